"""The transport conformance suite: what every ``triomq_transport`` implementation must do.

A transport is a factory of trio byte streams (``triomq.transport``).
To check one, subclass ``TransportConformance`` in a test module of your
own and provide three fixtures::

    import pytest
    from triomq.testing.transport_suite import TransportConformance
    from my_package import MyTransport

    class TestMyTransport(TransportConformance):
        @pytest.fixture
        def transport(self):
            return MyTransport()               # used to listen and to connect

        @pytest.fixture
        def listen_address(self):
            return "my://127.0.0.1:0"          # what the tests listen on

        @pytest.fixture
        def unreachable_address(self):
            return "my://127.0.0.1:1"          # nothing listens there

``from triomq.testing import TransportConformance`` imports the same class.
Listeners must be async context managers (``triomq.transport.Listener``);
a listener class that subclasses ``trio.abc.Listener`` is one.

The tests run under pytest-trio (they carry the ``trio`` mark, so trio
mode is not needed). ``triomq.testing.rpc_suite.RpcConformance`` takes
the same three fixtures and runs the RPC layer over the transport; a
transport should pass both.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from triomq.transport import (
    LISTENER_MEMBERS,
    Listener,
    Transport,
    TransportError,
    split_address,
)


def pattern(size: int, seed: int) -> bytes:
    """``size`` bytes that differ by ``seed`` and by position, to catch reordering."""
    return bytes((i * 7 + seed) & 0xFF for i in range(size))


async def receive_exactly(stream: trio.abc.Stream, size: int) -> bytes:
    """Read ``size`` bytes, failing if the stream ends first."""
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"stream ended after {len(data)} of {size} bytes"
        data += chunk
    return bytes(data)


async def transfer(sender: trio.abc.Stream, receiver: trio.abc.Stream, data: bytes) -> bytes:
    """Send ``data`` and read it on the other end at once: a stream may need its peer
    to take part in a write (a TLS handshake does)."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.send_all, data)
        return await receive_exactly(receiver, len(data))


async def warm_up(client: trio.abc.Stream, server: trio.abc.Stream) -> None:
    """A byte each way, so any handshake is over and closing needs no help from the peer."""
    assert await transfer(client, server, b"1") == b"1"
    assert await transfer(server, client, b"2") == b"2"


