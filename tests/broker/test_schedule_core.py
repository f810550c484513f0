"""One delay level's delivery without an event loop, with explicit times: due messages
go to their real topic in order, once; a refused put is retried, never skipped; the
offset moves only past what was stored; ``delayOffset.json``'s table."""

from __future__ import annotations

import pytest

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

    def __init__(self, store_times: list[int], offset: int = 0) -> None:
        self.flow = LevelDelivery(2, DELAY, offset)
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
                    actions += self.flow.put_done(False, now)
                else:
                    self.stored.append(int(action.message.body[1:]))
                    actions += self.flow.put_done(True, now)
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
