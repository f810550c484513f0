"""Held pulls (long polling), pure: RocketMQ's ``PullRequestHoldService``.

A pull that finds nothing new (PULL_NOT_FOUND with the suspend flag) is
held under its queue, ``(topic, queueId)``, with the offset it waits
beyond and a deadline. It is let go, to be run again and answered, when

- a message arrives in its queue: ``arrived(topic, queue_id, max_offset)``
  releases the holds of that queue whose offset is below the queue's new
  max offset (the run finds the message, or, if its tag is not
  subscribed, answers RETRY_IMMEDIATELY past it as RocketMQ's periodic
  check does);
- its deadline passes: ``tick(now)`` (the run answers PULL_NOT_FOUND, or
  what arrived meanwhile);
- the broker's role changes: ``release_all()`` (RocketMQ's
  ``notifyMasterOnline``: a slave's holds go back to the consumer, which
  follows the new suggestion).

A hold whose pull went away (its connection closed) is ``drop``-ped.
``next_deadline()`` is when the driver must call ``tick`` next. Times are
whatever the driver counts in (seconds of its clock); nothing here reads one.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["Hold", "HoldTable"]

T = TypeVar("T")


class Hold(Generic[T]):
    """One held pull: its queue, the offset it waits beyond, its deadline, and what
    the driver keeps with it (``payload``)."""

    __slots__ = ("deadline", "key", "offset", "payload", "seq")

    def __init__(self, key: tuple[str, int], offset: int, deadline: float, payload: T,
                 seq: int) -> None:
        self.key = key
        self.offset = offset
        self.deadline = deadline
        self.payload = payload
        self.seq = seq

    def __repr__(self) -> str:
        return f"Hold({self.key!r}, offset={self.offset}, deadline={self.deadline})"


class HoldTable(Generic[T]):
    """The held pulls of one broker, by queue and by deadline."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, int], dict[int, Hold[T]]] = {}
        # (deadline, seq) of every hold; entries of holds already let go stay
        # until they reach the top (a heap cannot remove from its middle).
        self._deadlines: list[tuple[float, int]] = []
        self._held: dict[int, Hold[T]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._held)

    def queues(self) -> Iterator[tuple[str, int]]:
        """The queues with held pulls (to look at after an append)."""
        return iter(list(self._queues))

    def hold(self, topic: str, queue_id: int, offset: int, now: float, timeout: float,
             payload: T) -> Hold[T]:
        """Hold a pull of ``(topic, queue_id)`` waiting beyond ``offset`` for ``timeout``."""
        hold = Hold((topic, queue_id), offset, now + timeout, payload, next(self._seq))
        self._queues.setdefault(hold.key, {})[hold.seq] = hold
        self._held[hold.seq] = hold
        heapq.heappush(self._deadlines, (hold.deadline, hold.seq))
        return hold

    def arrived(self, topic: str, queue_id: int, max_offset: int) -> list[Hold[T]]:
        """The queue now ends at ``max_offset``: the holds it releases, in the order held."""
        held = self._queues.get((topic, queue_id))
        if not held:
            return []
        released = [hold for hold in held.values() if hold.offset < max_offset]
        for hold in released:
            self.drop(hold)
        return released

    def tick(self, now: float) -> list[Hold[T]]:
        """The holds whose deadline is ``now`` or past, released."""
        released = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq = heapq.heappop(self._deadlines)
            hold = self._held.get(seq)
            if hold is not None:
                self.drop(hold)
                released.append(hold)
        return released

    def release_all(self) -> list[Hold[T]]:
        """Every hold, released (the broker's role changed)."""
        released = sorted(self._held.values(), key=lambda hold: hold.seq)
        for hold in released:
            self.drop(hold)
        return released

    def drop(self, hold: Hold[T]) -> None:
        """Forget ``hold`` (released, or its pull went away); no error if already gone."""
        if self._held.pop(hold.seq, None) is None:
            return
        held = self._queues[hold.key]
        del held[hold.seq]
        if not held:
            del self._queues[hold.key]
        if len(self._deadlines) > 2 * len(self._held) + 64:
            # Mostly holds let go by arrivals: rebuild rather than let it grow.
            self._deadlines = [(h.deadline, h.seq) for h in self._held.values()]
            heapq.heapify(self._deadlines)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a hold, None with none held."""
        while self._deadlines and self._deadlines[0][1] not in self._held:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None
