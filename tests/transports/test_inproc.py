"""The inproc transport: the plugin, addressing, and every kind of injected fault."""

from __future__ import annotations

import re

import pytest
import trio
import trio.testing

from triomq.errors import ConfigError
from triomq.plugins.transport_inproc import (
    InprocNetwork,
    InprocStream,
    InprocTransport,
    forget_network,
    get_network,
    triomq_transport,
)
from triomq.testing.transport_suite import read_until_closed, receive_exactly, transfer
from triomq.transport import TransportError

A = "inproc://a"
B = "inproc://b"


@pytest.fixture
def network() -> InprocNetwork:
    return InprocNetwork("test-inproc", seed=7)


async def pair(network: InprocNetwork, client: str = A, server: str = B
               ) -> tuple[InprocStream, InprocStream]:
    """A connection from ``client`` to a listener on ``server``."""
    listener = await InprocTransport(network, server).listen(server)
    stream = await InprocTransport(network, client).connect(server)
    accepted = await listener.accept()
    await listener.aclose()
    return stream, accepted


def test_plugin_builds_transports_from_options() -> None:
    factory = triomq_transport()["inproc"]
    transport = factory({"network": "test-plugin", "local": "node-1", "connect_timeout": 2,
                         "backlog": 4})
    assert isinstance(transport, InprocTransport)
    assert transport.scheme == "inproc"
    assert transport.network is get_network("test-plugin")
    assert transport.local == "inproc://node-1"
    assert transport.connect_timeout == 2.0
    assert factory({}).network is get_network()
    forget_network("test-plugin")
    assert get_network("test-plugin") is not transport.network


@pytest.mark.parametrize(("options", "path"), [
    ({"colour": "red"}, re.escape("transport.options.inproc: unknown option(s) colour")),
    ({"network": 5}, "transport.options.inproc.network"),
    ({"local": 5}, "transport.options.inproc.local"),
    ({"local": "tcp://h:1"}, "not an inproc:// address"),
    ({"connect_timeout": 0}, "transport.options.inproc.connect_timeout"),
    ({"connect_timeout": True}, "transport.options.inproc.connect_timeout"),
    ({"backlog": 0}, "transport.options.inproc.backlog"),
])
def test_plugin_rejects_bad_options(options: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError, match=path):
        InprocTransport.from_options(options)


async def test_networks_are_isolated() -> None:
    first, second = InprocNetwork("first"), InprocNetwork("second")
    listener = await InprocTransport(first).listen(B)
    with pytest.raises(TransportError, match="nothing listens there"):
        await InprocTransport(second).connect(B)
    await listener.aclose()


async def test_addresses_and_names(network: InprocNetwork) -> None:
    client, server = await pair(network, "a", "b")
    assert (client.local_address, client.remote_address) == (A, B)
    assert (server.local_address, server.remote_address) == (B, A)
    assert InprocTransport(network).local.startswith("inproc://anonymous-")
    [connection] = network.connections("a")
    assert connection.client is client and connection.server is server
    assert network.connections(A, B) == network.connections(B, A) == [connection]
    assert network.connections("c") == []
    await client.aclose()
    await server.aclose()
    assert network.connections() == []


async def test_connect_names_its_own_end(network: InprocNetwork) -> None:
    listener = await InprocTransport(network, B).listen(B)
    stream = await InprocTransport(network, A).connect(B, local="inproc://other")
    accepted = await listener.accept()
    assert accepted.remote_address == "inproc://other"
    for resource in (stream, accepted, listener):
        await resource.aclose()


