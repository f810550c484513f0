"""How controller requests and responses look in remoting frames: RocketMQ 5.3's.

Brokers of either kind talk to controllers of either kind, so requests and
answers are RocketMQ's own: headers (``extFields``, strings) named as its
``*RequestHeader`` and ``*ResponseHeader`` classes name them, and RocketMQ's
bodies. Per request code:

- 1012 GET_NEXT_BROKER_ID: ``clusterName``, ``brokerName`` -> header
  ``nextBrokerId``.
- 1013 APPLY_BROKER_ID: ``clusterName``, ``brokerName``, ``appliedBrokerId``,
  ``registerCheckCode`` (the broker's address, ``;``, a time: the address
  is read from it, as RocketMQ's controller reads it) -> nothing.
- 1003 REGISTER_BROKER: ``clusterName``, ``brokerName``, ``brokerId``,
  ``brokerAddress`` -> the group's master in the header
  (``replica_info_fields``) and a SyncStateSet body.
- 904 BROKER_HEARTBEAT: ``clusterName``, ``brokerName``, ``brokerId``,
  ``brokerAddr``, ``epoch``, ``maxOffset``, ``confirmOffset`` (-1 while
  unknown, as RocketMQ's broker sends them), ``electionPriority``, optional
  ``heartbeatTimeoutMills`` -> nothing (RocketMQ's broker sends it oneway).
- 1001 ALTER_SYNC_STATE_SET: ``brokerName``, ``masterBrokerId``,
  ``masterEpoch``, and a SyncStateSet body: the proposed set with the
  epoch of the set it replaces -> header ``newSyncStateSetEpoch`` and a
  SyncStateSet body, the set applied.
- 1002 ELECT_MASTER: ``clusterName``, ``brokerName``, optional ``brokerId``
  (-1: none), ``designateElect`` -> SUCCESS or CONTROLLER_MASTER_STILL_EXIST
  with RocketMQ's ElectMasterResponseHeader (``elect_fields``) and its
  ElectMasterResponseBody (``encode_elect_body``); a refusal carries neither.
- 1004 GET_REPLICA_INFO: ``brokerName`` -> as REGISTER_BROKER's answer.
- 1006 GET_SYNC_STATE_DATA: the body is a JSON list of group names ->
  RocketMQ's BrokerReplicasInfo (``encode_sync_state_data``; no names: an
  empty table).
- 1005 GET_METADATA_INFO: none -> RocketMQ's GetMetaDataResponseHeader in
  ``extFields``, no body (``ControllerMetadata``).
- 1011 CLEAN_BROKER_DATA: optional ``clusterName`` (mqadmin leaves it out
  with ``-l``), ``brokerName``, optional ``brokerControllerIdsToClean``
  (``;``-joined), ``isCleanLivingBroker`` -> nothing.
- 1008 NOTIFY_BROKER_ROLE_CHANGED (controller -> broker, oneway): the
  group's master in the header (RocketMQ's NotifyBrokerRoleChangedRequestHeader
  keys are among ``replica_info_fields``) and a SyncStateSet body.
- 1010 GET_CONTROLLER_CONFIG -> properties text (``name=value`` lines,
  ``triomq.protocol.java_properties``, names of ``controller.config``); 1009
  UPDATE_CONTROLLER_CONFIG: the body is properties text of the names to change.
- 1007 GET_BROKER_EPOCH_CACHE (served by a broker): none -> RocketMQ's
  EpochEntryCache (``BrokerEpochCache``).

A SyncStateSet body is ``{"syncStateSet": [1, 2], "syncStateSetEpoch": 4}``;
it is read as fastjson reads it: the ids in any order (a Java HashSet's),
numbers also as strings, unknown keys skipped. A refusal has the
controller's response code and the reason as remark; CONTROLLER_NOT_LEADER
(2007) adds ``leaderId`` and ``leaderAddress`` to ``extFields`` (empty
while no leader is known).

Addresses are written as RocketMQ writes them: a TCP address is
``host:port`` (``rocketmq_address``); one read is turned back into the
address the RPC client dials (``rpc_address``). A null is left out, as
fastjson and RocketMQ's headers do.
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
from triomq.ha.core.epoch import EpochCache
from triomq.protocol.header_fields import HeaderFields, java_integer
from triomq.protocol.route import RouteDataError, loads

__all__ = [
    "OPEN_END",
    "BrokerEpochCache",
    "ControllerMetadata",
    "EpochRange",
    "ReplicaInfo",
    "WireError",
    "decode_epoch_cache",
    "decode_sync_state_data",
    "dump_json",
    "elect_fields",
    "encode_elect_body",
    "encode_epoch_cache",
    "encode_sync_state_data",
    "encode_sync_state_set",
    "join_ids",
    "load_body",
    "metadata_fields",
    "read_elect_answer",
    "read_metadata",
    "read_replica_info",
    "read_sync_state_set",
    "replica_epoch_cache",
    "replica_info_fields",
    "rocketmq_address",
    "rpc_address",
]


class WireError(TriomqError, ValueError):
    """A controller request header or response body is malformed; the message says where."""


def join_ids(ids: Iterable[int]) -> str:
    """Broker ids as a header value: ``"1;2;3"``."""
    return ";".join(str(i) for i in sorted(ids))


def _load_object(data: bytes, where: str) -> dict[str, Any]:
    # fastjson writes a map's Long keys bare ({1:"..."}): route.loads reads those too.
    try:
        obj = loads(bytes(data), where)
    except (RouteDataError, RecursionError) as exc:
        raise WireError(str(exc)) from None
    if not isinstance(obj, dict):
        raise WireError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def load_body(data: bytes, where: str) -> _json.FieldReader:
    """A body's JSON object, for typed reads."""
    return _json.FieldReader(_load_object(data, where), where, WireError)


