"""In-process byte streams: two one-way pipes per connection, shaped by the network's faults.

A pipe carries bytes from one endpoint to another. The sender stamps each
segment with the time it may be delivered (latency, jitter, bandwidth of the
link at send time); the receiver takes segments in order once their time has
come and the link is not partitioned. A pipe holds at most ``capacity``
bytes; a sender waits for room, like a full TCP window.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from triomq.plugins.transport_inproc.network import InprocNetwork

# Large writes are cut into segments so a slow link paces them gradually.
_SEGMENT = 64 * 1024


class Pipe:
    """Bytes from ``source`` to ``target`` (addresses), in order."""

    def __init__(self, connection: Connection, source: str, target: str, capacity: int) -> None:
        self.connection = connection
        self.network = connection.network
        self.source = source
        self.target = target
        self.capacity = capacity
        self._segment_size = min(_SEGMENT, capacity)
        self._segments: deque[tuple[float, bytes]] = deque()  # (deliver_at, data)
        self._buffered = 0
        self._head_used = 0  # bytes of the first segment already received
        self._eof = False
        self._send_error: type[Exception] | None = None
        self._send_reason = ""
        self._receive_error: type[Exception] | None = None
        self._receive_reason = ""
        self._free_at = -math.inf  # when a bandwidth-limited link is free again
        self._receivers = trio.lowlevel.ParkingLot()
        self._senders = trio.lowlevel.ParkingLot()

    def wake(self) -> None:
        """Re-check conditions (faults changed, the pipe was closed)."""
        self._receivers.unpark_all()
        self._senders.unpark_all()

    # -- state changes ---------------------------------------------------

    def close_sender(self, error: type[Exception], reason: str, *, force: bool = False) -> None:
        """No more sends: they raise ``error``; the receiver sees EOF after the data."""
        if force or self._send_error is None:
            self._send_error, self._send_reason = error, reason
        self._eof = True
        self.wake()

    def close_receiver(self, error: type[Exception], reason: str, *, force: bool = False) -> None:
        """No more receives: they raise ``error``; buffered data is discarded."""
        if force or self._receive_error is None:
            self._receive_error, self._receive_reason = error, reason
        if self._send_error is None:
            self._send_error, self._send_reason = trio.BrokenResourceError, "peer closed"
        self._segments.clear()
        self._buffered = 0
        self._head_used = 0
        self.wake()

    def reset(self, reason: str) -> None:
        """Reset: both ends get ``BrokenResourceError`` from now on."""
        self.close_receiver(trio.BrokenResourceError, reason)
        if self._send_error is not trio.ClosedResourceError:
            self._send_error, self._send_reason = trio.BrokenResourceError, reason

    # -- sending ---------------------------------------------------------

    async def wait_writable(self) -> None:
        await trio.lowlevel.checkpoint()
        while self._send_error is None and self._buffered >= self.capacity:
            await self._senders.park()
        if self._send_error is not None:
            raise self._send_error(self._send_reason)

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        view = memoryview(data)
        if not view:
            # Like TCP, an empty write sends nothing and so notices nothing
            # about the peer; only a stream closed here refuses it.
            if self._send_error is trio.ClosedResourceError:
                raise trio.ClosedResourceError(self._send_reason)
            return
        for start in range(0, len(view), self._segment_size):
            while self._send_error is None and self._buffered >= self.capacity:
                await self._senders.park()
            if self._send_error is not None:
                raise self._send_error(self._send_reason)
            segment = bytes(view[start:start + self._segment_size])
            link = self.network.link(self.source, self.target)
            if link.drop_rate and self.network.random.random() < link.drop_rate:
                self.connection.reset("connection dropped by fault injection")
                raise trio.BrokenResourceError("connection dropped by fault injection")
            deliver_at = -math.inf
            if link.shaped:
                now = trio.current_time()
                if link.bandwidth is not None:
                    self._free_at = max(now, self._free_at) + len(segment) / link.bandwidth
                    now = self._free_at
                deliver_at = now + link.latency
                if link.jitter:
                    deliver_at += self.network.random.uniform(0.0, link.jitter)
            self._segments.append((deliver_at, segment))
            self._buffered += len(segment)
            self._receivers.unpark_all()

    # -- receiving -------------------------------------------------------

    async def receive(self, max_bytes: int) -> bytes:
        await trio.lowlevel.checkpoint()
        while True:
            if self._receive_error is not None:
                raise self._receive_error(self._receive_reason)
            if (self._segments or self._eof) and self.network.blocked(self.source, self.target):
                await self._receivers.park()
                continue
            if self._segments:
                deliver_at = self._segments[0][0]
                if deliver_at != -math.inf:
                    now = trio.current_time()
                    if deliver_at > now:
                        with trio.move_on_at(deliver_at):
                            await self._receivers.park()
                        continue
                else:
                    now = -math.inf
                return self._take(max_bytes, now)
            if self._eof:
                return b""
            await self._receivers.park()

    def _take(self, max_bytes: int, now: float) -> bytes:
        parts = []
        wanted = max_bytes
        segments = self._segments
        while segments and wanted and segments[0][0] <= now:
            segment = segments[0][1]
            available = len(segment) - self._head_used
            if available <= wanted:
                parts.append(segment[self._head_used:] if self._head_used else segment)
                segments.popleft()
                self._head_used = 0
                wanted -= available
            else:
                parts.append(segment[self._head_used:self._head_used + wanted])
                self._head_used += wanted
                wanted = 0
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._buffered -= len(data)
        self._senders.unpark_all()
        return data


class InprocStream(trio.abc.HalfCloseableStream):
    """One end of an in-process connection.

    ``local_address`` is this end's address, ``remote_address`` the other's
    (for a connecting client: the transport's ``local`` address).
    """

    def __init__(self, connection: Connection, outgoing: Pipe, incoming: Pipe) -> None:
        self.connection = connection
        self.local_address = outgoing.source
        self.remote_address = outgoing.target
        self._outgoing = outgoing
        self._incoming = incoming
        self._sending = False
        self._receiving = False
        self.closed = False

    def __repr__(self) -> str:
        return f"<InprocStream {self.local_address} -> {self.remote_address}>"

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is already sending on this stream")
        self._sending = True
        try:
            await self._outgoing.send(data)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is already sending on this stream")
        self._sending = True
        try:
            await self._outgoing.wait_writable()
        finally:
            self._sending = False

    async def send_eof(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is already sending on this stream")
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise trio.ClosedResourceError("stream is closed")
        self._outgoing.close_sender(trio.ClosedResourceError, "EOF was sent on this stream")

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving on this stream")
        self._receiving = True
        try:
            return await self._incoming.receive(max_bytes or _SEGMENT)
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self._outgoing.close_sender(trio.ClosedResourceError, "stream is closed", force=True)
            self._incoming.close_receiver(trio.ClosedResourceError, "stream is closed", force=True)
            self.connection.end_closed()
        await trio.lowlevel.checkpoint()


class Connection:
    """Both ends of one in-process connection, as the network sees it."""

    def __init__(self, network: InprocNetwork, client: str, server: str, capacity: int) -> None:
        self.network = network
        self.client_address = client
        self.server_address = server
        upstream = Pipe(self, client, server, capacity)
        downstream = Pipe(self, server, client, capacity)
        self.pipes = (upstream, downstream)
        self.client = InprocStream(self, upstream, downstream)
        self.server = InprocStream(self, downstream, upstream)

    def __repr__(self) -> str:
        return f"<Connection {self.client_address} -> {self.server_address}>"

    def involves(self, a: str | None, b: str | None) -> bool:
        """Whether this connection joins ``a`` and ``b`` (``None`` matches anything)."""
        ends = (self.client_address, self.server_address)
        if a is not None and b is not None:
            return ends in ((a, b), (b, a))
        return (a is None and b is None) or (a or b) in ends

    def reset(self, reason: str) -> None:
        """Break both directions: every operation raises ``BrokenResourceError``."""
        for pipe in self.pipes:
            pipe.reset(reason)
        self.network.forget(self)

    def close(self, reason: str) -> None:
        """Close both directions gracefully: data in flight arrives, then EOF."""
        for pipe in self.pipes:
            pipe.close_sender(trio.BrokenResourceError, reason)
        self.network.forget(self)

    def end_closed(self) -> None:
        if self.client.closed and self.server.closed:
            self.network.forget(self)
