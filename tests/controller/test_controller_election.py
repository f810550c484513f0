"""The default election policy and ElectMaster: clean, unclean, designated, exactly once."""

from __future__ import annotations

import pytest
from controller_helpers import GROUP, LiveTable, address

from triomq.controller import (
    BrokerGroup,
    BrokerLiveInfo,
    BrokerMember,
    ElectMasterEvent,
    ResponseCode,
    default_election_policy,
)

Code = ResponseCode


def _group(master, sync_state_set, replicas=(1, 2, 3)):
    return BrokerGroup(
        "c", GROUP, [BrokerMember(i, address(i), "x") for i in replicas],
        master_broker_id=master, master_epoch=4, sync_state_set=sync_state_set,
        sync_state_set_epoch=7, next_broker_id=max(replicas) + 1,
    )


def _live(**infos):
    table = {}
    for key, fields in infos.items():
        broker_id = int(key[1:])
        table[broker_id] = BrokerLiveInfo(broker_id, *fields)
    return table.get


UP = (True, 1, 100, 100, 0)  # alive, epoch, max_offset, confirm_offset, priority
DOWN = (False, 1, 100, 100, 0)


@pytest.mark.parametrize(("label", "group", "live", "designated", "unclean", "expected"), [
    ("old master alive is kept", _group(1, {1, 2, 3}),
     _live(b1=UP, b2=(True, 1, 900, 0, 0), b3=UP), None, False, 1),
    ("longest log wins", _group(1, {1, 2, 3}),
     _live(b1=DOWN, b2=(True, 1, 100, 0, 0), b3=(True, 1, 200, 0, 0)), None, False, 3),
    ("higher epoch beats longer log", _group(1, {1, 2, 3}),
     _live(b1=DOWN, b2=(True, 2, 10, 0, 0), b3=(True, 1, 500, 0, 0)), None, False, 2),
    ("smaller priority breaks ties", _group(1, {1, 2, 3}),
     _live(b1=DOWN, b2=(True, 1, 100, 0, 5), b3=(True, 1, 100, 0, 1)), None, False, 3),
    ("full tie: smaller id", _group(1, {1, 2, 3}),
     _live(b1=DOWN, b2=UP, b3=UP), None, False, 2),
    ("no live info counts as dead", _group(1, {1, 2, 3}), _live(b3=UP), None, False, 3),
    ("only the dead master in sync, unclean off", _group(1, {1}),
     _live(b1=DOWN, b2=UP, b3=UP), None, False, None),
    ("only the dead master in sync, unclean on", _group(1, {1}),
     _live(b1=DOWN, b2=UP, b3=(True, 1, 300, 0, 0)), None, True, 3),
    ("in-sync replicas first even with unclean on", _group(1, {1, 2}),
     _live(b1=DOWN, b2=UP, b3=(True, 1, 300, 0, 0)), None, True, 2),
    ("designated replaces an alive master", _group(1, {1, 2, 3}),
     _live(b1=UP, b2=UP, b3=UP), 2, False, 2),
    ("designated old master is kept", _group(1, {1, 2, 3}),
     _live(b1=UP, b2=UP, b3=UP), 1, False, 1),
    ("designated dead broker: nobody", _group(1, {1, 2, 3}),
     _live(b1=DOWN, b2=DOWN, b3=UP), 2, False, None),
    ("designated out of sync, unclean off", _group(1, {1, 2}),
     _live(b1=UP, b2=UP, b3=UP), 3, False, None),
    ("designated out of sync, unclean on", _group(1, {1, 2}),
     _live(b1=UP, b2=UP, b3=UP), 3, True, 3),
    ("everyone dead", _group(1, {1, 2, 3}), _live(b1=DOWN, b2=DOWN, b3=DOWN), None, True, None),
    ("no master yet, unclean on", _group(None, set()),
     _live(b1=UP, b2=(True, 1, 200, 0, 0)), None, True, 2),
])
def test_default_policy(label, group, live, designated, unclean, expected):
    assert default_election_policy(group, live, designated, unclean) == expected, label