def dump_json(obj: Any) -> bytes:
    """A JSON body: sorted keys (fastjson's order for a bean's fields), no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def rocketmq_address(address: str) -> str:
    """An address as RocketMQ writes it: ``host:port`` for TCP, others as they are."""
    return address.removeprefix("tcp://")


def rpc_address(address: str) -> str:
    """An address read from a RocketMQ shape, as the RPC client dials it."""
    return address if "://" in address else f"tcp://{address}"


@attrs.frozen
class ReplicaInfo:
    """One group as brokers and administrators see it: master, epochs, SyncStateSet, replicas.

    ``replicas`` is ``(broker_id, address)`` pairs sorted by id (RocketMQ's
    BrokerMemberGroup): only an election's answer carries them.
    ``possible_message_loss`` is set on an election answer when the master
    came from outside the SyncStateSet.
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


def encode_sync_state_set(members: Iterable[int], epoch: int) -> bytes:
    """A SyncStateSet body (RocketMQ's ``SyncStateSet``)."""
    return dump_json({"syncStateSet": sorted(members), "syncStateSetEpoch": epoch})


def _java_long(value: Any, where: str) -> int:
    # fastjson reads a number or a numeric string into a Long.
    number = java_integer(value) if isinstance(value, str) and value else value
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= _json.MAX_INT:
        raise WireError(f"{where}: expected a non-negative integer, got {value!r:.40}")
    return number


def read_sync_state_set(data: bytes, where: str) -> tuple[frozenset[int], int]:
    """A SyncStateSet body's members and epoch, read as fastjson reads it."""
    obj = _load_object(data, where)
    members = obj.get("syncStateSet")
    if not isinstance(members, list):
        raise WireError(f"{where}: 'syncStateSet' must be a list of broker ids, "
                        f"got {members!r:.40}")
    ids = frozenset(_java_long(member, f"{where} syncStateSet") for member in members)
    return ids, _java_long(obj.get("syncStateSetEpoch", 0), f"{where} syncStateSetEpoch")


