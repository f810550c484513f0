"""How controller requests and responses look in remoting frames.

Requests carry RocketMQ-style headers (``extFields``, strings); responses
carry JSON bodies. Header keys, per request code:

- 1012 GET_NEXT_BROKER_ID: ``clusterName``, ``brokerName`` -> body
  ``{"nextBrokerId": n}``.
- 1013 APPLY_BROKER_ID: ``clusterName``, ``brokerName``, ``appliedBrokerId``,
  ``registerCheckCode``, ``brokerAddress`` -> empty body.
- 1003 REGISTER_BROKER: ``clusterName``, ``brokerName``, ``brokerId``,
  ``brokerAddress`` -> a replica-info body.
- 904 BROKER_HEARTBEAT: ``clusterName``, ``brokerName``, ``brokerId``,
  ``brokerAddr``, ``epoch``, ``maxOffset``, ``confirmOffset``,
  ``electionPriority``, optional ``heartbeatTimeoutMills`` -> empty body.
- 1001 ALTER_SYNC_STATE_SET: ``brokerName``, ``masterBrokerId``,
  ``masterEpoch``, ``syncStateSetEpoch`` (current) and ``newSyncStateSet``
  (ids joined by ``;``) -> ``{"syncStateSet": [ids], "syncStateSetEpoch": n}``.
- 1002 ELECT_MASTER: ``clusterName``, ``brokerName``, optional ``brokerId``,
  ``designateElect`` (``true``/``false``) -> a replica-info body.
- 1004 GET_REPLICA_INFO: ``brokerName`` -> a replica-info body.
- 1006 GET_SYNC_STATE_DATA: ``brokerNames`` (``;``-joined; empty: every
  group) -> ``{"groups": [replica info, ...]}``.
- 1005 GET_METADATA_INFO: none -> the metadata body (see ``ControllerMetadata``).
- 1011 CLEAN_BROKER_DATA: ``clusterName``, ``brokerName``, optional
  ``brokerIdSetToClean`` (``;``-joined), ``isCleanLivingBroker``.
- 1008 NOTIFY_BROKER_ROLE_CHANGED (controller -> broker, oneway): a
  replica-info body.
- 1010 GET_CONTROLLER_CONFIG -> ``{key: value}``; 1009
  UPDATE_CONTROLLER_CONFIG: the body is ``{key: value}`` of the keys to change.
- 1007 GET_BROKER_EPOCH_CACHE (served by a broker): none -> the epoch body
  (see ``BrokerEpochCache``).

A replica-info body::

    {"brokerName": "broker-a", "masterBrokerId": 2, "masterAddress": "tcp://...",
     "masterEpoch": 3, "syncStateSet": [1, 2], "syncStateSetEpoch": 4,
     "brokerMemberGroup": [[1, "tcp://..."], [2, "tcp://..."]],
     "possibleMessageLoss": false}

``masterBrokerId`` and ``masterAddress`` are ``null`` while the group has no
master. A refusal has the controller's response code and the reason as
remark; CONTROLLER_NOT_LEADER (2007) adds ``leaderId`` and ``leaderAddress``
to ``extFields`` (empty while no leader is known).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from triomq.controller import _json
from triomq.controller.group import BrokerGroup
from triomq.errors import TriomqError

__all__ = [
    "BrokerEpochCache",
    "ControllerMetadata",
    "Header",
    "ReplicaInfo",
    "WireError",
    "decode_config",
    "decode_epoch_cache",
    "decode_metadata",
    "decode_replica_info",
    "decode_replica_infos",
    "encode_config",
    "encode_epoch_cache",
    "encode_metadata",
    "encode_replica_info",
    "encode_replica_infos",
    "join_ids",
    "load_body",
]


class WireError(TriomqError, ValueError):
    """A controller request header or response body is malformed; the message says where."""


def join_ids(ids: Iterable[int]) -> str:
    """Broker ids as a header value: ``"1;2;3"``."""
    return ";".join(str(i) for i in sorted(ids))


class Header:
    """Typed access to a request's ``extFields``; errors name the request and the key."""

    def __init__(self, fields: Mapping[str, str], where: str) -> None:
        self.fields = fields
        self.where = where

    def _fail(self, key: str, message: str) -> WireError:
        return WireError(f"{self.where}: header field {key!r}: {message}")

    def string(self, key: str) -> str:
        """A required, non-empty string."""
        value = self.fields.get(key, "")
        if not value:
            raise self._fail(key, "missing")
        return value

    def integer(self, key: str) -> int:
        """A required non-negative integer."""
        value = self.optional_integer(key)
        if value is None:
            raise self._fail(key, "missing")
        return value

    def optional_integer(self, key: str) -> int | None:
        """A non-negative integer, or ``None`` when absent or empty."""
        raw = self.fields.get(key, "")
        if raw == "":
            return None
        if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
            raise self._fail(key, f"expected a non-negative integer, got {raw[:40]!r}")
        value = int(raw)
        if value > _json.MAX_INT:
            raise self._fail(key, f"out of range: {raw[:40]}")
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        """``"true"`` or ``"false"`` (``default`` when absent)."""
        raw = self.fields.get(key, "")
        if raw == "":
            return default
        if raw not in ("true", "false"):
            raise self._fail(key, f"expected 'true' or 'false', got {raw[:40]!r}")
        return raw == "true"

    def id_set(self, key: str) -> frozenset[int] | None:
        """Broker ids joined by ``;``, or ``None`` when absent or empty."""
        raw = self.fields.get(key, "")
        if raw == "":
            return None
        ids = []
        for part in raw.split(";"):
            if not part.isascii() or not part.isdigit() or len(part) > 18:
                raise self._fail(key, f"expected broker ids joined by ';', got {raw[:40]!r}")
            ids.append(int(part))
        return frozenset(ids)


