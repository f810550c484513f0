"""The inproc transport and its listener."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from triomq.errors import ConfigError
from triomq.plugins.transport_inproc.network import SCHEME, InprocNetwork, get_network, normalize
from triomq.plugins.transport_inproc.stream import InprocStream

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_BACKLOG = 128


class InprocListener(trio.abc.Listener[InprocStream]):
    """Accepts connections made to ``address`` on its network."""

    def __init__(self, network: InprocNetwork, address: str, backlog: int) -> None:
        self.network = network
        self.address = address
        self._send, self._receive = trio.open_memory_channel[InprocStream](backlog)

    def __repr__(self) -> str:
        return f"<InprocListener {self.address}>"

    def offer(self, stream: InprocStream) -> bool:
        """Queue a new connection's server end; ``False`` when the backlog is full."""
        try:
            self._send.send_nowait(stream)
        except trio.WouldBlock:
            return False
        return True

    async def accept(self) -> InprocStream:
        return await self._receive.receive()

    async def aclose(self) -> None:
        self.network.remove_listener(self)
        # Connections never accepted are refused now.
        while True:
            try:
                stream = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.ClosedResourceError):
                break
            stream.connection.reset(f"{self.address}: listener closed before accepting")
        self._receive.close()
        await trio.lowlevel.checkpoint()


class InprocTransport:
    """Connects and listens on an ``InprocNetwork``.

    ``local`` is the address this transport's outgoing connections come
    from, the name fault injection uses for this end (default: a fresh
    ``inproc://anonymous-N``). A host running several nodes in one process
    gives each node its own transport with its own ``local``.
    """

    scheme = SCHEME

    def __init__(self, network: InprocNetwork | None = None, local: str | None = None, *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 backlog: int = DEFAULT_BACKLOG) -> None:
        self.network = network if network is not None else get_network()
        self.local = normalize(local) if local is not None else self.network.anonymous_address()
        self.connect_timeout = connect_timeout
        self.backlog = backlog

    def __repr__(self) -> str:
        return f"<InprocTransport {self.local} on {self.network!r}>"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> InprocTransport:
        """Build from ``[transport.options.inproc]``.

        Keys: ``network`` (a name, or an ``InprocNetwork``; default the
        process-wide ``"default"``), ``local`` (this node's address),
        ``connect_timeout`` (seconds, default 5), ``backlog`` (default 128).
        """
        unknown = set(options) - {"network", "local", "connect_timeout", "backlog"}
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))}",
                              "transport.options.inproc")
        network = options.get("network", "default")
        if isinstance(network, str):
            network = get_network(network)
        elif not isinstance(network, InprocNetwork):
            raise ConfigError(f"expected a network name, got {network!r}",
                              "transport.options.inproc.network")
        local = options.get("local")
        if local is not None and not isinstance(local, str):
            raise ConfigError(f"expected an address, got {local!r}",
                              "transport.options.inproc.local")
        connect_timeout = options.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int | float) \
                or connect_timeout <= 0:
            raise ConfigError(f"expected seconds > 0, got {connect_timeout!r}",
                              "transport.options.inproc.connect_timeout")
        backlog = options.get("backlog", DEFAULT_BACKLOG)
        if isinstance(backlog, bool) or not isinstance(backlog, int) or backlog < 1:
            raise ConfigError(f"expected an integer >= 1, got {backlog!r}",
                              "transport.options.inproc.backlog")
        return cls(network, local, connect_timeout=float(connect_timeout), backlog=backlog)

    async def connect(self, address: str, *, local: str | None = None) -> InprocStream:
        """Connect to ``address`` from ``local`` (default: this transport's ``local``)."""
        source = normalize(local) if local is not None else self.local
        return await self.network.connect(source, normalize(address), self.connect_timeout)

    async def listen(self, address: str) -> InprocListener:
        """Listen on ``address``; ``TransportError`` if something already does."""
        await trio.lowlevel.checkpoint()
        listener = InprocListener(self.network, normalize(address), self.backlog)
        self.network.add_listener(listener)
        return listener
