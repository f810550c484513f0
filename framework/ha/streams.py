"""Byte plumbing between the HA drivers and trio streams.

What the drivers send and receive in bulk, with as few copies and as
little fresh memory as the stream allows: gathered sends of transfer frames
on a socket (``send_frames``), reads that never wait, into a reused buffer
or scattered: the bodies of transfer frames straight into a log's space at
their places, their headers between them into slots of their own
(``read_scattered``).
"""

from __future__ import annotations

import fcntl
import math
import os
import struct
import termios
from collections.abc import Sequence

import trio

from triomq.protocol.extensions import optional_extension
from triomq.protocol.ha import TRANSFER_HEADER_SIZE, HAConnectionState, transfer_frames

__all__ = [
    "RECEIVE_SIZE",
    "bytes_waiting",
    "laid_out_as_sent",
    "read_nowait",
    "read_scattered",
    "scatter_layout",
    "send_frames",
    "write_frames",
]

#: Bytes asked of one receive.
RECEIVE_SIZE = 1024 * 1024
#: A transfer header's state and bodySize.
_STATE_AND_BODY_SIZE = struct.Struct(">ii")
_INT = struct.Struct("i")
#: Linux's IOV_MAX: a gathered write takes at most this many pieces.
_MAX_PIECES = 1024
_speedups = optional_extension("_ha_speedups")  # None: the pure-Python versions below


def read_nowait(sock: trio.socket.SocketType, buffers: Sequence[memoryview]) -> int | None:
    """Read what ``sock`` holds into ``buffers``, in order, without waiting: the
    byte count (0 at the end of the stream), or None if nothing is waiting."""
    try:
        return os.readv(sock.fileno(), buffers)
    except BlockingIOError:
        return None


def bytes_waiting(sock: trio.socket.SocketType) -> int:
    """How many bytes ``sock``'s receive queue holds (0 also at the end of the stream)."""
    return _INT.unpack(fcntl.ioctl(sock.fileno(), termios.FIONREAD, bytes(_INT.size)))[0]


def scatter_layout(space: memoryview, body_remaining: int, body_size: int,
                   headers: memoryview, size: int) -> list[memoryview]:
    """Buffers for a read of about ``size`` bytes in which transfer bodies land in
    ``space`` at their places.

    ``space`` holds the log from where the next body bytes go: first the
    ``body_remaining`` bytes of the current body, then, as far as ``space``
    and the header slots in ``headers`` go, a header slot and a body of
    ``body_size`` bytes in turn (the last body cut at the end of ``space``),
    until the buffers hold ``size`` bytes or more (the bytes waiting: a
    small frame must not cost a layout of the whole space).
    """
    at = min(body_remaining, len(space))
    pieces = [space[:at]] if at else []
    slot = 0
    while (at + slot < size and at < len(space)
           and slot + TRANSFER_HEADER_SIZE <= len(headers)):
        pieces.append(headers[slot:slot + TRANSFER_HEADER_SIZE])
        slot += TRANSFER_HEADER_SIZE
        end = min(at + body_size, len(space))
        pieces.append(space[at:end])
        at = end
    return pieces


def laid_out_as_sent(pieces: list[memoryview], count: int, body_first: bool) -> list[memoryview]:
    """The pieces of a ``scatter_layout`` read of ``count`` bytes, the last one cut to
    what it got, if every body byte landed at its place; else an empty list.

    Each whole header must be a transfer's whose bodySize is its body piece's
    size, or at least what that piece got where the read ended inside it (a
    body of another size, or a frame other than a transfer, puts bytes out
    of place). ``body_first``: the layout starts with the rest of a body.
    """
    filled: list[memoryview] = []
    is_body = body_first
    header: memoryview | None = None
    for piece in pieces:
        got = min(len(piece), count)
        if got == 0:
            break
        count -= got
        if is_body and header is not None:
            state, body_size = _STATE_AND_BODY_SIZE.unpack_from(header)
            # Where the read ends in this body, the rest of it is still to come.
            if state != HAConnectionState.TRANSFER or not (
                body_size == got or (count == 0 and body_size > got)
            ):
                return []
        header = piece if not is_body and got == len(piece) else None
        filled.append(piece if got == len(piece) else piece[:got])
        is_body = not is_body
    return filled


