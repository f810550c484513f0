"""One delay level's delivery without an event loop, with explicit times: due messages
go to their real topic once, up to ``max_in_flight`` at once (one at a time: in order);
a refused put is retried, never skipped; the offset moves only past what was stored and
everything before it, whatever order the puts end in; ``delayOffset.json``'s table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.schedule import (
    BATCH,
    RETRY_MAX_MS,
    RETRY_MIN_MS,
    SCAN_INTERVAL_MS,
    Deliver,
    LevelDelivery,
    ReadEntries,
    ReadRecord,
    Skipped,
    StoreOffset,
    WakeAt,
    idle_ms,
)
from triomq.protocol.message import MessageRecord
from triomq.protocol.route import DataVersion, RouteDataError

DELAY = 5000


def record(n: int, **extra: str) -> MessageRecord:
    props = {"DELAY": "2", "REAL_TOPIC": "orders", "REAL_QID": "3", "UNIQ_KEY": f"u{n}",
             "TAGS": "a", "TIMER_DELIVER_MS": "1", **extra}
    return MessageRecord(topic="SCHEDULE_TOPIC_XXXX", queue_id=1, body=b"m%d" % n, flag=4,
                         born_timestamp=77, born_host=("10.0.0.1", 5000), reconsume_times=1,
                         properties=props)


class Driver:
    """Runs a ``LevelDelivery`` against a queue of (store time) entries, by hand."""

    def __init__(self, store_times: list[int], offset: int = 0, max_in_flight: int = 1,
                 hand_on_beyond: int | None = None) -> None:
        self.flow = LevelDelivery(2, DELAY, offset, max_in_flight=max_in_flight,
                                  hand_on_beyond_ms=hand_on_beyond)
        self.entries = [(q, 1000 * q, 100, t + DELAY) for q, t in enumerate(store_times)]
        self.records = {1000 * q: record(q) for q in range(len(store_times))}
        self.stored: list[int] = []
        self.offsets: list[int] = []
        self.skipped: list[Skipped] = []

    def run(self, actions: list, now: int, *, refuse: bool = False) -> object:
        """Do ``actions`` until the flow waits; return what it waits on."""
        while actions:
            action = actions.pop(0)
            if isinstance(action, StoreOffset):
                self.offsets.append(action.offset)
            elif isinstance(action, Skipped):
                self.skipped.append(action)
            elif isinstance(action, ReadEntries):
                assert action.queue_id == 1
                got = self.entries[action.start:action.start + action.max_count]
                actions += self.flow.entries_read(got, 0, len(self.entries), now)
            elif isinstance(action, ReadRecord):
                actions += self.flow.record_read(self.records.get(action.physical_offset), now)
            elif isinstance(action, Deliver):
                if refuse:
                    actions += self.flow.put_done(action.queue_offset, False, now)
                else:
                    self.stored.append(int(action.message.body[1:]))
                    actions += self.flow.put_done(action.queue_offset, True, now)
            else:
                assert not actions
                return action
        raise AssertionError("the flow stopped without waiting")


def test_due_messages_are_delivered_in_order_to_their_real_topic_once() -> None:
    d = Driver([1000, 1000, 2000])
    wait = d.run(d.flow.start(2000), now=2000)
    assert wait == WakeAt(1000 + DELAY) and d.stored == []
    wait = d.run(d.flow.woke(6000), now=6000)
    assert d.stored == [0, 1] and d.offsets == [1, 2]
    assert wait == WakeAt(2000 + DELAY)
    wait = d.run(d.flow.woke(7000), now=7000)
    assert d.stored == [0, 1, 2] and d.offsets == [1, 2, 3]
    assert wait == WakeAt(7000 + idle_ms(DELAY))
    # Nothing new: nothing delivered twice.
    d.run(d.flow.woke(9000), now=9000)
    assert d.stored == [0, 1, 2]


def test_the_delivered_message_keeps_its_fields_without_its_delay() -> None:
    d = Driver([0])
    actions = d.flow.start(0)
    assert actions == [ReadEntries(1, 0, BATCH)]
    actions = d.flow.entries_read(d.entries, 0, 1, DELAY)
    assert actions == [ReadRecord(0, 100)]
    (deliver,) = d.flow.record_read(d.records[0], DELAY)
    assert isinstance(deliver, Deliver)
    message = deliver.message
    assert (message.topic, message.queue_id, message.body, message.flag) == ("orders", 3,
                                                                            b"m0", 4)
    assert (message.born_timestamp, message.born_host, message.reconsume_times) == (
        77, ("10.0.0.1", 5000), 1)
    assert "DELAY" not in message.properties and "TIMER_DELIVER_MS" not in message.properties
    assert message.properties["UNIQ_KEY"] == "u0" and message.properties["TAGS"] == "a"
    assert message.properties["REAL_TOPIC"] == "orders"


def test_a_refused_put_is_retried_after_a_growing_back_off_and_never_skipped() -> None:
    d = Driver([0, 0])
    now = DELAY
    wait = d.run(d.flow.start(now), now=now, refuse=True)
    waits = []
    for _ in range(10):
        assert isinstance(wait, WakeAt)
        waits.append(wait.at_ms - now)
        now = wait.at_ms
        wait = d.run(d.flow.woke(now), now=now, refuse=True)
    assert waits[0] == RETRY_MIN_MS and waits == sorted(waits) and waits[-1] == RETRY_MAX_MS
    assert d.offsets == [] and d.stored == []
    d.run(d.flow.woke(now), now=now)
    assert d.stored == [0, 1] and d.offsets == [1, 2]


def test_delivery_goes_on_from_the_stored_offset() -> None:
    d = Driver([0, 0, 0], offset=2)
    d.run(d.flow.start(DELAY), now=DELAY)
    assert d.stored == [2] and d.offsets == [3]


def test_an_offset_the_queue_no_longer_holds_is_corrected() -> None:
    d = Driver([0, 0], offset=9)
    d.run(d.flow.start(DELAY), now=DELAY)
    assert d.offsets == [2] and d.stored == []


@pytest.mark.parametrize("extra, reason", [
    ({"REAL_TOPIC": ""}, "no REAL_TOPIC"), ({"REAL_QID": "x"}, "not a queue id"),
    ({"REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC"}, "RMQ_SYS_TRANS_HALF_TOPIC"),
])
def test_a_message_that_cannot_be_delivered_is_skipped_with_the_reason(
        extra: dict[str, str], reason: str) -> None:
    d = Driver([0, 0])
    d.records[0] = record(0, **extra)
    d.run(d.flow.start(DELAY), now=DELAY)
    assert d.stored == [1] and d.offsets == [1, 2]
    assert d.skipped[0].queue_offset == 0 and reason in d.skipped[0].reason


def test_a_delivery_time_beyond_the_levels_delay_is_due_now() -> None:
    """The clock went back after the store: RocketMQ's correctDeliverTimestamp."""
    d = Driver([100_000])
    d.run(d.flow.start(1000), now=1000)
    assert d.stored == [0]


