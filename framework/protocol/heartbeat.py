"""RocketMQ's client heartbeat (``HeartbeatData``) and its parts, sans-I/O.

A client (producer or consumer instance) sends HEART_BEAT with a JSON body::

    {"clientID": "10.0.0.5@4242",
     "producerDataSet": [{"groupName": "pg"}],
     "consumerDataSet": [{"groupName": "cg", "consumeType": "CONSUME_PASSIVELY",
                          "messageModel": "CLUSTERING",
                          "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "subscriptionDataSet": [{"topic": "t", "subString": "*",
                                                   "tagsSet": [], "codeSet": [],
                                                   "subVersion": 1, "expressionType": "TAG",
                                                   "classFilterMode": false}],
                          "unitMode": false}]}

``parse_heartbeat`` reads it (fastjson's bare integer keys too) and raises
``BodyError`` naming the field at fault (``consumerDataSet[0].groupName``):
a client learns what to fix, and a bad body never becomes SYSTEM_ERROR.
Unknown fields are ignored, as fastjson does. A client builds the same values
and writes them with ``HeartbeatData.encode``: one vocabulary for both ends.

A subscription by tag expression is ``*`` (every message; also an empty one)
or tags joined by ``||`` (``"paid || refunded"``), as RocketMQ's ``FilterAPI``
builds it (``SubscriptionData.build``). The broker filters by each tag's Java
``String.hashCode`` (a queue entry holds only that code); the client then
keeps the messages whose tag is in the set, since codes may collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from triomq.errors import TriomqError
from triomq.protocol.commitlog_layout import tags_code
from triomq.protocol.route import RouteDataError, dumps, loads
from triomq.protocol.topic_rules import IllegalName, check_group, check_topic

__all__ = [
    "CONSUME_FROM_WHERE",
    "CONSUME_TYPES",
    "EXPRESSION_SQL92",
    "EXPRESSION_TAG",
    "MESSAGE_MODELS",
    "SUB_ALL",
    "BodyError",
    "ConsumerData",
    "HeartbeatData",
    "SubscriptionData",
    "parse_heartbeat",
    "parse_json_body",
]

CONSUME_TYPES = frozenset({"CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP"})
MESSAGE_MODELS = frozenset({"BROADCASTING", "CLUSTERING"})
CONSUME_FROM_WHERE = frozenset({
    "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
})
#: RocketMQ's ``ExpressionType`` names and ``SubscriptionData.SUB_ALL`` (every message).
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"
EXPRESSION_TYPES = frozenset({EXPRESSION_TAG, EXPRESSION_SQL92})
SUB_ALL = "*"
#: A client id, a tag or an expression longer than this is not a client's.
MAX_TEXT = 1024
#: Groups and subscriptions one heartbeat may carry: far more than a client has.
MAX_ITEMS = 1024

_INT64 = (-(2**63), 2**63 - 1)


class BodyError(TriomqError, ValueError):
    """A request body is not what the request needs; ``field`` names where."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"body field {field!r}: {message}" if field else f"body: {message}")


@attrs.frozen
class SubscriptionData:
    """One topic a consumer group subscribes to (RocketMQ's ``SubscriptionData``)."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False

    @classmethod
    def build(cls, topic: str, expression: str | None, sub_version: int) -> SubscriptionData:
        """The subscription of ``topic`` to the tag ``expression``, versioned
        ``sub_version`` (RocketMQ uses the time it was made, in ms: a newer one
        replaces an older); ``ValueError`` for an expression that names no tag."""
        text = (expression or "").strip()
        if not text or text == SUB_ALL:
            return cls(topic, SUB_ALL, sub_version=sub_version)
        tags = sorted({t.strip() for t in text.split("||") if t.strip()})
        if not tags:
            raise ValueError(f"subscription expression {expression!r} names no tag")
        return cls(topic, text, tuple(tags), tuple(sorted({tags_code(t) for t in tags})),
                   sub_version)

    @property
    def all(self) -> bool:
        """Whether every message of the topic is wanted."""
        return self.sub_string == SUB_ALL

    def matches(self, tags: str | None) -> bool:
        """Whether a message tagged ``tags`` is wanted (the client's check, after the
        broker's by tag code)."""
        return self.all or (tags is not None and tags in self.tags_set)

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": self.class_filter_mode, "codeSet": list(self.code_set),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": list(self.tags_set),
                "topic": self.topic}


@attrs.frozen
class ConsumerData:
    """A consumer group as one client runs it (RocketMQ's ``ConsumerData``)."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.consume_from_where,
                "consumeType": self.consume_type, "groupName": self.group_name,
                "messageModel": self.message_model,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
                "unitMode": self.unit_mode}


@attrs.frozen
class HeartbeatData:
    """What a client instance runs: its id, producer groups and consumer groups."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()

    def encode(self) -> bytes:
        """HEART_BEAT's body, as RocketMQ's client writes it."""
        return dumps({"clientID": self.client_id,
                      "consumerDataSet": [c.to_json() for c in self.consumers],
                      "heartbeatFingerprint": 0, "isWithoutSub": False,
                      "producerDataSet": [{"groupName": g} for g in self.producer_groups]})


