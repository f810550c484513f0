"""Queue locks of orderly consumers, sans-I/O: RocketMQ's ``RebalanceLockManager``.

An orderly consumer locks the queues it was allocated (LOCK_BATCH_MQ)
before consuming them, so two clients of a group never consume one queue
at once while a rebalance moves it. A lock is held by a client id per
(consumer group, queue); it lasts ``max_live_time`` ms from the holder's
last lock of it (RocketMQ's ``rebalanceLockMaxLiveTime``, 60 s) and is
renewed by locking again, as clients do every 20 s. An expired lock goes to
the next client that asks; a live one only to its holder. Unlocking
(UNLOCK_BATCH_MQ) releases only the caller's own locks. Times are
milliseconds, passed in as ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from triomq.protocol.message_queue import MessageQueue

__all__ = ["LockEntry", "LockTable", "MessageQueue"]


@attrs.define
class LockEntry:
    """Who holds a queue's lock, and since when it was last renewed."""

    client_id: str
    last_update: int


class LockTable:
    """The queue locks of every consumer group on this broker."""

    def __init__(self, max_live_time: int = 60_000) -> None:
        self.max_live_time = max_live_time
        self._locks: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: int) -> bool:
        return now - entry.last_update > self.max_live_time

    def holder(self, group: str, mq: MessageQueue, now: int) -> str | None:
        """The client holding ``mq`` for ``group``, if the lock is live."""
        entry = self._locks.get(group, {}).get(mq)
        return None if entry is None or self._expired(entry, now) else entry.client_id

    def try_lock(self, group: str, mq: MessageQueue, client_id: str, now: int) -> bool:
        """Lock (or renew) ``mq`` for ``client_id``; whether it holds it now."""
        locks = self._locks.setdefault(group, {})
        entry = locks.get(mq)
        if entry is None:
            locks[mq] = LockEntry(client_id, now)
            return True
        if entry.client_id == client_id or self._expired(entry, now):
            entry.client_id = client_id
            entry.last_update = now
            return True
        return False

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str,
                       now: int) -> list[MessageQueue]:
        """LOCK_BATCH_MQ: the queues of ``mqs`` that ``client_id`` holds now, in order."""
        return [mq for mq in dict.fromkeys(mqs) if self.try_lock(group, mq, client_id, now)]

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """UNLOCK_BATCH_MQ: release the queues of ``mqs`` that ``client_id`` holds."""
        locks = self._locks.get(group)
        if locks is None:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
        if not locks:
            del self._locks[group]

    def expire(self, now: int) -> int:
        """Forget expired locks (nobody holds them); how many. Keeps the table as small
        as the live locks, whatever queue names clients made up."""
        dropped = 0
        for group, locks in list(self._locks.items()):
            for mq in [mq for mq, entry in locks.items() if self._expired(entry, now)]:
                del locks[mq]
                dropped += 1
            if not locks:
                del self._locks[group]
        return dropped

    def __len__(self) -> int:
        return sum(len(locks) for locks in self._locks.values())
