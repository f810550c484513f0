"""The acting-master rule without an event loop: which slave acts, and when it stops."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.registration.core.member_group import (
    GroupWatch,
    QueryMemberGroup,
    StartActing,
    StopActing,
)

NS = ("n1:9876", "n2:9876")


def watching_slave(broker_id: int = 1) -> GroupWatch:
    watch = GroupWatch(NS, broker_id=broker_id, sync_period=1000)
    assert watch.start(0) == [QueryMemberGroup("n1:9876")]
    assert watch.role_changed(is_slave=True, broker_id=broker_id, now=0) == []
    return watch


def test_the_smallest_alive_slave_acts_until_its_master_is_back() -> None:
    watch = watching_slave()
    # The master is alive: nothing to do; the next poll comes a period later.
    assert watch.member_group("n1:9876", {0: "m:1", 1: "s1:1", 2: "s2:1"}, 5) == []
    assert watch.next_wakeup() == 1005
    assert watch.poll(1004) == []
    assert watch.poll(1005) == [QueryMemberGroup("n1:9876")]
    # The master is gone: slave 1 is the smallest alive id, so it acts.
    assert watch.member_group("n1:9876", {1: "s1:1", 2: "s2:1"}, 1010) == [StartActing(1)]
    assert watch.acting
    # The same answer again changes nothing.
    watch.poll(2010)
    assert watch.member_group("n1:9876", {1: "s1:1", 2: "s2:1"}, 2011) == []
    # A name server says the master is back: the term ends.
    (stop,) = watch.min_broker_id_changed(0, 2500)
    assert isinstance(stop, StopActing) and "0" in stop.why
    assert not watch.acting


def test_a_slave_with_a_smaller_one_alive_does_not_act() -> None:
    watch = watching_slave(broker_id=2)
    assert watch.member_group("n1:9876", {1: "s1:1", 2: "s2:1"}, 1) == []
    # Slave 1 gone too: slave 2 is the smallest now.
    assert watch.min_broker_id_changed(2, 2) == [StartActing(2)]
    # Slave 1 back: slave 2 stops.
    assert isinstance(watch.min_broker_id_changed(1, 3)[0], StopActing)


def test_a_slave_that_hears_nothing_never_acts() -> None:
    watch = watching_slave()
    # n1 gives no answer: n2 is asked in the same round.
    assert watch.member_group("n1:9876", None, 1) == [QueryMemberGroup("n2:9876")]
    # n2 neither: the round is over; the master is still taken to be alive.
    assert watch.member_group("n2:9876", None, 2) == []
    assert not watch.acting and watch.next_wakeup() == 1002
    # A name server that knows no member of the group teaches nothing either.
    watch.poll(1002)
    assert watch.member_group("n1:9876", {}, 1003) == []
    assert not watch.acting
    # A late answer of a round already over is ignored.
    assert watch.member_group("n2:9876", {1: "s1:1"}, 1004) == []
    assert not watch.acting


def test_only_a_slave_acts_and_a_role_change_ends_the_term() -> None:
    watch = GroupWatch(NS, broker_id=1, sync_period=1000)
    watch.start(0)
    # Not a slave yet (the role is being taken): the answer is kept, no term.
    assert watch.member_group("n1:9876", {1: "s1:1"}, 1) == []
    assert watch.role_changed(is_slave=True, broker_id=1, now=2) == [StartActing(1)]
    # The controllers elect it master: the acting term ends.
    (stop,) = watch.role_changed(is_slave=False, broker_id=1, now=3)
    assert isinstance(stop, StopActing)
    # A master (id 0) never acts, whatever it is told.
    master = GroupWatch(NS, broker_id=0, sync_period=1000)
    master.start(0)
    master.role_changed(is_slave=True, broker_id=0, now=0)
    assert master.min_broker_id_changed(0, 1) == []


@given(st.lists(st.one_of(
    st.tuples(st.just("group"), st.sets(st.integers(0, 3), max_size=4)),
    st.tuples(st.just("notice"), st.integers(0, 3)),
    st.tuples(st.just("role"), st.booleans(), st.integers(0, 3)),
    st.tuples(st.just("silence"), st.none()),
), max_size=40))
def test_terms_alternate_and_follow_the_rule(events) -> None:
    watch = GroupWatch(NS, broker_id=1, sync_period=10)
    now = 0
    watch.start(now)
    acting = False
    for event in events:
        now += 10
        watch.poll(now)
        if event[0] == "group":
            actions = watch.member_group("n1:9876", {i: f"b{i}:1" for i in event[1]}, now)
        elif event[0] == "notice":
            actions = watch.min_broker_id_changed(event[1], now)
        elif event[0] == "role":
            actions = watch.role_changed(is_slave=event[1], broker_id=event[2], now=now)
        else:
            actions = watch.member_group("n1:9876", None, now)
            actions += watch.member_group("n2:9876", None, now)
        for action in actions:
            if isinstance(action, StartActing):
                assert not acting
                acting = True
            elif isinstance(action, StopActing):
                assert acting
                acting = False
        # Acting exactly while a slave whose id is the smallest alive one, never id 0.
        assert acting == watch.acting == (watch.is_slave and watch.broker_id != 0
                                          and watch.min_broker_id == watch.broker_id)
