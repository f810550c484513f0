"""``[controller]``: a controller node (or a nameserver embedding one).

Keys keep RocketMQ's names in snake_case; times are in milliseconds. The
defaults aim at sub-second failover on a LAN (RocketMQ's in brackets)::

    [controller]
    node_id = 1
    peers = { 1 = "tcp://10.0.0.1:9878", 2 = "tcp://10.0.0.2:9878",
              3 = "tcp://10.0.0.3:9878" }
    raft = { tick_interval_ms = 50, store_scheme = "lmdb" }

``peers`` names every controller's Raft id and RPC address (this one
included): the controllers serve Raft and controller requests on the same
RPC port. ``raft`` is handed to ``triomq.consensus.core.config.RaftConfig``
(timeouts, store scheme and path), which documents its keys.

GET_CONTROLLER_CONFIG and UPDATE_CONTROLLER_CONFIG carry the keys as
properties (``PROPERTY_NAMES``): RocketMQ's ControllerConfig names where it
has the setting (``scan_not_active_broker_interval`` is
``scanNotActiveBrokerInterval``, ``node_id``, ``peers`` and ``group`` are
``controllerDLegerSelfId``, ``controllerDLegerPeers`` and
``controllerDLegerGroup``), the key in camelCase otherwise; ``raft``, a
table, has none. ``to_properties`` and ``from_properties`` convert; an
update naming one of RocketMQ's ``BLACK_LIST`` is refused as RocketMQ
refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from triomq.consensus.core.config import RaftConfig
from triomq.errors import ConfigError
from triomq.settings import from_mapping, non_negative, positive, setting

__all__ = ["BLACK_LIST", "PROPERTY_NAMES", "ControllerConfig", "from_properties",
           "to_properties", "with_property_name"]


def _not_empty(value: str) -> str | None:
    return None if value else "must not be empty"


def _peers(value: Mapping[Any, str]) -> dict[int, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"expected a table of id -> address, got {value!r}", "peers")
    peers = {}
    for key, address in value.items():
        if isinstance(key, bool) or not str(key).isdigit() or int(key) < 1:
            raise ConfigError(f"controller id {key!r} must be an integer >= 1", f"peers.{key}")
        if not isinstance(address, str) or "://" not in address:
            raise ConfigError(f"expected 'scheme://location', got {address!r}", f"peers.{key}")
        peers[int(key)] = address
    return peers


@attrs.frozen
class ControllerConfig:
    """A DLedger-style controller: Raft membership, broker liveness and elections."""

    node_id: int = setting(
        0, doc="This controller's Raft id (>= 1), a key of 'peers'; required on a controller.",
        check=non_negative)
    group: str = setting(
        "DefaultControllerGroup", doc="The controllers' group name, as GET_METADATA_INFO "
        "answers it (RocketMQ's controllerDLegerGroup).", check=_not_empty)
    peers: dict[int, str] = attrs.field(
        factory=dict, converter=_peers,
        metadata={"doc": "Every controller's Raft id -> RPC address, this one included, "
                         "e.g. { 1 = 'tcp://10.0.0.1:9878' }."})
    raft: dict[str, Any] = setting(
        factory=dict, doc="More keys of the Raft node (triomq.consensus.core.config.RaftConfig): "
                          "tick_interval_ms, election_ticks, store_scheme, path, ...")
    scan_not_active_broker_interval: int = setting(
        100, doc="ms between the active controller's scans for silent brokers (RocketMQ: "
                 "5000).", check=positive)
    broker_not_active_timeout: int = setting(
        500, doc="ms without a heartbeat after which a broker is inactive, unless the broker "
                 "sends its own timeout (RocketMQ's brokerNotActiveTimeoutMillis: 10000).",
        check=positive)
    enable_elect_unclean_master: bool = setting(
        False, doc="Elect a replica outside the SyncStateSet when none inside is alive (it "
                   "may lack acknowledged messages; the loss is reported).")
    election_policy: str = setting(
        "default", doc="Name of the election policy (triomq_election_policy hook); 'default' "
                       "is RocketMQ's.", check=_not_empty)
    notify_broker_role_changed: bool = setting(
        True, doc="Push NOTIFY_BROKER_ROLE_CHANGED to a group's brokers after an election "
                  "(they also poll).")
    enable_controller_in_namesrv: bool = setting(
        False, doc="A nameserver node also runs this controller (RocketMQ's "
                   "enableControllerInNamesrv).")
    request_timeout: int = setting(
        3000, doc="ms a request waits for its state change to be committed before answering "
                  "CONTROLLER_JRAFT_INTERNAL_ERROR.", check=positive)

    def raft_config(self) -> RaftConfig:
        """The Raft node's settings: ``node_id``, ``peers`` and the ``raft`` keys."""
        if self.node_id not in self.peers:
            raise ConfigError(
                f"{self.node_id} is not a key of controller.peers "
                f"({', '.join(map(str, sorted(self.peers))) or 'none'})", "controller.node_id")
        data = {**self.raft, "node_id": self.node_id,
                "peers": {str(k): v for k, v in self.peers.items()}}
        return from_mapping(RaftConfig, data, "controller.raft")