def test_more_than_a_batch_is_read_in_batches() -> None:
    d = Driver([0] * (BATCH + 5))
    d.run(d.flow.start(DELAY), now=DELAY)
    assert d.stored == list(range(BATCH + 5))


def test_the_idle_look_is_within_the_scan_interval_and_a_second() -> None:
    assert idle_ms(10) == 100
    assert idle_ms(500) == 500
    assert idle_ms(3_600_000) == 1000


def test_the_delay_offsets_file_round_trips_and_reads_fastjson() -> None:
    table = DelayOffsetTable(version_step=2)
    table.update(1, 12, now_ms=5)
    table.update(3, 4, now_ms=6)
    assert table.data_version == DataVersion(0, 6, 1)
    assert table.encode() == (b'{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":6},'
                              b'"offsetTable":{"1":12,"3":4}}')
    assert DelayOffsetTable.decode(table.encode()) == table
    bare = DelayOffsetTable.decode(b'{"offsetTable":{1:12,3:4},"dataVersion":{"counter":1,'
                                   b'"stateVersion":0,"timestamp":6}}')
    assert bare == table
    with pytest.raises(RouteDataError):
        DelayOffsetTable.decode(b'{"offsetTable":{"x":1}}')


def test_a_slave_adopts_its_masters_table_whole() -> None:
    slave = DelayOffsetTable({1: 3, 5: 9})
    master = DelayOffsetTable({1: 7}, DataVersion(0, 1, 4))
    assert slave.adopt_master(master)
    assert slave.offsets() == {1: 7} and slave.data_version == master.data_version
    assert not slave.adopt_master(master)


@pytest.mark.parametrize("delay", [50, 300, 5000, 3_600_000])
def test_a_message_stored_after_a_look_is_delivered_at_most_a_scan_interval_late(
        delay: int) -> None:
    """The level looks again at most ``idle_ms(delay)`` later, and waits for an entry
    it sees until exactly its delivery time."""
    flow = LevelDelivery(1, delay, 0)
    (read,) = flow.start(0)
    (wait,) = flow.entries_read([], 0, 0, 0)
    assert isinstance(read, ReadEntries) and isinstance(wait, WakeAt)
    stored_at = 1  # just after the look found nothing
    assert flow.woke(wait.at_ms) == [ReadEntries(0, 0, BATCH)]
    due = stored_at + delay
    (next_step,) = flow.entries_read([(0, 0, 100, due)], 0, 1, wait.at_ms)
    delivered_at = wait.at_ms if isinstance(next_step, ReadRecord) else next_step.at_ms
    assert isinstance(next_step, ReadRecord | WakeAt)
    assert due <= delivered_at <= max(due, stored_at + SCAN_INTERVAL_MS)