async def close_while_peer_reads(stream: trio.abc.Stream, peer: trio.abc.Stream) -> None:
    """Close ``stream`` gracefully while ``peer`` reads until it sees the close."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_until_closed, peer)
        await stream.aclose()


async def read_until_closed(stream: trio.abc.Stream) -> bytes:
    """Everything the peer sends until it closes (an EOF or a reset both count)."""
    data = bytearray()
    try:
        while chunk := await stream.receive_some(65536):
            data += chunk
    except trio.BrokenResourceError:
        pass
    return bytes(data)


async def connected_pair(transport: Transport,
                         listener: Listener) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """A client stream and the server stream the listener accepted for it."""
    async with trio.open_nursery() as nursery:
        accepted: list[trio.abc.Stream] = []

        async def accept() -> None:
            accepted.append(await listener.accept())

        nursery.start_soon(accept)
        client = await transport.connect(listener.address)
    return client, accepted[0]


class TransportConformance:
    """Base class of the suite; see the module docstring for the fixtures to provide."""

    pytestmark = pytest.mark.trio

    @pytest.fixture
    def transport(self) -> Transport:
        raise NotImplementedError("subclass TransportConformance and provide 'transport'")

    @pytest.fixture
    def listen_address(self) -> str:
        raise NotImplementedError("subclass TransportConformance and provide 'listen_address'")

    @pytest.fixture
    def unreachable_address(self) -> str:
        raise NotImplementedError(
            "subclass TransportConformance and provide 'unreachable_address'")

    async def test_satisfies_the_contract(self, transport: Transport,
                                          listen_address: str) -> None:
        assert isinstance(transport, Transport)
        assert split_address(listen_address)[0] == transport.scheme
        listener = await transport.listen(listen_address)
        try:
            lacks = [name for name in LISTENER_MEMBERS if not hasattr(listener, name)]
            assert not lacks, (f"{type(listener).__name__} lacks {', '.join(lacks)} of "
                               "triomq.transport.Listener (subclass trio.abc.Listener)")
            assert isinstance(listener, Listener)
            assert split_address(listener.address)[0] == transport.scheme
        finally:
            await listener.aclose()

    async def test_async_with_closes_the_listener(self, transport: Transport,
                                                  listen_address: str) -> None:
        async with await transport.listen(listen_address) as listener:
            assert isinstance(listener, Listener)
        with pytest.raises(TransportError):
            await transport.connect(listener.address)

    async def test_bytes_flow_both_ways(self, transport: Transport,
                                        listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with client, server, listener:
            assert await transfer(client, server, b"ping") == b"ping"
            assert await transfer(server, client, b"pong!") == b"pong!"

    async def test_large_transfers_both_ways_at_once(self, transport: Transport,
                                                     listen_address: str) -> None:
        # Both ends write 1 MiB before reading: a transport that cannot buffer
        # and read concurrently deadlocks here.
        size = 1024 * 1024
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        received: dict[str, bytes] = {}

        async def exchange(name: str, stream: trio.abc.Stream, seed: int) -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream.send_all, pattern(size, seed))
                received[name] = await receive_exactly(stream, size)

        async with client, server, listener, trio.open_nursery() as nursery:
            nursery.start_soon(exchange, "client", client, 1)
            nursery.start_soon(exchange, "server", server, 2)
        assert received["client"] == pattern(size, 2)
        assert received["server"] == pattern(size, 1)

    async def test_many_connections_at_once(self, transport: Transport,
                                            listen_address: str) -> None:
        listener = await transport.listen(listen_address)

        async def echo(stream: trio.abc.Stream) -> None:
            async with stream:
                while data := await stream.receive_some():
                    await stream.send_all(data)

        async def serve(nursery: trio.Nursery) -> None:
            for _ in range(20):
                nursery.start_soon(echo, await listener.accept())

        async def client(index: int) -> None:
            stream = await transport.connect(listener.address)
            async with stream:
                message = pattern(1000 + index, index)
                await stream.send_all(message)
                assert await receive_exactly(stream, len(message)) == message

        async with listener, trio.open_nursery() as nursery:
            nursery.start_soon(serve, nursery)
            async with trio.open_nursery() as clients:
                for index in range(20):
                    clients.start_soon(client, index)

    async def test_peer_sees_data_then_eof_after_close(self, transport: Transport,
                                                       listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with server, listener, trio.open_nursery() as nursery:
            async def send_and_close() -> None:
                await client.send_all(b"last words")
                await client.aclose()

            nursery.start_soon(send_and_close)
            assert await read_until_closed(server) == b"last words"

    async def test_closed_stream_refuses_use(self, transport: Transport,
                                             listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with server, listener:
            await warm_up(client, server)
            await close_while_peer_reads(client, server)
            await client.aclose()  # closing twice is fine
            with pytest.raises(trio.ClosedResourceError):
                await client.send_all(b"x")
            with pytest.raises(trio.ClosedResourceError):
                await client.receive_some()

    async def test_close_wakes_a_blocked_receive(self, transport: Transport,
                                                 listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with server, listener, trio.open_nursery() as nursery:
            await warm_up(client, server)

            async def receive() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await client.receive_some()

            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            await trio.aclose_forcefully(client)

    async def test_sending_to_a_closed_peer_breaks(self, transport: Transport,
                                                   listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with client, listener:
            await warm_up(client, server)
            await close_while_peer_reads(server, client)
            with pytest.raises(trio.BrokenResourceError):
                # TCP may take a write or two before the peer's reset arrives.
                for _ in range(1000):
                    await client.send_all(b"x" * 1024)
                    await trio.testing.wait_all_tasks_blocked()

    async def test_concurrent_receives_are_refused(self, transport: Transport,
                                                   listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with client, server, listener, trio.open_nursery() as nursery:
            nursery.start_soon(client.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await client.receive_some()
            await server.send_all(b"x")

    async def test_receive_some_honours_max_bytes(self, transport: Transport,
                                                  listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        async with client, server, listener, trio.open_nursery() as nursery:
            nursery.start_soon(server.send_all, pattern(100, 3))
            first = await client.receive_some(10)
            assert 1 <= len(first) <= 10
            rest = await receive_exactly(client, 100 - len(first))
            assert first + rest == pattern(100, 3)

    async def test_half_close_when_supported(self, transport: Transport,
                                             listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        client, server = await connected_pair(transport, listener)
        if not isinstance(client, trio.abc.HalfCloseableStream):
            for resource in (client, server, listener):
                await trio.aclose_forcefully(resource)
            pytest.skip(f"{type(client).__name__} is no trio.abc.HalfCloseableStream: "
                        "it cannot half-close")
        async with client, server, listener:
            async with trio.open_nursery() as nursery:
                async def ask() -> None:
                    await client.send_all(b"question")
                    await client.send_eof()

                nursery.start_soon(ask)
                assert await read_until_closed(server) == b"question"
            assert await transfer(server, client, b"answer") == b"answer"
            with pytest.raises(trio.ClosedResourceError):
                await client.send_all(b"more")

    async def test_passes_trios_stream_checks(self, transport: Transport,
                                              listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        pairs: list[tuple[trio.abc.Stream, trio.abc.Stream]] = []

        async def make_pair() -> tuple[trio.abc.Stream, trio.abc.Stream]:
            pairs.append(await connected_pair(transport, listener))
            return pairs[-1]

        try:
            client, server = await make_pair()
            half_closeable = isinstance(client, trio.abc.HalfCloseableStream)
            if half_closeable:
                await trio.testing.check_half_closeable_stream(make_pair, None)
            else:
                await trio.testing.check_two_way_stream(make_pair, None)
        finally:
            for client, server in pairs:
                await trio.aclose_forcefully(client)
                await trio.aclose_forcefully(server)
            await listener.aclose()

    async def test_connecting_to_nothing_fails(self, transport: Transport,
                                               unreachable_address: str) -> None:
        with pytest.raises(TransportError):
            await transport.connect(unreachable_address)

    async def test_one_address_one_listener(self, transport: Transport,
                                            listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        async with listener:
            with pytest.raises(TransportError):
                await transport.listen(listener.address)

    async def test_closing_a_listener(self, transport: Transport,
                                      listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        async with trio.open_nursery() as nursery:
            async def accept() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await listener.accept()

            nursery.start_soon(accept)
            await trio.testing.wait_all_tasks_blocked()
            await listener.aclose()
        with pytest.raises(TransportError):
            await transport.connect(listener.address)

    async def test_listening_again_after_close(self, transport: Transport,
                                               listen_address: str) -> None:
        listener = await transport.listen(listen_address)
        await listener.aclose()
        for _ in range(2):
            listener = await transport.listen(listen_address)
            await listener.aclose()
