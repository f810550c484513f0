"""Role changes as the HA layer needs them: what a replica does to its log and epochs.

Becoming master: drop a torn tail (a partial last record), then durably
record <epoch, startOffset = max offset>; a log with bytes but no epoch
recorded (a store written before HA: a classic RocketMQ master, or a log
filled offline) is adopted whole into the epoch, from its first byte, so
slaves can copy it. Becoming slave: drop a torn tail;
the handshake does the rest. Both first forget epoch entries that start
past the log's end: a crash can lose unflushed bytes whose epoch entry was
already saved, and such an entry would claim bytes the log does not hold.
"""

from __future__ import annotations

from typing import Protocol

import trio

from triomq.ha.driver import Offload
from triomq.ha.epoch import EpochCache
from triomq.ha.errors import EpochError
from triomq.ha.slave_driver import EpochStore

__all__ = ["TermLog", "become_master", "become_slave"]


class TermLog(Protocol):
    """The commit-log calls a role change needs (``triomq.store.CommitLog`` has them)."""

    @property
    def min_offset(self) -> int: ...

    def truncate_to_last_whole_record(self) -> int: ...


async def become_master(
    log: TermLog,
    epoch_store: EpochStore,
    epoch: int,
    *,
    offload: Offload = trio.to_thread.run_sync,
) -> EpochCache:
    """Prepare the log for a master term in ``epoch``; return the epoch cache to serve.

    Restarting as master of the epoch recorded last continues that term.
    ``EpochError`` if ``epoch`` is older than the last recorded one.
    """
    end, saved, cache = await _reconcile(log, epoch_store, offload)
    if cache.last_epoch != epoch:
        if cache.last_epoch is not None and epoch < cache.last_epoch:
            raise EpochError(f"master epoch {epoch} is older than the recorded {cache.last_epoch}")
        cache = cache.append(epoch, end if cache.last is not None else log.min_offset)
    if cache != saved:
        await offload(epoch_store.save, cache)
    return cache


async def become_slave(
    log: TermLog,
    epoch_store: EpochStore,
    *,
    offload: Offload = trio.to_thread.run_sync,
) -> EpochCache:
    """Prepare the log for following a master; return the epoch cache to start from."""
    _end, saved, cache = await _reconcile(log, epoch_store, offload)
    if cache != saved:
        await offload(epoch_store.save, cache)
    return cache


async def _reconcile(
    log: TermLog, epoch_store: EpochStore, offload: Offload
) -> tuple[int, EpochCache, EpochCache]:
    # The log first: an epoch entry past its end claims bytes it does not hold.
    end = await offload(log.truncate_to_last_whole_record)
    saved = await offload(epoch_store.load)
    return end, saved, saved.truncate_suffix(end + 1)