def deliveries(d: Driver, actions: list, now: int) -> list[Deliver]:
    """Do ``actions``, reading what they ask, up to the puts; return the puts."""
    puts = []
    while actions:
        action = actions.pop(0)
        if isinstance(action, ReadEntries):
            got = d.entries[action.start:action.start + action.max_count]
            actions += d.flow.entries_read(got, 0, len(d.entries), now)
        elif isinstance(action, ReadRecord):
            actions += d.flow.record_read(d.records.get(action.physical_offset), now)
        elif isinstance(action, StoreOffset):
            d.offsets.append(action.offset)
        else:
            assert isinstance(action, Deliver), action
            puts.append(action)
    return puts


def test_a_level_puts_up_to_max_in_flight_at_once_and_its_offset_waits_for_the_first(
        ) -> None:
    d = Driver([0] * 20, max_in_flight=16)
    puts = deliveries(d, d.flow.start(DELAY), DELAY)
    assert [p.queue_offset for p in puts] == list(range(16))
    # The last ends first: stored, but the offset stays before the first, and the
    # window, full, takes nothing.
    assert d.flow.put_done(15, True, DELAY) == []
    assert d.offsets == []
    more = deliveries(d, d.flow.put_done(0, True, DELAY), DELAY)
    assert d.offsets == [1] and [p.queue_offset for p in more] == [16]
    for queue_offset in range(1, 15):
        more += deliveries(d, d.flow.put_done(queue_offset, True, DELAY), DELAY)
    assert d.offsets[-1] == 16 and [p.queue_offset for p in more] == list(range(16, 20))
    for put in more[:-1]:
        assert deliveries(d, d.flow.put_done(put.queue_offset, True, DELAY), DELAY) == []
    assert d.flow.put_done(19, True, DELAY) == [StoreOffset(2, 20),
                                                 WakeAt(DELAY + idle_ms(DELAY))]


def test_a_failed_put_holds_the_offset_and_the_taking_until_its_retry_is_stored() -> None:
    d = Driver([0] * 6, max_in_flight=4)
    now = DELAY
    puts = deliveries(d, d.flow.start(now), now)
    assert [p.queue_offset for p in puts] == [0, 1, 2, 3]
    assert d.flow.put_done(1, False, now) == []
    assert d.flow.put_done(0, True, now) == [StoreOffset(2, 1)]  # nothing more taken
    assert d.flow.put_done(3, True, now) == []
    # Every put ended: the failed one's back-off, as with one at a time.
    assert d.flow.put_done(2, True, now) == [WakeAt(now + RETRY_MIN_MS)]
    (retry,) = d.flow.woke(now + RETRY_MIN_MS)
    assert retry == Deliver(1, puts[1].message)
    after = deliveries(d, d.flow.put_done(1, True, now + RETRY_MIN_MS), now + RETRY_MIN_MS)
    assert d.offsets == [4] and [p.queue_offset for p in after] == [4, 5]


def test_an_acting_slave_hands_on_what_is_due_later_as_timer_messages_for_their_time(
        ) -> None:
    d = Driver([0, 500, 1000, 4000], max_in_flight=2, hand_on_beyond=1000)
    now = 1500  # due at 5000, 5500, 6000 (beyond 2500: handed on) and 9000 (due now, >6500)
    puts = deliveries(d, d.flow.start(now), now)
    assert [p.queue_offset for p in puts] == [0, 1]
    assert [p.message.properties["TIMER_DELIVER_MS"] for p in puts] == ["5000", "5500"]
    assert all("DELAY" not in p.message.properties for p in puts)
    assert puts[0].message.topic == "orders" and puts[0].message.queue_id == 3
    more = deliveries(d, d.flow.put_done(0, True, now), now)
    assert [p.queue_offset for p in more] == [2] and d.offsets == [1]
    (last,) = deliveries(d, d.flow.put_done(1, True, now), now)
    assert last.queue_offset == 3 and "TIMER_DELIVER_MS" not in last.message.properties
    assert deliveries(d, d.flow.put_done(2, True, now), now) == []
    assert d.flow.put_done(3, True, now) == [StoreOffset(2, 4), WakeAt(now + idle_ms(DELAY))]


