"""Storage interfaces: ``CommitLog`` (records by physical offset), ``EntryLog``
(Raft entries by index) and ``MetaStore`` (small durable key-value).

Store plugins provide factories through the ``triomq_log_store`` hook, keyed
by ``(kind, scheme)`` with ``kind`` in ``STORE_KINDS``. A factory takes
``(directory, options)``, runs the store's recovery and returns an open
store. A broker passes its commit log's factory ``message_delay_level``
too (``triomq.protocol.delay_levels``: the consume-queue entries of
``SCHEDULE_TOPIC_XXXX`` carry delivery times by it). All store methods
are blocking; trio code calls them with
``trio.to_thread.run_sync`` when they may block on the disk (opening,
``flush``, ``sync``, ``truncate``, LMDB writes), or directly for the cheap
in-memory-mapped operations (mmap ``append``/``read``).

Durability of the commit log is decoupled from appending: ``append`` makes
bytes readable, ``flush`` makes them durable and advances
``flushed_offset``. ``FlushService`` runs the flush policy for a trio
program: ``"group"`` (one fsync covers every append waiting for it),
``"interval"`` (fsync every ``interval`` seconds) or ``"none"`` (leave it to
the OS); a writer awaits ``wait_flushed(offset)``. The mmap commit log may
be flushed in a worker thread while the trio thread keeps appending.

The replication (HA) layer uses ``append_raw`` on a slave (bytes at exactly
``max_offset``, records possibly split across calls), ``read`` on a master,
``truncate`` and ``truncate_to_last_whole_record`` when an epoch changes;
the confirm offset is the HA layer's own state. A read-only reader of a
store root (no plugin) uses ``triomq.protocol.commitlog_layout``; tools
reading any plugin's store use its ``CommitLogReader`` (``READER_KIND``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs
import trio

# The Raft core's own value: an entry log persists it as it is.
from triomq.consensus.core.log import HardState
from triomq.errors import ConfigError, TriomqError
from triomq.protocol.message import MessageRecord

STORE_KINDS = ("commitlog", "entrylog", "meta")
#: The kind under which a store plugin also provides read-only access to its
#: commit logs, for tools (``triomq store``, the Spark source, ``triomq export``):
#: the factory takes ``(directory, options)`` and returns a ``CommitLogReader``,
#: or raises ``StoreNotFound`` when the directory holds none of its stores.
READER_KIND = "commitlog-reader"
FLUSH_POLICIES = ("group", "interval", "none")


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class StoreError(TriomqError):
    """Base of the errors a store raises."""


class StoreCorruption(StoreError):
    """Bytes on disk are not what the store wrote: ``path``, ``offset`` and ``reason``."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: corrupt at offset {offset}: {reason}")


class OffsetMismatch(StoreError):
    """Raw bytes were offered at ``offset`` but the log ends at ``expected`` (no gaps)."""

    def __init__(self, offset: int, expected: int) -> None:
        self.offset = offset
        self.expected = expected
        super().__init__(f"append at offset {offset}, but the log ends at {expected}")


class OffsetOutOfRange(StoreError):
    """``offset`` is outside ``[min_offset, max_offset]``."""

    def __init__(self, offset: int, min_offset: int, max_offset: int) -> None:
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        super().__init__(f"offset {offset} is outside [{min_offset}, {max_offset}]")


class IndexOutOfRange(StoreError):
    """A Raft entry index is compacted away or past the last entry."""

    def __init__(self, index: int, first_index: int, last_index: int) -> None:
        self.index = index
        self.first_index = first_index
        self.last_index = last_index
        super().__init__(f"entry index {index} is outside [{first_index}, {last_index}]")


class StoreClosed(StoreError):
    """The store was used after ``close()``."""


class StoreOutOfResources(StoreError):
    """The store could not get a file descriptor, a mapping or disk space it
    needed (``errno``: one of ``ERRNOS``). Nothing was written: the store still
    serves what it holds, and a broker answers the request with an error code.
    """

    ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT})

    def __init__(self, what: str, error_number: int) -> None:
        self.what = what
        self.errno = error_number
        super().__init__(f"{what}: {os.strerror(error_number)}")


