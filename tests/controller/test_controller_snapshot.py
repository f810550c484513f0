"""Snapshots: round trips, replay from any point of a random history, and bad snapshots."""

from __future__ import annotations

import json

import pytest
from controller_helpers import CLUSTER, LiveTable, address, check_code
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.controller import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    ReplicasInfoManager,
    SnapshotError,
    UpdateBrokerAddressEvent,
)
from triomq.controller.core.snapshot import group_invariant_violation

GROUPS = ("a", "b")
group_names = st.sampled_from(GROUPS)
small_ids = st.integers(min_value=0, max_value=5)
small_sets = st.frozensets(small_ids, max_size=4)
epochs = st.integers(min_value=0, max_value=6)

# Raw events with small values, so that some of them fit the state and most do not.
small_events = st.one_of(
    st.builds(ApplyBrokerIdEvent, st.sampled_from([CLUSTER, "x"]), group_names, small_ids,
              st.sampled_from(["h:1", "h:2"]), st.sampled_from(["k1", "k2"])),
    st.builds(UpdateBrokerAddressEvent, st.just(CLUSTER), group_names, small_ids,
              st.sampled_from(["h:1", "h:2"])),
    st.builds(AlterSyncStateSetEvent, group_names, epochs, small_sets, epochs),
    st.builds(ElectMasterEvent, group_names, st.none() | small_ids, epochs, epochs),
    st.builds(CleanBrokerDataEvent, group_names, st.none() | small_sets),
)

operations = st.one_of(
    st.tuples(st.just("join"), group_names),
    st.tuples(st.just("elect"), group_names, st.none() | small_ids, st.just(False), st.booleans()),
    st.tuples(st.just("kill"), group_names, st.integers(1, 3)),
    st.tuples(st.just("revive"), group_names, st.integers(1, 3), epochs, st.integers(0, 1000)),
    st.tuples(st.just("elect"), group_names, st.none() | small_ids, st.booleans(), st.booleans()),
    st.tuples(st.just("alter"), group_names, small_sets),
    st.tuples(st.just("clean"), group_names, st.none() | small_sets, st.booleans()),
    st.tuples(st.just("event"), small_events),
)


def _requests(manager, lives, op):
    """The events the active controller would commit for one operation."""
    kind, name = op[0], op[1]
    if kind == "event":
        return [op[1]]
    live = lives[name]
    if kind == "join":
        asked = manager.get_next_broker_id(CLUSTER, name)
        if not asked.ok:  # a raw event created the group in another cluster
            return []
        next_id = asked.payload.next_broker_id
        live.up(next_id)
        return list(manager.apply_broker_id(
            CLUSTER, name, next_id, address(next_id), check_code(next_id)).events)
    if kind == "kill":
        live.down(op[2])
        return []
    if kind == "revive":
        live.up(op[2], epoch=op[3], max_offset=op[4])
        return []
    if kind == "elect":
        group = manager.group(name)
        result = manager.elect_master(name, live, broker_id=op[2], designate=op[3],
                                      enable_elect_unclean_master=op[4])
        if result.ok:
            # Safety: outside the SyncStateSet only with unclean election on, and reported.
            outside = result.payload.master_broker_id not in group.sync_state_set
            unclean = outside and group.master_epoch > 0
            assert result.payload.possible_message_loss == unclean
            assert op[4] or not unclean
        return list(result.events)
    if kind == "alter":
        group = manager.group(name)
        if group is None or group.master_broker_id is None:
            return []
        # Mostly well-formed proposals: registered replicas plus the master.
        proposal = (op[2] & group.broker_ids) | {group.master_broker_id}
        return list(manager.alter_sync_state_set(
            name, group.master_broker_id, group.master_epoch, proposal,
            group.sync_state_set_epoch, live).events)
    return list(manager.clean_broker_data(CLUSTER, name, live, broker_ids=op[2],
                                          clean_living_broker=op[3]).events)


# Every history starts from two groups with masters, so random operations hit live states.
PROLOGUE = [("join", "a"), ("join", "a"), ("join", "a"), ("join", "b"), ("join", "b"),
            ("elect", "a", 1, False, False), ("elect", "b", 2, False, False)]


def _check_invariants(manager, epochs_seen):
    """Each group is well formed and its epochs never go back while it exists."""
    for name in list(epochs_seen):
        if manager.group(name) is None:
            del epochs_seen[name]
    for name, group in manager.groups.items():
        assert group_invariant_violation(group) is None, group
        epochs = (group.master_epoch, group.sync_state_set_epoch)
        previous = epochs_seen.get(name, (0, 0))
        assert epochs[0] >= previous[0] and epochs[1] >= previous[1], (previous, group)
        epochs_seen[name] = epochs


