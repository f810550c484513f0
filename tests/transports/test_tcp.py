"""The TCP transport: options, addresses, socket settings, timeouts and mutual TLS."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import trio
import trio.testing
import trustme

from triomq.errors import ConfigError
from triomq.plugins.transport_tcp import TcpTransport, TlsOptions, parse_address, triomq_transport
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import Backoff, RpcConnection, RpcConnectionError, RpcServer, open_rpc_client
from triomq.testing.transport_suite import connected_pair, transfer
from triomq.transport import TransportError

ECHO = 1


async def echo(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
    return RemotingCommand.response(body=request.body)


class Certificates:
    """A CA, a node certificate it signed, and files for both, under ``folder``."""

    def __init__(self, folder: Path, name: str = "good") -> None:
        self.ca = trustme.CA()
        self.ca_file = str(folder / f"{name}-ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.node_file = str(folder / f"{name}-node.pem")
        self.ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem \
            .write_to_path(self.node_file)

    def tls(self, **changes: object) -> TlsOptions:
        options = {"cert": self.node_file, "ca": self.ca_file, "require_client_cert": True,
                   **changes}
        return TlsOptions(**options)  # type: ignore[arg-type]


@pytest.fixture
def good(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path, "good")


@pytest.fixture
def other(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path, "other")


def test_plugin_builds_transports_from_options(good: Certificates) -> None:
    transport = triomq_transport()["tcp"]({
        "connect_timeout": 2, "handshake_timeout": 3, "keepalive": False, "keepalive_idle": 5,
        "keepalive_interval": 1, "keepalive_count": 2, "backlog": 16,
        "tls": {"cert": good.node_file, "ca": good.ca_file, "require_client_cert": True},
    })
    assert isinstance(transport, TcpTransport)
    assert transport.scheme == "tcp"
    assert transport.connect_timeout == 2.0
    assert transport.handshake_timeout == 3.0
    assert TcpTransport.from_options({}).handshake_timeout == 10.0
    assert not transport.keepalive
    assert transport.tls == good.tls()
    assert TcpTransport.from_options({}).tls is None


@pytest.mark.parametrize(("options", "message"), [
    ({"colour": 1}, "transport.options.tcp: unknown option(s) colour"),
    ({"connect_timeout": "soon"}, "transport.options.tcp.connect_timeout"),
    ({"connect_timeout": -1}, "transport.options.tcp.connect_timeout"),
    ({"handshake_timeout": 0}, "transport.options.tcp.handshake_timeout"),
    ({"backlog": 1.5}, "transport.options.tcp.backlog"),
    ({"keepalive": "yes"}, "transport.options.tcp.keepalive"),
    ({"tls": "on"}, "transport.options.tcp.tls: expected a table"),
    ({"tls": {"cert": 5}}, "transport.options.tcp.tls.cert: expected a str"),
    ({"tls": {"require_client_cert": "yes"}}, "tls.require_client_cert: expected a bool"),
    ({"tls": {"pem": "x"}}, "tls: unknown option(s) pem"),
    ({"tls": {"require_client_cert": True}}, "require_client_cert needs 'ca'"),
    ({"tls": {"key": "k.pem"}}, "'key' given without 'cert'"),
    ({"tls": {"ca": "/nonexistent/ca.pem"}}, "tls.ca: cannot load CA file"),
    ({"tls": {"cert": "/nonexistent/node.pem"}}, "tls.cert: cannot load certificate"),
])
def test_plugin_rejects_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        TcpTransport.from_options(options)


@pytest.mark.parametrize(("address", "expected"), [
    ("tcp://127.0.0.1:9876", ("127.0.0.1", 9876)),
    ("tcp://localhost:0", ("localhost", 0)),
    ("tcp://[::1]:10911", ("::1", 10911)),
])
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", [
    "127.0.0.1:1", "inproc://a", "tcp://127.0.0.1", "tcp://:80", "tcp://h:port",
    "tcp://h:70000",
])
def test_parse_bad_address(address: str) -> None:
    with pytest.raises(ConfigError, match="address"):
        parse_address(address)


async def test_port_zero_is_resolved_and_ipv6_works() -> None:
    transport = TcpTransport()
    listener = await transport.listen("tcp://127.0.0.1:0")
    assert re.fullmatch(r"tcp://127\.0\.0\.1:[1-9]\d*", listener.address)
    await listener.aclose()
    if not socket.has_ipv6:
        return
    try:
        listener = await transport.listen("tcp://[::1]:0")
    except TransportError:
        return  # no IPv6 loopback in this sandbox
    assert re.fullmatch(r"tcp://\[::1\]:[1-9]\d*", listener.address)
    client, server = await connected_pair(transport, listener)
    assert await transfer(client, server, b"v6") == b"v6"
    for resource in (client, server, listener):
        await resource.aclose()


async def test_cannot_connect_to_port_zero() -> None:
    with pytest.raises(ConfigError, match="port 0"):
        await TcpTransport().connect("tcp://127.0.0.1:0")


async def test_keepalive_on_both_ends() -> None:
    transport = TcpTransport(keepalive_idle=7, keepalive_interval=3, keepalive_count=4)
    listener = await transport.listen("tcp://127.0.0.1:0")
    client, server = await connected_pair(transport, listener)
    for stream in (client, server):
        sock = stream.socket
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 3
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    no_keepalive = TcpTransport(keepalive=False)
    other = await no_keepalive.connect(listener.address)
    assert other.socket.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    for resource in (client, server, other, listener):
        await resource.aclose()


async def test_connect_timeout(autojump_clock: trio.testing.MockClock) -> None:
    # A listener whose accept queue is full drops further handshakes: connects hang.
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        address = f"tcp://127.0.0.1:{full.getsockname()[1]}"
        transport = TcpTransport(connect_timeout=2)
        held = []
        with pytest.raises(TransportError, match="timed out after 2 s"):
            for _ in range(10):
                held.append(await transport.connect(address))
        for stream in held:
            await stream.aclose()


async def test_mutual_tls_round_trip(good: Certificates) -> None:
    transport = TcpTransport(tls=good.tls())
    server = RpcServer({ECHO: echo})
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("tcp://127.0.0.1:0"))
        async with open_rpc_client(transport.connect) as client:
            assert (await client.invoke(address, ECHO, body=b"secret")).body == b"secret"
            [connection] = server.connections
            # The peer's name is found through the TLS wrapper.
            assert re.fullmatch(r"127\.0\.0\.1:\d+", connection.peer)
        nursery.cancel_scope.cancel()


#: Per client: what the client's error says, what the server logs.
REFUSALS = {
    "no certificate": (
        "the server refused this node's certificate (certificate required)",
        "the client's certificate was refused (certificate required)"),
    "certificate of another CA": (
        "the server refused this node's certificate (unknown ca)",
        "the client's certificate was refused (certificate verify failed: unable to get "
        "local issuer certificate)"),
    "does not trust the server": (
        "the server's certificate was refused (certificate verify failed: self-signed "
        "certificate in certificate chain)",
        "the client refused this node's certificate (unknown ca)"),
    "wrong server name": (
        "the server's certificate was refused (certificate verify failed: Hostname mismatch",
        "the client refused this node's certificate (bad certificate)"),
}


@pytest.mark.parametrize("client_kind", list(REFUSALS))
async def test_mutual_tls_refusals_say_why_on_both_sides(
        good: Certificates, other: Certificates, client_kind: str,
        caplog: pytest.LogCaptureFixture) -> None:
    client_tls = {
        "no certificate": TlsOptions(ca=good.ca_file),
        "certificate of another CA": other.tls(ca=good.ca_file),
        "does not trust the server": other.tls(),
        "wrong server name": good.tls(server_hostname="elsewhere.example"),
    }[client_kind]
    client_says, server_logs = REFUSALS[client_kind]
    server = RpcServer({ECHO: echo})
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            server.serve, await TcpTransport(tls=good.tls()).listen("tcp://127.0.0.1:0"))
        # A minute's backoff: the second call below comes within it however busy the host.
        async with open_rpc_client(TcpTransport(tls=client_tls).connect,
                                   backoff=Backoff(initial=60, maximum=60)) as client:
            with pytest.raises(RpcConnectionError) as refused:
                await client.invoke(address, ECHO, timeout=10)
            assert f"TLS with {address}: {client_says}" in str(refused.value)
            # The server has logged the refusal by the time the client saw it.
            with trio.fail_after(5):
                while not any(server_logs in r.getMessage() for r in caplog.records):
                    await trio.sleep(0.01)
            [logged] = [r for r in caplog.records if server_logs in r.getMessage()]
            assert logged.name == "triomq.transport.tcp" and logged.levelname == "WARNING"
            assert re.match(rf"TLS with 127\.0\.0\.1:\d+ on {address}: ", logged.getMessage())
            # A refused handshake counts as a failed attempt: the client backs off.
            with pytest.raises(RpcConnectionError, match="next attempt in"):
                await client.invoke(address, ECHO, timeout=0.001)
        nursery.cancel_scope.cancel()


async def test_a_client_that_never_starts_tls_is_disconnected(
        good: Certificates, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    listener = await TcpTransport(tls=good.tls(), handshake_timeout=3).listen(
        "tcp://127.0.0.1:0")
    silent = await TcpTransport().connect(listener.address)  # plain TCP, sends nothing
    accepted = await listener.accept()
    start = trio.current_time()
    with pytest.raises(trio.BrokenResourceError, match="did not finish within 3 s"):
        await accepted.receive_some()
    assert trio.current_time() - start == pytest.approx(3)
    assert await silent.receive_some() == b""  # the server closed the connection
    assert any("did not finish within 3 s" in r.getMessage() for r in caplog.records)
    for resource in (silent, accepted, listener):
        await resource.aclose()


async def test_a_finished_handshake_has_no_deadline(
        good: Certificates, autojump_clock: trio.testing.MockClock) -> None:
    transport = TcpTransport(tls=good.tls(), handshake_timeout=3)
    listener = await transport.listen("tcp://127.0.0.1:0")
    client = await transport.connect(listener.address)
    accepted = await listener.accept()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, b"")  # the client's side of the handshake
        await accepted.send_all(b"")
    await trio.sleep(60)  # idle far past the handshake timeout
    await client.send_all(b"late")
    assert await accepted.receive_some() == b"late"
    for resource in (client, accepted, listener):
        await resource.aclose()


async def test_listening_with_tls_needs_a_certificate(good: Certificates) -> None:
    transport = TcpTransport(tls=TlsOptions(ca=good.ca_file))
    with pytest.raises(ConfigError, match="listening with TLS needs 'cert'"):
        await transport.listen("tcp://127.0.0.1:0")


async def test_listening_on_a_used_port() -> None:
    transport = TcpTransport()
    listener = await transport.listen("tcp://127.0.0.1:0")
    with pytest.raises(TransportError, match="cannot listen"):
        await transport.listen(listener.address)
    await listener.aclose()
