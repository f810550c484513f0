"""A simple consumer's requests and answers (RocketMQ's pop over remoting). Pure.

``pop_fields`` is a POP_MESSAGE's ``PopMessageRequestHeader``; ``popped``
reads its answer into ``Received`` messages, each with its receipt handle: the
``POP_CK`` property when the broker set one (a message of the group's pop
retry topic), else the handle RocketMQ's client builds from the answer's
``startOffsetInfo`` and ``msgOffsetInfo`` (``MQClientAPIImpl.processPopResponse``):
the checkpoint's start offset of the message's queue, the pop time, the
invisible time, the revive queue, the topic's kind, the broker name, the
queue id and the message's offset, joined by a space. ``ack_fields`` and
``change_fields`` are ACK_MESSAGE's and CHANGE_MESSAGE_INVISIBLETIME's headers
for a handle; a handle of the retry topic acks on that topic, as RocketMQ's
client does.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.client.core.errors import BrokerError
from triomq.client.core.message import MessageDecodeError, MessageExt, decode_messages

__all__ = [
    "POLLING_TIMEOUT",
    "PROPERTY_POP_CK",
    "Received",
    "ack_fields",
    "change_fields",
    "changed_handle",
    "pop_fields",
    "popped",
    "retry_topic",
]

PROPERTY_POP_CK = "POP_CK"
#: RocketMQ's answer to a pop that found nothing within its pollTime.
POLLING_TIMEOUT = 210
_SUCCESS = 0


def retry_topic(topic: str, group: str) -> str:
    """The group's pop retry topic for ``topic`` (RocketMQ's V1 name)."""
    return f"%RETRY%{group}_{topic}"


@attrs.frozen
class Received:
    """A popped message and what acks it."""

    message: MessageExt
    #: The receipt handle (``extraInfo``).
    handle: str
    #: The broker it was popped from (acks go there).
    address: str
    group: str

    @property
    def ack_topic(self) -> str:
        """The topic the message was popped from: its retry topic for a handle of kind 1."""
        kind = self.handle.split(" ")[4]
        return retry_topic(self.message.topic, self.group) if kind == "1" else \
            self.message.topic


def pop_fields(group: str, topic: str, expression: str, *, max_messages: int,
               invisible_ms: int, poll_ms: int, born_ms: int, queue_id: int = -1
               ) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
            "maxMsgNums": str(max_messages), "invisibleTime": str(invisible_ms),
            "pollTime": str(poll_ms), "bornTime": str(born_ms), "initMode": "0",
            "expType": "TAG", "exp": expression, "order": "false"}


def _infos(text: str) -> dict[tuple[str, int], list[int]]:
    parsed: dict[tuple[str, int], list[int]] = {}
    for part in text.split(";") if text else ():
        kind, queue_id, offsets = part.split(" ")
        parsed[kind, int(queue_id)] = [int(o) for o in offsets.split(",")]
    return parsed


def popped(code: int, remark: str | None, fields: Mapping[str, str], body: bytes, *,
           address: str, broker_name: str, group: str) -> list[Received]:
    """The messages of a POP_MESSAGE answer (none for POLLING_TIMEOUT); ``BrokerError``
    for a refusal or an answer that does not read."""
    if code == POLLING_TIMEOUT:
        return []
    if code != _SUCCESS:
        raise BrokerError(address, code, remark)
    try:
        starts = _infos(fields.get("startOffsetInfo", ""))
        head = " ".join((fields["popTime"], fields["invisibleTime"], fields["reviveQid"]))
    except (KeyError, ValueError) as exc:
        raise BrokerError(address, code, f"pop answer unreadable: {exc}") from None
    try:
        messages = decode_messages(body, broker_name)
    except MessageDecodeError as exc:
        raise BrokerError(address, code, f"pop answer unreadable: {exc}") from None
    received = []
    for message in messages:
        handle = message.properties.get(PROPERTY_POP_CK)
        if handle is None:
            start = starts.get(("0", message.queue_id), [message.queue_offset])[0]
            handle = " ".join((str(start), head, "0", broker_name, str(message.queue_id),
                               str(message.queue_offset)))
        received.append(Received(message, handle, address, group))
    return received


def ack_fields(received: Received) -> dict[str, str]:
    fields = received.handle.split(" ")
    return {"consumerGroup": received.group, "topic": received.ack_topic,
            "queueId": fields[6], "offset": fields[7], "extraInfo": received.handle}


def change_fields(received: Received, invisible_ms: int) -> dict[str, str]:
    return {**ack_fields(received), "invisibleTime": str(invisible_ms)}


def changed_handle(received: Received, fields: Mapping[str, str], broker_name: str
                   ) -> Received:
    """The message with the handle a CHANGE_MESSAGE_INVISIBLETIME answer gives it (its own
    offset as the checkpoint's start, as RocketMQ's client builds it)."""
    old = received.handle.split(" ")
    handle = " ".join((old[7], fields["popTime"], fields["invisibleTime"], fields["reviveQid"],
                       old[4], broker_name, old[6], old[7]))
    return attrs.evolve(received, handle=handle)