def _history(ops):
    """Run ``ops``; return the committed log and the snapshot before each entry and at the end."""
    manager = ReplicasInfoManager()
    lives = {name: LiveTable() for name in GROUPS}
    log, snapshots, applied = [], [], []
    epochs_seen: dict[str, tuple[int, int]] = {}
    for op in ops:
        for event in _requests(manager, lives, op):
            snapshots.append(manager.snapshot())
            log.append(event)
            applied.append(manager.apply(event))
            # A request's events, committed at once, always take effect.
            assert applied[-1] or op[0] == "event", (op, event)
            _check_invariants(manager, epochs_seen)
    snapshots.append(manager.snapshot())
    return log, snapshots, applied


@settings(max_examples=200, deadline=None)
@given(st.lists(operations, max_size=40), st.data())
def test_restore_at_any_point_and_continue_reaches_the_same_state(ops, data):
    log, snapshots, applied = _history(PROLOGUE + ops)
    for snap in snapshots:
        assert ReplicasInfoManager.from_snapshot(snap).snapshot() == snap
    k = data.draw(st.integers(min_value=0, max_value=len(log)), label="snapshot index")
    follower = ReplicasInfoManager.from_snapshot(snapshots[k])
    assert [follower.apply(event) for event in log[k:]] == applied[k:]
    assert follower.snapshot() == snapshots[-1]


def test_history_exercises_elections():
    """The generator's building blocks do reach the interesting states."""
    ops = [("alter", "a", frozenset({2})), ("kill", "a", 1), ("elect", "a", None, False, False)]
    log, snapshots, _ = _history(PROLOGUE + ops)
    restored = ReplicasInfoManager.from_snapshot(snapshots[-1])
    group = restored.group("a")
    assert (group.master_broker_id, group.master_epoch, group.sync_state_set) == (2, 2, {2})
    assert isinstance(log[-1], ElectMasterEvent)


def test_empty_state():
    data = ReplicasInfoManager().snapshot()
    assert data == b'{"format":"triomq.replicas_info","groups":[],"version":1}'
    assert ReplicasInfoManager.from_snapshot(data).groups == {}


def _valid_group(**changes):
    group = {
        "cluster_name": CLUSTER, "broker_name": "a",
        "members": [
            {"broker_id": 1, "address": "h:1", "register_check_code": "k1"},
            {"broker_id": 2, "address": "h:2", "register_check_code": "k2"},
        ],
        "master_broker_id": 1, "master_epoch": 1, "sync_state_set": [1, 2],
        "sync_state_set_epoch": 2, "next_broker_id": 3,
    }
    group.update(changes)
    return group


def _snapshot(*groups, **top):
    return json.dumps({"format": "triomq.replicas_info", "version": 1,
                       "groups": list(groups), **top}).encode()


def test_valid_handmade_snapshot_is_canonicalised():
    manager = ReplicasInfoManager.from_snapshot(_snapshot(_valid_group()))
    assert manager.group("a").master_broker_id == 1
    assert ReplicasInfoManager.from_snapshot(manager.snapshot()).snapshot() == manager.snapshot()


@pytest.mark.parametrize(("data", "fragment"), [
    (b"not json", "not valid JSON"),
    (b"[]", "expected a JSON object"),
    (_snapshot(format="other"), "unsupported format"),
    (_snapshot(version=2), "unsupported format"),
    (_snapshot(extra=1), "unknown keys ['extra']"),
    (_snapshot(_valid_group(), _valid_group()), "appears twice"),
    (_snapshot(5), "expected an object"),
    (_snapshot(_valid_group(master_epoch=-1)), "'master_epoch' out of range"),
    (_snapshot(_valid_group(members=[])), "at least one replica"),
    (_snapshot(_valid_group(members=[{"broker_id": 1, "address": "h"}])), "missing keys"),
    (_snapshot(_valid_group(members=[{"broker_id": 1, "address": "h", "register_check_code": "k"},
                                     {"broker_id": 1, "address": "h", "register_check_code": "k"}],
                            sync_state_set=[1])), "duplicate broker ids"),
    (_snapshot(_valid_group(next_broker_id=2)), "outside [1, 2)"),
    (_snapshot(_valid_group(sync_state_set=[1, 2, 5])), "unregistered brokers"),
    (_snapshot(_valid_group(sync_state_set=[2])), "master 1 is not in SyncStateSet"),
    (_snapshot(_valid_group(sync_state_set=[2, 1])), "strictly increasing"),
    (_snapshot(_valid_group(broker_name=None)), "'broker_name' must be a string"),
])
def test_bad_snapshots_are_rejected_and_leave_state_untouched(data, fragment):
    manager = ReplicasInfoManager.from_snapshot(_snapshot(_valid_group(broker_name="keep")))
    before = manager.snapshot()
    with pytest.raises(SnapshotError) as info:
        manager.restore(data)
    assert fragment in str(info.value)
    assert manager.snapshot() == before


@given(st.binary(max_size=300))
def test_fuzz_snapshot_bytes(data):
    try:
        manager = ReplicasInfoManager.from_snapshot(data)
    except SnapshotError:
        return
    assert ReplicasInfoManager.from_snapshot(manager.snapshot()).snapshot() == manager.snapshot()
