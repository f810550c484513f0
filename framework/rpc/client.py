"""The RPC client: one connection per address, reopened with backoff."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

import attrs
import trio

from triomq.protocol.remoting import RemotingCommand
from triomq.rpc.connection import DEFAULT_TIMEOUT, ConnectionLimits, Handler, RpcConnection
from triomq.rpc.errors import RpcConnectionError, RpcTimeout

Connect = Callable[[str], Awaitable[trio.abc.Stream]]
#: ``sign(code, ext_fields, body)``: the ext fields to send in their place.
Sign = Callable[[int, Mapping[str, str] | None, bytes], Mapping[str, str] | None]

#: Seconds a connection must have stayed open to count as a success even if
#: its peer never sent a frame (oneway-only traffic, e.g. Raft's pushes).
PROVEN_AFTER = 1.0


@attrs.frozen
class Backoff:
    """Delay before the n-th reconnect attempt: ``initial * multiplier**(n-1)``, capped."""

    initial: float = 0.05
    maximum: float = 5.0
    multiplier: float = 2.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failed attempts."""
        return min(self.maximum, self.initial * self.multiplier ** (failures - 1))


@attrs.define
class _Failures:
    count: int
    retry_at: float
    last_error: str


class RpcClient:
    """Calls by address over one connection per address. Build it with ``open_rpc_client``.

    A connection is opened on first use and again after it is lost. After
    a failed attempt the next one waits for the backoff delay, which grows
    exponentially with consecutive failures and resets once a peer answers;
    a call whose deadline comes before the next attempt fails at once with
    ``RpcConnectionError``. A connection the peer ends before sending
    anything and within ``PROVEN_AFTER`` seconds (a refused TLS handshake,
    a peer hanging up) counts as failed. Requests declare ``version`` (RocketMQ's
    ``MQVersion`` ordinal; 0 unless the client speaks for a release).
    """

    def __init__(self, connect: Connect, nursery: trio.Nursery, *,
                 handlers: Mapping[int, Handler] | None = None,
                 limits: ConnectionLimits | None = None, backoff: Backoff | None = None,
                 version: int = 0) -> None:
        self.limits = limits if limits is not None else ConnectionLimits()
        self.backoff = backoff if backoff is not None else Backoff()
        self.version = version
        self._connect = connect
        self._nursery = nursery
        self._handlers: Mapping[int, Handler] = handlers if handlers is not None else {}
        self._connections: dict[str, RpcConnection] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._failures: dict[str, _Failures] = {}
        #: Applied to every request before it is sent, as RocketMQ's RPCHook is: the
        #: admin tools sign their requests with it (``triomq.cli_credentials``).
        self.sign: Sign | None = None

    async def invoke(self, address: str, code: int, ext_fields: Mapping[str, str] | None = None,
                     body: bytes = b"", *, timeout: float = DEFAULT_TIMEOUT) -> RemotingCommand:
        """Send a request to ``address`` and return its response (whatever its code).

        ``timeout`` covers connecting too. Raises ``RpcTimeout`` or
        ``RpcConnectionError``.
        """
        if self.sign is not None:
            ext_fields = self.sign(code, ext_fields, body)
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            deadline = trio.current_time() + timeout
            connection = await self._connection_by(address, deadline)
            timeout = deadline - trio.current_time()
        return await connection.invoke(code, ext_fields, body, timeout=timeout)

    async def invoke_oneway(self, address: str, code: int,
                            ext_fields: Mapping[str, str] | None = None, body: bytes = b"", *,
                            timeout: float = DEFAULT_TIMEOUT) -> None:
        """Queue a request to ``address`` that gets no response."""
        if self.sign is not None:
            ext_fields = self.sign(code, ext_fields, body)
        deadline = trio.current_time() + timeout
        connection = await self._connection_by(address, deadline)
        await connection.invoke_oneway(code, ext_fields, body,
                                       timeout=deadline - trio.current_time())

    async def connection(self, address: str, *, deadline: float = math.inf) -> RpcConnection:
        """The open connection to ``address``, opening it if needed.

        While backing off after failed attempts, waits for the next attempt
        if it comes before ``deadline``, else fails at once.
        """
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        lock = self._locks.setdefault(address, trio.Lock())
        async with lock:
            connection = self._connections.get(address)
            if connection is not None and not connection.closed:
                return connection
            return await self._open(address, deadline)

    async def _connection_by(self, address: str, deadline: float) -> RpcConnection:
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        with trio.move_on_at(deadline):
            return await self.connection(address, deadline=deadline)
        raise RpcTimeout(f"{address}: not connected by the call's deadline")

    async def close(self, address: str) -> None:
        """Close the connection to ``address`` if one is open."""
        connection = self._connections.pop(address, None)
        if connection is not None:
            await connection.aclose()

    async def _open(self, address: str, deadline: float) -> RpcConnection:
        previous = self._connections.pop(address, None)
        if previous is not None:
            # One that ended at once, before its peer said anything (a TLS
            # handshake refused, a peer hanging up), counts as a failed attempt;
            # one that carried only oneway frames for a while proved the peer.
            if previous.frames_received or previous.closed_locally or _lived(previous):
                self._failures.pop(address, None)
            else:
                self._failed(address, previous.close_reason or "closed")
        failures = self._failures.get(address)
        now = trio.current_time()
        if failures is not None and failures.retry_at <= deadline:
            await trio.sleep_until(failures.retry_at)
        elif failures is not None and now < failures.retry_at:
            raise RpcConnectionError(
                f"{address}: {failures.count} connect attempts failed (last: "
                f"{failures.last_error}); next attempt in {failures.retry_at - now:.3f} s")
        try:
            stream = await self._connect(address)
        except OSError as exc:
            reason = _without_address(str(exc), address)
            self._failed(address, reason)
            raise RpcConnectionError(f"cannot connect to {address}: {reason}") from exc
        connection = RpcConnection(stream, handlers=self._handlers, limits=self.limits,
                                   peer=address, version=self.version)
        # Shown to other callers only once open: until then the stream's first
        # write (a TLS handshake) is in progress, and a caller's write beside it
        # would fail. They wait on the address's lock meanwhile.
        await self._nursery.start(connection.run)
        self._connections[address] = connection
        return connection

    def _failed(self, address: str, error: str) -> None:
        failures = self._failures.get(address)
        count = failures.count + 1 if failures is not None else 1
        self._failures[address] = _Failures(count, trio.current_time() + self.backoff.delay(count),
                                            error)


def _lived(connection: RpcConnection) -> bool:
    opened, closed = connection.opened_at, connection.closed_at
    return opened is not None and closed is not None and closed - opened >= PROVEN_AFTER


@asynccontextmanager
async def open_rpc_client(connect: Connect, *, handlers: Mapping[int, Handler] | None = None,
                          limits: ConnectionLimits | None = None,
                          backoff: Backoff | None = None,
                          version: int = 0) -> AsyncIterator[RpcClient]:
    """An ``RpcClient`` whose connections live until the block ends.

    ``connect`` opens a stream to an address: a transport's ``connect``, or
    ``Node.connect``, which picks the transport by the address's scheme.
    ``handlers`` answer requests the far ends send back over the client's
    connections; ``version`` is what its requests declare.
    """
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield RpcClient(connect, nursery, handlers=handlers, limits=limits,
                                backoff=backoff, version=version)
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # Connection tasks never raise, so a group holds the block's own error.
        if len(group.exceptions) != 1:
            raise
        raise group.exceptions[0] from None


def _without_address(text: str, address: str) -> str:
    """A transport's error text without the address it starts with (the RPC error names
    it once) and without a second ``cannot connect``."""
    return text.removeprefix(f"{address}: ").removeprefix("cannot connect: ")
