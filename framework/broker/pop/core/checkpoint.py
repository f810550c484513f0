"""The revive topic's records: checkpoints and acks, as RocketMQ's JSON writes them. Pure.

A pop of one queue writes a checkpoint (``PopCheckPoint``, tag ``ck``): the
queue's topic, id and first popped offset (``so``), each message's offset
as its distance from it (``d``), how many (``n``), the pop and invisible
times (``pt``, ``it``), the group (``c``) and the broker that popped them
(``bn``). An ack (``AckMsg``, tag ``ack``: ``ao`` the acked offset) or a batch
ack (``BatchAckMsg``, tag ``bAck``: ``aol`` the acked offsets) names its
checkpoint by topic, group, queue, start offset, pop time and broker name,
the ``merge_key`` the revive service pairs them by: the broker name in it
lets a master cancel another broker's checkpoint with its ack (seed 003).

Each record's ``UNIQ_KEY`` is RocketMQ's ``genCkUniqueId`` /
``genAckUniqueId`` / ``genBatchAckUniqueId``. Decoding takes RocketMQ's
short names and, for acks, the long ones fastjson also reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.pop.core.receipt import ACK_TAG, BATCH_ACK_TAG, CK_TAG
from triomq.protocol.message import PROPERTY_TAGS, PROPERTY_UNIQ_KEY

__all__ = ["AckMsg", "CheckPoint", "RecordRefused", "decode_ack", "decode_checkpoint",
           "revive_message"]

_SPLIT = "@"


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


class RecordRefused(ValueError):
    """A revive-topic record that is not a checkpoint or an ack; the message says why."""


@attrs.frozen
class CheckPoint:
    """A pop of one queue: what was popped, when, for how long."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    broker_name: str
    #: Each popped offset's distance from ``start_offset``, in order.
    offset_diffs: tuple[int, ...] = attrs.field(converter=_ints)
    bit_map: int = 0
    #: How many times the revive service put it back (RocketMQ's ``rePutTimes``).
    re_put_times: int | None = None

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(self.start_offset + diff for diff in self.offset_diffs)

    @property
    def merge_key(self) -> tuple[str, str, int, int, int, str]:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time,
                self.broker_name)

    def unique_id(self) -> str:
        return _SPLIT.join((self.topic, str(self.queue_id), str(self.start_offset), self.group,
                            str(self.pop_time), self.broker_name, CK_TAG))

    def encode(self) -> bytes:
        fields: dict[str, Any] = {
            "bm": self.bit_map, "bn": self.broker_name, "c": self.group,
            "d": list(self.offset_diffs), "it": self.invisible_time,
            "n": len(self.offset_diffs), "pt": self.pop_time, "q": self.queue_id,
            "ro": 0, "so": self.start_offset, "t": self.topic}
        if self.re_put_times is not None:
            fields["rp"] = str(self.re_put_times)
        return json.dumps(fields, separators=(",", ":")).encode()


@attrs.frozen
class AckMsg:
    """An ack of some of a checkpoint's offsets (one: ``ACK_MESSAGE``'s; more: a batch)."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    broker_name: str
    offsets: tuple[int, ...] = attrs.field(converter=_ints)
    batch: bool = False

    @property
    def tag(self) -> str:
        return BATCH_ACK_TAG if self.batch else ACK_TAG

    @property
    def merge_key(self) -> tuple[str, str, int, int, int, str]:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time,
                self.broker_name)

    def unique_id(self) -> str:
        if self.batch:
            shown = "[" + ", ".join(str(o) for o in self.offsets) + "]"
            return _SPLIT.join((self.topic, str(self.queue_id), shown, self.group,
                                str(self.pop_time), BATCH_ACK_TAG))
        return _SPLIT.join((self.topic, str(self.queue_id), str(self.offsets[0]), self.group,
                            str(self.pop_time), self.broker_name, ACK_TAG))

    def encode(self) -> bytes:
        fields: dict[str, Any] = {
            "ao": -1 if self.batch else self.offsets[0], "bn": self.broker_name,
            "c": self.group, "pt": self.pop_time, "q": self.queue_id,
            "so": self.start_offset, "t": self.topic}
        if self.batch:
            fields["aol"] = list(self.offsets)
        return json.dumps(fields, separators=(",", ":")).encode()


def revive_message(record: CheckPoint | AckMsg, revive_topic: str,
                   revive_qid: int) -> EscapedMessage:
    """``record`` as the message put into queue ``revive_qid`` of the revive topic: its
    JSON, its tag, its ``UNIQ_KEY``."""
    tag = CK_TAG if isinstance(record, CheckPoint) else record.tag
    return EscapedMessage(topic=revive_topic, queue_id=revive_qid, body=record.encode(),
                          properties={PROPERTY_TAGS: tag, PROPERTY_UNIQ_KEY: record.unique_id()})


def _object(body: bytes) -> Mapping[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordRefused(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RecordRefused("not a JSON object")
    return value


def _field(obj: Mapping[str, Any], kind: type, *names: str, default: Any = None) -> Any:
    for name in names:
        if name in obj:
            value = obj[name]
            if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
                raise RecordRefused(f"field {name!r} is not a {kind.__name__}")
            return value
    if default is None:
        raise RecordRefused(f"field {names[0]!r} missing")
    return default


def _offsets(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RecordRefused(f"field {name!r} is not a list of integers")
    return value


def decode_checkpoint(body: bytes) -> CheckPoint:
    obj = _object(body)
    diffs = obj.get("d")
    start = _field(obj, int, "so")
    # RocketMQ's first checkpoints have no ``d``: ``n`` consecutive offsets.
    offsets = _offsets(diffs, "d") if diffs else list(range(_field(obj, int, "n")))
    rp = obj.get("rp")
    return CheckPoint(
        topic=_field(obj, str, "t"), group=_field(obj, str, "c"), queue_id=_field(obj, int, "q"),
        start_offset=start, pop_time=_field(obj, int, "pt"),
        invisible_time=_field(obj, int, "it"), broker_name=_field(obj, str, "bn", default=""),
        offset_diffs=offsets, bit_map=_field(obj, int, "bm", default=0),
        re_put_times=int(rp) if isinstance(rp, str) and rp.isdigit() else None)


def decode_ack(body: bytes, *, batch: bool) -> AckMsg:
    obj = _object(body)
    offsets: Sequence[int]
    if batch:
        offsets = _offsets(_field(obj, list, "aol", "ackOffsetList"), "aol")
    else:
        offsets = (_field(obj, int, "ao", "ackOffset"),)
    return AckMsg(
        topic=_field(obj, str, "t", "topic"), group=_field(obj, str, "c", "consumerGroup"),
        queue_id=_field(obj, int, "q", "queueId"),
        start_offset=_field(obj, int, "so", "startOffset"),
        pop_time=_field(obj, int, "pt", "popTime"),
        broker_name=_field(obj, str, "bn", "brokerName", default=""), offsets=offsets,
        batch=batch)
