"""TCP streams (optionally TLS) for ``tcp://host:port`` addresses."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any

import trio

from triomq.errors import ConfigError
from triomq.plugins.transport_tcp.tls import TlsOptions
from triomq.plugins.transport_tcp.tls_stream import TlsStream
from triomq.transport import TransportError, os_reason, split_address

SCHEME = "tcp"
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_BACKLOG = 128
_PATH = "transport.options.tcp"
_OPTIONS = {"connect_timeout", "handshake_timeout", "keepalive", "keepalive_idle",
            "keepalive_interval", "keepalive_count", "backlog", "tls"}


def parse_address(address: str) -> tuple[str, int]:
    """``"tcp://h:1"`` or ``"tcp://[::1]:1"`` -> ``(host, port)``; a ConfigError if malformed."""
    scheme, rest = split_address(address)
    if scheme != SCHEME:
        raise ConfigError(f"address {address!r}: not a {SCHEME}:// address")
    host, sep, port_text = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"address {address!r}: expected tcp://host:port")
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """The inverse of ``parse_address``."""
    return f"{SCHEME}://[{host}]:{port}" if ":" in host else f"{SCHEME}://{host}:{port}"


class TcpListener(trio.abc.Listener[trio.abc.Stream]):
    """A bound TCP listener; ``address`` has the port resolved.

    Accepted TLS streams do their handshake on first use, so a slow client
    does not hold up ``accept``; a client that has not finished it within the
    transport's ``handshake_timeout`` is disconnected (``TlsStream``).
    """

    def __init__(self, listener: trio.SocketListener, address: str, transport: TcpTransport,
                 context: ssl.SSLContext | None) -> None:
        self.address = address
        self._listener = listener
        self._transport = transport
        self._context = context

    def __repr__(self) -> str:
        return f"<TcpListener {self.address}{' tls' if self._context else ''}>"

    async def accept(self) -> trio.abc.Stream:
        stream = await self._listener.accept()
        self._transport.configure(stream)
        if self._context is None:
            return stream
        return TlsStream(trio.SSLStream(stream, self._context, server_side=True),
                         server_side=True, handshake_timeout=self._transport.handshake_timeout,
                         local=self.address)

    async def aclose(self) -> None:
        await self._listener.aclose()


class TcpTransport:
    """Connects and listens over TCP, with TLS when ``tls`` is given.

    ``keepalive`` turns on TCP keepalive probes: after ``keepalive_idle``
    seconds of silence, every ``keepalive_interval`` seconds, giving up after
    ``keepalive_count`` unanswered probes. TCP_NODELAY is always on (trio's
    default): RPC frames are small and latency-bound. With TLS, a handshake
    (on a stream's first use, either side) must finish within
    ``handshake_timeout`` seconds, else the connection is closed.
    """

    scheme = SCHEME

    def __init__(self, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT, keepalive: bool = True,
                 keepalive_idle: int = 30, keepalive_interval: int = 10,
                 keepalive_count: int = 3, backlog: int = DEFAULT_BACKLOG,
                 tls: TlsOptions | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.keepalive = keepalive
        self.keepalive_idle = keepalive_idle
        self.keepalive_interval = keepalive_interval
        self.keepalive_count = keepalive_count
        self.backlog = backlog
        self.tls = tls
        self._client_context = tls.client_context() if tls is not None else None
        self._server_context: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"<TcpTransport{' tls' if self.tls else ''}>"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TcpTransport:
        """Build from ``[transport.options.tcp]``: ``connect_timeout`` (seconds, default 5),
        ``handshake_timeout`` (seconds a TLS handshake may take, default 10),
        ``keepalive`` (default true), ``keepalive_idle`` / ``keepalive_interval`` (seconds)
        / ``keepalive_count``, ``backlog``, and a ``tls`` table (see ``TlsOptions``)."""
        unknown = set(options) - _OPTIONS
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))}", _PATH)
        kwargs: dict[str, Any] = {}
        for name in ("connect_timeout", "handshake_timeout"):
            if name in options:
                kwargs[name] = float(_number(options, name, allow_float=True))
        for name in ("keepalive_idle", "keepalive_interval", "keepalive_count", "backlog"):
            if name in options:
                kwargs[name] = _number(options, name, allow_float=False)
        if "keepalive" in options:
            if not isinstance(options["keepalive"], bool):
                raise ConfigError(f"expected true or false, got {options['keepalive']!r}",
                                  f"{_PATH}.keepalive")
            kwargs["keepalive"] = options["keepalive"]
        if "tls" in options:
            if not isinstance(options["tls"], Mapping):
                raise ConfigError(f"expected a table, got {options['tls']!r}", f"{_PATH}.tls")
            kwargs["tls"] = TlsOptions.from_options(options["tls"])
        return cls(**kwargs)

    def configure(self, stream: trio.SocketStream) -> None:
        """Apply socket options (keepalive) to a new connection."""
        if not self.keepalive:
            return
        sock = stream.socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", self.keepalive_idle),
                            ("TCP_KEEPINTVL", self.keepalive_interval),
                            ("TCP_KEEPCNT", self.keepalive_count)):
            if hasattr(socket, name):  # not every platform has all three
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)

    async def connect(self, address: str) -> trio.abc.Stream:
        """Connect within ``connect_timeout``.

        With TLS the handshake happens on the stream's first use, as with
        trio's own ``open_ssl_over_tcp_stream``, within ``handshake_timeout``;
        a failed handshake (say, a rejected certificate) surfaces there as
        ``trio.BrokenResourceError`` saying who refused what and why, its
        ``__cause__`` the ``ssl.SSLError``.
        """
        host, port = parse_address(address)
        if port == 0:
            raise ConfigError(f"address {address!r}: cannot connect to port 0")
        with trio.move_on_after(self.connect_timeout):
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                # trio's own text names the address again; the OS's reason says why.
                reason = os_reason(exc) or str(exc)
                raise TransportError(f"{address}: cannot connect: {reason}") from exc
            self.configure(stream)
            if self._client_context is None:
                return stream
            server_hostname = (self.tls.server_hostname if self.tls else None) or host
            return TlsStream(trio.SSLStream(stream, self._client_context,
                                            server_hostname=server_hostname),
                             server_side=False, handshake_timeout=self.handshake_timeout,
                             local=address)
        raise TransportError(f"{address}: connect timed out after {self.connect_timeout} s")

    async def listen(self, address: str) -> TcpListener:
        """Bind ``address`` (port 0 picks a free port, shown in the listener's ``address``)."""
        host, port = parse_address(address)
        context = self._server_listen_context()
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)
            family, type_, proto, _, sockaddr = infos[0]
            sock = trio.socket.socket(family, type_, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                await sock.bind(sockaddr)
                sock.listen(self.backlog)
            except BaseException:
                sock.close()
                raise
        except OSError as exc:
            raise TransportError(f"{address}: cannot listen: {exc}") from exc
        bound_host, bound_port = sock.getsockname()[:2]
        return TcpListener(trio.SocketListener(sock), format_address(bound_host, bound_port),
                           self, context)

    def _server_listen_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        if self._server_context is None:
            self._server_context = self.tls.server_context()
        return self._server_context


def _number(options: Mapping[str, Any], name: str, *, allow_float: bool) -> int | float:
    value = options[name]
    kinds = (int, float) if allow_float else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ConfigError(f"expected a number > 0, got {value!r}", f"{_PATH}.{name}")
    return value
