"""One master term's SyncStateSet proposals and synchronous puts, driven by hand."""

from __future__ import annotations

from triomq.ha.core.master_term import HAMasterConfig, MasterTerm, carried_confirm_offset
from triomq.ha.core.sync_replication import PutResult, ReplicationStatus

CONFIG = HAMasterConfig(ha_max_time_slave_not_catchup=1000, check_sync_state_set_period=200,
                        all_ack_in_sync_state_set=True)
OK, TIMEOUT = ReplicationStatus.PUT_OK, ReplicationStatus.FLUSH_SLAVE_TIMEOUT


def term(members=(0, 1), config=CONFIG) -> MasterTerm:
    return MasterTerm(broker_id=0, sync_state_set=frozenset(members), epoch_start_offset=100,
                      confirm_offset=100, now_ms=0, config=config)


def test_a_lagging_member_is_proposed_out_once_until_answered():
    master = term()
    assert master.check(500, 100) == 700
    assert master.next_proposal() is None
    master.check(1001, 100)
    assert master.next_proposal() == {0}
    assert master.tracker.effective_sync_state_set == {0, 1}  # a shrink counts once applied
    master.check(1201, 100)
    assert master.next_proposal() is None  # still with the reporter
    master.answered(None)  # outcome unknown: asked again at the next check
    master.check(1401, 100)
    assert master.next_proposal() == {0}
    master.answered(frozenset({0}))
    assert master.tracker.sync_state_set == {0} and not master.reporting


def test_a_caught_up_slave_is_proposed_in_and_counts_at_once():
    master = term(members=(0,))
    master.slave_joined(1, is_async_learner=False, now_ms=10)
    master.slave_acked(1, 90, 10, 150)  # not past this epoch's start
    assert not master.has_proposals
    master.slave_acked(1, 150, 10, 150)
    assert master.next_proposal() == {0, 1}
    assert master.tracker.effective_sync_state_set == {0, 1}
    assert master.add_put("p", 200, 5000) is None
    assert master.completed(200) == []  # s has not acked 200
    master.slave_acked(1, 200, 20, 200)
    assert master.completed(200) == [PutResult("p", OK)]


def test_puts_complete_in_order_or_expire():
    master = term()
    master.slave_joined(1, is_async_learner=False, now_ms=0)
    master.add_put("a", 150, 1000)
    master.add_put("b", 250, 2000)
    master.slave_acked(1, 150, 0, 250)
    assert master.completed(250) == [PutResult("a", OK)]
    assert master.expired(1999) == []
    assert master.expired(2000) == [PutResult("b", TIMEOUT)]


def test_a_fenced_term_fails_its_puts_and_changes_nothing_more():
    master = term()
    master.add_put("a", 150, 1000)
    master.check(1001, 100)
    assert master.fence() == [PutResult("a", TIMEOUT)]
    assert not master.has_proposals
    assert master.add_put("b", 150, 1000) is TIMEOUT
    master.slave_acked(1, 500, 0, 500)
    assert master.completed(500) == []
    assert master.check(2000, 500) is None


def test_a_put_the_acks_already_cover_needs_no_wait():
    master = term()
    master.slave_joined(1, is_async_learner=False, now_ms=0)
    assert not master.replicated(150, 150)  # s has acked nothing yet
    master.slave_acked(1, 150, 0, 200)
    assert master.replicated(150, 200) and not master.replicated(200, 200)
    alone = term(members=(0,), config=HAMasterConfig(all_ack_in_sync_state_set=True))
    assert alone.replicated(150, 150)  # the master's own bytes suffice
    too_few = term(members=(0,), config=HAMasterConfig(min_in_sync_replicas=2))
    assert not too_few.replicated(150, 150)
    master.fence()
    assert not master.replicated(150, 200)  # a fenced term completes nothing


def test_ending_the_term_abandons_its_puts():
    master = term()
    master.add_put("a", 150, 1000)
    master.add_put("b", 160, 1000)
    assert sorted(master.end()) == ["a", "b"]
    assert master.expired(5000) == []


def test_too_few_members_fail_a_put_at_once():
    master = term(members=(0,), config=HAMasterConfig(min_in_sync_replicas=2))
    assert master.add_put("a", 150, 1000) is ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH


def test_a_new_term_confirms_what_the_last_one_did_and_no_more():
    assert carried_confirm_offset(500, 400, 0) == 400  # capped at the log's end
    assert carried_confirm_offset(300, 400, 0) == 300
    assert carried_confirm_offset(-1, 400, 100) == 100  # a restart: the log's start


def test_an_answer_to_an_earlier_proposal_leaves_a_waiting_one_counted():
    master = term(members=(0,))
    for slave in (1, 2):
        master.slave_joined(slave, is_async_learner=False, now_ms=0)
    master.slave_acked(1, 150, 10, 150)
    assert master.next_proposal() == {0, 1}  # with the reporter
    master.committed(frozenset({0, 1}))  # a poll shows it applied before its answer
    master.slave_acked(2, 150, 10, 150)  # {0, 1, 2} waits for the reporter
    master.slave_left(2)
    master.answered(frozenset({0, 1}))  # the first proposal's answer, not the waiting one's
    assert master.tracker.effective_sync_state_set == {0, 1, 2}
    assert master.next_proposal() == {0, 1, 2}
    master.slave_acked(1, 300, 20, 300)
    assert master.confirm_offset(300) == 150  # t, which the controller may still add, has 150


def test_a_restarted_master_lets_no_slave_in_before_its_members_acked():
    # Back in its epoch after a restart, the master knows nothing confirmed
    # (the log's start): t must not join lacking what s and m acked before.
    master = MasterTerm(broker_id=0, sync_state_set=frozenset({0, 1}),
                        epoch_start_offset=100, confirm_offset=0, now_ms=0, config=CONFIG)
    for slave in (1, 2):
        master.slave_joined(slave, is_async_learner=False, now_ms=0)
    master.slave_acked(2, 150, 10, 300)
    master.check(10, 300)
    assert not master.has_proposals
    master.slave_acked(1, 300, 20, 300)
    master.check(20, 300)
    assert not master.has_proposals  # t lacks 150..300
    master.slave_acked(2, 300, 30, 300)
    assert master.next_proposal() == {0, 1, 2}
