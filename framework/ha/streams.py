"""Byte plumbing between the HA drivers and trio streams.

What the drivers send and receive in bulk, with as few copies and as
little fresh memory as the stream allows: gathered sends on a socket, reads
that never wait (into a reused buffer, or straight into a log's space).
"""

from __future__ import annotations

import os

import trio

__all__ = ["RECEIVE_SIZE", "read_nowait", "send_parts"]

#: Bytes asked of one receive.
RECEIVE_SIZE = 1024 * 1024


def read_nowait(sock: trio.socket.SocketType, buffer: memoryview) -> int | None:
    """Read what ``sock`` holds into ``buffer`` without waiting: the byte count
    (0 at the end of the stream), or None if nothing is waiting."""
    try:
        return os.readv(sock.fileno(), [buffer])
    except BlockingIOError:
        return None


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
    while views:
        try:
            sent = os.writev(sock.fileno(), views)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if sent:
            views[0] = views[0][sent:]
    await trio.lowlevel.checkpoint()
