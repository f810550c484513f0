"""What a silent or numerous peer can hold on an RPC port: bounded in time and count."""

from __future__ import annotations

import pytest
import trio

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import ConnectionLimits, RpcConnection, RpcConnectionError, RpcServer


async def echo(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
    return RemotingCommand.response(body=request.body)


async def test_a_silent_connection_is_closed_after_the_idle_timeout(autojump_clock) -> None:
    network = InprocNetwork("idle")
    transport = InprocTransport(network, "inproc://client")
    server = RpcServer({1: echo}, limits=ConnectionLimits(idle_timeout=5.0))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("inproc://server"))
        silent = await transport.connect(address)
        busy = RpcConnection(await transport.connect(address),
                             limits=ConnectionLimits(idle_timeout=float("inf")))
        await nursery.start(busy.run)
        for _ in range(20):  # a request every 2 s keeps the busy one open for 40 s
            await trio.sleep(2.0)
            assert (await busy.invoke(1, body=b"x")).body == b"x"
        assert len(server.connections) == 1
        assert await silent.receive_some(10) == b""  # closed by the server
        nursery.cancel_scope.cancel()


async def test_connections_beyond_the_cap_are_closed_and_the_others_served(
        autojump_clock) -> None:
    network = InprocNetwork("cap")
    transport = InprocTransport(network, "inproc://client")
    server = RpcServer({1: echo}, max_connections=3)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("inproc://server"))
        kept = []
        for _ in range(3):
            connection = RpcConnection(await transport.connect(address))
            await nursery.start(connection.run)
            assert (await connection.invoke(1, body=b"ok")).body == b"ok"
            kept.append(connection)
        extra = [await transport.connect(address) for _ in range(5)]
        for stream in extra:
            assert await stream.receive_some(10) == b""
        assert server.refused == 5
        for connection in kept:
            assert (await connection.invoke(1, body=b"still")).body == b"still"
        nursery.cancel_scope.cancel()


async def test_one_peer_cannot_take_the_connections_of_others(autojump_clock) -> None:
    network = InprocNetwork("per-peer")
    greedy = InprocTransport(network, "inproc://greedy")
    other = InprocTransport(network, "inproc://other")
    server = RpcServer({1: echo}, max_connections=10, max_connections_per_peer=4)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await greedy.listen("inproc://server"))
        held = [await greedy.connect(address) for _ in range(4)]
        refused = [await greedy.connect(address) for _ in range(3)]
        for stream in refused:
            assert await stream.receive_some(10) == b""
        assert server.refused == 3
        served = RpcConnection(await other.connect(address))
        await nursery.start(served.run)
        assert (await served.invoke(1, body=b"in")).body == b"in"
        # A connection of the greedy peer that closes makes room for another of it.
        await held.pop().aclose()
        while len(server.connections) > 4:
            await trio.sleep(0.01)
        again = RpcConnection(await greedy.connect(address))
        await nursery.start(again.run)
        assert (await again.invoke(1, body=b"back")).body == b"back"
        nursery.cancel_scope.cancel()


async def test_a_request_over_the_ext_fields_limit_is_answered_and_the_connection_goes_on(
        autojump_clock) -> None:
    network = InprocNetwork("fields")
    transport = InprocTransport(network, "inproc://client")
    server = RpcServer({1: echo}, limits=ConnectionLimits(max_ext_fields=8))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("inproc://server"))
        client = RpcConnection(await transport.connect(address))
        await nursery.start(client.run)
        answer = await client.invoke(1, {f"k{i}": "v" for i in range(9)}, b"never handled")
        assert answer.code == 1  # SYSTEM_ERROR, as RocketMQ answers a header it cannot decode
        assert answer.remark == ("request code 1 refused: the header holds 9 extFields; the "
                                 "maximum is 8")
        assert answer.body == b""
        assert (await client.invoke(1, {"k": "v"}, b"fine")).body == b"fine"
        (connection,) = server.connections
        assert connection.refused_over_limit == 1
        nursery.cancel_scope.cancel()


async def test_a_response_over_the_ext_fields_limit_closes_the_connection(
        autojump_clock) -> None:
    async def many_fields(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(ext_fields={f"k{i}": "v" for i in range(9)})

    network = InprocNetwork("answers")
    transport = InprocTransport(network, "inproc://client")
    server = RpcServer({1: many_fields})
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("inproc://server"))
        client = RpcConnection(await transport.connect(address),
                               limits=ConnectionLimits(max_ext_fields=8))
        await nursery.start(client.run)
        with pytest.raises(RpcConnectionError, match="response over a limit"):
            await client.invoke(1)
        assert client.closed
        nursery.cancel_scope.cancel()
