"""Synchronous replication on the master: which pending puts have enough acks.

Pure. A put waits until enough replicas hold its bytes: every member of the
SyncStateSet when ``all_ack_in_sync_state_set``, else ``min_in_sync_replicas``
members (the master counts as one, with its own max offset as its ack).
Only SyncStateSet members count: a slave outside it cannot be elected
cleanly, so its copy does not make a put safe; async learners are never
members. A put whose deadline passes fails with FLUSH_SLAVE_TIMEOUT; a put
added while the SyncStateSet is smaller than ``min_in_sync_replicas`` fails
at once with IN_SYNC_REPLICAS_NOT_ENOUGH, as in RocketMQ.

The acks and members come from ``SyncStateTracker`` (its effective set, so
an expand in flight already counts; see ``triomq.ha.core.sync_state``).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Hashable, Mapping, Set

import attrs

__all__ = ["PutResult", "ReplicationStatus", "SyncReplication", "replicated_offset"]


class ReplicationStatus(enum.Enum):
    """How a synchronous put ended, named after RocketMQ's PutMessageStatus."""

    PUT_OK = "PUT_OK"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"


@attrs.frozen
class PutResult:
    """The outcome for the put registered under ``waiter``."""

    waiter: Hashable
    status: ReplicationStatus


def replicated_offset(acks: Mapping[int, int], members: Set[int], required: int) -> int:
    """The highest offset at least ``required`` of ``members`` have acked (-1 if none).

    A member missing from ``acks`` has acked nothing.
    """
    if required <= 0:
        raise ValueError(f"required must be > 0, got {required}")
    offsets = sorted((acks.get(m, -1) for m in members), reverse=True)
    return offsets[required - 1] if len(offsets) >= required else -1


@attrs.frozen(order=True)
class _Pending:
    next_offset: int
    sequence: int
    waiter: Hashable = attrs.field(eq=False, order=False)
    deadline_ms: int = attrs.field(eq=False, order=False)


class SyncReplication:
    """Pending synchronous puts, completed by acks or failed by time."""

    def __init__(
        self, *, all_ack_in_sync_state_set: bool = False, min_in_sync_replicas: int = 1
    ) -> None:
        if min_in_sync_replicas < 1:
            raise ValueError(f"min_in_sync_replicas must be >= 1, got {min_in_sync_replicas}")
        self.all_ack_in_sync_state_set = all_ack_in_sync_state_set
        self.min_in_sync_replicas = min_in_sync_replicas
        self._pending: list[_Pending] = []
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self, waiter: Hashable, next_offset: int, deadline_ms: int, sync_state_set: Set[int]
    ) -> PutResult | None:
        """Register a put whose bytes end at ``next_offset``; a result if it fails at once."""
        if len(sync_state_set) < self.min_in_sync_replicas:
            return PutResult(waiter, ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
        self._sequence += 1
        bisect.insort(self._pending, _Pending(next_offset, self._sequence, waiter, deadline_ms))
        return None

    def reached(self, acks: Mapping[int, int], sync_state_set: Set[int]) -> int:
        """The offset enough members have acked: puts ending at or before it are done."""
        required = (
            len(sync_state_set) if self.all_ack_in_sync_state_set else self.min_in_sync_replicas
        )
        return replicated_offset(acks, sync_state_set, required)

    def update(self, acks: Mapping[int, int], sync_state_set: Set[int]) -> list[PutResult]:
        """Complete the puts the current acks cover, in offset order."""
        reached = self.reached(acks, sync_state_set)
        done = 0
        while done < len(self._pending) and self._pending[done].next_offset <= reached:
            done += 1
        completed, self._pending = self._pending[:done], self._pending[done:]
        return [PutResult(p.waiter, ReplicationStatus.PUT_OK) for p in completed]

    def expire(self, now_ms: int) -> list[PutResult]:
        """Fail the puts whose deadline is at or before ``now_ms``."""
        expired = [p for p in self._pending if p.deadline_ms <= now_ms]
        self._pending = [p for p in self._pending if p.deadline_ms > now_ms]
        return [PutResult(p.waiter, ReplicationStatus.FLUSH_SLAVE_TIMEOUT) for p in expired]

    def abandon(self, status: ReplicationStatus) -> list[PutResult]:
        """End every pending put with ``status``."""
        pending, self._pending = self._pending, []
        return [PutResult(p.waiter, status) for p in pending]

    def discard(self, waiter: Hashable) -> None:
        """Forget a put whose caller stopped waiting."""
        self._pending = [p for p in self._pending if p.waiter != waiter]

    def next_deadline_ms(self) -> int | None:
        """The earliest pending deadline, for the driver's timer."""
        return min((p.deadline_ms for p in self._pending), default=None)