def read_scattered(sock: trio.socket.SocketType, space: memoryview, body_remaining: int,
                   body_size: int, headers: memoryview, buffer: memoryview
                   ) -> tuple[int, int] | None:
    """One read of what ``sock`` holds, without waiting, laid out so that transfer
    bodies land in ``space`` at their places (``scatter_layout`` for the bytes
    waiting; ``body_size`` > 0, ``space`` not empty, at least one header
    slot in ``headers``).

    None if nothing is waiting; else ``(n, bodies)``, n bytes read (0 at the
    end of the stream). ``bodies`` >= 0 if the read is laid out as sent
    (``laid_out_as_sent``): its ``bodies`` body bytes are in ``space``, from
    its start, and its headers are ``headers[:n - bodies]``, one after
    another (the last maybe cut short). -1 if it is not: its bytes are then
    copied into ``buffer[:n]`` in the order they came (``buffer`` holds
    ``len(space) + len(headers)`` bytes), and ``space[:n]`` may hold some of
    them out of place. The C version
    (``framework/protocol/_ha_speedups.c``) does the same in one call.
    """
    if _speedups is not None:
        return _speedups.read_scattered(sock.fileno(), space, body_remaining, body_size,
                                        headers, buffer)
    if body_size <= 0 or body_remaining < 0:
        raise ValueError("body_size must be > 0 and body_remaining >= 0")
    if not space or len(headers) < TRANSFER_HEADER_SIZE:
        raise ValueError("space and headers must hold a byte and a header")
    if len(buffer) < len(space) + len(headers):
        raise ValueError("buffer must hold len(space) + len(headers) bytes")
    pieces = scatter_layout(space, body_remaining, body_size, headers,
                            max(bytes_waiting(sock), 1))
    try:
        n = read_nowait(sock, pieces)
        if not n:
            return None if n is None else (0, 0)
        body_first = body_remaining > 0
        filled = laid_out_as_sent(pieces, n, body_first)
        if filled:
            bodies = sum(map(len, filled[0 if body_first else 1::2]))
            filled.clear()
            return n, bodies
        at = 0
        for piece in pieces:
            got = min(len(piece), n - at)
            buffer[at:at + got] = piece[:got]
            at += got
        return n, -1
    finally:
        # Dropped, so released: none of these views outlives the read.
        pieces.clear()


def write_frames(sock: trio.socket.SocketType, headers: bytes, body: bytes | memoryview,
                 batch_size: int, skip: int) -> int | None:
    """One gathered write, without waiting, of the frames of ``transfer_frames``
    after their first ``skip`` bytes: the bytes written, or None if ``sock``
    is full. The C version (``framework/protocol/_ha_speedups.c``) lays the
    pieces out itself, without a view per piece."""
    if _speedups is not None:
        return _speedups.write_frames(sock.fileno(), headers, body, batch_size, skip)
    if batch_size <= 0 or skip < 0:
        raise ValueError("batch_size must be > 0 and skip >= 0")
    pieces = [memoryview(piece) for piece in transfer_frames(headers, body, batch_size)]
    try:
        while pieces and skip >= len(pieces[0]):
            skip -= len(pieces.pop(0))
        if pieces:
            pieces[0] = pieces[0][skip:]
        pieces = [piece for piece in pieces if piece][:_MAX_PIECES]
        if not pieces:
            return 0
        try:
            return os.writev(sock.fileno(), pieces)
        except BlockingIOError:
            return None
    finally:
        # The body may view a log's mapping: dropped, so released.
        pieces.clear()


async def send_frames(stream: trio.abc.Stream, headers: bytes, body: bytes | memoryview,
                      batch_size: int, timeout: float = math.inf) -> None:
    """Send the frames of ``transfer_frames``: gathered by the kernel on a socket
    (``write_frames``), else joined.

    On a socket, writes that never wait: the task yields once the socket is
    full (until it is writable again) and once at the end, not after every
    write (a slave in the same thread then reads more per turn).
    ``trio.TooSlowError`` if the send makes no progress for ``timeout``
    seconds (on a socket: it stays full; on another stream: the one send
    of the joined frames does not complete).
    """
    if not isinstance(stream, trio.SocketStream):
        with trio.fail_after(timeout):
            await stream.send_all(b"".join(transfer_frames(headers, body, batch_size)))
        return
    sock = stream.socket
    sent, size = 0, len(headers) + len(body)
    while sent < size:
        written = write_frames(sock, headers, body, batch_size, sent)
        if written is None:
            with trio.fail_after(timeout):
                await trio.lowlevel.wait_writable(sock)
        else:
            sent += written
    await trio.lowlevel.checkpoint()
