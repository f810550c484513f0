"""The broker's message index at run time: records of the commit log indexed by key.

RocketMQ indexes a record's keys behind its commit log: the reput service
(``ReputMessageService``) follows the log's max offset and hands each record
to ``CommitLogDispatcherBuildIndex`` in its own thread, so a put never waits
for the index. ``IndexService`` does the same here, whatever put the records
there (a master's puts, a slave's replicated appends) and whatever store
plugin holds them: it reads the records from the offset it indexed up to,
``DISPATCH_BYTES`` of log a batch, hashes their keys
(``triomq.broker.index.core.index_dispatch.key_hashes``) and puts them in the index
files (``triomq.broker.index.index_store``): in a worker thread, without the GIL,
where the C versions are built and the batch is ``THREAD_BYTES`` or more (the
broker's loop only copies the batch out of the log; a short one, a few
records put one by one, costs the loop less than a thread's hand-over). It
looks for new records every ``REPUT_INTERVAL`` when it has caught up. A
query waits for the batch being put, if any, and answers from what is
indexed so far, saying how far that is (``indexLastUpdatePhyoffset``), as
RocketMQ's does.

Where it resumes after a restart is in the newest file's header: the
record at ``endPhyOffset`` (the last one indexed) and those before it are
indexed. A log cut below it (a slave truncated to its new master) is
followed from its new end. Dirty pages of the index are written every
``FLUSH_INTERVAL`` and on stop; files whose keys all point below the log's
first offset are deleted.
"""

from __future__ import annotations

import logging

import trio

from triomq.broker.config import BrokerConfig
from triomq.broker.index.core.index_dispatch import SPEEDUPS, key_hashes, walk
from triomq.broker.index.index_store import IndexStore, QueryResult
from triomq.protocol.commitlog_layout import segment_start
from triomq.protocol.message import RecordError
from triomq.store import CommitLog, StoreError

__all__ = ["DISPATCH_BYTES", "FLUSH_INTERVAL", "REPUT_INTERVAL", "THREAD_BYTES", "IndexService"]

log = logging.getLogger("triomq.broker")

#: Seconds between looks for new records when the index has caught up.
REPUT_INTERVAL = 0.01
#: Bytes of log read and indexed per batch.
DISPATCH_BYTES = 1024 * 1024
#: Batches of this size or more are indexed in a worker thread: a thread's hand-over
#: costs the loop more than a few records' keys.
THREAD_BYTES = 32 * 1024
#: Seconds between writes of the index's dirty pages.
FLUSH_INTERVAL = 1.0
#: Seconds indexing waits after a file or log error before it tries again.
ERROR_BACKOFF = 1.0


class IndexService:
    """Indexes the commit log's records by key and answers key queries."""

    def __init__(self, log: CommitLog, root: str, config: BrokerConfig) -> None:
        self.log = log
        self.root = root
        self.config = config
        self.store: IndexStore | None = None
        #: Every record below this physical offset is indexed.
        self.position = 0
        #: Held while a worker thread puts a batch's keys in the files.
        self._batch = trio.Lock()

    @property
    def caught_up(self) -> bool:
        """Whether every whole record of the log is indexed."""
        return self.store is not None and self.position >= self.log.last_whole_record_end()

    async def query(self, key: str, max_num: int, begin: int, end: int) -> QueryResult:
        """Offsets of records indexed under ``key`` (``topic#key``), once the batch
        being indexed (if any) is in."""
        async with self._batch:
            if self.store is None:
                return QueryResult([], 0, 0)
            return self.store.query(key, max_num, begin, end)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Open the index files, then follow the log until cancelled."""
        config = self.config
        store = await trio.to_thread.run_sync(IndexStore, self.root, config.max_hash_slot_num,
                                              config.max_index_num)
        self.store = store
        self.position = self._resume(store)
        task_status.started()
        try:
            next_flush = trio.current_time() + FLUSH_INTERVAL
            while True:
                try:
                    more = await self._dispatch(store)
                    if trio.current_time() >= next_flush:
                        await trio.to_thread.run_sync(store.flush)
                        store.delete_before(self.log.min_offset)
                        next_flush = trio.current_time() + FLUSH_INTERVAL
                except (OSError, StoreError) as exc:
                    # No disk for a new index file, the log cut under the read: queries
                    # miss what is not indexed yet, puts go on; try again shortly.
                    log.warning("indexing at offset %d paused: %s", self.position, exc)
                    await trio.sleep(ERROR_BACKOFF)
                    continue
                await trio.sleep(0 if more else REPUT_INTERVAL)
        finally:
            self.store = None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(store.close)

    async def _index(self, store: IndexStore, data: bytes, start: int) -> int:
        """Index a batch: in a worker thread where its C version runs without the GIL
        (queries wait for it), on the loop for a short batch (the thread's hand-over
        would cost the loop more) or without the C version (a thread would only contend
        for the GIL); where the next batch starts."""
        if not SPEEDUPS or len(data) < THREAD_BYTES:
            return _index_batch(store, data, start, self.log.segment_size)
        async with self._batch:
            return await trio.to_thread.run_sync(_index_batch, store, data, start,
                                                 self.log.segment_size)

    def _resume(self, store: IndexStore) -> int:
        """Where indexing goes on: after the last record the newest file indexed."""
        first = self.log.min_offset
        index = store.last
        if index is None or (index.header.index_count <= 1 and index.header.end_phy_offset == 0):
            return first
        last = index.header.end_phy_offset
        if last < first:
            return first
        if last >= self.log.last_whole_record_end():
            return self.log.last_whole_record_end()
        try:
            return last + _record_size(self.log, last)
        except (StoreError, RecordError, ValueError):
            # Not a record there any more (the log was cut and rewritten): index this
            # segment again; a query drops the duplicates.
            return max(first, segment_start(last, self.log.segment_size))

    async def _dispatch(self, store: IndexStore) -> bool:
        """Index the next batch of up to ``DISPATCH_BYTES`` of records; whether more
        are waiting."""
        end = self.log.last_whole_record_end()
        self.position = min(max(self.position, self.log.min_offset), end)
        start = self.position
        if start >= end:
            return False
        segment_size = self.log.segment_size
        data = self.log.read(start, min(DISPATCH_BYTES, end - start))
        try:
            following = await self._index(store, data, start)
            if following == start:  # one record longer than the batch
                data = self.log.read(start, int.from_bytes(data[:4], "big"))
                following = await self._index(store, data, start)
        except RecordError as exc:
            log.warning("indexing skips the rest of the segment at %d: %s", start, exc)
            following = segment_start(start, segment_size) + segment_size
        if following <= start:
            return False
        self.position = min(following, end)
        return self.position < self.log.last_whole_record_end()


def _index_batch(store: IndexStore, data: bytes, start: int, segment_size: int) -> int:
    """Put the keys of the records wholly in ``data`` (read at ``start``) in the index;
    where the next batch starts."""
    entries, following = key_hashes(data, start, segment_size)
    # Keys of records a slave's log lost meanwhile are harmless: a query checks
    # each record it finds.
    store.put_hashed(entries)
    return following


def _record_size(log: CommitLog, offset: int) -> int:
    """The totalSize of the record at ``offset`` (checked to be one)."""
    total = int.from_bytes(log.read(offset, 4), "big")
    records, _ = walk(log.read(offset, total), offset, log.segment_size)
    if records and records[0].offset == offset:
        return records[0].size
    raise ValueError(f"no whole record at {offset}")
