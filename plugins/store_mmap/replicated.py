"""Whether replicated (or recovered) records fit a commit log's consume queues.

A record carries its queue offset; the log accepts one that rewrites an
entry its queue has or adds the next one, never one that skips ahead of
the queue's end (the rule is ``commitlog_layout.queue_offset_error``).
"""

from __future__ import annotations

from triomq.protocol.commitlog_layout import (
    QueueBounds,
    Span,
    check_placement,
    queue_offset_error,
)
from triomq.protocol.message import MessageRecord, RecordError, decode
from triomq.store import StoreCorruption


def check_queue_offset(record: MessageRecord, phys: int, lo: int, hi: int) -> None:
    """Raise ``RecordError`` if ``record`` skips ahead of its queue ``(lo, hi)``."""
    error = queue_offset_error(record.topic, record.queue_id, record.queue_offset, phys, lo, hi)
    if error is not None:
        raise error


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