def load_body(data: bytes, where: str) -> _json.FieldReader:
    """A response body's JSON object, for typed reads."""
    return _json.FieldReader(_json.load_object(data, where, WireError), where, WireError)


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _optional_string(reader: _json.FieldReader, key: str) -> str | None:
    value = reader.raw(key)
    if value is not None and not isinstance(value, str):
        reader.fail(f"{key!r} must be a string or null, got {type(value).__name__}")
    return value


def _boolean(reader: _json.FieldReader, key: str) -> bool:
    value = reader.raw(key)
    if not isinstance(value, bool):
        reader.fail(f"{key!r} must be true or false, got {type(value).__name__}")
    return value


def _pairs(reader: _json.FieldReader, key: str) -> tuple[tuple[int, str], ...]:
    pairs = []
    for item in reader.list(key):
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], str)):
            reader.fail(f"{key!r} must hold [integer, string] pairs, got {item!r:.60}")
        pairs.append((reader.check_integer(item[0], key), item[1]))
    return tuple(sorted(pairs))


@attrs.frozen
class ReplicaInfo:
    """One group as brokers and administrators see it: master, epochs, SyncStateSet, replicas.

    ``replicas`` is ``(broker_id, address)`` pairs sorted by id (RocketMQ's
    BrokerMemberGroup). ``possible_message_loss`` is set on an election
    answer when the master came from outside the SyncStateSet.
    """

    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int] = attrs.field(converter=frozenset)
    sync_state_set_epoch: int
    replicas: tuple[tuple[int, str], ...] = attrs.field(default=(), converter=tuple)
    possible_message_loss: bool = False

    @classmethod
    def of_group(cls, group: BrokerGroup, *, possible_message_loss: bool = False
                 ) -> ReplicaInfo:
        """The view of a group's current state."""
        return cls(group.broker_name, group.master_broker_id, group.master_address,
                   group.master_epoch, group.sync_state_set, group.sync_state_set_epoch,
                   tuple(sorted(group.addresses.items())), possible_message_loss)

    def is_older_than(self, other: ReplicaInfo) -> bool:
        """True when ``other`` saw a later master or SyncStateSet epoch."""
        return (self.master_epoch, self.sync_state_set_epoch) < (
            other.master_epoch, other.sync_state_set_epoch)

    def address_of(self, broker_id: int | None) -> str | None:
        """The address of a replica, or ``None``."""
        return dict(self.replicas).get(broker_id) if broker_id is not None else None

    def broker_id_of(self, address: str) -> int | None:
        """The id of the replica at ``address``, or ``None``."""
        for broker_id, replica_address in self.replicas:
            if replica_address == address:
                return broker_id
        return None


_REPLICA_INFO_KEYS = {"brokerName", "masterBrokerId", "masterAddress", "masterEpoch",
                      "syncStateSet", "syncStateSetEpoch", "brokerMemberGroup",
                      "possibleMessageLoss"}


def _replica_info_object(info: ReplicaInfo) -> dict[str, Any]:
    return {
        "brokerName": info.broker_name,
        "masterBrokerId": info.master_broker_id,
        "masterAddress": info.master_address,
        "masterEpoch": info.master_epoch,
        "syncStateSet": sorted(info.sync_state_set),
        "syncStateSetEpoch": info.sync_state_set_epoch,
        "brokerMemberGroup": [list(pair) for pair in info.replicas],
        "possibleMessageLoss": info.possible_message_loss,
    }


def _read_replica_info(obj: Any, where: str) -> ReplicaInfo:
    reader = _json.FieldReader(obj, where, WireError)
    reader.expect_keys(_REPLICA_INFO_KEYS)
    return ReplicaInfo(
        broker_name=reader.string("brokerName"),
        master_broker_id=reader.optional_integer("masterBrokerId"),
        master_address=_optional_string(reader, "masterAddress"),
        master_epoch=reader.integer("masterEpoch"),
        sync_state_set=reader.id_set("syncStateSet"),
        sync_state_set_epoch=reader.integer("syncStateSetEpoch"),
        replicas=_pairs(reader, "brokerMemberGroup"),
        possible_message_loss=_boolean(reader, "possibleMessageLoss"),
    )


