"""Pop consumption's names and receipt handles (RocketMQ's ``ExtraInfoUtil``,
``KeyBuilder``, ``PopAckConstants``). Pure.

A popped message's receipt handle, its ``POP_CK`` property and the
``extraInfo`` of its ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME, is eight
fields joined by a space: the checkpoint's start offset in the queue, the pop
time (ms since the epoch), the invisible time (ms), the revive queue of the
checkpoint, the topic's kind (``0`` the topic, ``1`` the group's pop retry
topic ``%RETRY%<group>_<topic>``, ``2`` RocketMQ's ``%RETRY%<group>+<topic>``),
the broker name, the queue id and the message's queue offset (RocketMQ's
older clients leave the last out).

A POP_MESSAGE answer says where its messages came from in ``startOffsetInfo``
(``kind queueId startOffset`` per queue) and ``msgOffsetInfo`` (``kind
queueId offset,offset,...``), entries joined by ``;``: a client builds each
message's handle from them, as RocketMQ's does, when the message carries none.

``receipt_refusal`` is the broker's check of a handle before it stores
anything for it: a handle that does not parse, names another queue or a
revive queue the broker has not, or a pop time in the future is forged
(INVALID_PARAMETER); one whose invisible time has run out is stale
(NO_MESSAGE: the message is visible again and may be revived already, so
the ack would not be the last word on it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from triomq.protocol.header_fields import java_integer
from triomq.protocol.response_codes import ResponseCode
from triomq.protocol.topic_rules import RETRY_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX

__all__ = [
    "ACK_TAG",
    "BATCH_ACK_TAG",
    "CK_TAG",
    "KIND_RETRY",
    "KIND_RETRY_V2",
    "KIND_TOPIC",
    "POP_ORDER_REVIVE_QUEUE",
    "PROPERTY_FIRST_POP_TIME",
    "PROPERTY_POP_CK",
    "REVIVE_GROUP",
    "Receipt",
    "ReceiptRefused",
    "build_offset_info",
    "normal_topic",
    "parse_offset_info",
    "parse_receipt",
    "pop_retry_topic",
    "receipt_refusal",
    "revive_topic",
    "topic_kind",
]

#: The message property that carries a popped message's receipt handle.
PROPERTY_POP_CK = "POP_CK"
#: When a revived message was popped first (set on its first revive).
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
#: The group whose consumer offsets are the revive queues' progress.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: The revive topic's tags: a checkpoint, an ack, a batch ack.
CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"
#: The revive queue an orderly pop's handle names (orderly pops are not built).
POP_ORDER_REVIVE_QUEUE = 999
KIND_TOPIC, KIND_RETRY, KIND_RETRY_V2 = "0", "1", "2"

_SEPARATOR = " "
_QUOTED = 80


def revive_topic(cluster_name: str) -> str:
    """The revive topic of a cluster: ``rmq_sys_REVIVE_LOG_<cluster>``."""
    return f"{SYSTEM_TOPIC_PREFIX}REVIVE_LOG_{cluster_name}"


def pop_retry_topic(topic: str, group: str) -> str:
    """The group's pop retry topic for ``topic`` (RocketMQ's V1 name; V2's ``+`` is not a
    legal topic character here)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def normal_topic(topic: str, group: str) -> str:
    """The topic a pop retry topic of ``group`` retries (``topic`` itself otherwise)."""
    for separator in ("+", "_"):
        prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}{separator}"
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return topic


def topic_kind(topic: str) -> str:
    """The handle's topic kind of ``topic``: ``0``, or ``1``/``2`` for a retry topic."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return KIND_RETRY_V2 if "+" in topic else KIND_RETRY
    return KIND_TOPIC


@attrs.frozen
class Receipt:
    """A receipt handle's fields."""

    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_queue_id: int
    kind: str
    broker_name: str
    queue_id: int
    #: The message's queue offset (None in the seven-field handle of older clients).
    offset: int | None = None

    @property
    def revive_time(self) -> int:
        """When the message becomes visible again (ms since the epoch)."""
        return self.pop_time + self.invisible_time

    def encode(self) -> str:
        fields = [self.ck_offset, self.pop_time, self.invisible_time, self.revive_queue_id,
                  self.kind, self.broker_name, self.queue_id]
        if self.offset is not None:
            fields.append(self.offset)
        return _SEPARATOR.join(str(field) for field in fields)


@attrs.frozen
class ReceiptRefused:
    """Why a handle is refused: RocketMQ's response code and a remark."""

    code: int
    remark: str


