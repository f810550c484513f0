"""A consumer's messages of one queue between pull and consume, and the offset it may commit. Pure.

RocketMQ's ``ProcessQueue`` rule, which makes delivery at-least-once: the
offset committed for a queue is that of its lowest message not consumed
yet, or one past the highest pulled when all are consumed. A message still
being consumed (or waiting to be consumed again) holds the offset back,
however many after it are done; a restarted consumer starts from it and
may see those again, but never misses one.

Orderly consumption takes messages in offset order (``take``) and commits
all taken at once when the listener succeeds (``commit``), or puts them
back to be taken again (``put_back``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from triomq.client.core.message import MessageExt

__all__ = ["ProcessQueue"]


class ProcessQueue:
    """Pulled, not yet consumed messages of one queue, by queue offset."""

    def __init__(self) -> None:
        self._messages: dict[int, MessageExt] = {}
        self._offsets: list[int] = []  # the keys of _messages, sorted
        self._taken: dict[int, MessageExt] = {}  # orderly: being consumed now
        #: One past the highest offset ever put here (RocketMQ's queueOffsetMax + 1).
        self.next_offset = -1
        #: Bytes of the bodies held.
        self.size = 0
        #: Set when the queue is no longer this consumer's (rebalanced away,
        #: offset moved): its messages are not consumed nor committed any more.
        self.dropped = False

    def __len__(self) -> int:
        return len(self._messages) + len(self._taken)

    @property
    def waiting(self) -> int:
        """Messages held and not taken."""
        return len(self._offsets)

    @property
    def span(self) -> int:
        """Offsets between the lowest and the highest held (flow control)."""
        return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def waiting_offsets(self) -> list[int]:
        """The offsets of the messages held and not taken, in order."""
        return list(self._offsets)

    def taken_offsets(self) -> list[int]:
        """The offsets of the messages taken (orderly: being consumed), in order."""
        return sorted(self._taken)

    def put(self, messages: Iterable[MessageExt]) -> None:
        """Hold pulled messages until consumed."""
        for message in messages:
            offset = message.queue_offset
            if offset in self._messages or offset in self._taken:
                continue
            self._messages[offset] = message
            bisect.insort(self._offsets, offset)
            self.size += len(message.body)
            self.next_offset = max(self.next_offset, offset + 1)

    def remove(self, messages: Iterable[MessageExt]) -> int | None:
        """Forget consumed messages; the offset to commit now (``None``: nothing ever held)."""
        for message in messages:
            if self._messages.pop(message.queue_offset, None) is not None:
                del self._offsets[bisect.bisect_left(self._offsets, message.queue_offset)]
                self.size -= len(message.body)
        return self.committable()

    def committable(self) -> int | None:
        """The lowest offset not consumed, or one past the highest put if all are."""
        if self._taken:
            return min(self._taken)
        if self._offsets:
            return self._offsets[0]
        return self.next_offset if self.next_offset >= 0 else None

    # -- orderly -------------------------------------------------------------

    def take(self, count: int = 1) -> list[MessageExt]:
        """The next ``count`` messages in offset order, held as taken until
        ``commit`` or ``put_back``."""
        taken: list[MessageExt] = []
        while self._offsets and len(taken) < count:
            offset = self._offsets.pop(0)
            message = self._messages.pop(offset)
            self._taken[offset] = message
            taken.append(message)
        return taken

    def commit(self) -> int | None:
        """The taken messages are consumed: the offset after them (``None`` if none)."""
        if not self._taken:
            return None
        offset = max(self._taken) + 1
        self.size -= sum(len(m.body) for m in self._taken.values())
        self._taken.clear()
        return offset

    def put_back(self, messages: Sequence[MessageExt]) -> None:
        """Taken messages go back, to be taken again first."""
        for message in messages:
            if self._taken.pop(message.queue_offset, None) is not None:
                self._messages[message.queue_offset] = message
                bisect.insort(self._offsets, message.queue_offset)
