"""Byte plumbing between the HA drivers and trio streams.

What the drivers send and receive in bulk, with as few copies and as
little fresh memory as the stream allows: gathered sends on a socket, one
reused receive buffer, one reused buffer to join a receive's bodies in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["RECEIVE_SIZE", "JoinBuffer", "Receiver", "send_parts"]

#: Bytes asked of one receive.
RECEIVE_SIZE = 1024 * 1024


class Receiver:
    """Receives from a stream, into one reused buffer on a socket.

    A fresh buffer per receive (``receive_some``) is fresh memory, whose
    pages the kernel must fault in and zero each time, as many as the bytes
    received. On a socket the bytes land in the same buffer every time; what
    one receive returns is valid until the next. Other streams go through
    ``receive_some``.
    """

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.buffer = memoryview(bytearray(RECEIVE_SIZE if self.socket else 0))

    async def __call__(self) -> bytes | memoryview:
        if self.socket is None:
            return await self.stream.receive_some(RECEIVE_SIZE)
        return self.buffer[: await self.socket.recv_into(self.buffer)]


class JoinBuffer:
    """Joins the bodies of one receive into one reused buffer, for one append."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @contextmanager
    def join(self, parts: list[bytes | memoryview]) -> Iterator[memoryview]:
        """A view of ``parts`` joined, valid inside the ``with``."""
        size = sum(len(part) for part in parts)
        if len(self._buffer) < size:
            self._buffer = bytearray(size)
        with memoryview(self._buffer) as view:
            at = 0
            for part in parts:
                view[at : at + len(part)] = part
                at += len(part)
            with view[:size] as joined:
                yield joined


async def send_parts(stream: trio.abc.Stream, parts: list[bytes | memoryview]) -> None:
    """Send ``parts`` in order: gathered by the kernel on a socket, else joined."""
    if not isinstance(stream, trio.SocketStream):
        await stream.send_all(b"".join(parts))
        return
    views = [memoryview(part) for part in parts if part]
    while views:
        sent = await stream.socket.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if sent:
            views[0] = views[0][sent:]
