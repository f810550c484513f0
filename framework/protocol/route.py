"""RocketMQ's route and topic data as its clients and tools exchange them, sans-I/O.

The shapes are RocketMQ's JSON beans, field for field, so a Java client's
``TopicRouteData`` or ``ClusterInfo`` and a broker's ``topics.json`` read the
same here:

- ``DataVersion``: ``{"counter", "stateVersion", "timestamp"}``, ordered by
  state version, then counter, then timestamp (``DataVersion.compare``).
- ``TopicConfig``: one topic on one broker (``topicName``, read and write
  queue counts, ``perm``, ``topicFilterType``, ``topicSysFlag``, ``order``,
  ``attributes``).
- ``QueueData`` / ``BrokerData`` / ``TopicRouteData``: a topic's route, the
  answer to GET_ROUTEINFO_BY_TOPIC; ``brokerAddrs`` is keyed by broker id
  (0 the master), addresses are ``host:port`` without a scheme.
- ``ClusterInfo`` and ``BrokerMemberGroup``: GET_BROKER_CLUSTER_INFO and
  GET_BROKER_MEMBER_GROUP.
- ``RegisterBrokerBody``: what REGISTER_BROKER carries, as JSON or in the
  compressed form brokers send by default (``compressed=true``: a deflate
  stream of length-prefixed parts, see ``decode_register_broker_body``),
  inflated to at most ``MAX_REGISTER_BODY_SIZE`` bytes.

Java's fastjson writes a map with integer keys with bare numbers
(``{0:"10.0.0.1:10911"}``); ``loads`` reads that as well as standard JSON.
What this module writes is standard JSON with the ids as strings, which
fastjson reads back as numbers. A body that is not what it should be raises
``RouteDataError`` naming the field.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from triomq.errors import TriomqError
from triomq.protocol.inflate import InflateError, inflate

__all__ = [
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "BrokerMemberGroup",
    "ClusterInfo",
    "DataVersion",
    "QueueData",
    "RegisterBrokerBody",
    "RouteDataError",
    "TopicConfig",
    "TopicRouteData",
    "decode_register_broker_body",
    "dumps",
    "encode_register_broker_body",
    "loads",
]

MASTER_ID = 0

#: ``PermName``'s bits.
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


class RouteDataError(TriomqError, ValueError):
    """A route or topic body is malformed; the message names the field."""


_BARE_NUMBER_KEY = re.compile(rb'([{,]\s*)(-?\d+)(\s*:)')


def loads(data: bytes | bytearray | str, what: str = "body") -> Any:
    """JSON as RocketMQ writes it: standard, or with fastjson's bare integer keys."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        return json.loads(_quote_bare_keys(raw))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RouteDataError(f"{what}: not valid JSON ({exc})") from None


def _quote_bare_keys(raw: bytes) -> bytes:
    # Quote bare numeric keys outside strings only: split the text into
    # string literals and the rest, and rewrite the rest.
    out = []
    pos = 0
    for match in re.finditer(rb'"(?:[^"\\]|\\.)*"', raw, re.DOTALL):
        out.append(_BARE_NUMBER_KEY.sub(rb'\1"\2"\3', raw[pos:match.start()]))
        out.append(match.group())
        pos = match.end()
    out.append(_BARE_NUMBER_KEY.sub(rb'\1"\2"\3', raw[pos:]))
    return b"".join(out)