def encode_replica_info(info: ReplicaInfo) -> bytes:
    """A replica-info response body."""
    return _dump(_replica_info_object(info))


def decode_replica_info(data: bytes) -> ReplicaInfo:
    """Decode a replica-info body; ``WireError`` names the bad key."""
    return _read_replica_info(_json.load_object(data, "replica info", WireError), "replica info")


def encode_replica_infos(infos: Iterable[ReplicaInfo]) -> bytes:
    """A GET_SYNC_STATE_DATA response body."""
    return _dump({"groups": [_replica_info_object(info) for info in infos]})


def decode_replica_infos(data: bytes) -> tuple[ReplicaInfo, ...]:
    """Decode a GET_SYNC_STATE_DATA body."""
    reader = load_body(data, "sync state data")
    reader.expect_keys({"groups"})
    return tuple(_read_replica_info(obj, f"sync state data group {i}")
                 for i, obj in enumerate(reader.list("groups")))


@attrs.frozen
class ControllerMetadata:
    """GET_METADATA_INFO: the controllers' Raft view and every group.

    ``leader_id`` / ``leader_address`` are empty while no leader is known.
    """

    controller_id: str
    leader_id: str
    leader_address: str
    term: int
    peers: tuple[tuple[str, str], ...] = attrs.field(converter=tuple)
    groups: tuple[ReplicaInfo, ...] = attrs.field(converter=tuple)


def encode_metadata(metadata: ControllerMetadata) -> bytes:
    """A GET_METADATA_INFO response body."""
    return _dump({
        "controllerId": metadata.controller_id,
        "leaderId": metadata.leader_id,
        "leaderAddress": metadata.leader_address,
        "term": metadata.term,
        "peers": [list(pair) for pair in metadata.peers],
        "groups": [_replica_info_object(info) for info in metadata.groups],
    })


def decode_metadata(data: bytes) -> ControllerMetadata:
    """Decode a GET_METADATA_INFO body."""
    reader = load_body(data, "controller metadata")
    reader.expect_keys({"controllerId", "leaderId", "leaderAddress", "term", "peers", "groups"})
    peers = []
    for item in reader.list("peers"):
        if (not isinstance(item, list) or len(item) != 2
                or not all(isinstance(part, str) for part in item)):
            reader.fail(f"'peers' must hold [string, string] pairs, got {item!r:.60}")
        peers.append((item[0], item[1]))
    return ControllerMetadata(
        controller_id=reader.string("controllerId"),
        leader_id=reader.string("leaderId"),
        leader_address=reader.string("leaderAddress"),
        term=reader.integer("term"),
        peers=tuple(sorted(peers)),
        groups=tuple(_read_replica_info(obj, f"controller metadata group {i}")
                     for i, obj in enumerate(reader.list("groups"))),
    )


@attrs.frozen
class BrokerEpochCache:
    """GET_BROKER_EPOCH_CACHE (answered by a broker): its epochs and offsets.

    ``epochs`` is ``(epoch, start_offset)`` pairs, oldest first; an epoch
    ends where the next starts, the last at ``max_offset``.
    """

    broker_name: str
    broker_id: int
    max_offset: int
    confirm_offset: int
    epochs: tuple[tuple[int, int], ...] = attrs.field(converter=tuple)


def encode_epoch_cache(cache: BrokerEpochCache) -> bytes:
    """A GET_BROKER_EPOCH_CACHE response body."""
    return _dump({"brokerName": cache.broker_name, "brokerId": cache.broker_id,
                  "maxOffset": cache.max_offset, "confirmOffset": cache.confirm_offset,
                  "epochs": [list(pair) for pair in cache.epochs]})


def decode_epoch_cache(data: bytes) -> BrokerEpochCache:
    """Decode a GET_BROKER_EPOCH_CACHE body."""
    reader = load_body(data, "broker epoch cache")
    reader.expect_keys({"brokerName", "brokerId", "maxOffset", "confirmOffset", "epochs"})
    epochs = []
    for item in reader.list("epochs"):
        if not isinstance(item, list) or len(item) != 2:
            reader.fail(f"'epochs' must hold [epoch, startOffset] pairs, got {item!r:.60}")
        epochs.append((reader.check_integer(item[0], "epochs"),
                       reader.check_integer(item[1], "epochs")))
    return BrokerEpochCache(
        broker_name=reader.string("brokerName"),
        broker_id=reader.integer("brokerId"),
        max_offset=reader.integer("maxOffset"),
        confirm_offset=reader.integer("confirmOffset"),
        epochs=tuple(epochs),
    )


def encode_config(values: Mapping[str, Any]) -> bytes:
    """A GET/UPDATE_CONTROLLER_CONFIG body: ``{key: value}``."""
    return _dump(dict(values))


def decode_config(data: bytes) -> dict[str, Any]:
    """Decode a GET/UPDATE_CONTROLLER_CONFIG body."""
    return _json.load_object(data, "controller config", WireError)
