"""BATCH_ACK_MESSAGE 200151's body (RocketMQ's ``BatchAckMessageRequestBody``). Pure.

The body is fastjson's JSON: ``brokerName`` and ``acks``, each a ``BatchAck``
with ``c`` (the group), ``t`` (the topic), ``r`` (the topic's kind, as a
receipt handle's: ``1`` the group's pop retry topic), ``so`` (the
checkpoint's start offset), ``q`` (the queue), ``rq`` (the revive queue),
``pt``/``it`` (pop and invisible times) and ``b``, the acked offsets as a
``java.util.BitSet``: its ``toByteArray`` (bit ``i`` of byte ``i // 8`` is
offset ``so + 8 * (i // 8) + i % 8``) in base64, as fastjson writes bytes.
fastjson reads the long names too (``consumerGroup``, ``topic``...).

``parse_batch_ack`` refuses the whole body when one ack is malformed, so a
refused request stores nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import attrs

from triomq.broker.pop.core.pop import PopRefused
from triomq.broker.pop.core.receipt import (
    KIND_RETRY,
    KIND_RETRY_V2,
    KIND_TOPIC,
    Receipt,
    pop_retry_topic,
)
from triomq.protocol.response_codes import ResponseCode

__all__ = ["BatchAck", "parse_batch_ack"]

_NAMES = {"c": "consumerGroup", "t": "topic", "r": "retry", "so": "startOffset",
          "q": "queueId", "rq": "reviveQueueId", "pt": "popTime", "it": "invisibleTime",
          "b": "bitSet"}
#: Most offsets one ack's bit set may name (RocketMQ pops at most 32 a queue).
_MAX_BITS = 1024


@attrs.frozen
class BatchAck:
    """One checkpoint's acked offsets."""

    group: str
    #: The topic popped from: the pop retry topic for kind ``1``.
    topic: str
    kind: str
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]

    def receipt(self, broker_name: str, offset: int) -> Receipt:
        """The receipt handle of ``offset`` this ack stands for."""
        return Receipt(self.start_offset, self.pop_time, self.invisible_time,
                       self.revive_queue_id, self.kind, broker_name, self.queue_id, offset)


def _refused(why: str) -> PopRefused:
    return PopRefused(ResponseCode.INVALID_PARAMETER, f"BATCH_ACK_MESSAGE: {why}")


def _get(obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = obj.get(key, obj.get(_NAMES[key]))
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise _refused(f"{where} field {key!r} is not a non-negative integer")
    if kind is str and (not isinstance(value, str) or not value):
        raise _refused(f"{where} field {key!r} is not a non-empty string")
    return value


def _offsets(encoded: Any, start: int, where: str) -> tuple[int, ...]:
    if not isinstance(encoded, str):
        raise _refused(f"{where} field 'b' is not a base64 string")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _refused(f"{where} field 'b' is not base64") from None
    if len(raw) * 8 > _MAX_BITS:
        raise _refused(f"{where} field 'b' names more than {_MAX_BITS} offsets")
    return tuple(start + 8 * index + bit for index, byte in enumerate(raw)
                 for bit in range(8) if byte >> bit & 1)


def parse_batch_ack(body: bytes) -> tuple[str | None, list[BatchAck]]:
    """The body's broker name and acks; ``PopRefused`` naming what is wrong, or
    NO_MESSAGE for a body with no ack (RocketMQ's answer)."""
    try:
        value = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refused(f"the body is not JSON: {exc}") from None
    if value is None or (isinstance(value, dict) and not value.get("acks")):
        raise PopRefused(ResponseCode.NO_MESSAGE, "BATCH_ACK_MESSAGE: the body holds no ack")
    if not isinstance(value, dict) or not isinstance(value["acks"], list):
        raise _refused("the body is not an object with a list 'acks'")
    broker_name = value.get("brokerName")
    if broker_name is not None and not isinstance(broker_name, str):
        raise _refused("'brokerName' is not a string")
    acks = []
    for index, item in enumerate(value["acks"]):
        where = f"ack {index}:"
        if not isinstance(item, dict):
            raise _refused(f"{where} not an object")
        kind = item.get("r", item.get("retry"))
        if kind not in (KIND_TOPIC, KIND_RETRY, KIND_RETRY_V2):
            raise _refused(f"{where} field 'r' is {str(kind)[:20]!r}, not '0', '1' or '2'")
        if kind == KIND_RETRY_V2:
            raise _refused(f"{where} V2 retry topics ('r' 2) are not built")
        group, topic = _get(item, "c", str, where), _get(item, "t", str, where)
        start = _get(item, "so", int, where)
        acks.append(BatchAck(
            group=group, topic=pop_retry_topic(topic, group) if kind == KIND_RETRY else topic,
            kind=kind, start_offset=start, queue_id=_get(item, "q", int, where),
            revive_queue_id=_get(item, "rq", int, where), pop_time=_get(item, "pt", int, where),
            invisible_time=_get(item, "it", int, where),
            offsets=_offsets(item.get("b", item.get("bitSet")), start, where)))
    return broker_name or None, acks