# --- ElectMaster through the replicas-info state machine -------------------------


def test_first_election_makes_the_asking_broker_master(h):
    for _ in range(3):
        h.join()
    result = h.manager.elect_master(GROUP, h.live, broker_id=2)
    assert result.ok
    assert result.events == (ElectMasterEvent(GROUP, 2, 1, 1),)
    assert not result.payload.possible_message_loss
    h.commit(result)
    group = h.group()
    assert (group.master_broker_id, group.master_epoch) == (2, 1)
    assert (group.sync_state_set, group.sync_state_set_epoch) == ({2}, 1)


def test_clean_failover_picks_the_most_up_to_date_in_sync_replica(h):
    h.build(3)
    h.live.down(1)
    h.live.up(2, epoch=1, max_offset=100)
    h.live.up(3, epoch=1, max_offset=250)
    result = h.commit(h.manager.elect_master(GROUP, h.live))
    assert result.ok and result.remark == ""
    payload = result.payload
    assert (payload.master_broker_id, payload.master_address) == (3, address(3))
    assert (payload.master_epoch, payload.sync_state_set_epoch) == (2, 3)
    assert payload.sync_state_set == {3}
    assert not payload.possible_message_loss
    assert [r.broker_id for r in payload.replicas] == [1, 2, 3]
    group = h.group()
    assert (group.master_broker_id, group.master_epoch, group.sync_state_set,
            group.sync_state_set_epoch) == (3, 2, {3}, 3)


def test_alive_master_still_exists(h):
    h.build(3)
    before = h.manager.snapshot()
    result = h.manager.elect_master(GROUP, h.live)
    h.assert_rejected(result, Code.CONTROLLER_MASTER_STILL_EXIST)
    assert (result.payload.master_broker_id, result.payload.master_epoch) == (1, 1)
    assert h.manager.snapshot() == before


def _only_master_in_sync(h, replicas=3):
    """A group whose SyncStateSet shrank to the master, which then died."""
    h.build(replicas)
    h.commit(h.manager.alter_sync_state_set(GROUP, 1, 1, {1}, 2, h.live))
    h.live.down(1)
    h.live.up(2, epoch=1, max_offset=80)
    if replicas > 2:
        h.live.up(3, epoch=1, max_offset=90)


@pytest.mark.parametrize("replicas", [2, 3])
def test_unclean_off_leaves_the_group_without_master_and_says_so(h, replicas):
    _only_master_in_sync(h, replicas)
    result = h.commit(h.manager.elect_master(GROUP, h.live))
    assert result.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert "SyncStateSet [1] has none alive" in result.remark
    assert "unclean election is disabled" in result.remark
    assert result.events == (ElectMasterEvent(GROUP, None, 2, 3),)
    assert result.payload.master_broker_id is None
    group = h.group()
    assert group.master_broker_id is None
    assert (group.master_epoch, group.sync_state_set, group.sync_state_set_epoch) == (2, {1}, 3)

    again = h.manager.elect_master(GROUP, h.live)  # next scan: still nobody, nothing to commit
    assert again.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE and again.events == ()


@pytest.mark.parametrize(("replicas", "winner"), [(2, 2), (3, 3)])
def test_unclean_on_elects_the_most_up_to_date_and_reports_loss(h, replicas, winner):
    _only_master_in_sync(h, replicas)
    result = h.commit(h.manager.elect_master(GROUP, h.live, enable_elect_unclean_master=True))
    assert result.ok
    assert result.payload.master_broker_id == winner
    assert result.payload.possible_message_loss
    assert "unclean election" in result.remark and "may be lost" in result.remark
    assert h.group().master_broker_id == winner
    assert h.group().sync_state_set == {winner}


def test_two_replica_group_fails_over_to_its_in_sync_slave(h):
    h.build(2)
    h.live.down(1)
    result = h.commit(h.manager.elect_master(GROUP, h.live))
    assert result.ok and result.payload.master_broker_id == 2
    assert (h.group().master_epoch, h.group().sync_state_set) == (2, {2})


