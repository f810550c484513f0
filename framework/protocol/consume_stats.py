"""RocketMQ's ``ConsumeStats``: GET_CONSUME_STATS's body, as fastjson writes it. Pure.

A broker answers GET_CONSUME_STATS (208) with a consumer group's offsets
per queue and how many messages a second it got lately::

    {"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"t"}:
     {"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1700000000000,"pullOffset":4}}}

``offsetTable`` is a ``HashMap<MessageQueue, OffsetWrapper>``, and fastjson
writes a map's keys as they are: the keys are JSON objects, so the body is
not JSON. ``queue_map`` writes that form (GET_TOPIC_STATS_INFO's body has
such a map too), each key and value with
``triomq.protocol.route.dumps`` (fields sorted as fastjson sorts a bean's);
``ConsumeStats.decode`` reads it and raises ``RouteDataError`` naming what is
wrong. ``merge`` adds another broker's answer, as ``mqadmin`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import RouteDataError, dumps

__all__ = ["ConsumeStats", "OffsetWrapper", "queue_map"]

_INT64 = (-(2**63), 2**63 - 1)
#: Deeper than any ConsumeStats body: a bound on what a peer can make the reader recurse.
_MAX_DEPTH = 16
_SCALARS = json.JSONDecoder()


@attrs.frozen
class OffsetWrapper:
    """One queue's figures: the broker's max offset, the group's committed and pulled
    offsets, and the store time of the last message the group consumed (0: none)."""

    broker_offset: int
    consumer_offset: int
    pull_offset: int
    last_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset,
                "lastTimestamp": self.last_timestamp, "pullOffset": self.pull_offset}

    @property
    def diff(self) -> int:
        """The lag, as ``mqadmin`` counts it (negative if the group stands past the end)."""
        return self.broker_offset - self.consumer_offset


def queue_map(table: Mapping[MessageQueue, Mapping[str, Any]]) -> bytes:
    """A ``Map<MessageQueue, bean>`` as fastjson writes it: each key the queue's JSON
    object, each value the bean's (``to_json``), queues in order for a stable answer."""
    return (b"{" + b",".join(dumps(queue.to_json()) + b":" + dumps(value)
                             for queue, value in sorted(table.items())) + b"}")


def _table(table: Mapping[MessageQueue, OffsetWrapper]
           ) -> dict[MessageQueue, OffsetWrapper]:
    return dict(table)


@attrs.frozen
class ConsumeStats:
    """A consumer group's ``offsetTable`` and ``consumeTps`` on one broker, or merged."""

    offset_table: Mapping[MessageQueue, OffsetWrapper] = attrs.field(
        factory=dict, converter=_table)
    consume_tps: float = 0.0

    def merge(self, other: ConsumeStats) -> ConsumeStats:
        """Both tables in one, their rates summed (``examineConsumeStats``)."""
        return ConsumeStats({**self.offset_table, **other.offset_table},
                            self.consume_tps + other.consume_tps)

    def total_diff(self) -> int:
        return sum(w.diff for w in self.offset_table.values())

    def encode(self) -> bytes:
        """The body as fastjson writes it (queues in order, for a stable answer)."""
        return (b'{"consumeTps":' + dumps(float(self.consume_tps))
                + b',"offsetTable":' + queue_map(
                    {q: w.to_json() for q, w in self.offset_table.items()}) + b"}")

    @classmethod
    def decode(cls, data: bytes) -> ConsumeStats:
        """A body as fastjson writes it (or standard JSON with an empty table)."""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise RouteDataError("ConsumeStats: not UTF-8") from None
        obj, end = _value(text, 0, 0)
        if _skip(text, end) != len(text):
            raise RouteDataError(f"ConsumeStats: text after the object at {end}")
        if not isinstance(obj, dict):
            raise RouteDataError("ConsumeStats: expected an object")
        tps = obj.get("consumeTps", 0.0)
        if isinstance(tps, bool) or not isinstance(tps, int | float):
            raise RouteDataError(f"ConsumeStats.consumeTps: expected a number, got {tps!r}")
        table = obj.get("offsetTable") or {}
        if isinstance(table, dict):  # only an empty map reads as a dict: its keys are objects
            if table:
                raise RouteDataError("ConsumeStats.offsetTable: expected MessageQueue keys")
            table = []
        if not isinstance(table, list):
            raise RouteDataError("ConsumeStats.offsetTable: expected a map")
        return cls(dict(_entry(key, value) for key, value in table), float(tps))


def _entry(key: Any, value: Any) -> tuple[MessageQueue, OffsetWrapper]:
    where = "ConsumeStats.offsetTable"
    if not isinstance(key, dict) or not isinstance(value, dict):
        raise RouteDataError(f"{where}: expected MessageQueue -> OffsetWrapper objects")
    topic, broker_name = key.get("topic"), key.get("brokerName")
    if not isinstance(topic, str) or not isinstance(broker_name, str):
        raise RouteDataError(f"{where}: a key without topic or brokerName: {key!r:.80}")
    queue = MessageQueue(topic, broker_name, _integer(key, "queueId", where))
    return queue, OffsetWrapper(
        _integer(value, "brokerOffset", where), _integer(value, "consumerOffset", where),
        _integer(value, "pullOffset", where, optional=True),
        _integer(value, "lastTimestamp", where, optional=True))


def _integer(obj: Mapping[str, Any], key: str, where: str, *,
             optional: bool = False) -> int:
    value = obj.get(key)
    if value is None and optional:
        # Older brokers write no pullOffset or lastTimestamp.
        return 0
    if isinstance(value, bool) or not isinstance(value, int) \
            or not _INT64[0] <= value <= _INT64[1]:
        raise RouteDataError(f"{where}: {key}: expected a 64-bit integer, got {value!r:.40}")
    return value


def _value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    """The JSON value at ``pos`` and where it ends; an object whose keys are not all
    strings (fastjson's map keys) reads as a list of (key, value) pairs."""
    if depth > _MAX_DEPTH:
        raise RouteDataError("ConsumeStats: nested too deeply")
    pos = _skip(text, pos)
    opener = text[pos:pos + 1]
    if opener in ("{", "["):
        closer = "}" if opener == "{" else "]"
        items: list[Any] = []
        pos = _skip(text, pos + 1)
        if text.startswith(closer, pos):
            return ({} if opener == "{" else []), pos + 1
        while True:
            item, pos = _value(text, pos, depth + 1)
            if opener == "{":
                pos = _expect(text, pos, ":")
                member, pos = _value(text, pos, depth + 1)
                item = (item, member)
            items.append(item)
            pos = _skip(text, pos)
            if text.startswith(closer, pos):
                pos += 1
                break
            pos = _expect(text, pos, ",")
        if opener == "[":
            return items, pos
        if all(isinstance(key, str) for key, _ in items):
            return dict(items), pos
        return items, pos
    try:
        return _SCALARS.raw_decode(text, pos)
    except ValueError:
        raise RouteDataError(f"ConsumeStats: no JSON value at {pos}") from None


def _skip(text: str, pos: int) -> int:
    """Past the JSON white space at ``pos``."""
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    pos = _skip(text, pos)
    if not text.startswith(char, pos):
        raise RouteDataError(f"ConsumeStats: expected {char!r} at {pos}")
    return pos + 1
