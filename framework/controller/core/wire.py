"""How controller requests and responses look in remoting frames.

Requests carry RocketMQ-style headers (``extFields``, strings); responses
carry JSON bodies, except where RocketMQ's ``mqadmin`` reads the answer: those
are RocketMQ's own shapes (below). Header keys, per request code:

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
  ``designateElect`` (``true``/``false``) -> SUCCESS or
  CONTROLLER_MASTER_STILL_EXIST with RocketMQ's ElectMasterResponseHeader in
  ``extFields`` and its ElectMasterResponseBody (``elect_fields``,
  ``encode_elect_body``); a refusal carries neither.
- 1004 GET_REPLICA_INFO: ``brokerName`` -> a replica-info body.
- 1006 GET_SYNC_STATE_DATA: the body is a JSON list of group names ->
  RocketMQ's BrokerReplicasInfo (``encode_sync_state_data``; no names: an
  empty table).
- 1005 GET_METADATA_INFO: none -> RocketMQ's GetMetaDataResponseHeader in
  ``extFields``, no body (``ControllerMetadata``).
- 1011 CLEAN_BROKER_DATA: optional ``clusterName`` (mqadmin leaves it out
  with ``-l``), ``brokerName``, optional ``brokerControllerIdsToClean``
  (``;``-joined), ``isCleanLivingBroker`` -> empty body.
- 1008 NOTIFY_BROKER_ROLE_CHANGED (controller -> broker, oneway): a
  replica-info body.
- 1010 GET_CONTROLLER_CONFIG -> properties text (``name=value`` lines,
  ``triomq.protocol.java_properties``, names of ``controller.config``); 1009
  UPDATE_CONTROLLER_CONFIG: the body is properties text of the names to change.
- 1007 GET_BROKER_EPOCH_CACHE (served by a broker): none -> RocketMQ's
  EpochEntryCache (``BrokerEpochCache``).

A replica-info body::

    {"brokerName": "broker-a", "masterBrokerId": 2, "masterAddress": "tcp://...",
     "masterEpoch": 3, "syncStateSet": [1, 2], "syncStateSetEpoch": 4,
     "brokerMemberGroup": [[1, "tcp://..."], [2, "tcp://..."]],
     "possibleMessageLoss": false}

``masterBrokerId`` and ``masterAddress`` are ``null`` while the group has no
master. A refusal has the controller's response code and the reason as
remark; CONTROLLER_NOT_LEADER (2007) adds ``leaderId`` and ``leaderAddress``
to ``extFields`` (empty while no leader is known).

In RocketMQ's shapes addresses are written as RocketMQ writes them: a TCP
address is ``host:port`` (``rocketmq_address``; ``rpc_address`` is the way
back), and a null is left out, as fastjson and RocketMQ's headers do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from triomq.controller.core import _json
from triomq.controller.core.group import BrokerGroup
from triomq.controller.core.results import Replica, SyncStateData
from triomq.errors import TriomqError
from triomq.protocol.header_fields import HeaderFields

__all__ = [
    "OPEN_END",
    "BrokerEpochCache",
    "ControllerMetadata",
    "EpochRange",
    "ReplicaInfo",
    "WireError",
    "decode_epoch_cache",
    "decode_replica_info",
    "decode_sync_state_data",
    "dump_json",
    "elect_fields",
    "encode_elect_body",
    "encode_epoch_cache",
    "encode_replica_info",
    "encode_sync_state_data",
    "join_ids",
    "load_body",
    "metadata_fields",
    "read_elect_answer",
    "read_metadata",
    "rocketmq_address",
    "rpc_address",
]


class WireError(TriomqError, ValueError):
    """A controller request header or response body is malformed; the message says where."""


def join_ids(ids: Iterable[int]) -> str:
    """Broker ids as a header value: ``"1;2;3"``."""
    return ";".join(str(i) for i in sorted(ids))


def load_body(data: bytes, where: str) -> _json.FieldReader:
    """A response body's JSON object, for typed reads."""
    return _json.FieldReader(_json.load_object(data, where, WireError), where, WireError)