class StoreNotFound(StoreError):
    """``directory`` holds no store of this plugin; ``expected`` says what it looked for."""

    def __init__(self, directory: str, expected: str) -> None:
        self.directory = directory
        self.expected = expected
        super().__init__(f"{directory}: no store here (expected {expected})")


def store_options(options: Mapping[str, Any], known: tuple[str, ...], used: tuple[str, ...],
                  plugin: str) -> dict[str, Any]:
    """The ``used`` keys of ``options`` as keyword arguments.

    A node may hand one options table to every kind of store of a plugin, so
    a key is accepted when the plugin knows it (``known``, for any kind) and
    passed on only when this kind ``used`` it; any other key is a
    ``ConfigError`` naming it.
    """
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"unknown option {unknown[0]!r} for the {plugin} store plugin; "
                          f"known: {', '.join(known) or 'none'}", path=unknown[0])
    return {k: v for k, v in options.items() if k in used}


def read_into_by_read(read: Callable[[int, int], bytes], offset: int,
                      buffer: bytearray | memoryview) -> int:
    """``CommitLog.read_into`` for a log with no cheaper way than its ``read``."""
    data = read(offset, len(buffer))
    memoryview(buffer)[:len(data)] = data
    return len(data)


class ScratchRead:
    """``CommitLog.read_view`` for a log with no mapped bytes to lend: its
    ``read_into`` copies them into the caller's scratch buffer. Mix it into
    such a log class."""

    def read_view(self, offset: int, scratch: bytearray | memoryview) -> memoryview:
        with memoryview(scratch) as view:
            return view[:self.read_into(offset, view)].toreadonly()  # type: ignore[attr-defined]


class ScratchAppend:
    """``CommitLog.append_buffer`` and ``append_written`` for a log with no space
    of its own to lend (its bytes are not mapped): a scratch buffer, then
    ``append_raw``. Mix it into such a log class."""

    _scratch = bytearray()

    def append_buffer(self, offset: int, size: int) -> memoryview:
        size = max(1, size)
        if len(self._scratch) < size:
            # Grown with what it holds: bytes written before this call stay lent.
            grown = bytearray(size)
            grown[:len(self._scratch)] = self._scratch
            self._scratch = grown
        with memoryview(self._scratch) as scratch:
            return scratch[:size]

    def append_written(self, offset: int, size: int) -> int:
        with memoryview(self._scratch) as scratch, scratch[:size] as data:
            return self.append_raw(offset, data)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------


class AppendResult(NamedTuple):
    """Where an appended record landed (a tuple: one is built per record on the hot path)."""

    physical_offset: int
    size: int
    queue_offset: int
    store_timestamp: int


class QueueEntry(NamedTuple):
    """A consume-queue entry: a record of one (topic, queueId) in the commit log."""

    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int


@attrs.frozen
class EntryRecord:
    """A Raft log entry as an entry log stores it: ``data`` is the core's
    ``Entry.to_record``."""

    index: int
    term: int
    data: bytes = b""


# --------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------