def dumps(value: Any) -> bytes:
    """Compact JSON, keys sorted as fastjson sorts a bean's fields."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False).encode()


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str,
           default: Any = attrs.NOTHING) -> Any:
    if key not in obj or obj[key] is None:
        if default is attrs.NOTHING:
            raise RouteDataError(f"{where}.{key}: missing")
        return default
    value = obj[key]
    # JSON has no int/bool split; a bool is never a count or an id here.
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            return int(value)
        raise RouteDataError(f"{where}.{key}: expected an integer, got {value!r}")
    if not isinstance(value, kind):
        raise RouteDataError(f"{where}.{key}: expected {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", bool: "a boolean", dict: "an object", list: "a list"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise RouteDataError(f"{where}: expected an object, got {type(value).__name__}")
    return value


@attrs.frozen(order=False)
class DataVersion:
    """A broker's version of its topic configs (or offsets): RocketMQ's ``DataVersion``."""

    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    def key(self) -> tuple[int, int, int]:
        """What ``DataVersion.compare`` orders by."""
        return (self.state_version, self.counter, self.timestamp)

    def newer_than(self, other: DataVersion) -> bool:
        return self.key() > other.key()

    def next(self, now_ms: int, state_version: int | None = None) -> DataVersion:
        """The version after a change made at ``now_ms`` (``nextVersion``)."""
        return DataVersion(self.state_version if state_version is None else state_version,
                           now_ms, self.counter + 1)

    def next_state(self, now_ms: int) -> DataVersion:
        """The first version of a new state (``state_version`` + 1): newer than every
        version of the state before, whatever their counters."""
        return DataVersion(self.state_version + 1, now_ms, self.counter + 1)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version,
                "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, value: Any, where: str = "dataVersion") -> DataVersion:
        obj = _object(value, where)
        counter = obj.get("counter", 0)
        # fastjson writes the AtomicLong counter as a number; tolerate {"value": n} too.
        if isinstance(counter, dict):
            counter = counter.get("value", 0)
        return cls(_field(obj, "stateVersion", int, where, 0),
                   _field(obj, "timestamp", int, where, 0),
                   _field({"counter": counter}, "counter", int, where, 0))


@attrs.frozen
class TopicConfig:
    """One topic as one broker group holds it (RocketMQ's ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"attributes": dict(self.attributes), "order": self.order, "perm": self.perm,
                "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, value: Any, where: str = "topicConfig") -> TopicConfig:
        obj = _object(value, where)
        attributes = _field(obj, "attributes", dict, where, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
            raise RouteDataError(f"{where}.attributes: expected strings to strings")
        return cls(_field(obj, "topicName", str, where),
                   _field(obj, "readQueueNums", int, where, 16),
                   _field(obj, "writeQueueNums", int, where, 16),
                   _field(obj, "perm", int, where, PERM_READ | PERM_WRITE),
                   _field(obj, "topicFilterType", str, where, "SINGLE_TAG"),
                   _field(obj, "topicSysFlag", int, where, 0),
                   _field(obj, "order", bool, where, False),
                   attributes)

    def encode_line(self) -> str:
        """``TopicConfig.encode``: the space-separated form inside a compressed body."""
        return " ".join([self.topic_name, str(self.read_queue_nums),
                         str(self.write_queue_nums), str(self.perm), self.topic_filter_type,
                         json.dumps(dict(self.attributes), separators=(",", ":"))])

    @classmethod
    def decode_line(cls, line: str, where: str = "topicConfig") -> TopicConfig:
        parts = line.split(" ")
        if len(parts) < 5:
            raise RouteDataError(f"{where}: expected 5 space-separated fields, got {line!r}")
        try:
            numbers = [int(p) for p in parts[1:4]]
        except ValueError:
            raise RouteDataError(f"{where}: queue counts and perm must be integers, "
                                 f"got {line!r}") from None
        attributes: dict[str, str] = {}
        if len(parts) >= 6:
            # As RocketMQ: attributes holding a space do not survive this form.
            try:
                parsed = json.loads(" ".join(parts[5:]))
            except ValueError:
                parsed = {}
            if isinstance(parsed, dict):
                attributes = {str(k): str(v) for k, v in parsed.items()}
        return cls(parts[0], numbers[0], numbers[1], numbers[2], parts[4],
                   attributes=attributes)


@attrs.frozen
class QueueData:
    """A topic's queues on one broker group."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @classmethod
    def of(cls, broker_name: str, config: TopicConfig) -> QueueData:
        return cls(broker_name, config.read_queue_nums, config.write_queue_nums,
                   config.perm, config.topic_sys_flag)

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, value: Any, where: str = "queueData") -> QueueData:
        obj = _object(value, where)
        return cls(_field(obj, "brokerName", str, where),
                   _field(obj, "readQueueNums", int, where),
                   _field(obj, "writeQueueNums", int, where),
                   _field(obj, "perm", int, where),
                   _field(obj, "topicSysFlag", int, where, 0))


def _broker_addrs(value: Any, where: str) -> dict[int, str]:
    obj = _object(value, where)
    addrs = {}
    for key, address in obj.items():
        if not isinstance(address, str) or not re.fullmatch(r"-?\d+", str(key)):
            raise RouteDataError(f"{where}: expected broker id -> address, got "
                                 f"{key!r}: {address!r}")
        addrs[int(key)] = address
    return addrs


@attrs.frozen
class BrokerData:
    """A broker group: its cluster, name and the address of each broker id."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = attrs.field(factory=dict)
    enable_acting_master: bool = False
    zone_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "brokerAddrs": {str(i): a for i, a in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name, "cluster": self.cluster,
            "enableActingMaster": self.enable_acting_master}
        if self.zone_name is not None:
            value["zoneName"] = self.zone_name
        return value

    @classmethod
    def from_json(cls, value: Any, where: str = "brokerData") -> BrokerData:
        obj = _object(value, where)
        return cls(_field(obj, "cluster", str, where),
                   _field(obj, "brokerName", str, where),
                   _broker_addrs(_field(obj, "brokerAddrs", dict, where, {}),
                                 f"{where}.brokerAddrs"),
                   _field(obj, "enableActingMaster", bool, where, False),
                   _field(obj, "zoneName", str, where, None))


@attrs.frozen
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC's answer: the topic's queues and the groups that hold them."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {},
            "queueDatas": [q.to_json() for q in self.queue_datas]}
        if self.order_topic_conf is not None:
            value["orderTopicConf"] = self.order_topic_conf
        return value

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, body: bytes) -> TopicRouteData:
        obj = _object(loads(body, "TopicRouteData"), "TopicRouteData")
        return cls(tuple(QueueData.from_json(q, f"queueDatas[{i}]") for i, q in
                         enumerate(_field(obj, "queueDatas", list, "TopicRouteData", []))),
                   tuple(BrokerData.from_json(b, f"brokerDatas[{i}]") for i, b in
                         enumerate(_field(obj, "brokerDatas", list, "TopicRouteData", []))),
                   _field(obj, "orderTopicConf", str, "TopicRouteData", None))


