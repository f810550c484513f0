"""The RPC server: accepts connections and answers requests by code."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import trio

from triomq.protocol.remoting import RemotingCommand
from triomq.rpc.connection import ConnectionLimits, Handler, RpcConnection, log
from triomq.rpc.peer import peer_host
from triomq.transport import Listener

#: Connections one server keeps open at once, by default.
DEFAULT_MAX_CONNECTIONS = 4096
#: Connections one server keeps open at once from one host, by default: a quarter
#: of the total, so that no one host can take every connection.
DEFAULT_MAX_CONNECTIONS_PER_PEER = 1024

#: ``guard(request, connection)``: a refusal to send instead of handling the request,
#: or ``None`` to let it through.
Guard = Callable[[RemotingCommand, RpcConnection], RemotingCommand | None]
#: ``check(request)``: a refusal of a malformed request, or ``None`` to let it through.
Check = Callable[[RemotingCommand], RemotingCommand | None]


class RpcServer:
    """Serves RPC connections accepted from listeners with handlers registered by code."""

    def __init__(self, handlers: Mapping[int, Handler] | None = None, *,
                 limits: ConnectionLimits | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER) -> None:
        self.limits = limits if limits is not None else ConnectionLimits()
        #: Connections served at once; one more is closed as soon as it is accepted,
        #: so a flood of peers cannot take every file descriptor of the node.
        self.max_connections = max_connections
        #: Connections served at once from one host (the peer's address less its
        #: port); one more from it is closed as soon as it is accepted, so one
        #: client cannot take the connections every other client needs.
        self.max_connections_per_peer = max_connections_per_peer
        #: Connections refused for either cap so far.
        self.refused = 0
        # Connections open per peer host.
        self._per_host: dict[str, int] = {}
        # Handlers as registered; what connections use is _table (rebuilt in place,
        # so connections already open see every change, at no cost per request).
        self._own: dict[int, tuple[Handler, bool]] = {
            code: (handler, False) for code, handler in (handlers or {}).items()}
        self._fallbacks: dict[int, tuple[Handler, bool]] = {}
        self._observers: dict[int, list[Callable[[RemotingCommand, RpcConnection], None]]] = {}
        self._guards: dict[int, Guard] = {}
        self._checks: dict[int, list[Check]] = {}
        self._handlers: dict[int, Handler] = {}
        self._inline: set[int] = set()
        self._rebuild()
        #: The connections being served right now.
        self.connections: set[RpcConnection] = set()
        #: Called with each connection once it is closed (a name server drops the
        #: brokers that registered on it).
        self.on_connection_closed: list[Callable[[RpcConnection], None]] = []

    def register(self, code: int, handler: Handler, *, inline: bool = False) -> None:
        """Answer requests with ``code`` with ``handler``; also on connections already open.

        By default the connection's worker task that read the request runs
        the handler, and wakes another worker to read on, so a handler that
        waits holds up no other request. An ``inline`` handler runs while
        the connection reads nothing else, which saves that task switch:
        only for handlers that never wait (they look at memory and answer).
        """
        if code in self._own:
            raise ValueError(f"request code {code} already has a handler")
        self._own[code] = (handler, inline)
        self._rebuild()

    def register_fallback(self, code: int, handler: Handler, *, inline: bool = False) -> None:
        """Answer ``code`` with ``handler`` while no plugin ``register``s one of its own.

        Two roles in one node may serve the same code: a name server answers
        BROKER_HEARTBEAT unless the node's embedded controller does.
        """
        self._fallbacks[code] = (handler, inline)
        self._rebuild()

    def observe(self, code: int, observer: Callable[[RemotingCommand, RpcConnection], None]
                ) -> None:
        """Call ``observer(request, connection)`` on each request with ``code``, before
        whichever handler answers it (it must not wait or raise)."""
        self._observers.setdefault(code, []).append(observer)
        self._rebuild()

    def guard(self, codes: Iterable[int], guard: Guard) -> None:
        """Ask ``guard(request, connection)`` first on each request with one of ``codes``:
        a response it returns is the answer, and neither observers nor the handler run.

        One guard per code, whichever handler (own or fallback) serves it: the
        node's admin-access rule (``triomq.admin_access``) is the one guard.
        """
        codes = tuple(codes)
        taken = [code for code in codes if code in self._guards]
        if taken:
            raise ValueError(f"request codes {taken} already have a guard")
        self._guards.update(dict.fromkeys(codes, guard))
        self._rebuild()

    def check(self, codes: Iterable[int], check: Check) -> None:
        """Ask ``check(request)`` on each request with one of ``codes``, after the guard and
        before observers and the handler: a response it returns is the answer.

        Any number of checks per code, asked in the order they were added; they
        validate what a request names (a role's rules for its fields) in one
        place for every handler that reads it.
        """
        for code in codes:
            self._checks.setdefault(code, []).append(check)
        self._rebuild()

    def _rebuild(self) -> None:
        table = {**self._fallbacks, **self._own}
        self._handlers.clear()
        self._inline.clear()
        for code, (handler, inline) in table.items():
            observers = self._observers.get(code)
            if observers:
                handler = _observed(handler, tuple(observers))
            checks = self._checks.get(code)
            if checks:
                handler = _checked(handler, tuple(checks))
            guard = self._guards.get(code)
            self._handlers[code] = handler if guard is None else _guarded(handler, guard)
            if inline:
                self._inline.add(code)

    async def serve(self, listener: Listener, *,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept and serve connections until cancelled; closes ``listener`` on exit.

        Reports ``listener.address`` through ``task_status``, so
        ``address = await nursery.start(server.serve, listener)`` works.
        """
        try:
            async with trio.open_nursery() as nursery:
                task_status.started(listener.address)
                await self._accept_loop(listener, nursery)
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()

    async def _accept_loop(self, listener: Listener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except trio.ClosedResourceError:
                return
            except OSError as exc:
                # Out of file descriptors and the like: wait for some to be freed.
                log.warning("accept on %s failed: %s", listener.address, exc)
                await trio.sleep(0.1)
                continue
            connection = RpcConnection(stream, handlers=self._handlers, inline=self._inline,
                                       limits=self.limits)
            host = peer_host(connection.peer)
            held = self._per_host.get(host, 0)
            if len(self.connections) >= self.max_connections:
                self._refuse(listener, f"{len(self.connections)} connections open, the cap "
                                       "(max_connections)")
                await trio.aclose_forcefully(stream)
                continue
            if held >= self.max_connections_per_peer:
                self._refuse(listener, f"{held} connections open from {host}, the cap per "
                                       "peer (max_connections_per_peer)")
                await trio.aclose_forcefully(stream)
                continue
            # Counted from the accept on, so a burst of accepts cannot pass the caps.
            self.connections.add(connection)
            self._per_host[host] = held + 1
            nursery.start_soon(self._serve_connection, connection, host)

    def _refuse(self, listener: Listener, why: str) -> None:
        self.refused += 1
        if self.refused & (self.refused - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...
            log.warning("%s: %s: refused %d connections so far", listener.address, why,
                        self.refused)

    async def _serve_connection(self, connection: RpcConnection, host: str) -> None:
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            held = self._per_host.pop(host) - 1
            if held:
                self._per_host[host] = held
            for callback in self.on_connection_closed:
                callback(connection)


def _guarded(handler: Handler, guard: Guard) -> Handler:
    async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand | None:
        refusal = guard(request, peer)
        if refusal is not None:
            return refusal
        return await handler(request, peer)

    return handle


def _checked(handler: Handler, checks: tuple[Check, ...]) -> Handler:
    async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand | None:
        for check in checks:
            refusal = check(request)
            if refusal is not None:
                return refusal
        return await handler(request, peer)

    return handle


def _observed(handler: Handler, observers: tuple[Callable[[RemotingCommand, RpcConnection], None],
                                                 ...]) -> Handler:
    async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand | None:
        for observer in observers:
            observer(request, peer)
        return await handler(request, peer)

    return handle
