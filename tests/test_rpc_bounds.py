"""What a silent or numerous peer can hold on an RPC port: bounded in time and count."""

from __future__ import annotations

import trio

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import ConnectionLimits, RpcConnection, RpcServer


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
