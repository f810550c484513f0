"""AlterSyncStateSet: shrink, expand, and every fencing and validation rule."""

from __future__ import annotations

import pytest
from controller_helpers import GROUP

from triomq.controller import AlterSyncStateSetEvent, ResponseCode

Code = ResponseCode


def test_shrink_then_expand(h):
    group = h.build(3)
    assert (group.master_broker_id, group.master_epoch) == (1, 1)
    assert (group.sync_state_set, group.sync_state_set_epoch) == ({1, 2, 3}, 2)

    shrink = h.manager.alter_sync_state_set(GROUP, 1, 1, [1, 2], 2, h.live)
    assert shrink.ok
    assert shrink.events == (AlterSyncStateSetEvent(GROUP, 1, frozenset({1, 2}), 3),)
    assert (shrink.payload.sync_state_set, shrink.payload.sync_state_set_epoch) == ({1, 2}, 3)
    h.commit(shrink)
    assert (h.group().sync_state_set, h.group().sync_state_set_epoch) == ({1, 2}, 3)

    h.commit(h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 2, 3}, 3, h.live))
    assert (h.group().sync_state_set, h.group().sync_state_set_epoch) == ({1, 2, 3}, 4)
    assert h.group().master_epoch == 1


def test_two_replica_group_shrinks_to_the_master_alone(h):
    h.build(2)
    h.live.down(2)
    h.commit(h.manager.alter_sync_state_set(GROUP, 1, 1, {1}, 2, h.live))
    assert h.group().sync_state_set == {1}


@pytest.mark.parametrize(
    ("name", "master", "master_epoch", "new_set", "ssse", "dead", "code", "fragment"),
    [
        ("unknown", 1, 1, {1}, 2, (), Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
         "not registered"),
        (GROUP, 1, 0, {1, 2}, 2, (), Code.CONTROLLER_FENCED_MASTER_EPOCH, "master epoch 1"),
        (GROUP, 1, 2, {1, 2}, 2, (), Code.CONTROLLER_FENCED_MASTER_EPOCH, "not 2"),
        (GROUP, 1, 1, {1, 2}, 1, (), Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
         "SyncStateSet epoch 2"),
        (GROUP, 1, 1, {1, 2}, 3, (), Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, "not 3"),
        (GROUP, 2, 1, {1, 2}, 2, (), Code.CONTROLLER_INVALID_MASTER, "is 1, not 2"),
        (GROUP, 1, 1, {1, 2, 3}, 2, (), Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
         "unchanged"),
        (GROUP, 1, 1, {1, 2, 7}, 2, (), Code.CONTROLLER_INVALID_REPLICAS, "[7]"),
        (GROUP, 1, 1, {1, 3}, 2, (3,), Code.CONTROLLER_BROKER_NOT_ALIVE, "[3]"),
        (GROUP, 1, 1, {2, 3}, 2, (), Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
         "lacks the master 1"),
    ],
)
def test_rejections_leave_the_state_untouched(
    h, name, master, master_epoch, new_set, ssse, dead, code, fragment
):
    h.build(3)
    for broker_id in dead:
        h.live.down(broker_id)
    before = h.manager.snapshot()
    result = h.manager.alter_sync_state_set(name, master, master_epoch, new_set, ssse, h.live)
    h.assert_rejected(result, code)
    assert fragment in result.remark
    assert h.manager.snapshot() == before


def test_unknown_live_info_counts_as_dead(h):
    h.build(3)
    del h.live.infos[3]
    h.commit(h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 2}, 2, h.live))
    result = h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 2, 3}, 3, h.live)
    h.assert_rejected(result, Code.CONTROLLER_BROKER_NOT_ALIVE)


def test_old_master_is_fenced_after_a_failover(h):
    h.build(3)
    h.live.down(1)
    h.commit(h.manager.elect_master(GROUP, h.live))
    assert h.group().master_broker_id != 1
    h.live.up(1)
    result = h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 2}, 2, h.live)
    h.assert_rejected(result, Code.CONTROLLER_FENCED_MASTER_EPOCH)


def test_master_without_master_in_group(h):
    h.build(2)
    h.live.down(1)
    h.live.down(2)
    h.commit(h.manager.elect_master(GROUP, h.live))
    group = h.group()
    assert group.master_broker_id is None
    result = h.manager.alter_sync_state_set(
        GROUP, 1, group.master_epoch, {1, 2}, group.sync_state_set_epoch, h.live
    )
    h.assert_rejected(result, Code.CONTROLLER_INVALID_MASTER)


def test_two_proposals_from_one_state_take_effect_once(h):
    h.build(3)
    first = h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 2}, 2, h.live)
    second = h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 3}, 2, h.live)
    assert first.ok and second.ok  # both validated against the same applied state
    assert h.manager.apply(first.events[0])
    assert not h.manager.apply(second.events[0])  # fenced at apply time
    assert (h.group().sync_state_set, h.group().sync_state_set_epoch) == ({1, 2}, 3)
