"""A replication's transfer headers in bulk, with optional C versions.

A master sends a range of its log as transfers of one batch each: it makes
all their headers at once (``encode_transfer_headers``) and lays each before
its batch (``transfer_frames``). A slave takes the headers of a read that
continue its run at once (``transfer_run``, which ``MasterFrameDecoder.take_run``
calls), checking each by ``_valid_transfer``, the decoder's own rule for a
whole header. These run once a batch, so ``framework/protocol/_ha_speedups.c``
has C versions of ``encode_transfer_headers`` and ``transfer_run`` that give
the same results.
"""

from __future__ import annotations

from triomq.protocol.extensions import optional_extension
from triomq.protocol.ha_encode import encode_transfer_header
from triomq.protocol.ha_layout import (
    _LONG_MAX,
    _TRANSFER,
    _TRANSFER_HEADER,
    TRANSFER_HEADER_SIZE,
)

_speedups = optional_extension("_ha_speedups")  # None: the pure-Python versions below

#: Whether the HA drivers' per-frame work (headers here, reads and writes in
#: ``triomq.ha.streams``) runs the optional C versions
#: (``framework/protocol/_ha_speedups.c``); set ``TRIOMQ_NO_SPEEDUPS=1`` to disable.
SPEEDUPS = _speedups is not None


def _valid_transfer(state: int, body_size: int, offset: int, epoch: int, epoch_start: int,
                    confirm: int, max_body_size: int) -> bool:
    """Whether a transfer header is a plain batch's (no ``NO_OFFSET``) that passes
    every check of ``MasterFrameDecoder``: the rule of the fast paths, C's too. Any
    other header goes to ``MasterFrameDecoder._transfer``, which takes RocketMQ's
    ``NO_OFFSET`` and names what is wrong."""
    return (state == _TRANSFER and 0 <= body_size <= max_body_size
            and min(offset, epoch, epoch_start, confirm) >= 0
            and offset + body_size <= _LONG_MAX)


def encode_transfer_headers(
    offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int, body_size: int,
    batch_size: int,
) -> bytes:
    """The headers of the transfers that carry ``body_size`` bytes from ``offset``
    on in batches of ``batch_size`` (the last one the rest; a heartbeat, one
    empty batch, for 0 bytes), one after another: ``transfer_frames`` puts
    each before its batch. Raises ``HAFrameError`` like ``encode``."""
    if _speedups is not None:
        headers = _speedups.encode_transfer_headers(
            offset, epoch, epoch_start_offset, confirm_offset, body_size, batch_size)
        if headers is not None:
            return headers
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    last_offset = offset + max(0, body_size - 1) // batch_size * batch_size
    # Only offset and bodySize vary, the first header has the largest bodySize
    # and the last the largest offset: checking these two checks them all.
    first = encode_transfer_header(offset, epoch, epoch_start_offset, confirm_offset,
                                   min(batch_size, body_size))
    if last_offset == offset:
        return first
    last = encode_transfer_header(last_offset, epoch, epoch_start_offset, confirm_offset,
                                  offset + body_size - last_offset)
    pack = _TRANSFER_HEADER.pack
    return b"".join([
        first,
        *[pack(_TRANSFER, batch_size, at, epoch, epoch_start_offset, confirm_offset)
          for at in range(offset + batch_size, last_offset, batch_size)],
        last,
    ])


def transfer_frames(headers: bytes, body: bytes | memoryview, batch_size: int
                    ) -> list[bytes | memoryview]:
    """The pieces of the frames of ``encode_transfer_headers`` in order: each
    header, then its batch of ``body``."""
    pieces: list[bytes | memoryview] = []
    for at in range(0, len(headers), TRANSFER_HEADER_SIZE):
        batch = at // TRANSFER_HEADER_SIZE * batch_size
        pieces += (headers[at:at + TRANSFER_HEADER_SIZE], body[batch:batch + batch_size])
    return pieces


def _transfer_run(headers: bytes | bytearray | memoryview, pos: int, offset: int, epoch: int,
                  epoch_start: int, max_body_size: int, room: int) -> tuple[int, ...]:
    count = taken = largest = body_remaining = 0
    confirm = last_confirm = -1
    while pos + TRANSFER_HEADER_SIZE <= len(headers):
        state, size, at, frame_epoch, start, frame_confirm = _TRANSFER_HEADER.unpack_from(
            headers, pos)
        if not (at == offset and frame_epoch == epoch and start == epoch_start
                and _valid_transfer(state, size, at, frame_epoch, start, frame_confirm,
                                    max_body_size)):
            break
        take = min(size, room)
        room -= take
        taken += take
        offset += take
        largest = max(largest, size)
        confirm = max(confirm, min(frame_confirm, offset))
        last_confirm = frame_confirm
        count += 1
        pos += TRANSFER_HEADER_SIZE
        if take < size:
            body_remaining = size - take
            break
    return pos, count, taken, largest, confirm, last_confirm, body_remaining


def transfer_run(headers: bytes | bytearray | memoryview, pos: int, offset: int, epoch: int,
                 epoch_start: int, max_body_size: int, room: int) -> tuple[int, ...]:
    """The whole transfer headers at ``headers[pos:]`` (one after another) that
    continue a run: each valid (as ``MasterFrameDecoder`` checks, with
    ``max_body_size``), of ``epoch`` starting at ``epoch_start``, at the
    ``offset`` where the last one's body ended (the first at ``offset``);
    their bodies come from ``room`` bytes. Stops before a header that does not
    continue it, or once a body is not all in ``room``. The fields of a
    ``TransferRun``, as a tuple. ``offset``, ``epoch`` and ``epoch_start``
    are non-negative."""
    run = _speedups.transfer_run if _speedups is not None else _transfer_run
    return run(headers, pos, offset, epoch, epoch_start, max_body_size, room)
