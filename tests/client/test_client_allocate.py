"""Average allocation: each queue to one consumer, in contiguous runs of near-equal size."""

from __future__ import annotations

import pytest

from triomq.client.core.allocate import (
    DropQueue,
    ForgetOffset,
    PersistOffset,
    UnlockQueue,
    allocate_averagely,
    release_steps,
)
from triomq.client.core.message import MessageQueue


def split(queues: int, consumers: int) -> list[list[int]]:
    ids = [f"c{i:02d}" for i in range(consumers)]
    return [allocate_averagely(cid, list(range(queues)), ids) for cid in ids]


def test_rocketmq_examples() -> None:
    assert split(8, 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert split(4, 2) == [[0, 1], [2, 3]]
    assert split(2, 4) == [[0], [1], [], []]
    assert split(5, 1) == [[0, 1, 2, 3, 4]]


@pytest.mark.parametrize("consumers", range(1, 13))
@pytest.mark.parametrize("queues", range(0, 33))
def test_every_split_is_a_partition_in_order_and_even(queues: int, consumers: int) -> None:
    parts = split(queues, consumers)
    assert [q for part in parts for q in part] == list(range(queues))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    # The longer runs come first, so consumers agree whatever the remainder.
    assert sizes == sorted(sizes, reverse=True)


def test_a_client_not_in_the_group_takes_nothing() -> None:
    assert allocate_averagely("stranger", [1, 2, 3], ["a", "b"]) == []
    assert allocate_averagely("a", [], ["a", "b"]) == []


def test_a_group_splits_the_read_queues_of_readable_groups() -> None:
    from triomq.client.core.allocate import subscribe_queues
    from triomq.client.core.message import MessageQueue
    from triomq.protocol.route import BrokerData, QueueData, TopicRouteData

    route = TopicRouteData((QueueData("b", 2, 4, 6), QueueData("a", 1, 1, 4),
                            QueueData("c", 3, 3, 2)),
                           (BrokerData("c", "a", {0: "a"}), BrokerData("c", "b", {1: "b"})))
    assert subscribe_queues("t", route) == [MessageQueue("t", "a", 0), MessageQueue("t", "b", 0),
                                            MessageQueue("t", "b", 1)]


def test_a_rebalance_lets_go_what_is_no_longer_ours_and_takes_up_the_rest() -> None:
    from triomq.client.core.allocate import Rebalance, rebalance
    from triomq.client.core.message import MessageQueue
    from triomq.protocol.route import BrokerData, QueueData, TopicRouteData

    route = TopicRouteData((QueueData("a", 4, 4, 6),), (BrokerData("c", "a", {0: "a"}),))
    q = [MessageQueue("t", "a", i) for i in range(4)]
    other = MessageQueue("u", "a", 0)
    # Alone: everything; then a second member takes the upper half.
    assert rebalance("t", route, "c1", ["c1"], [other]) == Rebalance((), tuple(q))
    assert rebalance("t", route, "c1", ["c1", "c2"], [*q, other]) == Rebalance((q[2], q[3]), ())
    assert rebalance("t", route, "c2", ["c1", "c2"], [q[0]]) == Rebalance((q[0],), (q[2], q[3]))
    assert rebalance("t", route, "c3", ["c1", "c2"], q[:1]) == Rebalance((q[0],), ())


def test_a_released_queue_stores_its_offset_before_forgetting_it_and_unlocks_last() -> None:
    queue = MessageQueue("t", "b", 0)
    assert release_steps(queue, orderly=False) == (
        DropQueue(queue), PersistOffset(queue), ForgetOffset(queue))
    # The next holder locks only once the offset it starts from is stored.
    assert release_steps(queue, orderly=True) == (
        DropQueue(queue), PersistOffset(queue), ForgetOffset(queue), UnlockQueue(queue))
