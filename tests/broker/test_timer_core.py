"""The timer wheel without an event loop, with explicit times: a timer message is
delivered once its slot has passed, to its real topic; a refused put is retried, never
skipped; the checkpoint moves only past what was stored, and a wheel rebuilt from it
delivers what was pending, not what was delivered; ``timerCheckpoint.json``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.broker.secondary.core.schedule import RETRY_MIN_MS
from triomq.broker.secondary.core.timer_checkpoint import (
    TimerCheckpoint,
    TimerCheckpointTable,
)
from triomq.broker.secondary.core.timer_wheel import (
    BATCH,
    MAX_IN_FLIGHT,
    Deliver,
    ReadEntries,
    ReadRecord,
    Skipped,
    StoreCheckpoint,
    TimerDelivery,
    TimerWheel,
    WakeAt,
    time_up,
)
from triomq.protocol.message import MessageRecord
from triomq.protocol.route import DataVersion, RouteDataError

P = 1000


def record(n: int, out_ms: int, **extra: str) -> MessageRecord:
    props = {"TIMER_OUT_MS": str(out_ms), "REAL_TOPIC": "orders", "REAL_QID": "3",
             "UNIQ_KEY": f"u{n}", "TIMER_DELIVER_MS": str(out_ms + 1), **extra}
    return MessageRecord(topic="rmq_sys_wheel_timer", queue_id=0, body=b"m%d" % n, flag=4,
                         born_timestamp=77, born_host=("10.0.0.1", 5000), reconsume_times=1,
                         store_timestamp=500 + n, properties=props)


class Driver:
    """Runs a ``TimerDelivery`` against a timer queue of records, by hand."""

    def __init__(self, outs: list[int], checkpoint: TimerCheckpoint | None = None,
                 queue_min: int = 0, hand_on: bool = False) -> None:
        self.flow = TimerDelivery(P, checkpoint or TimerCheckpoint(), hand_on=hand_on)
        self.handed_on: list[Deliver] = []
        self.records: dict[int, MessageRecord] = {}
        self.entries: list[tuple[int, int, int, int]] = []
        self.queue_min = queue_min
        self.stored: list[int] = []
        self.checkpoints: list[TimerCheckpoint] = []
        self.skipped: list[Skipped] = []
        self.reads = 0
        for out in outs:
            self.append(out)

    def append(self, out: int, **extra: str) -> None:
        q = len(self.entries)
        self.entries.append((q, 1000 * q, 100, 0))
        self.records[1000 * q] = record(q, out, **extra)

    def run(self, actions: list, now: int, *, refuse: bool = False) -> object:
        """Do ``actions`` until the flow waits; return what it waits on."""
        while actions:
            action = actions.pop(0)
            if isinstance(action, StoreCheckpoint):
                self.checkpoints.append(action.checkpoint)
            elif isinstance(action, Skipped):
                self.skipped.append(action)
            elif isinstance(action, ReadEntries):
                start = max(action.start, self.queue_min)
                got = self.entries[start:start + action.max_count]
                actions += self.flow.entries_read(got, self.queue_min, len(self.entries), now)
            elif isinstance(action, ReadRecord):
                self.reads += 1
                actions += self.flow.record_read(self.records.get(action.physical_offset), now)
            elif isinstance(action, Deliver):
                if refuse:
                    actions += self.flow.put_done(action.queue_offset, False, now)
                else:
                    if "TIMER_OUT_MS" not in action.message.properties:
                        self.handed_on.append(action)
                    self.stored.append(int(action.message.body[1:]))
                    actions += self.flow.put_done(action.queue_offset, True, now)
            else:
                assert not actions
                return action
        raise AssertionError("the flow stopped without waiting")


def test_a_slot_is_delivered_once_it_has_passed_and_the_wheel_ticks_each_precision() -> None:
    d = Driver([12_000, 12_000, 15_000])
    assert d.run(d.flow.start(10_400), now=10_400) == WakeAt(11_000)
    assert d.flow.pending() == 3 and d.stored == []
    assert d.run(d.flow.woke(12_999), now=12_999) == WakeAt(13_000)
    assert d.stored == []
    assert d.run(d.flow.woke(13_000), now=13_000) == WakeAt(14_000)
    assert d.stored == [0, 1]
    assert d.run(d.flow.woke(16_000), now=16_000) == WakeAt(17_000)
    assert d.stored == [0, 1, 2] and d.flow.pending() == 0
    assert d.checkpoints[-1] == TimerCheckpoint(3, 3, 16_000)


def test_the_delivered_message_goes_to_its_real_topic_as_rocketmq_converts_it() -> None:
    message = time_up(record(1, 5000, TAGS="a"), 7000)
    assert not isinstance(message, str)
    assert (message.topic, message.queue_id, message.body) == ("orders", 3, b"m1")
    props = message.properties
    assert "REAL_TOPIC" not in props and "REAL_QID" not in props
    assert props["TIMER_OUT_MS"] == "5000" and props["TIMER_DELIVER_MS"] == "5001"
    assert props["TIMER_ENQUEUE_MS"] == "501" and props["TIMER_DEQUEUE_MS"] == "7000"
    assert props["TAGS"] == "a" and props["UNIQ_KEY"] == "u1"
    assert (message.flag, message.born_timestamp, message.reconsume_times) == (4, 77, 1)


def test_an_entry_scanned_after_its_slot_is_delivered_at_once_in_order() -> None:
    d = Driver([20_000])
    assert d.run(d.flow.start(10_000), now=10_000) == WakeAt(11_000)
    d.append(9_000)
    d.append(10_000)  # the read time's own slot: not passed yet
    assert d.run(d.flow.woke(10_500), now=10_500) == WakeAt(11_000)
    assert d.stored == [1]
    assert d.run(d.flow.woke(11_000), now=11_000) == WakeAt(12_000)
    assert d.stored == [1, 2]


def test_new_entries_join_the_slot_being_delivered() -> None:
    d = Driver([10_000])
    d.run(d.flow.start(10_000), now=10_000)
    actions = d.flow.woke(11_000)
    # The scan finds nothing new, the slot's chain is read...
    assert isinstance(actions[0], ReadEntries)
    d.append(10_000)
    assert d.run(actions, now=11_000) == WakeAt(12_000)
    assert d.stored == [0, 1]


def test_a_refused_put_is_retried_and_the_checkpoint_waits() -> None:
    d = Driver([10_000, 10_000])
    d.run(d.flow.start(10_000), now=10_000)
    assert d.run(d.flow.woke(11_000), now=11_000, refuse=True) == WakeAt(11_000 + RETRY_MIN_MS)
    assert d.stored == [] and all(c.queue_offset == 0 for c in d.checkpoints)
    assert d.run(d.flow.woke(11_100), now=11_100, refuse=True) == WakeAt(
        11_100 + 2 * RETRY_MIN_MS)
    d.run(d.flow.woke(11_300), now=11_300)
    assert d.stored == [0, 1] and d.checkpoints[-1] == TimerCheckpoint(2, 2, 11_000)


def test_a_slot_is_put_several_at_once_and_passed_once_every_put_ended() -> None:
    d = Driver([10_000] * (MAX_IN_FLIGHT + 4) + [11_000])
    d.run(d.flow.start(10_000), now=10_000)
    actions = d.flow.woke(12_000)
    puts: list[Deliver] = []
    while actions:  # read what it asks, hold the puts
        action = actions.pop(0)
        if isinstance(action, ReadEntries):
            actions += d.flow.entries_read([], 0, len(d.entries), 12_000)
        elif isinstance(action, ReadRecord):
            actions += d.flow.record_read(d.records[action.physical_offset], 12_000)
        elif isinstance(action, Deliver):
            puts.append(action)
    assert len(puts) == MAX_IN_FLIGHT
    # Answered last first: the checkpoint does not pass the first until it is stored;
    # each answer lets the next of the slot be read.
    more: list = []
    for put in reversed(puts[1:]):
        answer = d.flow.put_done(put.queue_offset, True, 12_000)
        assert not [a for a in answer if isinstance(a, StoreCheckpoint)]
        more += answer
    assert len(more) == 4 and all(isinstance(a, ReadRecord) for a in more)
    assert d.flow.read_time_ms == 10_000
    rest = d.flow.put_done(puts[0].queue_offset, True, 12_000)
    assert rest == [StoreCheckpoint(TimerCheckpoint(len(puts), len(puts) + 5, 10_000))]
    assert d.run(more, now=12_000) == WakeAt(13_000)
    assert sorted(d.stored) == list(range(MAX_IN_FLIGHT, MAX_IN_FLIGHT + 5))
    assert d.checkpoints[-1] == TimerCheckpoint(MAX_IN_FLIGHT + 5, MAX_IN_FLIGHT + 5, 12_000)


def test_an_illegal_put_and_a_bad_record_are_skipped() -> None:
    d = Driver([10_000])
    d.append(10_000, REAL_QID="x")
    d.entries.append((2, 99_999, 100, 0))  # its record is gone
    d.run(d.flow.start(10_000), now=10_000)
    assert [s.queue_offset for s in d.skipped] == [1, 2]
    actions = d.flow.woke(11_000)
    while not isinstance(actions[0], Deliver):
        action = actions.pop(0)
        if isinstance(action, ReadEntries):
            actions += d.flow.entries_read([], 0, 3, 11_000)
        elif isinstance(action, ReadRecord):
            actions += d.flow.record_read(d.records[action.physical_offset], 11_000)
    assert isinstance(d.flow.put_done(0, False, 11_000, illegal=True)[0], Skipped)
    assert d.flow.pending() == 0 and d.flow.checkpoint().queue_offset == 3


def test_a_rebuilt_wheel_delivers_what_was_pending_not_what_was_delivered() -> None:
    outs = [10_000, 30_000, 11_000, 40_000, 12_000]
    d = Driver(outs)
    d.run(d.flow.start(10_000), now=10_000)
    d.run(d.flow.woke(13_000), now=13_000)
    assert d.stored == [0, 2, 4]
    checkpoint = d.checkpoints[-1]
    assert checkpoint == TimerCheckpoint(1, 5, 13_000)
    d.append(12_500)  # stored after the checkpoint, its slot already passed
    again = Driver([], checkpoint)
    again.entries, again.records = d.entries, d.records
    assert again.run(again.flow.start(50_000), now=50_000) == WakeAt(51_000)
    # Only the pending ones and the new one, which the old wheel never scanned.
    assert again.stored == [5, 1, 3]
    assert again.checkpoints[-1] == TimerCheckpoint(6, 6, 50_000)


def test_an_acting_slave_hands_on_what_is_not_due_for_the_end_of_its_slot() -> None:
    d = Driver([9_000, 12_000, 40_000], hand_on=True)
    assert d.run(d.flow.start(10_400), now=10_400) == WakeAt(11_000)
    # The one whose slot passed is delivered; the others are handed on at once.
    assert sorted(d.stored) == [0, 1, 2]
    assert [int(p.message.body[1:]) for p in d.handed_on] == [1, 2]
    handed = d.handed_on[0].message
    assert (handed.topic, handed.queue_id) == ("orders", 3)
    assert handed.properties["TIMER_DELIVER_MS"] == "13000"  # when this wheel would have
    assert not {"REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS"} & set(handed.properties)
    # Counted as delivered: a master rebuilt from the checkpoint delivers none again.
    checkpoint = d.checkpoints[-1]
    assert (checkpoint.queue_offset, checkpoint.scan_offset) == (3, 3)
    again = Driver([], checkpoint)
    again.entries, again.records = d.entries, d.records
    again.run(again.flow.start(50_000), now=50_000)
    assert again.stored == []


def test_a_refused_hand_on_ends_it_and_the_entries_wait_in_the_wheel() -> None:
    d = Driver([12_000, 13_000], hand_on=True)
    d.run(d.flow.start(10_400), now=10_400, refuse=True)
    assert not d.flow.hand_on and d.stored == [] and d.flow.pending() == 2
    d.run(d.flow.woke(13_000), now=13_000)
    assert d.stored == [0] and d.handed_on == []  # delivered in its slot, plainly
    d.run(d.flow.woke(14_000), now=14_000)
    assert d.stored == [0, 1]
    assert d.checkpoints[-1] == TimerCheckpoint(2, 2, 14_000)


def test_a_checkpoint_does_not_move_while_its_wheel_rebuilds() -> None:
    old = TimerCheckpoint(0, 2 * BATCH + 3, 20_000)
    d = Driver([60_000] * (2 * BATCH + 3), old)
    assert d.flow.start(30_000) == [ReadEntries(0, 0, BATCH)]
    actions = d.flow.entries_read(d.entries[:BATCH], 0, len(d.entries), 30_000)
    assert d.flow.rebuilding and d.flow.checkpoint() == old
    assert d.run(actions, now=30_000) == WakeAt(31_000)
    # Rebuilt, it ticks: the read time goes to the clock.
    assert d.flow.pending() == 2 * BATCH + 3
    assert d.checkpoints == [TimerCheckpoint(0, 2 * BATCH + 3, 30_000)]


def test_a_queue_that_starts_later_moves_the_scan() -> None:
    d = Driver([10_000] * 5, queue_min=3)
    d.run(d.flow.start(10_000), now=10_000)
    d.run(d.flow.woke(11_000), now=11_000)
    assert d.stored == [3, 4] and d.checkpoints[-1].queue_offset == 5


def test_a_queue_cut_below_the_checkpoint_scans_its_new_entries() -> None:
    # An unclean election: the new master's timer queue ends before its checkpoint.
    d = Driver([10_000] * 3, TimerCheckpoint(5, 8, 10_000))
    assert d.run(d.flow.start(10_000), now=10_000) == WakeAt(11_000)
    assert d.flow.checkpoint() == TimerCheckpoint(3, 3, 10_000)
    d.append(10_000)
    d.append(12_000)
    d.run(d.flow.woke(11_000), now=11_000)
    assert d.stored == [3]
    d.run(d.flow.woke(13_000), now=13_000)
    assert d.stored == [3, 4]


def test_a_tick_costs_the_same_whatever_is_pending() -> None:
    # The reads a tick does: the new entries and the due ones, not the pending ones.
    small, large = Driver([10**6] * 10), Driver([10**6] * 5000)
    for d in (small, large):
        d.run(d.flow.start(10_000), now=10_000)
        d.reads = 0
        d.run(d.flow.woke(11_000), now=11_000)
    assert small.reads == large.reads == 0


def test_the_wheel_gives_its_earliest_slot_first() -> None:
    wheel = TimerWheel(P)
    for slot, n in [(5000, 1), (3000, 2), (5000, 3), (4000, 4)]:
        wheel.add(slot, (n, n, n))
    assert len(wheel) == 4 and wheel.first_slot() == 3000
    assert [wheel.pop_first() for _ in range(3)] == [
        [(2, 2, 2)], [(4, 4, 4)], [(1, 1, 1), (3, 3, 3)]]
    assert wheel.first_slot() is None and len(wheel) == 0


def test_the_checkpoint_file_round_trips_and_names_what_is_wrong() -> None:
    table = TimerCheckpointTable()
    table.update(TimerCheckpoint(3, 7, 12_000), now_ms=99)
    assert table.revision == 1 and table.data_version == DataVersion(0, 99, 1)
    assert table.encode() == (b'{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":99},'
                              b'"queueOffset":3,"readTimeMs":12000,"scanOffset":7}')
    assert TimerCheckpointTable.decode(table.encode()) == table
    slave = TimerCheckpointTable()
    assert slave.adopt_master(table) and not slave.adopt_master(table)
    assert slave.checkpoint == table.checkpoint
    for bad, words in [(b"[]", "object"), (b'{"scanOffset": -1}', "scanOffset"),
                       (b'{"queueOffset": 5, "scanOffset": 2}', "past"),
                       (b'{"readTimeMs": "x"}', "readTimeMs")]:
        with pytest.raises(RouteDataError, match=words):
            TimerCheckpointTable.decode(bad)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.builds(
    lambda obj: json.dumps(obj).encode(),
    st.dictionaries(st.sampled_from(["queueOffset", "scanOffset", "readTimeMs",
                                     "dataVersion", "x"]),
                    st.one_of(st.integers(-5, 2**63), st.text(max_size=5), st.none(),
                              st.booleans(), st.lists(st.integers(), max_size=2))))))
def test_a_damaged_checkpoint_file_is_refused_by_name_or_read(data: bytes) -> None:
    try:
        table = TimerCheckpointTable.decode(data)
    except RouteDataError as exc:
        assert "timerCheckpoint.json" in str(exc) or "dataVersion" in str(exc)
        return
    c = table.checkpoint
    assert 0 <= c.queue_offset <= c.scan_offset and c.read_time_ms >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 40), min_size=1, max_size=60), st.integers(0, 30))
def test_a_wheel_rebuilt_from_any_checkpoint_loses_nothing(slots: list[int],
                                                           cut: int) -> None:
    # Run until some are delivered, take the checkpoint, rebuild: every message is
    # delivered by the first wheel or the second, and, the checkpoint taken while the
    # first waited, by one only.
    outs = [10_000 + 1000 * s for s in slots]
    first = Driver(outs)
    first.run(first.flow.start(10_000), now=10_000)
    first.run(first.flow.woke(11_000 + 1000 * cut), now=11_000 + 1000 * cut)
    checkpoint = first.flow.checkpoint()
    second = Driver([], checkpoint)
    second.entries, second.records = first.entries, first.records
    second.run(second.flow.start(60_000), now=60_000)
    assert sorted(first.stored + second.stored) == list(range(len(outs)))
