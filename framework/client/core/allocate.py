"""Which queues each consumer of a group takes: RocketMQ's average allocation. Pure.

Every consumer of a group computes the same split from the same two sorted
lists (the topic's queues, the group's client ids), so they agree without
talking to one another. The queues are cut into as many contiguous runs as
there are consumers, the first ``len(queues) % len(consumers)`` runs one
longer; consumers beyond the number of queues get none. ``rebalance`` is
one consumer's step from the queues it holds to its share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import attrs

from triomq.client.core.message import MessageQueue
from triomq.protocol.route import PERM_READ, TopicRouteData

__all__ = ["Rebalance", "allocate_averagely", "rebalance", "subscribe_queues"]

Q = TypeVar("Q")


def allocate_averagely(client_id: str, queues: Sequence[Q], client_ids: Sequence[str]) -> list[Q]:
    """The queues ``client_id`` takes (``AllocateMessageQueueAveragely``).

    ``queues`` and ``client_ids`` must be sorted (the same way by every
    consumer); a client id missing from ``client_ids`` takes nothing.
    """
    if client_id not in client_ids or not queues:
        return []
    index = client_ids.index(client_id)
    consumers = len(client_ids)
    extra = len(queues) % consumers
    if len(queues) <= consumers:
        size = 1
    elif index < extra:
        size = len(queues) // consumers + 1
    else:
        size = len(queues) // consumers
    start = index * size if index < extra else index * size + extra
    return list(queues[start:start + max(0, min(size, len(queues) - start))])


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The queues of ``topic`` a group splits: every read queue of each readable
    group, sorted (``topicRouteData2TopicSubscribeInfo``)."""
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                  if q.perm & PERM_READ for i in range(q.read_queue_nums))


@attrs.frozen
class Rebalance:
    """One topic's rebalance for one consumer: the queues it lets go and takes up, sorted."""

    release: tuple[MessageQueue, ...]
    take: tuple[MessageQueue, ...]


def rebalance(topic: str, route: TopicRouteData, client_id: str, client_ids: Sequence[str],
              held: Iterable[MessageQueue]) -> Rebalance:
    """From the queues of ``topic`` among ``held`` to ``client_id``'s share of the
    topic's queues among the group's sorted ``client_ids`` (``RebalanceImpl``)."""
    mine = set(allocate_averagely(client_id, subscribe_queues(topic, route), client_ids))
    holding = {q for q in held if q.topic == topic}
    return Rebalance(tuple(sorted(holding - mine)), tuple(sorted(mine - holding)))
