"""Snapshot encoding of the replicas-info state, for Raft log compaction.

A snapshot is one canonical JSON object::

    {"format": "triomq.replicas_info", "version": 1, "groups": [GROUP, ...]}

with groups sorted by broker name, each holding every ``BrokerGroup``
field (members as objects sorted by id, the SyncStateSet as a sorted id
list). Equal states encode to equal bytes, so ``encode(decode(x)) == x``.
Decoding checks the invariants the state machine keeps and raises
``SnapshotError`` naming the group and field at fault.
"""

from __future__ import annotations

from collections.abc import Iterable

from triomq.controller.core import _json
from triomq.controller.core.group import FIRST_BROKER_ID, BrokerGroup, BrokerMember
from triomq.errors import TriomqError

FORMAT = "triomq.replicas_info"
VERSION = 1


class SnapshotError(TriomqError, ValueError):
    """A replicas-info snapshot is malformed or breaks the state's invariants."""


def encode_groups(groups: Iterable[BrokerGroup]) -> bytes:
    """Encode the given groups (any order) as a snapshot."""
    return _json.dump({
        "format": FORMAT,
        "version": VERSION,
        "groups": [_group_to_json(group) for group in sorted(groups, key=_name)],
    })


def decode_groups(data: bytes) -> dict[str, BrokerGroup]:
    """Decode a snapshot into broker name -> group."""
    obj = _json.load_object(data, "replicas-info snapshot", SnapshotError)
    top = _json.FieldReader(obj, "replicas-info snapshot", SnapshotError)
    top.expect_keys({"format", "version", "groups"})
    if top.raw("format") != FORMAT or top.raw("version") != VERSION:
        top.fail(f"unsupported format {top.raw('format')!r} version {top.raw('version')!r}")
    groups: dict[str, BrokerGroup] = {}
    for index, item in enumerate(top.list("groups")):
        group = _group_from_json(_json.FieldReader(item, f"snapshot group #{index}", SnapshotError))
        if group.broker_name in groups:
            top.fail(f"broker group {group.broker_name!r} appears twice")
        groups[group.broker_name] = group
    return groups


def _name(group: BrokerGroup) -> str:
    return group.broker_name


def _group_to_json(group: BrokerGroup) -> dict[str, object]:
    return {
        "cluster_name": group.cluster_name,
        "broker_name": group.broker_name,
        "members": [
            {
                "broker_id": member.broker_id,
                "address": member.address,
                "register_check_code": member.register_check_code,
            }
            for member in group.members
        ],
        "master_broker_id": group.master_broker_id,
        "master_epoch": group.master_epoch,
        "sync_state_set": sorted(group.sync_state_set),
        "sync_state_set_epoch": group.sync_state_set_epoch,
        "next_broker_id": group.next_broker_id,
    }


_GROUP_KEYS = {
    "cluster_name", "broker_name", "members", "master_broker_id", "master_epoch",
    "sync_state_set", "sync_state_set_epoch", "next_broker_id",
}
_MEMBER_KEYS = {"broker_id", "address", "register_check_code"}


def _group_from_json(reader: _json.FieldReader) -> BrokerGroup:
    reader.expect_keys(_GROUP_KEYS)
    reader.where = f"snapshot group {reader.string('broker_name')!r}"
    members = []
    for index, item in enumerate(reader.list("members")):
        member = _json.FieldReader(item, f"{reader.where} member #{index}", SnapshotError)
        member.expect_keys(_MEMBER_KEYS)
        members.append(BrokerMember(
            broker_id=member.integer("broker_id"),
            address=member.string("address"),
            register_check_code=member.string("register_check_code"),
        ))
    group = BrokerGroup(
        cluster_name=reader.string("cluster_name"),
        broker_name=reader.string("broker_name"),
        members=members,
        master_broker_id=reader.optional_integer("master_broker_id"),
        master_epoch=reader.integer("master_epoch"),
        sync_state_set=reader.id_set("sync_state_set"),
        sync_state_set_epoch=reader.integer("sync_state_set_epoch"),
        next_broker_id=reader.integer("next_broker_id"),
    )
    problem = group_invariant_violation(group)
    if problem is not None:
        reader.fail(problem)
    return group


def group_invariant_violation(group: BrokerGroup) -> str | None:
    """Describe how ``group`` breaks the state machine's invariants, or ``None``.

    A group has at least one replica, ids from ``FIRST_BROKER_ID`` up, all
    unique and below ``next_broker_id``; the SyncStateSet holds registered
    replicas only, and the master, when there is one, is in it.
    """
    ids = [member.broker_id for member in group.members]
    if not ids:
        return "a group has at least one replica"
    if len(set(ids)) != len(ids):
        return f"duplicate broker ids {ids}"
    if min(ids) < FIRST_BROKER_ID or max(ids) >= group.next_broker_id:
        return f"broker ids {ids} outside [{FIRST_BROKER_ID}, {group.next_broker_id})"
    if not group.sync_state_set <= set(ids):
        return f"SyncStateSet {sorted(group.sync_state_set)} has unregistered brokers"
    if group.master_broker_id is not None and group.master_broker_id not in group.sync_state_set:
        return f"master {group.master_broker_id} is not in SyncStateSet"
    return None
