"""A broker's consumer-group configs, pure: RocketMQ's ``SubscriptionGroupManager`` rules.

The table maps group names to ``SubscriptionGroupConfig`` under one
``DataVersion`` that moves with every change (a slave copying its master
compares versions). The broker persists ``encode()`` as
``<store root>/config/subscriptionGroup.json``, RocketMQ's file::

    {"dataVersion": {...}, "forbiddenTable": {},
     "subscriptionGroupTable": {"cg": {"groupName": "cg", "consumeEnable": true, ...}}}

A new broker holds RocketMQ's system groups (``TOOLS_CONSUMER`` and the
others). A consumer's heartbeat for an unknown group creates its config
with RocketMQ's defaults when ``auto_create`` is on (or the group is a
system one): ``find(group, auto_create, now)``. An admin replaces a group's
config (``update``, keeping the attributes it has) or deletes it
(``delete``, its ``forbiddenTable`` entry too), as RocketMQ's
``SubscriptionGroupManager`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from triomq.protocol.route import DataVersion, RouteDataError, dumps, loads

__all__ = ["SYSTEM_GROUPS", "AttributeRefused", "SubscriptionGroupConfig",
           "SubscriptionGroupTable"]

#: The groups a RocketMQ broker creates for itself (``MixAll``'s consumer groups).
SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                 "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                 "CID_ONSAPI_OWNER", "CID_SYS_RMQ_TRANS")
_SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"

_BOOLS = {"consumeEnable": "consume_enable", "consumeFromMinEnable": "consume_from_min_enable",
          "consumeBroadcastEnable": "consume_broadcast_enable",
          "consumeMessageOrderly": "consume_message_orderly",
          "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable"}
_INTS = {"retryQueueNums": "retry_queue_nums", "retryMaxTimes": "retry_max_times",
         "brokerId": "broker_id", "whichBrokerWhenConsumeSlowly":
             "which_broker_when_consume_slowly", "groupSysFlag": "group_sys_flag",
         "consumeTimeoutMinute": "consume_timeout_minute"}


class AttributeRefused(ValueError):
    """A group config's attributes cannot be applied; the message says why."""


def is_system_group(group: str) -> bool:
    return group in SYSTEM_GROUPS or group.startswith(_SYSTEM_GROUP_PREFIX)


