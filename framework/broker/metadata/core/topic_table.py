"""A broker's topics, pure: RocketMQ's ``TopicConfigManager`` rules and ``topics.json``.

The table maps topic names to ``TopicConfig`` under one ``DataVersion``
that moves with every change, so name servers (and slaves copying their
master) learn whether anything changed by comparing versions. Nothing
here does I/O: the broker persists ``encode()`` as
``<store root>/config/topics.json`` (RocketMQ's file: ``topicConfigTable``
plus ``dataVersion``) and reads it back with ``decode``.

Rules:

- Names follow RocketMQ's (``triomq.protocol.topic_rules``); system topics
  are the broker's own and cannot be created or deleted by a client.
- Queue counts are 1 to ``max_queue_nums`` and ``perm`` holds only
  RocketMQ's permission bits: a topic's queues are the only queues a
  broker keeps, so this bounds what a client can make it open.
- With ``auto_create_topic_enable`` the broker holds ``TBW102``
  (inheritable); a send to an unknown topic naming it as the default
  topic creates the topic with at most its queue count, and its
  permission less the inherit bit (``createTopicInSendMessageMethod``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from triomq.errors import TriomqError
from triomq.protocol.route import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    RouteDataError,
    TopicConfig,
    dumps,
    loads,
)
from triomq.protocol.topic_rules import (
    AUTO_CREATE_TOPIC,
    IllegalName,
    check_topic,
    is_system_topic,
)

__all__ = ["INVALID_PARAMETER", "TopicRefused", "TopicTable"]

#: RocketMQ's ``ResponseCode.INVALID_PARAMETER``, and the code of an unknown topic.
INVALID_PARAMETER = 29
TOPIC_NOT_EXIST = 17

_PERM_BITS = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT

#: Queues of the topics a broker creates for itself (RocketMQ's defaultTopicQueueNums).
DEFAULT_TOPIC_QUEUE_NUMS = 8
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"


class TopicRefused(TriomqError):
    """A topic change the table will not make; ``code`` and ``remark`` are the answer."""

    def __init__(self, code: int, remark: str) -> None:
        self.code = code
        self.remark = remark
        super().__init__(remark)


class TopicTable:
    """The topics one broker holds, and their DataVersion."""

    def __init__(self, configs: Iterable[TopicConfig] = (),
                 data_version: DataVersion | None = None, *, max_queue_nums: int = 1024) -> None:
        self.max_queue_nums = max_queue_nums
        self._configs = {c.topic_name: c for c in configs}
        self.data_version = data_version if data_version is not None else DataVersion()

    @classmethod
    def with_system_topics(cls, cluster: str, broker_name: str, *, auto_create: bool,
                           now: int, max_queue_nums: int = 1024) -> TopicTable:
        """A new broker's table: its own topics, and TBW102 with auto-creation."""
        rw = PERM_READ | PERM_WRITE
        configs = [TopicConfig(SELF_TEST_TOPIC, 1, 1, rw),
                   TopicConfig(cluster, 16, 16, rw | PERM_INHERIT),
                   TopicConfig(broker_name, 1, 1, rw)]
        if auto_create:
            configs.append(TopicConfig(AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS,
                                       DEFAULT_TOPIC_QUEUE_NUMS, rw | PERM_INHERIT))
        return cls(configs, DataVersion(0, now, 0), max_queue_nums=max_queue_nums)

    def get(self, topic: str) -> TopicConfig | None:
        return self._configs.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self._configs

    def __len__(self) -> int:
        return len(self._configs)

    def configs(self) -> Mapping[str, TopicConfig]:
        return dict(self._configs)

    def check(self, config: TopicConfig, *, system: bool = False) -> None:
        """Raise ``TopicRefused`` unless a client (``system``: the broker) may set ``config``."""
        try:
            check_topic(config.topic_name)
        except IllegalName as exc:
            raise TopicRefused(INVALID_PARAMETER, str(exc)) from None
        if not system and is_system_topic(config.topic_name):
            raise TopicRefused(INVALID_PARAMETER, f"The topic[{config.topic_name}] is "
                                                  "conflict with system topic.")
        for what, count in (("readQueueNums", config.read_queue_nums),
                            ("writeQueueNums", config.write_queue_nums)):
            if not 1 <= count <= self.max_queue_nums:
                raise TopicRefused(INVALID_PARAMETER, (
                    f"topic {config.topic_name}: {what} {count} is not within 1.."
                    f"{self.max_queue_nums}"))
        if config.perm & ~_PERM_BITS or config.perm < 0:
            raise TopicRefused(INVALID_PARAMETER, (
                f"topic {config.topic_name}: perm {config.perm} has bits other than "
                f"priority 8, read 4, write 2, inherit 1"))
        if config.topic_filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
            raise TopicRefused(INVALID_PARAMETER, (
                f"topic {config.topic_name}: topicFilterType {config.topic_filter_type!r} is "
                f"neither SINGLE_TAG nor MULTI_TAG"))

    def update(self, config: TopicConfig, now: int, *, system: bool = False) -> bool:
        """UPDATE_AND_CREATE_TOPIC; whether anything changed (an equal config changes nothing)."""
        self.check(config, system=system)
        if self._configs.get(config.topic_name) == config:
            return False
        self._configs[config.topic_name] = config
        self.data_version = self.data_version.next(now)
        return True

    def delete(self, topic: str, now: int) -> bool:
        """DELETE_TOPIC_IN_BROKER; whether the topic was held."""
        if is_system_topic(topic):
            raise TopicRefused(INVALID_PARAMETER, f"The topic[{topic}] is a system topic "
                                                  "and cannot be deleted.")
        if self._configs.pop(topic, None) is None:
            return False
        self.data_version = self.data_version.next(now)
        return True

    def create_on_send(self, topic: str, default_topic: str, queue_nums: int,
                       now: int) -> TopicConfig | None:
        """The topic a send to unknown ``topic`` creates from ``default_topic``, if any."""
        held = self._configs.get(topic)
        if held is not None:
            return held
        default = self._configs.get(default_topic)
        if default is None or not default.perm & PERM_INHERIT:
            return None
        count = max(1, min(queue_nums, default.write_queue_nums))
        config = TopicConfig(topic, count, count, default.perm & ~PERM_INHERIT)
        self.update(config, now)
        return config

    def bump(self, now: int, state_version: int) -> None:
        """A new DataVersion with ``state_version`` (a new master's epoch), nothing else changed."""
        self.data_version = self.data_version.next(now, state_version)

    def adopt(self, configs: Mapping[str, TopicConfig], data_version: DataVersion) -> bool:
        """Take a master's table (a slave's periodic copy); whether it differed."""
        if data_version == self.data_version and dict(configs) == self._configs:
            return False
        self._configs = dict(configs)
        self.data_version = data_version
        return True

    # -- topics.json ------------------------------------------------------------

    def encode(self) -> bytes:
        """``topics.json`` (also GET_ALL_TOPIC_CONFIG's body)."""
        return dumps(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_json(),
                "topicConfigTable": {n: c.to_json() for n, c in sorted(self._configs.items())}}

    @classmethod
    def decode(cls, data: bytes, *, max_queue_nums: int = 1024) -> TopicTable:
        """A table from ``topics.json``; ``RouteDataError`` names what is wrong."""
        obj = loads(data, "topics.json")
        if not isinstance(obj, dict):
            raise RouteDataError("topics.json: expected an object")
        table = obj.get("topicConfigTable")
        table = {} if table is None else table
        if not isinstance(table, dict):
            raise RouteDataError("topics.json: topicConfigTable: expected an object")
        configs = [TopicConfig.from_json(c, f"topicConfigTable.{n}") for n, c in table.items()]
        return cls(configs, DataVersion.from_json(obj.get("dataVersion") or {}),
                   max_queue_nums=max_queue_nums)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TopicTable) and self._configs == other._configs
                and self.data_version == other.data_version)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TopicTable({len(self._configs)} topics, {attrs.asdict(self.data_version)})"
