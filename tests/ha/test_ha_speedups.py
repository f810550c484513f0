"""The HA drivers' C fast paths (``framework/protocol/_ha_speedups.c``) against
their pure-Python references.

Each C function must give exactly what the Python version gives: the same
headers (or None where Python raises), the same run of headers taken, the
same bytes read where they land and the same bytes written, whatever the
input. Reads and writes go through real socket pairs. Without the
extension built these tests are skipped; the Python paths are covered by
every other HA test run with ``TRIOMQ_NO_SPEEDUPS=1`` and here against
hand-computed results.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_ha_streams import stream_of

from triomq.ha import streams
from triomq.protocol import ha, ha_transfers
from triomq.protocol.ha import TRANSFER_HEADER_SIZE, HAFrameError, Transfer, encode

speedups = ha_transfers._speedups
needs_c = pytest.mark.skipif(not ha.SPEEDUPS, reason="C speedups not built")

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# Values around every field's limits, and some that are out of range.
EDGY = st.one_of(st.integers(0, 5000), st.sampled_from(
    [-1, INT_MAX, INT_MAX + 1, LONG_MAX - 100, LONG_MAX, LONG_MAX + 1, 2**70, -(2**70)]))


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """The pure-Python versions, with the extension switched off meanwhile (also
    inside a hypothesis example, where a function-scoped fixture would not do)."""
    saved = ha_transfers._speedups, streams._speedups
    ha_transfers._speedups = streams._speedups = None
    try:
        yield
    finally:
        ha_transfers._speedups, streams._speedups = saved


@pytest.fixture
def python_only():
    with pure_python():
        yield


def python_headers(*args: int) -> bytes | str:
    with pure_python():
        try:
            return ha.encode_transfer_headers(*args)
        except (HAFrameError, ValueError) as exc:
            return type(exc).__name__


def test_headers_of_a_send_split_it_in_batches(python_only):
    headers = ha.encode_transfer_headers(100, 3, 50, 90, 140, 64)
    fields = list(struct.iter_unpack(">iiqiqq", headers))
    assert fields == [(2, 64, 100, 3, 50, 90), (2, 64, 164, 3, 50, 90), (2, 12, 228, 3, 50, 90)]
    assert ha.encode_transfer_headers(100, 3, 50, 90, 0, 64) == encode(Transfer(100, 3, 50, 90))
    with pytest.raises(HAFrameError, match="offset"):
        ha.encode_transfer_headers(LONG_MAX - 10, 3, 50, 90, 140, 64)
    with pytest.raises(ValueError, match="batch_size"):
        ha.encode_transfer_headers(0, 3, 50, 90, 140, 0)


@needs_c
@given(offset=EDGY, epoch=EDGY, start=EDGY, confirm=EDGY, body_size=EDGY,
       batch_size=st.one_of(st.integers(-2, 300), EDGY))
def test_c_headers_are_pythons_or_none(offset, epoch, start, confirm, body_size, batch_size):
    args = (offset, epoch, start, confirm, min(body_size, 100_000), batch_size)
    expected = python_headers(*args)
    got = speedups.encode_transfer_headers(*args)
    # None: "let Python decide" (it raises, or takes an offset + bodySize past
    # the limit whose last batch starts within it).
    assert got is None if isinstance(expected, str) else got in (None, expected)


def header(offset: int, size: int, epoch: int = 1, start: int = 0, confirm: int = 0,
           state: int = 2) -> bytes:
    return struct.pack(">iiqiqq", state, size, offset, epoch, start, confirm)


@st.composite
def header_runs(draw):
    """Headers that mostly continue each other, now and then one that does not
    (another offset, epoch or state, a bad size), maybe cut short at the end."""
    offset, out = draw(st.integers(0, 1000)), []
    for _ in range(draw(st.integers(0, 8))):
        size = draw(st.sampled_from([0, 1, 7, 64, 65]))
        fields = dict(offset=offset, size=size, epoch=1, start=0,
                      confirm=draw(st.sampled_from([0, offset, offset + 30, LONG_MAX])))
        spoil = draw(st.sampled_from([None] * 6 + ["offset", "epoch", "start", "confirm",
                                                   "size", "state"]))
        if spoil == "state":
            out.append(header(**fields, state=1))
        else:
            if spoil is not None:
                fields[spoil] = draw(st.sampled_from([-1, 2, 1 << 40, 2**31 - 1]))
                if spoil in ("epoch", "size"):
                    fields[spoil] = min(fields[spoil], 2**31 - 1)
            out.append(header(**fields))
        offset += size
    data = b"".join(out)
    return data[:draw(st.integers(0, len(data)))] if draw(st.booleans()) else data


@needs_c
@given(headers=header_runs(), pos=st.sampled_from([0, 0, 36, 5]), room=st.integers(0, 400),
       max_body_size=st.sampled_from([64, 65, 1 << 20]))
def test_c_transfer_runs_are_pythons(headers, pos, room, max_body_size):
    offset = struct.unpack_from(">q", headers, pos + 8)[0] if len(headers) >= pos + 16 else 0
    args = (headers, pos, offset, 1, 0, max_body_size, room)
    assert speedups.transfer_run(*args) == ha_transfers._transfer_run(*args)


def test_a_run_stops_at_a_header_that_does_not_continue_it(python_only):
    headers = header(10, 5) + header(15, 5, confirm=40) + header(25, 5) + header(30, 5)
    assert ha.transfer_run(headers, 0, 10, 1, 0, 100, 100) == (72, 2, 10, 5, 20, 40, 0)
    # A body not all at hand ends the run: the rest is still to come.
    assert ha.transfer_run(headers, 0, 10, 1, 0, 100, 7) == (72, 2, 7, 5, 17, 40, 3)
    assert ha.transfer_run(headers, 0, 10, 2, 0, 100, 100) == (0, 0, 0, 0, -1, -1, 0)


def socket_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def scattered_read(wire: bytes, rest: int, expected: int, space_size: int, slots: int):
    """Send ``wire`` and read it once with ``read_scattered``; what landed where."""
    reader, writer = socket_pair()
    with reader, writer:
        if wire:
            writer.send(wire)
        else:
            writer.shutdown(socket.SHUT_WR)
        space = memoryview(bytearray(b"\xee" * space_size))
        headers = memoryview(bytearray(b"\xdd" * (TRANSFER_HEADER_SIZE * slots)))
        buffer = memoryview(bytearray(b"\xcc" * (space_size + len(headers))))
        got = streams.read_scattered(reader, space, rest, expected, headers, buffer)
        return got, bytes(space), bytes(headers), bytes(buffer)


FRAMES = st.lists(st.tuples(st.integers(0, 300), st.sampled_from([True, True, True, False])),
                  max_size=10)


@needs_c
@given(rest=st.integers(0, 300), frames=FRAMES, expected=st.integers(1, 300),
       space_size=st.integers(1, 2000), slots=st.integers(1, 8))
def test_c_scattered_reads_are_pythons(rest, frames, expected, space_size, slots):
    wire, _ = stream_of(rest, frames)
    got_c = scattered_read(wire, rest, expected, space_size, slots)
    with pure_python():
        got_py = scattered_read(wire, rest, expected, space_size, slots)
    assert got_c == got_py


@pytest.mark.parametrize("version", ["c", "python"])
@given(rest=st.integers(0, 300), frames=FRAMES, expected=st.integers(1, 300),
       space_size=st.integers(1, 2000), slots=st.integers(1, 8))
def test_a_scattered_read_puts_bodies_at_their_places_or_copies_in_order(
    version, rest, frames, expected, space_size, slots
):
    if version == "c" and not ha.SPEEDUPS:
        pytest.skip("C speedups not built")
    wire, _ = stream_of(rest, frames)
    with pure_python() if version == "python" else contextlib.nullcontext():
        (n, bodies), space, headers, buffer = scattered_read(wire, rest, expected, space_size,
                                                             slots)
    assert n > 0 or not wire
    if bodies < 0:
        assert buffer[:n] == wire[:n]
        return
    # The read's bytes, in the order they came, from the layout's pieces.
    pieces = streams.scatter_layout(memoryview(space), rest, expected, memoryview(headers), n)
    in_order = b"".join(bytes(piece) for piece in pieces)[:n]
    assert in_order == wire[:n]
    # Bodies from the start of the space, headers one after another.
    is_body, left, got = rest > 0, n, {True: b"", False: b""}
    for piece in pieces:
        got[is_body] += bytes(piece[:left])
        left -= min(left, len(piece))
        is_body = not is_body
    assert (len(got[True]), got[False]) == (bodies, headers[:n - bodies])
    assert got[True] == space[:bodies]


def test_nothing_waiting_and_the_end_of_the_stream():
    reader, writer = socket_pair()
    with reader, writer:
        space, headers = memoryview(bytearray(100)), memoryview(bytearray(72))
        buffer = memoryview(bytearray(172))
        assert streams.read_scattered(reader, space, 0, 10, headers, buffer) is None
        writer.shutdown(socket.SHUT_WR)
        assert streams.read_scattered(reader, space, 0, 10, headers, buffer) == (0, 0)
        with pytest.raises(ValueError, match="buffer"):
            streams.read_scattered(reader, space, 0, 10, headers, buffer[:100])
        with pytest.raises(ValueError, match="a header"):
            streams.read_scattered(reader, space, 0, 10, headers[:35], buffer)


def written(headers: bytes, body: bytes, batch: int, skip: int, sndbuf: int = 0):
    """What one ``write_frames`` writes: its count and the bytes the peer gets."""
    reader, writer = socket_pair()
    with reader, writer:
        if sndbuf:
            writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        count = streams.write_frames(writer, headers, body, batch, skip)
        out = b""
        while True:
            try:
                chunk = reader.recv(1 << 20)
            except BlockingIOError:
                break
            out += chunk
        return count, out


@needs_c
@given(body_size=st.integers(0, 3000), batch=st.integers(1, 700), skip=st.integers(0, 4000))
def test_c_gathered_writes_are_pythons(body_size, batch, skip):
    body = bytes(i % 253 for i in range(body_size))
    headers = python_headers(7, 1, 0, 0, body_size, batch)
    frames = b"".join(ha.transfer_frames(headers, body, batch))
    count, out = written(headers, body, batch, skip)
    with pure_python():
        assert (count, out) == written(headers, body, batch, skip)
    # All of it, but for the pieces past the 1024 a write takes.
    assert out == frames[skip:skip + count]
    assert count == max(0, len(frames) - skip) or 2 * len(headers) // TRANSFER_HEADER_SIZE > 1024


@needs_c
def test_a_huge_batch_size_is_pythons_too():
    headers, body = ha.encode_transfer_headers(0, 1, 0, 0, 100, 40) * 3, bytes(range(100))
    for batch in (2**62, 2**63 - 1):
        count, out = written(headers, body, batch, 0)
        with pure_python():
            assert (count, out) == written(headers, body, batch, 0)


def test_a_full_socket_takes_part_of_the_frames_and_then_none():
    headers = ha.encode_transfer_headers(0, 1, 0, 0, 1 << 20, 32 * 1024)
    body = bytes(1 << 20)
    reader, writer = socket_pair()
    with reader, writer:
        writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sent = 0
        while (written := streams.write_frames(writer, headers, body, 32 * 1024, sent)):
            sent += written
        assert written is None and 0 < sent < len(headers) + len(body)
        received = reader.recv(1 << 20)
        assert received == b"".join(ha.transfer_frames(headers, body, 32 * 1024))[:len(received)]
