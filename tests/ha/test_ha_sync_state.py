"""SyncStateSet shrink / expand, confirmOffset, and synchronous puts (incl. RocketMQ 5663)."""

from __future__ import annotations

import pytest

from triomq.ha.core.sync_replication import (
    PutResult,
    ReplicationStatus,
    SyncReplication,
    replicated_offset,
)
from triomq.ha.core.sync_state import SyncStateTracker

MAX_LAG = 15_000


def tracker(members=(0,), epoch_start=100, confirm=0, started=0):
    return SyncStateTracker(
        master=0,
        sync_state_set=members,
        epoch_start_offset=epoch_start,
        confirm_offset=confirm,
        started_ms=started,
        max_time_slave_not_catchup_ms=MAX_LAG,
    )


def test_master_is_always_a_member():
    assert tracker(members=()).sync_state_set == {0}


def test_confirm_offset_is_the_min_ack_and_holds_for_unknown_members():
    t = tracker(members=(0, 1, 2), confirm=50)
    assert t.confirm_offset(500) == 50  # b and c have not acked in this term
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 300, 0)
    assert t.confirm_offset(500) == 50  # c still unknown
    t.slave_acked(2, 200, 0)
    assert t.confirm_offset(500) == 200
    t.apply({0, 1})
    assert t.confirm_offset(500) == 300
    t.apply({0, 1, 2})
    assert t.confirm_offset(500) == 300  # never goes back
    assert tracker().confirm_offset(77) == 77  # alone, the master confirms its own log


def test_shrink_a_stalled_slave_after_the_lag_limit():
    t = tracker(members=(0, 1, 2))
    for s in (1, 2):
        t.slave_connected(s, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 150, 1_000)
    t.slave_acked(2, 150, 9_000)
    assert t.maybe_shrink(16_000, 1_000) is None
    assert t.maybe_shrink(16_001, 1_000) == {0, 2}
    assert t.pending == {0, 2}
    assert t.maybe_shrink(30_000, 1_000) is None  # one proposal at a time
    # Until the controller confirms, b still counts.
    assert t.effective_sync_state_set == {0, 1, 2}
    t.apply({0, 2})
    assert t.effective_sync_state_set == {0, 2}


def test_never_connected_member_gets_a_grace_period():
    t = tracker(members=(0, 1), started=5_000)
    assert t.maybe_shrink(20_000, 1_000) is None
    assert t.maybe_shrink(20_001, 1_000) == {0}


def test_a_members_last_connection_closing_proposes_it_out():
    # As RocketMQ's removeConnection: puts waiting on every member's ack stop
    # waiting on a slave that is gone.
    t = tracker(members=(0, 1, 2))
    for s in (1, 2):
        t.slave_connected(s, is_async_learner=False, now_ms=0)
        t.slave_acked(s, 150, 0)
    t.slave_connected(1, is_async_learner=False, now_ms=10)  # a reconnect overlapping
    assert t.slave_disconnected(1) is None  # the old connection: 1 is still there
    assert t.slave_disconnected(2) == {0, 1}
    assert t.effective_sync_state_set == {0, 1, 2}  # a shrink counts once confirmed
    t.apply({0, 1})
    assert t.slave_disconnected(2) is None  # no member any more
    t.slave_acked(1, 150, 20)  # on its new connection
    t.slave_connected(2, is_async_learner=False, now_ms=20)
    t.slave_acked(2, 150, 20)
    assert t.maybe_expand(2, 150) == {0, 1, 2}  # back once caught up


def test_disconnected_member_keeps_ageing_while_another_proposal_is_in_flight():
    t = tracker(members=(0, 1))
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 150, 4_000)
    t.slave_connected(2, is_async_learner=False, now_ms=0)
    t.slave_acked(2, 1_000, 4_000)
    assert t.maybe_expand(2, 1_000) == {0, 1, 2}
    assert t.slave_disconnected(1) is None  # the expand is in flight
    t.apply({0, 1, 2})
    assert t.maybe_shrink(19_000, 1_000) is None
    assert t.maybe_shrink(19_001, 1_000) == {0, 2}