@attrs.frozen
class SubscriptionGroupConfig:
    """One consumer group's config, with RocketMQ's defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    #: Kept as RocketMQ wrote them (triomq does not use them yet).
    group_retry_policy: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "CUSTOMIZED"}, converter=dict, hash=False)
    attributes: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"groupName": self.group_name,
                               "groupRetryPolicy": dict(self.group_retry_policy),
                               "attributes": dict(self.attributes)}
        for key, name in (_BOOLS | _INTS).items():
            obj[key] = getattr(self, name)
        return obj

    @classmethod
    def from_json(cls, value: Any, where: str) -> SubscriptionGroupConfig:
        if not isinstance(value, dict):
            raise RouteDataError(f"{where}: expected an object")
        name = value.get("groupName")
        if not isinstance(name, str) or not name:
            raise RouteDataError(f"{where}.groupName: expected a name")
        fields: dict[str, Any] = {}
        for keys, kind in ((_BOOLS, bool), (_INTS, int)):
            for key, attr in keys.items():
                got = value.get(key)
                if got is None:
                    continue
                if type(got) is not kind:
                    raise RouteDataError(f"{where}.{key}: expected {kind.__name__}")
                fields[attr] = got
        for key, attr in (("groupRetryPolicy", "group_retry_policy"),
                          ("attributes", "attributes")):
            if isinstance(value.get(key), dict):
                fields[attr] = value[key]
        return cls(name, **fields)


class SubscriptionGroupTable:
    """The consumer-group configs one broker holds, and their DataVersion."""

    def __init__(self, configs: Iterable[SubscriptionGroupConfig] = (),
                 data_version: DataVersion | None = None,
                 forbidden: Mapping[str, Any] | None = None) -> None:
        self._configs = {c.group_name: c for c in configs}
        self.data_version = data_version if data_version is not None else DataVersion()
        #: RocketMQ 5's ``forbiddenTable``, kept as read.
        self.forbidden = dict(forbidden or {})

    @classmethod
    def with_system_groups(cls, now: int) -> SubscriptionGroupTable:
        """A new broker's table."""
        return cls((SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS), DataVersion(0, now, 0))

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._configs.get(group)

    def __contains__(self, group: str) -> bool:
        return group in self._configs

    def __len__(self) -> int:
        return len(self._configs)

    def configs(self) -> dict[str, SubscriptionGroupConfig]:
        return dict(self._configs)

    def find(self, group: str, *, auto_create: bool, now: int
             ) -> tuple[SubscriptionGroupConfig | None, bool]:
        """``group``'s config, created with the defaults if allowed; and whether it was."""
        held = self._configs.get(group)
        if held is not None or not (auto_create or is_system_group(group)):
            return held, False
        config = SubscriptionGroupConfig(group)
        self._configs[group] = config
        self.data_version = self.data_version.next(now)
        return config, True

    def update(self, config: SubscriptionGroupConfig, now: int) -> SubscriptionGroupConfig:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: put ``config`` in place of the group's; what
        was stored. ``AttributeRefused`` if it alters attributes: RocketMQ 5 knows none for
        groups, so it refuses any; without any, the group keeps those it has."""
        if config.attributes:
            key = next(iter(config.attributes))
            raise AttributeRefused(f"attributes: unsupported key: {str(key)[:80]!r} (no "
                                   f"subscription-group attribute can be set)")
        held = self._configs.get(config.group_name)
        stored = attrs.evolve(config, attributes=held.attributes if held is not None else {})
        self._configs[config.group_name] = stored
        self.data_version = self.data_version.next(now)
        return stored

    def delete(self, group: str, now: int) -> bool:
        """DELETE_SUBSCRIPTIONGROUP: forget the group's config and forbidden topics;
        whether the table changed (its version moves only if the config was there)."""
        forbidden = self.forbidden.pop(group, None) is not None
        if self._configs.pop(group, None) is None:
            return forbidden
        self.data_version = self.data_version.next(now)
        return True

    def adopt(self, other: SubscriptionGroupTable) -> bool:
        """Take a master's table (a slave's periodic copy); whether it differed."""
        if other == self:
            return False
        self._configs = other.configs()
        self.data_version = other.data_version
        self.forbidden = dict(other.forbidden)
        return True

    # -- subscriptionGroup.json ------------------------------------------------

    def encode(self) -> bytes:
        """``subscriptionGroup.json`` (also GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body)."""
        return dumps({"dataVersion": self.data_version.to_json(),
                      "forbiddenTable": self.forbidden,
                      "subscriptionGroupTable": {n: c.to_json()
                                                 for n, c in sorted(self._configs.items())}})

    @classmethod
    def decode(cls, data: bytes) -> SubscriptionGroupTable:
        """A table from ``subscriptionGroup.json``; ``RouteDataError`` names what is wrong."""
        obj = loads(data, "subscriptionGroup.json")
        if not isinstance(obj, dict):
            raise RouteDataError("subscriptionGroup.json: expected an object")
        table = obj.get("subscriptionGroupTable") or {}
        if not isinstance(table, dict):
            raise RouteDataError("subscriptionGroup.json: subscriptionGroupTable: expected an "
                                 "object")
        forbidden = obj.get("forbiddenTable") or {}
        return cls([SubscriptionGroupConfig.from_json(c, f"subscriptionGroupTable.{n}")
                    for n, c in table.items()],
                   DataVersion.from_json(obj.get("dataVersion") or {}),
                   forbidden if isinstance(forbidden, dict) else {})

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SubscriptionGroupTable) and self._configs == other._configs
                and self.data_version == other.data_version and self.forbidden == other.forbidden)

    __hash__ = None  # type: ignore[assignment]