def dump_json(obj: Any) -> bytes:
    """A JSON body: sorted keys (fastjson's order for a bean's fields), no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def rocketmq_address(address: str) -> str:
    """An address as RocketMQ writes it: ``host:port`` for TCP, others as they are."""
    return address.removeprefix("tcp://")


def rpc_address(address: str) -> str:
    """An address read from a RocketMQ shape, as the RPC client dials it."""
    return address if "://" in address else f"tcp://{address}"


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
    return dump_json(_replica_info_object(info))


def decode_replica_info(data: bytes) -> ReplicaInfo:
    """Decode a replica-info body; ``WireError`` names the bad key."""
    return _read_replica_info(_json.load_object(data, "replica info", WireError), "replica info")



# -- RocketMQ's shapes: what mqadmin reads ----------------------------------------------


@attrs.frozen
class ControllerMetadata:
    """GET_METADATA_INFO: RocketMQ's GetMetaDataResponseHeader, one controller's view.

    ``leader_id`` and ``leader_address`` are ``None`` while it knows no leader;
    ``peers`` is ``(id, address)`` pairs, in the order sent.
    """

    group: str | None
    leader_id: str | None
    leader_address: str | None
    is_leader: bool
    peers: tuple[tuple[str, str], ...] = attrs.field(converter=tuple)


def metadata_fields(metadata: ControllerMetadata) -> dict[str, str]:
    """The response's ``extFields``: ``isLeader`` as Java prints a boolean, ``peers`` as
    DLedgerController joins them (``id:address;`` each)."""
    fields = {"isLeader": "true" if metadata.is_leader else "false",
              "peers": "".join(f"{i}:{rocketmq_address(a)};" for i, a in metadata.peers)}
    for key, value in (("group", metadata.group), ("controllerLeaderId", metadata.leader_id),
                       ("controllerLeaderAddress", metadata.leader_address)):
        if value is not None:
            fields[key] = rocketmq_address(value) if key.endswith("Address") else value
    return fields


def read_metadata(fields: Mapping[str, str]) -> ControllerMetadata:
    """A GET_METADATA_INFO response's ``extFields`` read back."""
    peers = []
    for member in filter(None, fields.get("peers", "").split(";")):
        peer_id, sep, address = member.partition(":")
        if not sep:
            raise WireError(f"controller metadata: 'peers' holds {member[:40]!r}, "
                            "expected id:address")
        peers.append((peer_id, address))
    return ControllerMetadata(fields.get("group"), fields.get("controllerLeaderId"),
                              fields.get("controllerLeaderAddress"),
                              fields.get("isLeader") == "true", peers)


def _replica_identities(broker_name: str, replicas: Iterable[Replica]) -> list[dict[str, Any]]:
    return [{"alive": r.alive, "brokerAddress": rocketmq_address(r.address),
             "brokerId": r.broker_id, "brokerName": broker_name} for r in replicas]


def encode_sync_state_data(groups: Iterable[SyncStateData]) -> bytes:
    """A GET_SYNC_STATE_DATA body: RocketMQ's BrokerReplicasInfo, by group name."""
    table = {}
    for data in groups:
        info: dict[str, Any] = {
            "inSyncReplicas": _replica_identities(data.broker_name, data.in_sync_replicas),
            "masterEpoch": data.master_epoch,
            "notInSyncReplicas": _replica_identities(data.broker_name,
                                                     data.not_in_sync_replicas),
            "syncStateSetEpoch": data.sync_state_set_epoch,
        }
        if data.master_broker_id is not None:
            info["masterBrokerId"] = data.master_broker_id
        if data.master_address is not None:
            info["masterAddress"] = rocketmq_address(data.master_address)
        table[data.broker_name] = info
    return dump_json({"replicasInfoTable": table})


