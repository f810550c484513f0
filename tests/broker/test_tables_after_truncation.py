"""A slave that cut its log back to its new master's: no table of the broker points past
the cut, where other messages are written since (they would be taken for consumed or
delivered)."""

from __future__ import annotations

from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable
from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpoint, TimerCheckpointTable

ENDS = {("orders", 0): 10, ("orders", 1): 4, ("SCHEDULE_TOPIC_XXXX", 0): 3,
        ("SCHEDULE_TOPIC_XXXX", 1): 9, ("rmq_sys_wheel_timer", 0): 5}


def queue_max(topic: str, queue_id: int) -> int:
    return ENDS.get((topic, queue_id), 0)


def test_consumer_offsets_past_a_queues_end_go_back_to_it() -> None:
    table = ConsumerOffsetTable()
    for group in ("g1", "CID_SYS_RMQ_TRANS"):
        table.commit(group, "orders", 0, 8, 1)
        table.commit(group, "orders", 1, 7, 1)
    revision, version = table.revision, table.data_version
    assert table.truncated(queue_max)
    assert [table.query(g, "orders", q) for g in ("g1", "CID_SYS_RMQ_TRANS") for q in (0, 1)] \
        == [8, 4, 8, 4]
    # Written again (its revision moved), not newer for it (its DataVersion stays).
    assert table.revision > revision and table.data_version == version
    assert not table.truncated(queue_max)


def test_delay_offsets_past_a_levels_queue_end_go_back_to_it() -> None:
    table = DelayOffsetTable({1: 5, 2: 9})  # level 1 is queue 0, level 2 queue 1
    assert table.truncated(queue_max)
    assert table.offsets() == {1: 3, 2: 9}
    assert not table.truncated(queue_max)


def test_a_timer_scan_past_the_timer_queues_end_goes_back_to_it() -> None:
    table = TimerCheckpointTable(TimerCheckpoint(queue_offset=4, scan_offset=7,
                                                 read_time_ms=14_000))
    assert table.truncated(queue_max)
    assert table.checkpoint == TimerCheckpoint(4, 5, 14_000)
    # The entries from the cut on are pending again, whatever their slot.
    assert not table.checkpoint.delivered(5, 11_000) and table.checkpoint.delivered(4, 11_000)
    assert not table.truncated(queue_max)