def test_returning_in_sync_master_is_elected_again(h):
    _only_master_in_sync(h)
    h.commit(h.manager.elect_master(GROUP, h.live))
    h.live.up(1)
    result = h.commit(h.manager.elect_master(GROUP, h.live, broker_id=1))
    assert result.ok and result.payload.master_broker_id == 1
    assert h.group().master_epoch == 3


def test_admin_designates_a_broker(h):
    h.build(3)
    result = h.commit(h.manager.elect_master(GROUP, h.live, broker_id=3, designate=True))
    assert result.ok and h.group().master_broker_id == 3


@pytest.mark.parametrize(("kwargs", "dead", "code", "fragment"), [
    ({"broker_id": 9, "designate": True}, (), Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
     "broker id 9"),
    ({"broker_id": 2, "designate": True}, (2,), Code.CONTROLLER_ELECT_MASTER_FAILED,
     "designated broker 2"),
    ({"designate": True}, (), Code.CONTROLLER_INVALID_REQUEST, "without broker id"),
    ({"broker_id": 3}, (1, 2, 3), Code.CONTROLLER_ELECT_MASTER_FAILED, "none alive"),
])
def test_elect_rejections_commit_nothing(h, kwargs, dead, code, fragment):
    h.build(3)
    for broker_id in dead:
        h.live.down(broker_id)
    before = h.manager.snapshot()
    result = h.manager.elect_master(GROUP, h.live, **kwargs)
    h.assert_rejected(result, code)
    assert fragment in result.remark
    assert h.manager.snapshot() == before


def test_unknown_group(h):
    h.assert_rejected(h.manager.elect_master("nope", LiveTable()),
                      Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)


@pytest.mark.parametrize(("choice", "fragment"), [
    (42, "not a replica"),
    (3, "outside SyncStateSet [1, 2]"),
])
def test_a_misbehaving_policy_cannot_break_safety(h, choice, fragment):
    h.build(3)
    h.commit(h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 2}, 2, h.live))
    h.live.down(1)
    result = h.manager.elect_master(GROUP, h.live, policy=lambda *args: choice)
    h.assert_rejected(result, Code.CONTROLLER_ELECT_MASTER_FAILED)
    assert fragment in result.remark


def test_policy_receives_the_documented_inputs(h):
    h.build(3)
    seen = []

    def policy(group, live_info, designated, unclean):
        seen.append((group, live_info(2), designated, unclean))
        return 2

    h.manager.elect_master(GROUP, h.live, broker_id=2, designate=True, policy=policy,
                           enable_elect_unclean_master=True)
    assert seen == [(h.group(), h.live(2), 2, True)]


def test_election_completes_exactly_once_across_a_leader_change(h):
    """The old leader's proposal and the new leader's retry both commit: one takes effect."""
    h.build(3)
    h.live.down(1)
    old_leader = h.manager.elect_master(GROUP, h.live)
    new_leader = h.manager.elect_master(GROUP, h.live)  # same applied state, proposal in flight
    assert old_leader.events == new_leader.events
    assert h.manager.apply(old_leader.events[0])
    assert not h.manager.apply(new_leader.events[0])
    assert h.group().master_epoch == 2
    assert h.group().sync_state_set_epoch == 3


def test_first_election_can_be_designated_by_an_administrator(h):
    for _ in range(2):
        h.join()
    result = h.commit(h.manager.elect_master(GROUP, h.live, broker_id=2, designate=True))
    assert result.ok and h.group().master_broker_id == 2


@pytest.mark.parametrize(("unclean", "code", "master"), [
    (False, Code.CONTROLLER_MASTER_NOT_AVAILABLE, None),
    (True, Code.SUCCESS, 1),
])
def test_controller_triggered_first_election(h, unclean, code, master):
    """Before any master, the SyncStateSet is empty: only unclean election finds one."""
    for _ in range(2):
        h.join()
    result = h.commit(h.manager.elect_master(GROUP, h.live,
                                             enable_elect_unclean_master=unclean))
    assert result.code == code
    assert h.group().master_broker_id == master
    assert not result.payload.possible_message_loss  # nothing was ever acknowledged