@runtime_checkable
class CommitLog(Protocol):
    """A byte log of message records addressed by physical offset, with consume queues.

    Offsets: ``min_offset <= flushed_offset <= max_offset``. Bytes in
    ``[min_offset, max_offset)`` are readable; the ones below
    ``flushed_offset`` survive a crash. Records never cross a segment (of
    ``segment_size`` bytes); a blank pads the end of a segment, so two stores
    with the same ``segment_size`` hold byte-identical logs. The commit log
    indexes every whole record in a consume queue per (topic, queueId).
    """

    segment_size: int

    @property
    def min_offset(self) -> int:
        """The first readable physical offset (raised by retention)."""

    @property
    def max_offset(self) -> int:
        """The end of the log: where the next byte goes."""

    @property
    def flushed_offset(self) -> int:
        """Everything below this offset is on stable storage."""

    def append(self, record: MessageRecord) -> AppendResult:
        """Append one record; the log assigns its physical and queue offsets.

        The caller sets ``store_timestamp`` (and every other field). The
        record is readable on return, durable after a ``flush`` covering it.
        ``StoreError`` if it is larger than a segment or the log ends with a
        torn replicated record.
        """

    def append_batch(self, records: Sequence[MessageRecord]) -> list[AppendResult]:
        """Append records in order with one write per segment touched."""

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append replicated bytes (whole or partial records) at ``offset``; return the new end.

        ``offset`` must equal ``max_offset`` (``OffsetMismatch`` otherwise:
        never a gap, never an overwrite), except on an empty log, which may
        start at any later segment boundary (a slave syncing from the
        master's last segment); ``min_offset`` is then that boundary. Whole
        records are indexed in the consume queues as they complete. Bytes
        that cannot be records (bad magic or lengths, body CRC, a
        physicalOffset field that is not the record's offset, a queue offset
        skipping ahead) raise ``StoreCorruption`` and nothing is written.
        """

    def append_buffer(self, offset: int, size: int) -> memoryview:
        """Writable space for bytes to append at ``offset``: at most ``size`` bytes, at least one.

        ``append_raw`` in two steps, for a replica that receives bytes
        straight into its log: write them into this view, release it (a
        ``with`` block), then ``append_written``. ``offset`` as for
        ``append_raw``. A log whose segments are mapped lends the mapped
        space after its end, up to the end of that segment; others lend a
        scratch buffer (``ScratchAppend``). Bytes written there are not in
        the log until ``append_written`` takes them, and the next call may
        lend the same space again. Asked again at the same ``offset`` before
        that, for as many bytes or more, it lends the same space with the
        bytes written so far (a replica may receive several reads before it
        appends them). Release the view before any other call.
        """

    def append_written(self, offset: int, size: int) -> int:
        """Append the first ``size`` bytes written into ``append_buffer(offset, ...)``.

        Returns the new end; checks, indexing and errors as ``append_raw``
        (bad bytes: ``StoreCorruption``, nothing appended).
        """

    def read(self, offset: int, size: int) -> bytes:
        """The bytes ``[offset, min(offset + size, max_offset))``, across segments.

        ``OffsetOutOfRange`` if ``offset`` is outside ``[min_offset, max_offset]``.
        """

    def read_into(self, offset: int, buffer: bytearray | memoryview) -> int:
        """Copy the bytes ``[offset, min(offset + len(buffer), max_offset))`` into
        ``buffer``; return how many.

        ``read`` without a fresh buffer per call: a replication master sends
        from one reused buffer, instead of allocating (and the kernel zeroing)
        new memory for every batch. ``OffsetOutOfRange`` as for ``read``.
        """

    def read_view(self, offset: int, scratch: bytearray | memoryview) -> memoryview:
        """A read-only view of the bytes from ``offset``: at most ``len(scratch)``,
        at least one if ``offset < max_offset``.

        ``read_into`` without the copy where the log can lend its bytes: a
        log whose segments are mapped returns a view of the mapping (up to
        the end of that segment), others copy into ``scratch``
        (``ScratchRead``) and return a view of it. A replication master
        sends from it. Release the view (a ``with`` block, and every slice
        of it) before the log is truncated or closed: a mapping with views
        left cannot be unmapped. ``OffsetOutOfRange`` as for ``read``.
        """

    def read_record(self, offset: int) -> MessageRecord:
        """Decode the record starting at ``offset`` (``StoreCorruption`` if it is not one)."""

    def iter_records(self, start: int | None = None, end: int | None = None
                     ) -> Iterator[MessageRecord]:
        """Records from ``start`` (default ``min_offset``, a record boundary) up to ``end``."""

    def last_whole_record_end(self) -> int:
        """The end of the last whole record: ``max_offset`` minus any torn tail."""

    def truncate(self, offset: int) -> None:
        """Drop every byte at or after ``offset`` (crash-safe).

        After ``truncate(x)`` returns, or after a crash at any moment during
        it, recovery never brings back a byte at or past ``x``. Consume-queue
        entries of dropped records are removed.
        """

    def truncate_to_last_whole_record(self) -> int:
        """Drop a torn tail (a partial record at the end); return the new ``max_offset``."""

    def flush(self) -> int:
        """Make every appended byte durable; return the new ``flushed_offset``."""

    def retain(self, now_ms: int, max_age_ms: int | None = None,
               max_bytes: int | None = None) -> int:
        """Delete whole segments older than ``max_age_ms`` or beyond ``max_bytes``.

        A segment is old when the next segment's first record was stored
        before ``now_ms - max_age_ms``. The segment being written is never
        deleted. Returns the new ``min_offset``.
        """

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queueId) with a consume queue."""

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still readable in the commit log."""

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next record of this queue gets."""

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> list[QueueEntry]:
        """Up to ``max_count`` entries from queue offset ``start``."""

    def search_queue_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (max offset if none)."""

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        """The storeTimestamp of the queue's first readable record, ``None`` if empty."""

    def close(self) -> None:
        """Flush and close; a following open is a clean restart (no scan).

        A record still arriving (``append_raw`` bytes past
        ``last_whole_record_end``) is cut first: a recovery would cut it, and
        the master sends it again from the offset the replica reports.
        """


@runtime_checkable
class CommitLogReader(Protocol):
    """The bytes of a commit log as stored, read-only, for tools.

    Opening one runs no recovery, takes no lock and writes nothing, so it may
    read a store a node has open. ``[min_offset, end_offset)`` are the bytes
    stored: a torn or bad tail, and the zero fill of preallocated segment
    files, included. What is a good record there is the kernel's rule
    (``triomq.log_check``), not the plugin's.
    """

    scheme: str
    segment_size: int

    @property
    def min_offset(self) -> int:
        """The first offset stored."""

    @property
    def end_offset(self) -> int:
        """Where the stored bytes end."""

    def read(self, offset: int, size: int) -> bytes:
        """The bytes ``[offset, min(offset + size, end_offset))``."""

    def where(self, offset: int) -> str:
        """Where ``offset`` is stored, for messages (a file, a directory)."""

    def recovery_options(self) -> dict[str, Any]:
        """Options for this plugin's ``commitlog`` factory that open the store
        with a full recovery (every record checked and indexed again)."""

    def close(self) -> None:
        """Let go of the files."""


@runtime_checkable
class EntryLog(Protocol):
    """Raft log entries by index, with the persisted hard state.

    Empty log: ``last_index == first_index - 1``. After ``compact_prefix(i)``
    ``first_index == i`` and ``term_at(i - 1)`` still answers (the snapshot's
    term). Entries become durable at ``sync()``; ``set_hard_state`` is
    durable and atomic on return.
    """

    @property
    def first_index(self) -> int:
        """The index of the first entry kept."""

    @property
    def last_index(self) -> int:
        """The index of the last entry (``first_index - 1`` when empty)."""

    def append(self, entries: Sequence[EntryRecord]) -> None:
        """Append entries; the first must be ``last_index + 1`` and indexes consecutive."""

    def append_records(self, first_index: int, terms: Sequence[int],
                       datas: Sequence[bytes]) -> None:
        """``append`` of ``EntryRecord(first_index + i, terms[i], datas[i])`` for every ``i``,
        without an object per entry (a Raft driver appends hundreds at a time)."""

    def get(self, index: int) -> EntryRecord:
        """The entry at ``index`` (``IndexOutOfRange`` otherwise)."""

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[EntryRecord]:
        """Entries ``[lo, hi)``; at least one if any, at most ``max_bytes`` of data otherwise."""

    def term_at(self, index: int) -> int:
        """The term of the entry at ``index``; also answers for ``first_index - 1``."""

    def truncate_suffix(self, index: int) -> None:
        """Drop entries ``>= index`` (crash-safe, durable on return)."""

    def compact_prefix(self, index: int, term: int | None = None) -> None:
        """Drop entries ``< index``, remembering ``term_at(index - 1)``.

        Past ``last_index + 1`` (installing a snapshot) the whole log is
        dropped and ``term`` (the snapshot's) is required.
        """

    def sync(self) -> None:
        """Make every appended entry durable."""

    @property
    def hard_state(self) -> HardState:
        """The last hard state set (``HardState()`` on a new log)."""

    def set_hard_state(self, state: HardState) -> None:
        """Persist ``state`` atomically and durably."""

    def close(self) -> None:
        """Sync and close."""


@runtime_checkable
class MetaStore(Protocol):
    """A small durable key-value store; every write is atomic and durable on return."""

    def get(self, key: str) -> bytes | None:
        """The value of ``key`` or ``None``."""

    def put(self, key: str, value: bytes) -> None:
        """Set ``key`` to ``value``."""

    def put_many(self, items: Mapping[str, bytes]) -> None:
        """Set several keys in one atomic write."""

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""

    def items(self) -> list[tuple[str, bytes]]:
        """Every ``(key, value)``, sorted by key."""

    def close(self) -> None:
        """Close the store."""


# --------------------------------------------------------------------------
# Flushing from trio
# --------------------------------------------------------------------------


class FlushService:
    """Runs a commit log's flush policy in a trio program.

    Start ``run`` in a nursery; writers ``await wait_flushed(end)`` after an
    append that ended at ``end``. The fsync runs in a worker thread
    (``trio.to_thread``), so the trio thread keeps appending meanwhile.

    - ``"group"``: a flush starts as soon as someone waits; every writer whose
      bytes were appended before it started is released by that one fsync.
    - ``"interval"``: one flush every ``interval`` seconds when there is
      something new; waiters are released by the next one.
    - ``"none"``: no fsync; ``wait_flushed`` returns at once (durability is
      left to the OS).
    """

    def __init__(self, flush: Callable[[], int], max_offset: Callable[[], int],
                 policy: str = "group", interval: float = 0.2, flushed: int = 0) -> None:
        if policy not in FLUSH_POLICIES:
            raise ValueError(f"unknown flush policy {policy!r}, expected one of {FLUSH_POLICIES}")
        self._flush = flush
        self._max_offset = max_offset
        self.policy = policy
        self.interval = interval
        self.flushed = flushed
        self.flush_count = 0
        self._wanted = trio.Event()
        self._next_done = trio.Event()
        self._in_flight: trio.Event | None = None

    @classmethod
    def for_log(cls, log: CommitLog, policy: str = "group", interval: float = 0.2
                ) -> FlushService:
        """A service flushing ``log``."""
        return cls(log.flush, lambda: log.max_offset, policy, interval, log.flushed_offset)

    async def wait_flushed(self, offset: int) -> None:
        """Return once every byte below ``offset`` is durable (at once for ``"none"``)."""
        if self.policy == "none":
            return
        while self.flushed < offset:
            if self._in_flight is not None:
                await self._in_flight.wait()
                continue
            done = self._next_done
            self._wanted.set()
            await done.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Flush according to the policy until cancelled."""
        task_status.started()
        if self.policy == "none":
            await trio.sleep_forever()
        while True:
            if self.policy == "group":
                await self._wanted.wait()
            else:
                await trio.sleep(self.interval)
                if self._max_offset() <= self.flushed:
                    continue
            await self.flush_now()

    async def flush_now(self) -> int:
        """Run one flush in a worker thread and release the writers it covers."""
        self._wanted = trio.Event()
        done, self._next_done = self._next_done, trio.Event()
        self._in_flight = done
        try:
            self.flushed = await trio.to_thread.run_sync(self._flush)
            self.flush_count += 1
        finally:
            self._in_flight = None
            done.set()
        return self.flushed
