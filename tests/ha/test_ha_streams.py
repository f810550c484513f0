"""Scattered reads of transfer frames: bodies at their places, or nothing claimed.

A slave lays out a read as the rest of the current body, then header slots
and bodies of the size it expects in turn (``scatter_layout``), and keeps
the bodies where they landed only if ``laid_out_as_sent`` says every body
byte is at its place. Here a stream of transfers of any sizes (and now and
then a frame that is no transfer) is read into such a layout, cut anywhere:
whenever the read is claimed laid out, the log's space must hold exactly
the body bytes received, at their offsets.
"""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from triomq.ha.streams import laid_out_as_sent, scatter_layout
from triomq.protocol.ha import TRANSFER_HEADER_SIZE, Transfer, encode

HEADERS = 8


def stream_of(rest: int, frames: list[tuple[int, bool]]) -> tuple[bytes, bytes]:
    """The bytes on the wire and the log they carry: ``rest`` bytes of a body
    under way, then a frame per (body size, is a transfer)."""
    log = bytes(i * 7 % 251 for i in range(rest + sum(size for size, _ in frames)))
    wire = [log[:rest]]
    at = rest
    for size, is_transfer in frames:
        header = encode(Transfer(at, 1, 0, 0, log[at:at + size]))
        if not is_transfer:
            header = struct.pack(">i", 1) + header[4:TRANSFER_HEADER_SIZE] + log[at:at + size]
        wire.append(header)
        at += size
    return b"".join(wire), log


def read_into(pieces: list[memoryview], data: bytes) -> int:
    """What ``readv`` does: ``data`` into the pieces, in order, as far as they go."""
    at = 0
    for piece in pieces:
        got = min(len(piece), len(data) - at)
        piece[:got] = data[at:at + got]
        at += got
    return at


@given(
    rest=st.integers(0, 300),
    frames=st.lists(st.tuples(st.integers(0, 300), st.sampled_from([True, True, True, False])),
                    max_size=12),
    expected=st.integers(1, 300),
    space_size=st.integers(1, 2000),
    cut=st.integers(0, 5000),
    waiting=st.integers(1, 5000),
)
def test_a_read_claimed_laid_out_holds_every_body_byte_at_its_place(
    rest, frames, expected, space_size, cut, waiting
):
    wire, log = stream_of(rest, frames)
    space = memoryview(bytearray(b"\xee" * space_size))
    headers = memoryview(bytearray(TRANSFER_HEADER_SIZE * HEADERS))
    pieces = scatter_layout(space, rest, expected, headers, waiting)
    count = read_into(pieces, wire[:cut])

    filled = laid_out_as_sent(pieces, count, rest > 0)

    if not filled:
        return
    assert b"".join(filled) == wire[:count]
    bodies = filled[0 if rest else 1::2]
    received = sum(map(len, bodies))
    assert space[:received] == log[:received]
    assert all(len(header) <= TRANSFER_HEADER_SIZE for header in filled[1 if rest else 0::2])


def test_full_batches_are_laid_out_and_another_size_is_not():
    frames = [(100, True)] * 3
    wire, log = stream_of(40, frames)
    space = memoryview(bytearray(1000))
    headers = memoryview(bytearray(TRANSFER_HEADER_SIZE * HEADERS))

    pieces = scatter_layout(space, 40, 100, headers, 1000)
    assert [len(p) for p in pieces][:5] == [40, 36, 100, 36, 100]
    # Laid out as far as the bytes waiting, no further.
    assert [len(p) for p in scatter_layout(space, 40, 100, headers, 77)] == [40, 36, 100]
    assert [len(p) for p in scatter_layout(space, 0, 100, headers, 1)] == [36, 100]
    filled = laid_out_as_sent(pieces, read_into(pieces, wire), True)
    assert filled and space[:340] == log

    pieces = scatter_layout(space, 40, 120, headers, 1000)  # expected bigger batches
    assert laid_out_as_sent(pieces, read_into(pieces, wire), True) == []
    # Cut inside the first body of another size: its bytes are still at their places.
    pieces = scatter_layout(space, 40, 120, headers, 1000)
    assert laid_out_as_sent(pieces, read_into(pieces, wire[:40 + 36 + 90]), True)