def replica_info_fields(info: ReplicaInfo) -> dict[str, str]:
    """The header of a REGISTER_BROKER or GET_REPLICA_INFO answer and of a
    NOTIFY_BROKER_ROLE_CHANGED: RocketMQ's keys for the group's master (those
    of a master that is not there left out) and epochs."""
    fields = {"brokerName": info.broker_name, "masterEpoch": str(info.master_epoch),
              "syncStateSetEpoch": str(info.sync_state_set_epoch)}
    if info.master_broker_id is not None:
        fields["masterBrokerId"] = str(info.master_broker_id)
    if info.master_address is not None:
        fields["masterAddress"] = rocketmq_address(info.master_address)
    return fields


def read_replica_info(fields: Mapping[str, str], body: bytes, broker_name: str,
                      where: str) -> ReplicaInfo:
    """Group ``broker_name`` as ``replica_info_fields`` and a SyncStateSet body give
    it. RocketMQ's controller leaves the epochs out of a REGISTER_BROKER answer
    while the group has no alive master: its master epoch is then 0."""
    header = HeaderFields(fields, where, error=WireError)
    members, epoch = read_sync_state_set(body, f"{where} body")
    master_id = header.optional_integer("masterBrokerId", (-1, _json.MAX_INT))
    master_address = fields.get("masterAddress")
    return ReplicaInfo(
        broker_name=broker_name,
        master_broker_id=None if master_id is None or master_id < 0 else master_id,
        master_address=rpc_address(master_address) if master_address else None,
        master_epoch=header.optional_integer("masterEpoch") or 0,
        sync_state_set=members,
        sync_state_set_epoch=epoch,
    )


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


def read_elect_answer(fields: Mapping[str, str], body: bytes, broker_name: str) -> ReplicaInfo:
    """An ELECT_MASTER answer for group ``broker_name`` (``elect_fields`` and
    ``encode_elect_body``) read back. RocketMQ's controller leaves the
    BrokerMemberGroup out when the master stays: no replicas then."""
    where = "ELECT_MASTER response"
    header = HeaderFields(fields, where, error=WireError)
    reader = load_body(body, where)
    reader.expect_keys({"syncStateSet"},
                       optional={"brokerMemberGroup", "brokerAddrs", "brokerName", "cluster"})
    replicas: list[tuple[int, str]] = []
    if reader.optional("brokerMemberGroup") is not None:
        group = _json.FieldReader(reader.raw("brokerMemberGroup"),
                                  f"{where} brokerMemberGroup", WireError)
        group.expect_keys({"brokerAddrs", "brokerName"}, optional={"cluster"})
        addresses = group.raw("brokerAddrs")
        if not isinstance(addresses, dict) or not all(
                key.isascii() and key.isdigit() and isinstance(value, str)
                for key, value in addresses.items()):
            group.fail(f"'brokerAddrs' must map broker ids to addresses, got {addresses!r:.60}")
        replicas = sorted((int(key), rpc_address(value)) for key, value in addresses.items())
    members, _ = read_sync_state_set(body, where)
    master_address = fields.get("masterAddress")
    return ReplicaInfo(
        broker_name=broker_name,
        master_broker_id=header.optional_integer("masterBrokerId"),
        master_address=rpc_address(master_address) if master_address else None,
        master_epoch=header.integer("masterEpoch"),
        sync_state_set=members,
        sync_state_set_epoch=header.integer("syncStateSetEpoch"),
        replicas=replicas,
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


def replica_epoch_cache(cluster_name: str, broker_name: str, broker_id: int, *,
                        is_master: bool, epochs: EpochCache, max_offset: int
                        ) -> BrokerEpochCache:
    """What a replica answers GET_BROKER_EPOCH_CACHE with, from its epoch cache."""
    return BrokerEpochCache(
        cluster_name, broker_name, 0 if is_master else max(broker_id, 0),
        [EpochRange(e.epoch, e.start_offset, OPEN_END if e.end_offset is None else e.end_offset)
         for e in epochs.entries()],
        max_offset)


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