def _read_replicas(reader: _json.FieldReader, key: str) -> tuple[Replica, ...]:
    replicas = []
    for index, obj in enumerate(reader.list(key)):
        item = _json.FieldReader(obj, f"{reader.where} {key}[{index}]", WireError)
        item.expect_keys({"brokerName", "brokerId", "brokerAddress"}, optional={"alive"})
        item.string("brokerName")  # checked, not kept: it is the group's name
        alive = item.optional("alive")
        if alive is not None and not isinstance(alive, bool):
            item.fail(f"'alive' must be true, false or null, got {type(alive).__name__}")
        replicas.append(Replica(item.integer("brokerId"), item.string("brokerAddress"),
                                alive=bool(alive)))
    return tuple(replicas)


def decode_sync_state_data(data: bytes) -> tuple[SyncStateData, ...]:
    """Decode a GET_SYNC_STATE_DATA body: the groups sorted by name."""
    reader = load_body(data, "sync state data")
    reader.expect_keys({"replicasInfoTable"})
    table = reader.raw("replicasInfoTable")
    if not isinstance(table, dict):
        reader.fail(f"'replicasInfoTable' must be an object, got {type(table).__name__}")
    groups = []
    for name, obj in sorted(table.items()):
        info = _json.FieldReader(obj, f"sync state data of {name[:40]!r}", WireError)
        info.expect_keys({"masterEpoch", "syncStateSetEpoch", "inSyncReplicas",
                          "notInSyncReplicas"}, optional={"masterBrokerId", "masterAddress"})
        master_address = info.optional("masterAddress")
        if master_address is not None and not isinstance(master_address, str):
            info.fail(f"'masterAddress' must be a string, got {type(master_address).__name__}")
        groups.append(SyncStateData(
            broker_name=name,
            master_broker_id=(None if info.optional("masterBrokerId") is None
                              else info.integer("masterBrokerId")),
            master_address=master_address,
            master_epoch=info.integer("masterEpoch"),
            sync_state_set_epoch=info.integer("syncStateSetEpoch"),
            in_sync_replicas=_read_replicas(info, "inSyncReplicas"),
            not_in_sync_replicas=_read_replicas(info, "notInSyncReplicas"),
        ))
    return tuple(groups)


def elect_fields(info: ReplicaInfo) -> dict[str, str]:
    """An ELECT_MASTER answer's ``extFields``: RocketMQ's ElectMasterResponseHeader (the
    master's two fields left out while there is none), and ``possibleMessageLoss`` after
    an unclean election (triomq's own; RocketMQ's readers skip keys they do not know)."""
    fields = {"masterEpoch": str(info.master_epoch),
              "syncStateSetEpoch": str(info.sync_state_set_epoch)}
    if info.master_broker_id is not None:
        fields["masterBrokerId"] = str(info.master_broker_id)
    if info.master_address is not None:
        fields["masterAddress"] = rocketmq_address(info.master_address)
    if info.possible_message_loss:
        fields["possibleMessageLoss"] = "true"
    return fields


def encode_elect_body(cluster_name: str, info: ReplicaInfo) -> bytes:
    """An ELECT_MASTER answer's body: RocketMQ's ElectMasterResponseBody (the group's
    BrokerMemberGroup and SyncStateSet), with the BrokerMemberGroup's fields repeated at
    the top. RocketMQ's broker reads this body as an ElectMasterResponseBody but its
    mqadmin electMaster reads it as a bare BrokerMemberGroup (and so, from RocketMQ's
    own controller, lists no replicas); fastjson skips unknown keys, so both find theirs.
    """
    members = {"brokerAddrs": {str(i): rocketmq_address(a) for i, a in info.replicas},
               "brokerName": info.broker_name, "cluster": cluster_name}
    return dump_json({**members, "brokerMemberGroup": members,
                      "syncStateSet": sorted(info.sync_state_set)})