def test_a_slave_holding_the_whole_log_is_caught_up_between_its_acks():
    # An idle RocketMQ slave acks every 5 s only; it stays while it holds everything.
    t = tracker(members=(0, 1, 2))
    for s in (1, 2):
        t.slave_connected(s, is_async_learner=False, now_ms=0)
        t.slave_acked(s, 500, 0)
    assert t.slave_disconnected(2) == {0, 1}  # 2 is gone: it may have lost bytes
    t.apply({0, 1})
    assert t.maybe_shrink(MAX_LAG * 3, 500) is None
    # New bytes on the master: 1 has MAX_LAG from the last check to ack them.
    assert t.maybe_shrink(MAX_LAG * 4, 501) is None
    assert t.maybe_shrink(MAX_LAG * 5 + 1, 501) == {0}


def test_async_learner_never_counts():
    t = tracker(members=(0, 3))
    t.slave_connected(3, is_async_learner=True, now_ms=0)
    t.slave_acked(3, 10, 0)
    assert t.effective_sync_state_set == {0}
    assert t.confirm_offset(500) == 500
    assert t.maybe_shrink(1, 1_000) == {0}
    t.apply({0})
    t.slave_acked(3, 500, 1)
    assert t.maybe_expand(3, 500) is None


def test_expand_when_caught_up_within_the_epoch():
    t = tracker(members=(0, 1), epoch_start=100)
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_connected(2, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 400, 0)
    t.slave_acked(2, 399, 0)
    assert t.confirm_offset(1000) == 400
    assert t.maybe_expand(2, 1000) is None  # below confirmOffset
    assert t.maybe_expand(1, 1000) is None  # already a member
    assert t.maybe_expand(9, 1000) is None  # unknown
    t.slave_acked(2, 400, 0)
    assert t.maybe_expand(2, 1000) == {0, 1, 2}


def test_no_expand_on_a_tail_from_before_this_masters_epoch():
    # Alone in the set, the confirmOffset is the master's own max; a slave
    # reporting an offset below this term's start has not truncated against
    # this master yet.
    t = tracker(members=(0,), epoch_start=100)
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 90, 0)
    assert t.maybe_expand(1, 90) is None
    t.slave_acked(1, 100, 0)
    assert t.maybe_expand(1, 100) == {0, 1}


def test_no_expand_when_disconnected_or_while_a_proposal_is_in_flight():
    t = tracker(members=(0,), epoch_start=0)
    for s in (1, 2):
        t.slave_connected(s, is_async_learner=False, now_ms=0)
        t.slave_acked(s, 10, 0)
    assert t.maybe_expand(1, 10) == {0, 1}
    assert t.maybe_expand(2, 10) is None
    t.apply({0})  # refused: the controller's set is still {a}
    t.slave_disconnected(2)
    assert t.maybe_expand(2, 10) is None
    assert t.maybe_expand(1, 10) == {0, 1}


def test_rocketmq_5663_expand_in_flight_counts_the_new_member():
    """A proposes {A, B}; a put acked only by A must not complete before B has it."""
    t = tracker(members=(0,), epoch_start=0)
    puts = SyncReplication(all_ack_in_sync_state_set=True)
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 100, 0)
    assert t.maybe_expand(1, 100) == {0, 1}  # sent to the controller
    # The master appends a message ending at 150 while the proposal is in flight.
    assert (
        puts.add("put-1", 150, deadline_ms=3_000, sync_state_set=t.effective_sync_state_set) is None
    )
    acks = {m: t.ack_offset(m, 150) for m in t.effective_sync_state_set}
    assert puts.update(acks, t.effective_sync_state_set) == []  # a alone is not enough
    assert t.confirm_offset(150) == 100
    # The controller applied {A, B} but its answer is lost: A keeps the union,
    # so if A dies now, electing B loses nothing acked. When B acks, the put completes.
    t.slave_acked(1, 150, 10)
    acks = {m: t.ack_offset(m, 150) for m in t.effective_sync_state_set}
    assert puts.update(acks, t.effective_sync_state_set) == [
        PutResult("put-1", ReplicationStatus.PUT_OK)
    ]


# -- synchronous puts ---------------------------------------------------------------