def _bad(why: str) -> ReceiptRefused:
    return ReceiptRefused(ResponseCode.INVALID_PARAMETER, f"extraInfo {why}")


def parse_receipt(text: str) -> Receipt | ReceiptRefused:
    """The handle ``text``, or why it is not one."""
    fields = text.split(_SEPARATOR)
    if len(fields) not in (7, 8):
        return _bad(f"has {len(fields)} fields, not 7 or 8: {text[:_QUOTED]!r}")
    numbers: list[int] = []
    for index in (0, 1, 2, 3, 6, 7):
        if index >= len(fields):
            continue
        value = java_integer(fields[index])
        if value is None or value < 0:
            return _bad(f"field {index + 1} is not a non-negative integer: "
                        f"{fields[index][:_QUOTED]!r}")
        numbers.append(value)
    kind = fields[4]
    if kind not in (KIND_TOPIC, KIND_RETRY, KIND_RETRY_V2):
        return _bad(f"field 5 (the topic's kind) is {kind[:_QUOTED]!r}, not 0, 1 or 2")
    if not fields[5]:
        return _bad("field 6 (the broker name) is empty")
    return Receipt(numbers[0], numbers[1], numbers[2], numbers[3], kind, fields[5],
                   numbers[4], numbers[5] if len(numbers) == 6 else None)


def receipt_refusal(receipt: Receipt, *, topic: str, group: str, queue_id: int,
                    offset: int, now_ms: int, revive_queue_num: int
                    ) -> ReceiptRefused | None:
    """Why a request on ``topic``'s ``queue_id`` at ``offset`` with ``receipt`` is refused
    at ``now_ms`` (None: it is taken)."""
    if receipt.revive_queue_id == POP_ORDER_REVIVE_QUEUE:
        return ReceiptRefused(ResponseCode.INVALID_PARAMETER,
                              "extraInfo is an orderly pop's; orderly pop is not built")
    if receipt.revive_queue_id >= revive_queue_num:
        return _bad(f"names revive queue {receipt.revive_queue_id}; this broker has "
                    f"{revive_queue_num} (reviveQueueNum)")
    if receipt.queue_id != queue_id:
        return _bad(f"is for queue {receipt.queue_id}, the request for queue {queue_id}")
    if receipt.offset is not None and receipt.offset != offset:
        return _bad(f"is for offset {receipt.offset}, the request for offset {offset}")
    if offset < receipt.ck_offset:
        return _bad(f"starts its checkpoint at {receipt.ck_offset}, after offset {offset}")
    retried = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    if (receipt.kind != KIND_TOPIC) != retried or (
            retried and normal_topic(topic, group) == topic):
        return _bad(f"of topic kind {receipt.kind} does not match topic "
                    f"{topic[:_QUOTED]!r} of group {group[:_QUOTED]!r}")
    if receipt.pop_time > now_ms:
        return _bad(f"pop time {receipt.pop_time} is in the future (now {now_ms})")
    if receipt.revive_time <= now_ms:
        return ReceiptRefused(
            ResponseCode.NO_MESSAGE,
            f"receipt handle expired: popped at {receipt.pop_time}, invisible until "
            f"{receipt.revive_time}, now {now_ms}; the message is visible again")
    return None


def build_offset_info(entries: Iterable[tuple[str, int, Sequence[int]]], *,
                      start_only: bool) -> str:
    """``startOffsetInfo`` (``start_only``: each queue's first offset) or
    ``msgOffsetInfo`` (every offset) of ``(topic, queue id, offsets)`` entries."""
    parts = []
    for topic, queue_id, offsets in entries:
        shown = str(offsets[0]) if start_only else ",".join(str(o) for o in offsets)
        parts.append(f"{topic_kind(topic)}{_SEPARATOR}{queue_id}{_SEPARATOR}{shown}")
    return ";".join(parts)


def parse_offset_info(text: str) -> Mapping[tuple[str, int], list[int]] | None:
    """``startOffsetInfo`` or ``msgOffsetInfo`` read back: ``(kind, queue id)`` to offsets;
    None when it does not parse (or names a queue twice)."""
    if not text:
        return {}
    parsed: dict[tuple[str, int], list[int]] = {}
    for part in text.split(";"):
        fields = part.split(_SEPARATOR)
        if len(fields) != 3:
            return None
        queue_id = java_integer(fields[1])
        offsets = [java_integer(o) for o in fields[2].split(",")]
        if queue_id is None or (fields[0], queue_id) in parsed or None in offsets:
            return None
        parsed[fields[0], queue_id] = [o for o in offsets if o is not None]
    return parsed