#: ``[controller]`` keys and their property names (see the module docstring).
PROPERTY_NAMES: Mapping[str, str] = {
    "node_id": "controllerDLegerSelfId",
    "group": "controllerDLegerGroup",
    "peers": "controllerDLegerPeers",
    "scan_not_active_broker_interval": "scanNotActiveBrokerInterval",
    "broker_not_active_timeout": "brokerNotActiveTimeoutMillis",
    "enable_elect_unclean_master": "enableElectUncleanMaster",
    "election_policy": "electionPolicy",
    "notify_broker_role_changed": "notifyBrokerRoleChanged",
    "enable_controller_in_namesrv": "enableControllerInNamesrv",
    "request_timeout": "requestTimeout",
}
_KEYS = {name: key for key, name in PROPERTY_NAMES.items()}

#: Names RocketMQ's controller never lets UPDATE_CONTROLLER_CONFIG change (NO_PERMISSION):
#: its ``configBlackList`` default and the names it always adds.
BLACK_LIST = frozenset({"configBlackList", "configStorePath", "rocketmqHome"})


def with_property_name(key: str) -> str:
    """``key`` and its property name, for messages: ``request_timeout (requestTimeout)``."""
    name = PROPERTY_NAMES.get(key)
    return f"{key} ({name})" if name else key


def _property(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        # controllerDLegerPeers: "id-host:port;..." (RocketMQ's addresses carry no scheme).
        return ";".join(f"{i}-{a.removeprefix('tcp://')}" for i, a in sorted(value.items()))
    return str(value)


def to_properties(values: Mapping[str, Any]) -> dict[str, str]:
    """``[controller]`` keys and values as properties; ``ConfigError`` for a key without a
    property name (``raft``, an unknown one)."""
    unnamed = sorted(set(values) - set(PROPERTY_NAMES))
    if unnamed:
        raise ConfigError(f"no property name for {unnamed}; named keys: "
                          f"{', '.join(PROPERTY_NAMES)}")
    return {PROPERTY_NAMES[key]: _property(value) for key, value in values.items()}


def _typed(key: str, name: str, text: str) -> Any:
    kind = {f.name: f.type for f in attrs.fields(attrs.resolve_types(ControllerConfig))}[key]
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"expected true or false, got {text!r}", name)
        return text.lower() == "true"
    if kind is int:
        digits = text.strip().removeprefix("-")
        if not digits.isascii() or not digits.isdigit():
            raise ConfigError(f"expected an integer, got {text!r}", name)
        return int(text)
    if key == "peers":
        peers = {}
        for member in filter(None, text.split(";")):
            node_id, sep, address = member.partition("-")
            if not sep or not node_id.isascii() or not node_id.isdigit():
                raise ConfigError(f"expected id-host:port;..., got {text!r}", name)
            peers[node_id] = address if "://" in address else f"tcp://{address}"
        return peers
    return text


def from_properties(properties: Mapping[str, str]) -> dict[str, Any]:
    """Properties as ``[controller]`` keys with typed values; ``ConfigError`` names an
    unknown property or a value of the wrong type."""
    values = {}
    for name, text in properties.items():
        key = _KEYS.get(name)
        if key is None:
            raise ConfigError(f"unknown property {name!r}; known: {', '.join(sorted(_KEYS))}")
        values[key] = _typed(key, name, text)
    return values