@attrs.frozen
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO's answer: every group, and the groups of each cluster."""

    broker_addr_table: Mapping[str, BrokerData]
    cluster_addr_table: Mapping[str, frozenset[str]]

    def encode(self) -> bytes:
        return dumps({
            "brokerAddrTable": {n: b.to_json() for n, b in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(ns) for c, ns in self.cluster_addr_table.items()}})

    @classmethod
    def decode(cls, body: bytes) -> ClusterInfo:
        obj = _object(loads(body, "ClusterInfo"), "ClusterInfo")
        brokers = _object(obj.get("brokerAddrTable") or {}, "brokerAddrTable")
        clusters = _object(obj.get("clusterAddrTable") or {}, "clusterAddrTable")
        return cls({n: BrokerData.from_json(b, f"brokerAddrTable.{n}")
                    for n, b in brokers.items()},
                   {c: frozenset(_names(ns, f"clusterAddrTable.{c}"))
                    for c, ns in clusters.items()})


def _names(value: Any, where: str) -> Iterable[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise RouteDataError(f"{where}: expected a list of names")
    return value


@attrs.frozen
class BrokerMemberGroup:
    """GET_BROKER_MEMBER_GROUP's answer: a group's alive members by id."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = attrs.field(factory=dict)

    def encode(self) -> bytes:
        """The ``GetBrokerMemberGroupResponseBody`` around it."""
        return dumps({"brokerMemberGroup": {
            "brokerAddrs": {str(i): a for i, a in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name, "cluster": self.cluster}})

    @classmethod
    def decode(cls, body: bytes) -> BrokerMemberGroup:
        obj = _object(loads(body, "GetBrokerMemberGroupResponseBody"), "body")
        group = _object(_field(obj, "brokerMemberGroup", dict, "body"), "brokerMemberGroup")
        where = "brokerMemberGroup"
        return cls(_field(group, "cluster", str, where),
                   _field(group, "brokerName", str, where),
                   _broker_addrs(_field(group, "brokerAddrs", dict, where, {}),
                                 f"{where}.brokerAddrs"))


@attrs.frozen
class RegisterBrokerBody:
    """REGISTER_BROKER's body: the broker's topic configs and their DataVersion."""

    data_version: DataVersion
    topic_config_table: Mapping[str, TopicConfig]
    filter_server_list: tuple[str, ...] = ()


def encode_register_broker_body(body: RegisterBrokerBody, *, compressed: bool) -> bytes:
    """The body as a broker sends it (``RegisterBrokerBody.encode(compress)``)."""
    if not compressed:
        return dumps({
            "filterServerList": list(body.filter_server_list),
            "topicConfigSerializeWrapper": {
                "dataVersion": body.data_version.to_json(),
                "topicConfigTable": {n: c.to_json()
                                     for n, c in body.topic_config_table.items()}}})
    parts = [_prefixed(dumps(body.data_version.to_json())),
             struct.pack(">i", len(body.topic_config_table))]
    parts += [_prefixed(c.encode_line().encode()) for c in body.topic_config_table.values()]
    parts += [_prefixed(json.dumps(list(body.filter_server_list)).encode()),
              struct.pack(">i", 0)]  # no static-topic queue mappings
    return zlib.compress(b"".join(parts), 9)


def _prefixed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


#: Largest inflated REGISTER_BROKER body: what an uncompressed one may be at most (a
#: frame of RocketMQ's default frameMaxLength), ample for tens of thousands of topics.
MAX_REGISTER_BODY_SIZE = 16 * 1024 * 1024


def decode_register_broker_body(data: bytes, *, compressed: bool,
                                max_size: int = MAX_REGISTER_BODY_SIZE) -> RegisterBrokerBody:
    """REGISTER_BROKER's body, JSON or compressed; ``RouteDataError`` names what is wrong.

    A compressed body is inflated only up to ``max_size`` bytes: one that
    would be larger is refused with no more of it inflated.
    """
    if not data:
        return RegisterBrokerBody(DataVersion(), {})
    if not compressed:
        obj = _object(loads(data, "RegisterBrokerBody"), "RegisterBrokerBody")
        wrapper = _object(obj.get("topicConfigSerializeWrapper") or {},
                          "topicConfigSerializeWrapper")
        table = _object(wrapper.get("topicConfigTable") or {}, "topicConfigTable")
        filters = obj.get("filterServerList") or []
        return RegisterBrokerBody(
            DataVersion.from_json(wrapper.get("dataVersion") or {}),
            {name: TopicConfig.from_json(c, f"topicConfigTable.{name}")
             for name, c in table.items()},
            tuple(_names(filters, "filterServerList")))
    try:
        raw = inflate(data, max_size, "RegisterBrokerBody (compressed)")
    except InflateError as exc:
        raise RouteDataError(str(exc)) from None
    reader = _Reader(raw)
    version = DataVersion.from_json(loads(reader.part("dataVersion"), "dataVersion"))
    table = {}
    for i in range(reader.count("topic config count")):
        line = reader.part(f"topic config {i}")
        try:
            config = TopicConfig.decode_line(line.decode(), f"topic config {i}")
        except UnicodeDecodeError:
            raise RouteDataError(f"topic config {i}: not UTF-8") from None
        table[config.topic_name] = config
    filters = loads(reader.part("filterServerList"), "filterServerList")
    # A broker older than 5.0 ends here; newer ones add static-topic mappings (ignored).
    return RegisterBrokerBody(version, table, tuple(_names(filters, "filterServerList")))


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.pos = 0

    def count(self, what: str) -> int:
        if self.pos + 4 > len(self.raw):
            raise RouteDataError(f"RegisterBrokerBody: ends before the {what}")
        (value,) = struct.unpack_from(">i", self.raw, self.pos)
        self.pos += 4
        if value < 0:
            raise RouteDataError(f"RegisterBrokerBody: negative {what} {value}")
        return int(value)

    def part(self, what: str) -> bytes:
        length = self.count(f"length of the {what}")
        if self.pos + length > len(self.raw):
            raise RouteDataError(f"RegisterBrokerBody: the {what} runs past the end")
        self.pos += length
        return self.raw[self.pos - length:self.pos]