def parse_json_body(body: bytes) -> Mapping[str, Any]:
    """The JSON object in ``body``; ``BodyError`` if there is none."""
    if not body:
        raise BodyError("", "missing (a JSON object is expected)")
    try:
        obj = loads(body, "body")
    except RouteDataError:
        raise BodyError("", "not valid JSON") from None
    except RecursionError:
        raise BodyError("", "nested too deeply") from None
    if not isinstance(obj, dict):
        raise BodyError("", f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _get(obj: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...],
         default: Any = None) -> Any:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise BodyError(where + key, "missing")
        return default
    # JSON booleans are ints to Python: an int field must not take true/false.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise BodyError(where + key, f"expected {_json_kind(names)}, got {_describe(value)}")
    return value


def _json_kind(names: str) -> str:
    return (names.replace("str", "a string").replace("bool", "a boolean")
            .replace("int", "an integer").replace("list", "an array")
            .replace("dict", "an object"))


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _text(obj: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value: str = _get(obj, key, where, str, default)
    if len(value) > MAX_TEXT:
        raise BodyError(where + key, f"{len(value)} characters, at most {MAX_TEXT}")
    return value


def _one_of(obj: Mapping[str, Any], key: str, where: str, allowed: frozenset[str],
            default: str) -> str:
    value = _text(obj, key, where, default)
    if value not in allowed:
        raise BodyError(where + key, f"{_describe(value)} is not one of {sorted(allowed)}")
    return value


def _items(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value: list[Any] = _get(obj, key, where, list, [])
    if len(value) > MAX_ITEMS:
        raise BodyError(where + key, f"{len(value)} items, at most {MAX_ITEMS}")
    return value


def _group(obj: Mapping[str, Any], where: str) -> str:
    name = _text(obj, "groupName", where)
    try:
        check_group(name)
    except IllegalName as exc:
        raise BodyError(where + "groupName", str(exc)) from None
    return name


def _subscription(value: Any, where: str) -> SubscriptionData:
    if not isinstance(value, dict):
        raise BodyError(where.rstrip("."), f"expected an object, got {_describe(value)}")
    topic = _text(value, "topic", where)
    try:
        check_topic(topic)
    except IllegalName as exc:
        raise BodyError(where + "topic", str(exc)) from None
    tags = tuple(_items(value, "tagsSet", where))
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or len(tag) > MAX_TEXT:
            raise BodyError(f"{where}tagsSet[{i}]", f"expected a tag, got {_describe(tag)}")
    codes = tuple(_items(value, "codeSet", where))
    for i, code in enumerate(codes):
        if type(code) is not int or not -(2**31) <= code < 2**31:
            raise BodyError(f"{where}codeSet[{i}]",
                            f"expected a 32-bit integer, got {_describe(code)}")
    version: int = _get(value, "subVersion", where, int, 0)
    if not _INT64[0] <= version <= _INT64[1]:
        raise BodyError(where + "subVersion", f"{version} is out of the 64-bit range")
    return SubscriptionData(
        topic=topic, sub_string=_text(value, "subString", where, "*"), tags_set=tags,
        code_set=codes, sub_version=version,
        expression_type=_one_of(value, "expressionType", where, EXPRESSION_TYPES, "TAG"),
        class_filter_mode=_get(value, "classFilterMode", where, bool, False))


def _consumer(value: Any, where: str) -> ConsumerData:
    if not isinstance(value, dict):
        raise BodyError(where.rstrip("."), f"expected an object, got {_describe(value)}")
    subscriptions = tuple(
        _subscription(item, f"{where}subscriptionDataSet[{i}].")
        for i, item in enumerate(_items(value, "subscriptionDataSet", where)))
    return ConsumerData(
        group_name=_group(value, where),
        consume_type=_one_of(value, "consumeType", where, CONSUME_TYPES, "CONSUME_PASSIVELY"),
        message_model=_one_of(value, "messageModel", where, MESSAGE_MODELS, "CLUSTERING"),
        consume_from_where=_one_of(value, "consumeFromWhere", where, CONSUME_FROM_WHERE,
                                   "CONSUME_FROM_LAST_OFFSET"),
        subscriptions=subscriptions,
        unit_mode=_get(value, "unitMode", where, bool, False))


def parse_heartbeat(body: bytes) -> HeartbeatData:
    """The ``HeartbeatData`` in a HEART_BEAT body; ``BodyError`` if it is bad."""
    obj = parse_json_body(body)
    client_id = _text(obj, "clientID", "")
    if not client_id:
        raise BodyError("clientID", "empty")
    producers = []
    for i, item in enumerate(_items(obj, "producerDataSet", "")):
        where = f"producerDataSet[{i}]."
        if not isinstance(item, dict):
            raise BodyError(where.rstrip("."), f"expected an object, got {_describe(item)}")
        producers.append(_group(item, where))
    consumers = tuple(_consumer(item, f"consumerDataSet[{i}].")
                      for i, item in enumerate(_items(obj, "consumerDataSet", "")))
    return HeartbeatData(client_id, tuple(producers), consumers)
