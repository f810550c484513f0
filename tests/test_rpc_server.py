"""Two roles in one node sharing a request code: fallbacks and observers of RpcServer."""

from __future__ import annotations

import trio

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer


def answering(text: bytes):
    async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(body=text)
    return handle


async def test_a_fallback_answers_until_a_handler_is_registered_and_observers_see_all() -> None:
    transport = InprocTransport(InprocNetwork("shared-code"), "inproc://client")
    server = RpcServer()
    seen: list[int] = []
    server.register_fallback(904, answering(b"name server"), inline=True)
    server.observe(904, lambda request, peer: seen.append(request.opaque))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen("inproc://server"))
        connection = RpcConnection(await transport.connect(address))
        await nursery.start(connection.run)
        assert (await connection.invoke(904)).body == b"name server"
        server.register(904, answering(b"controller"))
        assert (await connection.invoke(904)).body == b"controller"
        assert len(seen) == 2
        nursery.cancel_scope.cancel()