def read_elect_answer(fields: Mapping[str, str], body: bytes) -> ReplicaInfo:
    """An ELECT_MASTER answer (``elect_fields`` and ``encode_elect_body``) read back."""
    where = "ELECT_MASTER response"
    header = HeaderFields(fields, where, error=WireError)
    reader = load_body(body, where)
    reader.expect_keys({"brokerMemberGroup", "syncStateSet"},
                       optional={"brokerAddrs", "brokerName", "cluster"})
    group = _json.FieldReader(reader.raw("brokerMemberGroup"), f"{where} brokerMemberGroup",
                              WireError)
    group.expect_keys({"brokerAddrs", "brokerName"}, optional={"cluster"})
    addresses = group.raw("brokerAddrs")
    if not isinstance(addresses, dict) or not all(
            key.isascii() and key.isdigit() and isinstance(value, str)
            for key, value in addresses.items()):
        group.fail(f"'brokerAddrs' must map broker ids to addresses, got {addresses!r:.60}")
    master_address = fields.get("masterAddress")
    return ReplicaInfo(
        broker_name=group.string("brokerName"),
        master_broker_id=header.optional_integer("masterBrokerId"),
        master_address=rpc_address(master_address) if master_address else None,
        master_epoch=header.integer("masterEpoch"),
        sync_state_set=reader.id_set("syncStateSet"),
        sync_state_set_epoch=header.integer("syncStateSetEpoch"),
        replicas=sorted((int(key), rpc_address(value)) for key, value in addresses.items()),
        possible_message_loss=header.boolean("possibleMessageLoss"),
    )


#: The end of an epoch still open: RocketMQ's EpochEntry default, Java's Long.MAX_VALUE.
OPEN_END = _json.MAX_INT


@attrs.frozen
class EpochRange:
    """One of a broker's epochs and its offsets (RocketMQ's EpochEntry)."""

    epoch: int
    start_offset: int
    end_offset: int = OPEN_END


@attrs.frozen
class BrokerEpochCache:
    """GET_BROKER_EPOCH_CACHE (answered by a broker): RocketMQ's EpochEntryCache.

    ``epochs`` oldest first; each ends where the next starts, the last is
    open (``OPEN_END``; mqadmin shows the broker's ``max_offset`` instead).
    ``broker_id`` is 0 on a master, as RocketMQ's controller mode sets it.
    """

    cluster_name: str
    broker_name: str
    broker_id: int
    epochs: tuple[EpochRange, ...] = attrs.field(converter=tuple)
    max_offset: int


def encode_epoch_cache(cache: BrokerEpochCache) -> bytes:
    """A GET_BROKER_EPOCH_CACHE response body."""
    return dump_json({
        "brokerId": cache.broker_id, "brokerName": cache.broker_name,
        "clusterName": cache.cluster_name, "maxOffset": cache.max_offset,
        "epochList": [{"endOffset": e.end_offset, "epoch": e.epoch,
                       "startOffset": e.start_offset} for e in cache.epochs]})


def decode_epoch_cache(data: bytes) -> BrokerEpochCache:
    """Decode a GET_BROKER_EPOCH_CACHE body."""
    reader = load_body(data, "broker epoch cache")
    reader.expect_keys({"clusterName", "brokerName", "brokerId", "epochList", "maxOffset"})
    epochs = []
    for index, obj in enumerate(reader.list("epochList")):
        entry = _json.FieldReader(obj, f"broker epoch cache epochList[{index}]", WireError)
        entry.expect_keys({"epoch", "startOffset", "endOffset"})
        epochs.append(EpochRange(entry.integer("epoch"), entry.integer("startOffset"),
                                 entry.integer("endOffset")))
    return BrokerEpochCache(reader.string("clusterName"), reader.string("brokerName"),
                            reader.integer("brokerId"), epochs, reader.integer("maxOffset"))
