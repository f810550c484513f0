"""Whether replicated (or recovered) records fit a commit log's consume queues.

A record carries its queue offset; the log accepts one that rewrites an
entry its queue has or adds the next one, never one that skips ahead of
the queue's end (the slave would index a gap). ``QueueBounds`` gives a
queue's current ``(min_offset, max_offset)``: ``(0, 0)`` for a queue the
log does not have yet.
"""

from __future__ import annotations

from collections.abc import Callable

from framework.protocol.commitlog_layout import CQ_ENTRY_SIZE, QueueRun, Span, check_placement
from framework.protocol.message import MessageRecord, RecordError, decode
from framework.store import StoreCorruption

QueueBounds = Callable[[str, int], tuple[int, int]]


def check_queue_offset(record: MessageRecord, phys: int, lo: int, hi: int) -> None:
    """A record may rewrite its queue's entries or add the next one, not skip ahead."""
    if record.queue_offset > hi > lo:
        raise RecordError(phys, f"queue offset {record.queue_offset} skips ahead of "
                                f"{record.topic}:{record.queue_id}'s end {hi}")


def runs_fit(runs: list[QueueRun], bounds: QueueBounds) -> bool:
    """Whether no run of ``index_records`` skips ahead of its queue's end."""
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, queue_id, first, entries in runs:
        key = (topic, queue_id)
        lo, hi = ends.get(key) or bounds(topic, queue_id)
        if first > hi > lo:
            return False
        ends[key] = (lo, max(hi, first + len(entries) // CQ_ENTRY_SIZE))
    return True


def check_replicated(buf: bytes, base: int, spans: list[Span], bounds: QueueBounds
                     ) -> list[tuple[Span, MessageRecord]]:
    """Decode the records of ``spans`` (``buf`` starts at offset ``base``), refusing
    any whose offsets do not fit the log with ``StoreCorruption``."""
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    out = []
    try:
        for span in spans:
            if span.blank:
                continue
            check_placement(buf, span.offset - base, span.offset)
            r = decode(buf, span.offset - base, base_offset=base, verify_crc=False)[0]
            key = (r.topic, r.queue_id)
            lo, hi = ends.get(key) or bounds(*key)
            check_queue_offset(r, span.offset, lo, hi)
            ends[key] = (lo, max(hi, r.queue_offset + 1))
            out.append((span, r))
    except RecordError as exc:
        raise StoreCorruption("replicated data", exc.offset, exc.reason) from None
    return out
