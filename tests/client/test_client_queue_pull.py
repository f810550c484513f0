"""One queue's pulling between pulls, and the consumed offsets in memory (pure)."""

from __future__ import annotations

from triomq.client.core.message import MessageQueue, decode_messages
from triomq.client.core.pull import PullResult, PullStatus
from triomq.client.core.queue_pull import (
    ConsumedOffsets,
    Dispatch,
    OffsetMoved,
    QueuePull,
    SkipTo,
    subscribe_broker,
)
from triomq.protocol.message import MessageRecord, encode

QUEUE = MessageQueue("t", "broker-a", 1)


def messages(*offsets: int) -> tuple:
    body = b"".join(encode(MessageRecord(topic="t", body=b"m%d" % o, queue_id=1,
                                         queue_offset=o, physical_offset=100 * o))
                    for o in offsets)
    return tuple(decode_messages(body, "broker-a"))


def result(status: PullStatus, next_offset: int, *found: int, suggest: int = 0) -> PullResult:
    return PullResult(status, next_offset, 0, 50, messages(*found) if found else (), suggest)


def test_a_pull_goes_to_the_suggested_replica_else_the_master_else_the_lowest() -> None:
    assert subscribe_broker({0: "m", 1: "s"}, 1) == "s"
    assert subscribe_broker({0: "m", 1: "s"}, 2) == "m"
    assert subscribe_broker({2: "s2", 1: "s1"}, 0) == "s1"
    assert subscribe_broker({}) is None


def test_found_messages_are_held_and_delivered_and_the_offset_moves() -> None:
    pull = QueuePull(QUEUE, next_offset=5)
    step = pull.answered(result(PullStatus.FOUND, 8, 5, 6, 7, suggest=1))
    assert isinstance(step, Dispatch)
    assert [m.queue_offset for m in step.messages] == [5, 6, 7]
    assert pull.next_offset == 8 and pull.broker_id == 1 and len(pull.process) == 3


def test_consumed_offsets_move_only_past_what_the_listener_finished() -> None:
    pull, offsets = QueuePull(QUEUE, next_offset=5), ConsumedOffsets()
    step = pull.answered(result(PullStatus.FOUND, 8, 5, 6, 7))
    assert isinstance(step, Dispatch)
    first, second, third = step.messages
    assert offsets.consumed(pull, [second]) == 5  # 5 still being consumed
    assert offsets.read(QUEUE) == 5
    assert offsets.consumed(pull, [first, third]) == 8
    assert offsets.read(QUEUE) == 8
    offsets.update(QUEUE, 6, increase_only=True)
    assert offsets.read(QUEUE) == 8
    offsets.update(QUEUE, 6)
    assert offsets.read(QUEUE) == 6


def test_a_pull_carries_the_offset_only_to_the_master() -> None:
    pull, offsets = QueuePull(QUEUE), ConsumedOffsets()
    offsets.update(QUEUE, 3)
    assert pull.commit_offset(offsets, to_master=True) == 3
    assert pull.commit_offset(offsets, to_master=False) is None


def test_nothing_new_on_an_empty_queue_corrects_the_offset() -> None:
    pull = QueuePull(QUEUE, next_offset=5)
    assert pull.answered(result(PullStatus.NO_MATCHED_MSG, 9)) == SkipTo(9)
    assert pull.next_offset == 9
    pull.process.put(messages(9))
    assert pull.answered(result(PullStatus.NO_NEW_MSG, 10)) is None  # something held


def test_an_illegal_offset_drops_the_queue() -> None:
    pull = QueuePull(QUEUE, next_offset=60)
    assert pull.answered(result(PullStatus.OFFSET_ILLEGAL, 50)) == OffsetMoved(50)
    assert pull.process.dropped and pull.next_offset == 60


def test_a_dropped_queue_ignores_answers_and_commits_nothing() -> None:
    pull, offsets = QueuePull(QUEUE, next_offset=5), ConsumedOffsets()
    step = pull.answered(result(PullStatus.FOUND, 6, 5))
    assert isinstance(step, Dispatch)
    pull.process.dropped = True
    assert pull.answered(result(PullStatus.FOUND, 7, 6)) is None
    assert offsets.consumed(pull, list(step.messages)) is None
    assert offsets.read(QUEUE) is None
