"""What the transaction cores read of a commit log, for every driver (no trio, no clock).

``TransactionReads`` reads a log (the broker's ``CommitLog``, the cluster
simulation's in-memory one) for ``triomq.broker.secondary.core.transaction`` and
``transaction_check``: the record at a commit-log offset, a queue's
records, and ``catch_up``: a ``TransactionLedger`` brought up to the op
records in the log, and in a new term to the committed messages of the
transactions the op records leave open (a commit whose op record was not
stored before a failover), read from the oldest one's half message on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from triomq.broker.secondary.core.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TransactionLedger,
    is_commit,
    op_offsets,
    transaction_key,
)
from triomq.broker.secondary.core.transaction_check import MAX_SCAN, HalfEntry, op_progress
from triomq.errors import TriomqError
from triomq.protocol.message import PROPERTY_UNIQ_KEY, MessageRecord, RecordError

__all__ = ["TransactionLog", "TransactionReads"]


class QueueEntryView(Protocol):
    """A consume-queue entry (``triomq.store.QueueEntry``'s fields the reads use)."""

    @property
    def queue_offset(self) -> int: ...

    @property
    def physical_offset(self) -> int: ...


class TransactionLog(Protocol):
    """The commit-log calls the reads use (``triomq.store.CommitLog``'s)."""

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def read_record(self, offset: int) -> MessageRecord: ...

    def iter_records(self, start: int | None = None, end: int | None = None
                     ) -> Iterator[MessageRecord]: ...

    def queue_min_offset(self, topic: str, queue_id: int) -> int: ...

    def queue_max_offset(self, topic: str, queue_id: int) -> int: ...

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> Sequence[QueueEntryView]: ...


class TransactionReads:
    """Reads of one log for the transaction cores."""

    def __init__(self, log: TransactionLog) -> None:
        self.log = log

    def record_at(self, offset: int) -> MessageRecord | None:
        """The record starting at commit-log ``offset`` (None: none starts there)."""
        log = self.log
        if not log.min_offset <= offset < log.max_offset:
            return None
        try:
            return log.read_record(offset)
        except (TriomqError, RecordError, ValueError):  # StoreError: not a record there
            return None

    def queue_records(self, topic: str, start: int, count: int) -> list[HalfEntry]:
        """Up to ``count`` records of queue 0 of ``topic`` from queue offset ``start``."""
        entries = self.log.queue_entries(topic, 0, start, count)
        return [HalfEntry(e.queue_offset, self.record_at(e.physical_offset)) for e in entries]

    def op_done(self, op_start: int, half_progress: int) -> int:
        """The op queue's progress from ``op_start``: past the op records that name only
        half messages behind ``half_progress`` (``op_progress``)."""
        ops = self.queue_records(OP_HALF_TOPIC, op_start, MAX_SCAN)
        return op_progress(op_start, [op_offsets(op.record) if op.record else [] for op in ops],
                           half_progress)

    def key_of(self, half_queue_offset: int) -> int:
        """The transaction key of the half message at ``half_queue_offset``."""
        halves = self.queue_records(HALF_TOPIC, half_queue_offset, 1)
        record = halves[0].record if halves else None
        return transaction_key(record) if record is not None else half_queue_offset

    def catch_up(self, ledger: TransactionLedger, half_progress: int) -> None:
        """Read the op records ``ledger`` has not read yet (and in a new term, the
        committed messages of the transactions open from ``half_progress`` on)."""
        log = self.log
        ledger.op_read = max(ledger.op_read, log.queue_min_offset(OP_HALF_TOPIC, 0))
        while ledger.op_read < log.queue_max_offset(OP_HALF_TOPIC, 0):
            ops = self.queue_records(OP_HALF_TOPIC, ledger.op_read, MAX_SCAN)
            if not ops:
                break
            for op in ops:
                named = op_offsets(op.record) if op.record is not None else []
                ledger.read_op(op.queue_offset, [self.key_of(offset) for offset in named])
        if not ledger.commits_read:
            ledger.commits_read = True
            first = self._oldest_open(ledger, half_progress)
            if first is not None:
                for record in log.iter_records(first, log.max_offset):
                    if is_commit(record):
                        half = self.record_at(record.prepared_transaction_offset)
                        # A commit an acting slave escaped here names no half of this
                        # log: the message ids tell whose commit it is.
                        if (half is not None and half.topic == HALF_TOPIC
                                and half.properties.get(PROPERTY_UNIQ_KEY)
                                == record.properties.get(PROPERTY_UNIQ_KEY)):
                            ledger.read_commit(half)

    def _oldest_open(self, ledger: TransactionLedger, offset: int) -> int | None:
        """The commit-log offset of the oldest open transaction's half message."""
        first: int | None = None
        end = self.log.queue_max_offset(HALF_TOPIC, 0)
        while offset < end:
            halves = self.queue_records(HALF_TOPIC, offset, MAX_SCAN)
            if not halves:
                break
            for half in halves:
                if half.record is None:
                    continue
                key = transaction_key(half.record)
                if key not in ledger.ended:
                    origin = self.log.queue_entries(HALF_TOPIC, 0, key, 1)
                    at = origin[0].physical_offset if origin else half.record.physical_offset
                    first = at if first is None else min(first, at)
            offset = halves[-1].queue_offset + 1
        return first
