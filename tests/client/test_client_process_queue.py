"""The process-queue offset rule: commit up to the lowest unconsumed message, never past it."""

from __future__ import annotations

from triomq.client.core.message import MessageExt
from triomq.client.core.process_queue import ProcessQueue


def msg(offset: int, body: bytes = b"x") -> MessageExt:
    return MessageExt(topic="t", body=body, queue_id=0, queue_offset=offset,
                      commit_log_offset=offset * 100, msg_id=f"id{offset}",
                      offset_msg_id=f"o{offset}", born_timestamp=0, born_host=("1.2.3.4", 1),
                      store_timestamp=0, store_host=("1.2.3.4", 2))


def test_nothing_held_commits_nothing() -> None:
    assert ProcessQueue().committable() is None
    assert ProcessQueue().remove([]) is None


def test_offset_held_back_by_the_lowest_unconsumed_message() -> None:
    pq = ProcessQueue()
    messages = [msg(o) for o in range(10, 15)]
    pq.put(messages)
    assert len(pq) == 5 and pq.size == 5 and pq.span == 4
    assert pq.committable() == 10
    # 11..14 done, 10 still consuming: the offset stays at 10.
    assert pq.remove(messages[1:]) == 10
    assert pq.remove(messages[:1]) == 15
    assert len(pq) == 0 and pq.size == 0
    # Nothing left: the next put's messages hold it again.
    pq.put([msg(15), msg(16)])
    assert pq.remove([msg(16)]) == 15


def test_a_message_put_twice_is_held_once() -> None:
    pq = ProcessQueue()
    pq.put([msg(1), msg(2)])
    pq.put([msg(2), msg(3)])
    assert len(pq) == 3 and pq.next_offset == 4


def test_orderly_takes_in_order_commits_after_the_taken_and_puts_back() -> None:
    pq = ProcessQueue()
    pq.put([msg(5), msg(3), msg(4)])
    first = pq.take()
    assert [m.queue_offset for m in first] == [3]
    assert pq.committable() == 3
    pq.put_back(first)
    again = pq.take(2)
    assert [m.queue_offset for m in again] == [3, 4]
    assert pq.commit() == 5
    assert pq.committable() == 5
    assert [m.queue_offset for m in pq.take(5)] == [5]
    assert pq.commit() == 6
    assert pq.take() == [] and pq.commit() is None
