"""The RPC server: accepts connections and answers requests by code."""

from __future__ import annotations

from collections.abc import Mapping

import trio

from framework.rpc.connection import ConnectionLimits, Handler, RpcConnection, log
from framework.transport import Listener


class RpcServer:
    """Serves RPC connections accepted from listeners with handlers registered by code."""

    def __init__(self, handlers: Mapping[int, Handler] | None = None, *,
                 limits: ConnectionLimits | None = None) -> None:
        self.limits = limits if limits is not None else ConnectionLimits()
        self._handlers: dict[int, Handler] = dict(handlers or {})
        self._inline: set[int] = set()
        #: The connections being served right now.
        self.connections: set[RpcConnection] = set()

    def register(self, code: int, handler: Handler, *, inline: bool = False) -> None:
        """Answer requests with ``code`` with ``handler``; also on connections already open.

        By default the connection's worker task that read the request runs
        the handler, and wakes another worker to read on, so a handler that
        waits holds up no other request. An ``inline`` handler runs while
        the connection reads nothing else, which saves that task switch:
        only for handlers that never wait (they look at memory and answer).
        """
        if code in self._handlers:
            raise ValueError(f"request code {code} already has a handler")
        self._handlers[code] = handler
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
            nursery.start_soon(self._serve_connection,
                               RpcConnection(stream, handlers=self._handlers, inline=self._inline,
                                             limits=self.limits))

    async def _serve_connection(self, connection: RpcConnection) -> None:
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
