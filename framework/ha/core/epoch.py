"""The epoch cache and the truncation algorithm, pure.

Every master term has a master epoch (chosen by the controller, increasing)
and the commit-log offset at which the term started writing. A replica keeps
the sequence of <epoch, startOffset>; an entry ends where the next one starts
and the last one is open (it ends at the log's max offset). Comparing two
such sequences tells a slave where its log stops agreeing with the master's:
``find_consistent_point``. Persistence lives in ``triomq.ha.checkpoint``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Protocol

import attrs

from triomq.ha.core.errors import EpochError
from triomq.protocol.ha import EpochStart

__all__ = ["EpochCache", "EpochEntry", "EpochStart", "EpochStore", "find_consistent_point"]


@attrs.frozen
class EpochEntry:
    """An epoch with its offset range ``[start_offset, end_offset)``.

    ``end_offset`` is None for the open, current epoch.
    """

    epoch: int
    start_offset: int
    end_offset: int | None = None


def _check_order(starts: tuple[EpochStart, ...]) -> None:
    for index, entry in enumerate(starts):
        if entry.epoch < 0 or entry.start_offset < 0:
            raise EpochError(f"epoch entry {index} {entry} has a negative field")
        if index == 0:
            continue
        previous = starts[index - 1]
        if entry.epoch <= previous.epoch:
            raise EpochError(
                f"epoch entry {index}: epoch {entry.epoch} does not follow {previous.epoch}"
            )
        if entry.start_offset < previous.start_offset:
            raise EpochError(
                f"epoch entry {index}: epoch {entry.epoch} starts at {entry.start_offset},"
                f" before epoch {previous.epoch} at {previous.start_offset}"
            )


@attrs.frozen
class EpochCache:
    """An immutable, ordered list of <epoch, startOffset>; operations return new caches.

    Epochs strictly increase and start offsets never decrease (an epoch in
    which the master wrote nothing has the same start as the next one).
    """

    starts: tuple[EpochStart, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        _check_order(self.starts)

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self) -> Iterator[EpochStart]:
        return iter(self.starts)

    @property
    def last(self) -> EpochStart | None:
        """The current (open) epoch, or None for an empty cache."""
        return self.starts[-1] if self.starts else None

    @property
    def last_epoch(self) -> int | None:
        """The newest epoch, or None for an empty cache."""
        return self.starts[-1].epoch if self.starts else None

    def append(self, epoch: int, start_offset: int) -> EpochCache:
        """Return a cache with a new newest epoch starting at ``start_offset``.

        Raises ``EpochError`` unless ``epoch`` is newer than the last epoch and
        ``start_offset`` is not before the last start.
        """
        return EpochCache((*self.starts, EpochStart(epoch, start_offset)))

    def find(self, epoch: int) -> EpochEntry | None:
        """The entry of ``epoch`` with its end offset (None when it is the last)."""
        for index, entry in enumerate(self.starts):
            if entry.epoch == epoch:
                return self._entry(index)
        return None

    def entry_at(self, offset: int) -> EpochEntry | None:
        """The epoch that owns ``offset``: the newest one starting at or before it.

        Empty epochs are skipped naturally: they share their start with a newer
        epoch, which wins. None when ``offset`` precedes the first epoch.
        """
        index = bisect.bisect_right([s.start_offset for s in self.starts], offset) - 1
        return None if index < 0 else self._entry(index)

    def entries(self, end_offset: int | None = None) -> tuple[EpochEntry, ...]:
        """All entries with their end offsets; the last one ends at ``end_offset``."""
        out = [self._entry(i) for i in range(len(self.starts))]
        if out and end_offset is not None:
            out[-1] = attrs.evolve(out[-1], end_offset=end_offset)
        return tuple(out)

    def truncate_suffix(self, offset: int) -> EpochCache:
        """Forget the epochs that start at or after ``offset`` (the log is cut there).

        An epoch starting exactly at the cut owns no byte any more; keeping it
        would attribute the bytes written next, from whichever master, to it.
        """
        return EpochCache(s for s in self.starts if s.start_offset < offset)

    def truncate_prefix(self, min_offset: int) -> EpochCache:
        """Forget the epochs that end at or before ``min_offset`` (their bytes are deleted).

        The first kept entry keeps its start offset even if it lies below
        ``min_offset``: start offsets identify an epoch when the truncation
        algorithm compares them with the master's.
        """
        kept = [
            s
            for i, s in enumerate(self.starts)
            if i == len(self.starts) - 1 or self.starts[i + 1].start_offset > min_offset
        ]
        return EpochCache(kept)

    def _entry(self, index: int) -> EpochEntry:
        start = self.starts[index]
        end = self.starts[index + 1].start_offset if index + 1 < len(self.starts) else None
        return EpochEntry(start.epoch, start.start_offset, end)


def find_consistent_point(local: Sequence[EpochEntry], remote: Sequence[EpochEntry]) -> int | None:
    """The offset up to which the local log agrees with the remote one, or None.

    Both sequences must have closed end offsets (the last entry ends at its
    log's max offset; see ``EpochCache.entries``). Walk the local epochs from
    the newest; the first one the remote also has, with the same start
    offset, is shared history, and the logs agree up to the smaller of the
    two end offsets (the seed's truncation algorithm).
    """
    by_epoch = {entry.epoch: entry for entry in remote}
    for entry in reversed(local):
        theirs = by_epoch.get(entry.epoch)
        if theirs is not None and theirs.start_offset == entry.start_offset:
            if entry.end_offset is None or theirs.end_offset is None:
                raise ValueError("find_consistent_point needs closed end offsets")
            return min(entry.end_offset, theirs.end_offset)
    return None


class EpochStore(Protocol):
    """Where a replica keeps its epoch cache (``triomq.ha.checkpoint.EpochCheckpointFile``)."""

    def load(self) -> EpochCache: ...

    def save(self, cache: EpochCache) -> None: ...