async def test_symmetric_partition_holds_bytes_until_heal(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    client, server = await pair(network)
    network.partition("a", "b")
    await client.send_all(b"held")
    await server.send_all(b"held too")
    with trio.move_on_after(10) as waited:
        await server.receive_some()
    assert waited.cancelled_caught
    network.heal()
    assert await receive_exactly(server, 4) == b"held"
    assert await receive_exactly(client, 8) == b"held too"


async def test_one_way_partition(network: InprocNetwork,
                                 autojump_clock: trio.testing.MockClock) -> None:
    client, server = await pair(network)
    network.partition(A, B, one_way=True)
    await server.send_all(b"flows")
    assert await receive_exactly(client, 5) == b"flows"
    await client.send_all(b"stuck")
    with trio.move_on_after(10) as waited:
        await server.receive_some()
    assert waited.cancelled_caught
    network.heal(A, B)
    assert await receive_exactly(server, 5) == b"stuck"


async def test_isolate_and_heal_one_endpoint(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    client, server = await pair(network)
    network.isolate(B)
    assert network.blocked(A, B) and network.blocked(B, A)
    network.partition(A, "c")
    network.heal(B)
    assert not network.blocked(A, B)
    assert network.blocked(A, "inproc://c")
    assert await transfer(client, server, b"ok") == b"ok"


async def test_a_partition_blocks_eof_too(network: InprocNetwork,
                                          autojump_clock: trio.testing.MockClock) -> None:
    client, server = await pair(network)
    network.partition(A, B)
    await client.aclose()
    with trio.move_on_after(10) as waited:
        await server.receive_some()
    assert waited.cancelled_caught
    network.heal()
    assert await server.receive_some() == b""


async def test_a_full_link_blocks_the_sender(autojump_clock: trio.testing.MockClock) -> None:
    network = InprocNetwork(buffer_size=1000)
    client, server = await pair(network)
    network.partition(A, B)
    with trio.move_on_after(10) as waited:
        await client.send_all(b"x" * 5000)
    assert waited.cancelled_caught
    with trio.move_on_after(10) as waited:
        await client.wait_send_all_might_not_block()
    assert waited.cancelled_caught
    network.heal()
    assert await server.receive_some() == b"x" * 1000
    await client.wait_send_all_might_not_block()


async def test_connect_waits_out_a_partition_until_its_timeout(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    listener = await InprocTransport(network, B).listen(B)
    client = InprocTransport(network, A, connect_timeout=3)
    network.partition(B, A, one_way=True)  # the answer to the handshake is lost
    start = trio.current_time()
    with pytest.raises(TransportError, match="timed out after 3 s"):
        await client.connect(B)
    assert trio.current_time() - start == pytest.approx(3)

    async def heal_soon() -> None:
        await trio.sleep(1)
        network.heal()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heal_soon)
        stream = await client.connect(B)
    assert trio.current_time() - start == pytest.approx(4)
    await stream.aclose()
    await listener.aclose()


async def test_delay_and_seeded_jitter(autojump_clock: trio.testing.MockClock) -> None:
    async def arrivals(seed: int) -> list[float]:
        network = InprocNetwork(seed=seed)
        client, server = await pair(network)
        network.delay(A, B, 0.1, jitter=0.05, one_way=True)
        start = trio.current_time()
        times = []
        for index in range(5):
            await client.send_all(bytes([index]))
            await server.receive_some()
            times.append(round(trio.current_time() - start, 9))
        network.heal()
        await client.aclose()
        await server.aclose()
        return times

    first = await arrivals(1)
    assert all(0.1 <= later - earlier <= 0.15
               for earlier, later in zip([0.0, *first], first, strict=False))
    assert first == await arrivals(1)
    assert first != await arrivals(2)


async def test_slow_link(network: InprocNetwork,
                         autojump_clock: trio.testing.MockClock) -> None:
    client, server = await pair(network)
    network.slow(A, B, 10_000)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, b"x" * 200_000)
        assert await receive_exactly(server, 200_000) == b"x" * 200_000
    assert trio.current_time() - start == pytest.approx(20)


async def test_drop_resets_connections_reproducibly(
        autojump_clock: trio.testing.MockClock) -> None:
    async def sends_until_dropped(seed: int) -> int:
        network = InprocNetwork(seed=seed)
        client, server = await pair(network)
        network.drop(A, B, 0.2)
        for count in range(1000):
            try:
                await client.send_all(b"x")
            except trio.BrokenResourceError:
                with pytest.raises(trio.BrokenResourceError):
                    await server.receive_some()
                return count
        raise AssertionError("the connection was never dropped")

    assert await sends_until_dropped(3) == await sends_until_dropped(3)
    assert {await sends_until_dropped(seed) for seed in range(10)} != {0}


async def test_reset(network: InprocNetwork) -> None:
    client, server = await pair(network)
    await client.send_all(b"discarded")
    assert network.reset("b") == 1
    for operation in (client.receive_some(), server.receive_some(), client.send_all(b"x"),
                      server.send_all(b"x")):
        with pytest.raises(trio.BrokenResourceError, match="reset by fault injection"):
            await operation
    assert network.connections() == []
    assert network.reset() == 0


async def test_graceful_close(network: InprocNetwork) -> None:
    client, server = await pair(network)
    await client.send_all(b"in flight")
    assert network.close(A, B) == 1
    assert await read_until_closed(server) == b"in flight"
    assert await client.receive_some() == b""
    with pytest.raises(trio.BrokenResourceError, match="closed by fault injection"):
        await server.send_all(b"x")


async def test_fault_arguments_are_checked(network: InprocNetwork) -> None:
    with pytest.raises(ValueError, match="latency"):
        network.delay(A, B, -1)
    with pytest.raises(ValueError, match="bytes_per_second"):
        network.slow(A, B, 0)
    with pytest.raises(ValueError, match="probability"):
        network.drop(A, B, 1.5)
    with pytest.raises(ConfigError, match="not an inproc:// address"):
        network.partition("tcp://h:1", B)


async def test_backlog_and_closing_a_listener(network: InprocNetwork) -> None:
    listener = await InprocTransport(network, B, backlog=1).listen(B)
    client = InprocTransport(network, A)
    waiting = await client.connect(B)
    with pytest.raises(TransportError, match="backlog full"):
        await client.connect(B)
    await listener.aclose()
    # The connection nobody accepted is refused now.
    with pytest.raises(trio.BrokenResourceError, match="listener closed before accepting"):
        await waiting.receive_some()
    assert network.listening() == []
    with pytest.raises(TransportError, match="nothing listens"):
        await client.connect(B)


async def test_bad_receive_sizes(network: InprocNetwork) -> None:
    client, _ = await pair(network)
    with pytest.raises(ValueError, match="at least 1"):
        await client.receive_some(0)
    with pytest.raises(TypeError):
        await client.receive_some(1.5)  # type: ignore[arg-type]
