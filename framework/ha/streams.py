"""Byte plumbing between the HA drivers and trio streams.

What the drivers send and receive in bulk, with as few copies and as
little fresh memory as the stream allows: gathered sends on a socket, reads
that never wait, into a reused buffer or scattered: the bodies of transfer
frames straight into a log's space at their places, their headers between
them into slots of their own (``scatter_layout``, ``laid_out_as_sent``).
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from collections.abc import Sequence

import trio

from framework.protocol.ha import TRANSFER_HEADER_SIZE, HAConnectionState

__all__ = [
    "RECEIVE_SIZE",
    "bytes_waiting",
    "laid_out_as_sent",
    "read_nowait",
    "scatter_layout",
    "send_parts",
]

#: Bytes asked of one receive.
RECEIVE_SIZE = 1024 * 1024
#: A transfer header's state and bodySize.
_STATE_AND_BODY_SIZE = struct.Struct(">ii")
_INT = struct.Struct("i")


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


async def send_parts(stream: trio.abc.Stream, parts: list[bytes | memoryview]) -> None:
    """Send ``parts`` in order: gathered by the kernel on a socket, else joined.

    On a socket, writes that never wait: the task yields once the socket is
    full (until it is writable again) and once at the end, not after every
    write (a slave in the same thread then reads more per turn).
    """
    if not isinstance(stream, trio.SocketStream):
        await stream.send_all(b"".join(parts))
        return
    sock = stream.socket
    views = [memoryview(part) for part in parts if part]
    left = sum(map(len, views))
    try:
        while left:
            try:
                sent = os.writev(sock.fileno(), views)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            left -= sent
            if not left:
                break
            while sent >= len(views[0]):
                sent -= len(views.pop(0))
            if sent:
                views[0] = views[0][sent:]
        await trio.lowlevel.checkpoint()
    finally:
        # The parts may view a log's mapping: none of these views outlives the
        # send (dropped, so released).
        views.clear()