def test_replicated_offset():
    acks = {0: 500, 1: 300, 2: 400, 9: 999}
    assert replicated_offset(acks, {0, 1, 2}, 1) == 500
    assert replicated_offset(acks, {0, 1, 2}, 2) == 400
    assert replicated_offset(acks, {0, 1, 2}, 3) == 300
    assert replicated_offset(acks, {0, 1, 4}, 3) == -1
    assert replicated_offset(acks, {0}, 2) == -1
    with pytest.raises(ValueError):
        replicated_offset(acks, {0}, 0)


def test_all_ack_waits_for_every_member_in_offset_order():
    puts = SyncReplication(all_ack_in_sync_state_set=True, min_in_sync_replicas=1)
    members = frozenset({0, 1, 2})
    for i, end in enumerate((100, 200, 300)):
        assert puts.add(i, end, 10_000, members) is None
    assert puts.update({0: 300, 1: 300, 2: 150}, members) == [
        PutResult(0, ReplicationStatus.PUT_OK)
    ]
    assert puts.update({0: 300, 1: 250, 2: 300}, members) == [
        PutResult(1, ReplicationStatus.PUT_OK)
    ]
    assert len(puts) == 1


def test_min_in_sync_replicas():
    puts = SyncReplication(min_in_sync_replicas=2)
    members = frozenset({0, 1, 2})
    puts.add("p", 100, 10_000, members)
    assert puts.update({0: 100, 9: 100}, members) == []  # x is not a member
    assert puts.update({0: 100, 2: 120}, members) == [PutResult("p", ReplicationStatus.PUT_OK)]


def test_in_sync_replicas_not_enough():
    puts = SyncReplication(min_in_sync_replicas=2)
    assert puts.add("p", 100, 10_000, frozenset({0})) == PutResult(
        "p", ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    )
    assert len(puts) == 0


def test_timeout_gives_flush_slave_timeout():
    puts = SyncReplication(all_ack_in_sync_state_set=True)
    members = frozenset({0, 1})
    puts.add("early", 100, 1_000, members)
    puts.add("late", 200, 5_000, members)
    assert puts.next_deadline_ms() == 1_000
    assert puts.expire(999) == []
    assert puts.expire(1_000) == [PutResult("early", ReplicationStatus.FLUSH_SLAVE_TIMEOUT)]
    assert puts.next_deadline_ms() == 5_000
    assert puts.update({0: 200, 1: 200}, members) == [
        PutResult("late", ReplicationStatus.PUT_OK)
    ]
    assert puts.next_deadline_ms() is None


def test_bad_setting():
    with pytest.raises(ValueError, match="min_in_sync_replicas"):
        SyncReplication(min_in_sync_replicas=0)


def test_discard_forgets_a_put():
    puts = SyncReplication()
    members = frozenset({0})
    puts.add("gone", 100, 1_000, members)
    puts.add("kept", 100, 1_000, members)
    puts.discard("gone")
    assert puts.update({0: 100}, members) == [PutResult("kept", ReplicationStatus.PUT_OK)]


def test_reconnect_forgets_the_old_ack_and_overlapping_connections_count():
    t = tracker(members=(0, 1), confirm=10)
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 300, 0)
    assert t.confirm_offset(500) == 300
    t.slave_connected(1, is_async_learner=False, now_ms=0)  # a second connection
    assert t.slaves[1].ack_offset == -1
    t.slave_disconnected(1)  # the old one closes late
    assert t.slaves[1].connected
    t.slave_disconnected(1)
    assert not t.slaves[1].connected


def test_a_polled_set_keeps_an_in_flight_proposal_counted_until_it_shows_it():
    t = tracker(members=(0,), epoch_start=0)
    t.slave_connected(1, is_async_learner=False, now_ms=0)
    t.slave_acked(1, 10, 0)
    assert t.maybe_expand(1, 10) == {0, 1}
    t.learn({0})  # a poll answered before the expand was committed
    assert t.pending == {0, 1}
    assert t.effective_sync_state_set == {0, 1}
    t.learn({0, 1})  # a later poll shows it committed
    assert t.pending is None
    assert t.sync_state_set == {0, 1}
