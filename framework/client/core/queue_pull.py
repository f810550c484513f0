"""One queue's pulling between two pulls, and a consumer's offsets in memory. Pure.

What ``ConsumerBase``'s pull loop decides around each PULL_MESSAGE,
without the I/O (the trio driver and the cluster simulation both pump it):

- ``subscribe_broker``: which replica of a group a pull goes to
  (RocketMQ's ``findBrokerAddressInSubscribe``): the one the last answer
  suggested, else the master, else the lowest id the route names;
- ``QueuePull``: the queue's next offset, the suggested broker and its
  ``ProcessQueue``; ``answered(result)`` applies a ``PullResult`` as the
  pull loop does (``PullOutcome``) and says what to do next: deliver
  messages, store a corrected offset, or drop the queue because its offset
  moved; ``commit_offset`` is what a pull carries for the broker to store
  (only a pull to the master, as RocketMQ's ``commitOffsetEnable``);
- ``ConsumedOffsets``: the in-memory side of RocketMQ's
  ``RemoteBrokerOffsetStore``, each queue's offset to store, moved forward
  only as the ``ProcessQueue`` allows (at-least-once: never past a message
  not consumed).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.client.core.message import MessageExt, MessageQueue
from triomq.client.core.process_queue import ProcessQueue
from triomq.client.core.pull import PullOutcome, PullResult
from triomq.protocol.route import MASTER_ID

__all__ = ["ConsumedOffsets", "Dispatch", "OffsetMoved", "QueuePull", "SkipTo",
           "subscribe_broker"]


def subscribe_broker(addresses: Mapping[int, str], broker_id: int = MASTER_ID) -> str | None:
    """Replica ``broker_id`` of a group (broker id -> address), else its master, else the
    lowest id it has (``findBrokerAddressInSubscribe``); None for a group with none."""
    found = addresses.get(broker_id) or addresses.get(MASTER_ID)
    if found is None and addresses:
        found = addresses[min(addresses)]
    return found


@attrs.frozen
class Dispatch:
    """Pulled messages, now held in the queue's ``ProcessQueue``: hand them to the listener."""

    messages: tuple[MessageExt, ...]


@attrs.frozen
class SkipTo:
    """Nothing is held and the queue has nothing for us before ``offset``: store it
    (only forward: ``ConsumedOffsets.update(..., increase_only=True)``)."""

    offset: int


@attrs.frozen
class OffsetMoved:
    """The offset was out of the queue's range: the queue is dropped; store ``offset``
    as its offset (a later rebalance takes it up again from there)."""

    offset: int


@attrs.define(eq=False)
class QueuePull:
    """One queue a consumer holds: where it pulls next, from which replica, what it holds."""

    queue: MessageQueue
    process: ProcessQueue = attrs.field(factory=ProcessQueue)
    #: Where the next pull starts; -1 until the start is known.
    next_offset: int = -1
    #: The broker id the last answer suggested.
    broker_id: int = MASTER_ID

    def commit_offset(self, offsets: ConsumedOffsets, *, to_master: bool) -> int | None:
        """The offset a pull carries for the broker to store: the consumed one in memory,
        on a pull to the master only."""
        return offsets.read(self.queue) if to_master else None

    def answered(self, result: PullResult) -> Dispatch | SkipTo | OffsetMoved | None:
        """Apply a pull's result; what the pull loop does with it (None: nothing more).

        A queue dropped meanwhile (rebalanced away) keeps its state: its new
        holder pulls those messages again.
        """
        self.broker_id = result.suggest_which_broker_id
        outcome = PullOutcome.of(result)
        if self.process.dropped:
            return None
        if outcome.offset_moved:
            self.process.dropped = True
            return OffsetMoved(outcome.next_offset)
        self.next_offset = outcome.next_offset
        if outcome.messages:
            self.process.put(outcome.messages)
            return Dispatch(outcome.messages)
        if outcome.correct_offset and not len(self.process):
            return SkipTo(outcome.next_offset)
        return None


class ConsumedOffsets:
    """Each queue's offset to store, in memory (``RemoteBrokerOffsetStore``'s table)."""

    def __init__(self) -> None:
        self._offsets: dict[MessageQueue, int] = {}

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Set the queue's offset (with ``increase_only``, only forward)."""
        current = self._offsets.get(queue)
        if current is None or not increase_only or offset > current:
            self._offsets[queue] = offset

    def consumed(self, pull: QueuePull, messages: tuple[MessageExt, ...] | list[MessageExt]
                 ) -> int | None:
        """The listener consumed ``messages`` of ``pull``'s queue: the offset now stored in
        memory (the ``ProcessQueue``'s committable one, only forward), None if none or
        if the queue was dropped meanwhile (its new holder delivers them again)."""
        if pull.process.dropped:
            return None
        offset = pull.process.remove(messages)
        if offset is not None:
            self.update(pull.queue, offset, increase_only=True)
        return offset

    def read(self, queue: MessageQueue) -> int | None:
        """The queue's offset in memory, if any."""
        return self._offsets.get(queue)

    def remove(self, queue: MessageQueue) -> None:
        self._offsets.pop(queue, None)
