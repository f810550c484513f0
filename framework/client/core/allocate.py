"""Which queues each consumer of a group takes: RocketMQ's average allocation. Pure.

Every consumer of a group computes the same split from the same two sorted
lists (the topic's queues, the group's client ids), so they agree without
talking to one another. The queues are cut into as many contiguous runs as
there are consumers, the first ``len(queues) % len(consumers)`` runs one
longer; consumers beyond the number of queues get none. ``rebalance`` is
one consumer's step from the queues it holds to its share, and
``release_steps`` what letting one of them go takes, in order (RocketMQ's
``removeUnnecessaryMessageQueue``): stop pulling it, store its offset on
the broker, forget it, and for an orderly consumer unlock it last, so the
next holder starts from the stored offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import attrs

from triomq.client.core.message import MessageQueue
from triomq.protocol.route import PERM_READ, TopicRouteData

__all__ = [
    "DropQueue",
    "ForgetOffset",
    "PersistOffset",
    "Rebalance",
    "ReleaseStep",
    "UnlockQueue",
    "allocate_averagely",
    "rebalance",
    "release_steps",
    "subscribe_queues",
]

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


@attrs.frozen
class DropQueue:
    """Stop pulling ``queue`` and mark its process queue dropped (an orderly consumer
    lets the message being consumed finish first)."""

    queue: MessageQueue


@attrs.frozen
class PersistOffset:
    """Store the consumed offset of ``queue`` on its broker."""

    queue: MessageQueue


@attrs.frozen
class ForgetOffset:
    """Drop ``queue``'s offset from the consumer's table."""

    queue: MessageQueue


@attrs.frozen
class UnlockQueue:
    """UNLOCK_BATCH_MQ ``queue`` on its master (orderly consumers)."""

    queue: MessageQueue


ReleaseStep = DropQueue | PersistOffset | ForgetOffset | UnlockQueue


def release_steps(queue: MessageQueue, *, orderly: bool) -> tuple[ReleaseStep, ...]:
    """What letting ``queue`` go takes, in order (see the module)."""
    steps: tuple[ReleaseStep, ...] = (DropQueue(queue), PersistOffset(queue),
                                      ForgetOffset(queue))
    return (*steps, UnlockQueue(queue)) if orderly else steps