def test_one_due_within_the_margin_waits_for_its_time_on_the_acting_slave() -> None:
    d = Driver([0], hand_on_beyond=1000)
    assert d.run(d.flow.start(4200), now=4200) == WakeAt(DELAY) and d.stored == []


def test_a_refused_hand_on_ends_it_and_the_message_waits_its_time() -> None:
    d = Driver([0, 1000], max_in_flight=2, hand_on_beyond=1000)
    now = 500
    puts = deliveries(d, d.flow.start(now), now)
    assert [p.queue_offset for p in puts] == [0, 1]
    assert d.flow.put_done(0, False, now) == []  # e.g. the other master runs no timer wheel
    assert d.flow.put_done(1, True, now) == [WakeAt(now + RETRY_MIN_MS)]
    # Not tried again before its time, and then as a plain delivery.
    assert d.flow.woke(now + RETRY_MIN_MS) == [WakeAt(DELAY)]
    (retry,) = d.flow.woke(DELAY)
    assert isinstance(retry, Deliver) and retry.queue_offset == 0
    assert "TIMER_DELIVER_MS" not in retry.message.properties
    assert d.flow.put_done(0, True, DELAY)[0] == StoreOffset(2, 2)
    assert d.flow.hand_on_beyond_ms is None


def test_a_master_waits_for_the_delivery_time() -> None:
    d = Driver([0, 1000])
    assert d.run(d.flow.start(500), now=500) == WakeAt(DELAY) and d.stored == []


def test_one_in_flight_delivers_in_order() -> None:
    d = Driver([0] * 5, max_in_flight=1)
    d.run(d.flow.start(DELAY), now=DELAY)
    assert d.stored == [0, 1, 2, 3, 4] and d.offsets == [1, 2, 3, 4, 5]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(0, 3 * DELAY), min_size=1, max_size=50),
       st.sets(st.integers(0, 49), max_size=5), st.data())
def test_whatever_order_and_outcome_the_puts_end_in_every_message_is_delivered_and_the_offset_never_passes_an_unstored_one(  # noqa: E501
        max_in_flight: int, store_times: list[int], gone: set[int],
        data: st.DataObject) -> None:
    d = Driver(store_times, max_in_flight=max_in_flight)
    for queue_offset in gone:
        d.records.pop(1000 * queue_offset, None)
    count = len(store_times)
    due = {q: t + DELAY for q, t in enumerate(store_times)}
    #: Queue offset -> its PUT_OKs; the puts under way; the skipped.
    stored = dict.fromkeys(range(count), 0)
    skipped: set[int] = set()
    under_way: dict[int, Deliver] = {}
    failures = 0
    now = max(store_times)  # every delivery time within the level's delay
    offset = 0
    actions = d.flow.start(now)
    for _ in range(20 * count + 200):
        while actions:
            action = actions.pop(0)
            if isinstance(action, ReadEntries):
                got = d.entries[action.start:action.start + action.max_count]
                actions += d.flow.entries_read(got, 0, count, now)
            elif isinstance(action, ReadRecord):
                queue_offset = action.physical_offset // 1000
                assert due[queue_offset] <= now, "taken before it is due"
                actions += d.flow.record_read(d.records.get(action.physical_offset), now)
            elif isinstance(action, Skipped):
                assert action.queue_offset in gone
                skipped.add(action.queue_offset)
            elif isinstance(action, StoreOffset):
                assert action.offset >= offset
                offset = action.offset
                assert all(stored[q] or q in skipped for q in range(offset)), (
                    "the offset passed a message not stored")
            elif isinstance(action, Deliver):
                assert action.queue_offset not in under_way
                assert not stored[action.queue_offset], "stored, then put again"
                under_way[action.queue_offset] = action
                # What is taken and not behind the offset: at most the window.
                assert len({*under_way, *range(offset, action.queue_offset + 1)}
                           - {q for q in range(count) if stored[q]} - skipped
                           ) <= max_in_flight
            else:
                assert isinstance(action, WakeAt) and not actions
                assert not under_way, "a wait while a put is under way"
                if offset == count:
                    assert all(stored[q] == 1 for q in range(count) if q not in skipped)
                    assert skipped == gone & set(range(count))
                    return
                assert action.at_ms > now or failures
                now = max(now, action.at_ms)
                actions = d.flow.woke(now)
        assert under_way, "the flow stopped without waiting"
        key = data.draw(st.sampled_from(sorted(under_way)))
        under_way.pop(key)
        ok = failures >= 20 or data.draw(st.booleans())
        failures += not ok
        stored[key] += ok
        actions = d.flow.put_done(key, ok, now)
    raise AssertionError("not every message delivered")
