"""The RPC conformance suite: ``triomq.rpc`` over a transport, good input and bad.

Takes the same three fixtures as ``TransportConformance`` (``transport``,
``listen_address``, ``unreachable_address``)::

    from triomq.testing.rpc_suite import RpcConformance

    class TestRpcOverMyTransport(MyTransportFixtures, RpcConformance):
        pass

Every test runs a real ``RpcServer`` on a listener of the transport and
real clients connected through it, so the same tests check the RPC layer
and the transport under it. The bad-input tests write broken frames on a
raw stream and check that the server closes that connection with a logged
reason while it keeps answering everyone else.
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from triomq.protocol.remoting import (
    REQUEST_CODE_NOT_SUPPORTED,
    SUCCESS,
    SYSTEM_BUSY,
    SYSTEM_ERROR,
    RemotingCommand,
    encode,
)
from triomq.rpc import (
    ConnectionLimits,
    RpcConnection,
    RpcConnectionError,
    RpcServer,
    RpcTimeout,
    open_rpc_client,
)
from triomq.testing.transport_suite import read_until_closed
from triomq.transport import Transport

ECHO = 1
FAIL = 2
SLEEP = 3
NOTE = 4
CALL_BACK = 5
DELAY = 6
UNKNOWN = 999


class Service:
    """The handlers the suite's server answers with, and what they saw."""

    def __init__(self) -> None:
        self.notes: list[bytes] = []
        self.noted = trio.Event()
        self.sleeping = 0

    async def echo(self, request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(ext_fields=request.ext_fields, body=request.body)

    async def fail(self, request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        raise ValueError("the handler failed")

    async def sleep(self, request: RemotingCommand, peer: RpcConnection) -> None:
        self.sleeping += 1
        try:
            await trio.sleep_forever()
        finally:
            self.sleeping -= 1

    async def note(self, request: RemotingCommand, peer: RpcConnection) -> None:
        self.notes.append(request.body)
        self.noted.set()

    async def delay(self, request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        """Echo after as many seconds as the body says."""
        await trio.sleep(float(request.body))
        return RemotingCommand.response(body=request.body)

    async def call_back(self, request: RemotingCommand, peer: RpcConnection
                        ) -> RemotingCommand:
        answer = await peer.invoke(ECHO, body=b"from the server: " + request.body, timeout=5)
        return RemotingCommand.response(body=answer.body)

    def server(self, limits: ConnectionLimits | None = None) -> RpcServer:
        return RpcServer({ECHO: self.echo, FAIL: self.fail, SLEEP: self.sleep,
                          NOTE: self.note, CALL_BACK: self.call_back, DELAY: self.delay},
                         limits=limits)


@asynccontextmanager
async def serving(transport: Transport, listen_address: str,
                  server: RpcServer) -> AsyncIterator[str]:
    """Run ``server`` on a listener of ``transport``; yields the address to dial."""
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, await transport.listen(listen_address))
        yield address
        nursery.cancel_scope.cancel()


async def wait_for_connections(server: RpcServer, count: int) -> None:
    """Wait until ``server`` serves exactly ``count`` connections."""
    with trio.fail_after(30):
        while len(server.connections) != count:
            await trio.sleep(0.01)


def frame(header: bytes, *, serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header), (serialize_type << 24) | len(header)) + header


_GOOD = encode(RemotingCommand(ECHO, body=b"0123456789"))

#: name -> (bytes a bad peer sends, then whether it closes; the reason the server logs)
BAD_INPUT = {
    "garbage": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False, "exceeds the maximum frame size"),
    "negative length": (struct.pack(">i", -8), False, "length field -8 is less than 4"),
    "oversized length": (struct.pack(">iI", 1 << 30, 0), False,
                         "exceeds the maximum frame size"),
    "wrong serialize type": (frame(b"{}", serialize_type=2), False,
                             "unsupported serialize type 2"),
    "invalid JSON header": (frame(b'{"code": 1,'), False, "invalid JSON header"),
    "header not an object": (frame(b'"code"'), False, "not an object"),
    "truncated frame": (_GOOD[:-4], True, "stream ended inside a frame"),
    "stall mid-frame": (_GOOD[:-4], False, "stalled"),
}


class RpcConformance:
    """Base class of the suite; see the module docstring for the fixtures to provide."""

    pytestmark = pytest.mark.trio

    @pytest.fixture
    def transport(self) -> Transport:
        raise NotImplementedError("subclass RpcConformance and provide 'transport'")

    @pytest.fixture
    def listen_address(self) -> str:
        raise NotImplementedError("subclass RpcConformance and provide 'listen_address'")

    @pytest.fixture
    def unreachable_address(self) -> str:
        raise NotImplementedError("subclass RpcConformance and provide 'unreachable_address'")

    async def test_round_trip(self, transport: Transport, listen_address: str) -> None:
        async with serving(transport, listen_address, Service().server()) as address, \
                open_rpc_client(transport.connect) as client:
            response = await client.invoke(address, ECHO, {"k": "v", "ü": "\n"}, b"\x00body")
            assert response.code == SUCCESS
            assert response.is_response
            assert response.ext_fields == {"k": "v", "ü": "\n"}
            assert response.body == b"\x00body"

    async def test_many_calls_in_flight_on_one_connection(self, transport: Transport,
                                                          listen_address: str) -> None:
        server = Service().server()
        async with serving(transport, listen_address, server) as address, \
                open_rpc_client(transport.connect) as client:
            answers: dict[int, bytes] = {}

            async def call(index: int) -> None:
                response = await client.invoke(address, ECHO, body=str(index).encode(),
                                               timeout=30)
                answers[index] = response.body

            async with trio.open_nursery() as nursery:
                for index in range(300):
                    nursery.start_soon(call, index)
            assert answers == {index: str(index).encode() for index in range(300)}
            assert len(server.connections) == 1

    async def test_large_bodies(self, transport: Transport, listen_address: str) -> None:
        body = bytes(range(256)) * (4 * 4096)  # 4 MiB
        async with serving(transport, listen_address, Service().server()) as address, \
                open_rpc_client(transport.connect) as client:
            response = await client.invoke(address, ECHO, body=body, timeout=30)
            assert response.body == body

    async def test_oneway(self, transport: Transport, listen_address: str) -> None:
        service = Service()
        async with serving(transport, listen_address, service.server()) as address, \
                open_rpc_client(transport.connect) as client:
            await client.invoke_oneway(address, NOTE, body=b"fire and forget")
            await client.invoke_oneway(address, UNKNOWN)  # not answered either
            with trio.fail_after(30):
                await service.noted.wait()
            assert service.notes == [b"fire and forget"]
            assert (await client.invoke(address, ECHO, body=b"still fine")).body == b"still fine"

    async def test_unknown_request_code(self, transport: Transport,
                                        listen_address: str) -> None:
        async with serving(transport, listen_address, Service().server()) as address, \
                open_rpc_client(transport.connect) as client:
            response = await client.invoke(address, UNKNOWN)
            assert response.code == REQUEST_CODE_NOT_SUPPORTED
            assert response.remark == f"request code {UNKNOWN} not supported"

    async def test_handler_error_is_a_system_error(self, transport: Transport,
                                                   listen_address: str) -> None:
        async with serving(transport, listen_address, Service().server()) as address, \
                open_rpc_client(transport.connect) as client:
            response = await client.invoke(address, FAIL)
            assert response.code == SYSTEM_ERROR
            # The exception's own text (it may name server files) stays in the server's log.
            assert response.remark == (f"ValueError in the handler of request code {FAIL}; "
                                       "see the server's log")
            assert (await client.invoke(address, ECHO, body=b"after")).body == b"after"

    async def test_timeout(self, transport: Transport, listen_address: str,
                           autojump_clock: trio.testing.MockClock) -> None:
        service = Service()
        async with serving(transport, listen_address, service.server()) as address, \
                open_rpc_client(transport.connect) as client:
            start = trio.current_time()
            with pytest.raises(RpcTimeout, match="no response in 2"):
                await client.invoke(address, SLEEP, timeout=2)
            assert trio.current_time() - start == pytest.approx(2, abs=0.1)
            # The connection outlives a timed-out call.
            assert (await client.invoke(address, ECHO, body=b"on")).body == b"on"
            assert service.sleeping == 1

    async def test_busy_connection_answers_system_busy(self, transport: Transport,
                                                       listen_address: str) -> None:
        service = Service()
        server = service.server(ConnectionLimits(max_concurrent_requests=2))
        async with serving(transport, listen_address, server) as address, \
                open_rpc_client(transport.connect) as client, \
                trio.open_nursery() as nursery:
            async def sleep() -> None:
                await client.invoke(address, SLEEP, timeout=600)

            for _ in range(2):
                nursery.start_soon(sleep)
            with trio.fail_after(30):
                while service.sleeping < 2:
                    await trio.sleep(0.01)
            response = await client.invoke(address, ECHO)
            assert response.code == SYSTEM_BUSY
            nursery.cancel_scope.cancel()

    async def test_server_calls_back_over_the_same_connection(self, transport: Transport,
                                                              listen_address: str) -> None:
        service = Service()
        async with serving(transport, listen_address, service.server()) as address, \
                open_rpc_client(transport.connect, handlers={ECHO: service.echo}) as client:
            response = await client.invoke(address, CALL_BACK, body=b"hello", timeout=10)
            assert response.body == b"from the server: hello"

    async def test_lost_connection_fails_calls_in_flight(self, transport: Transport,
                                                         listen_address: str) -> None:
        service = Service()
        server = service.server()
        async with serving(transport, listen_address, server) as address, \
                open_rpc_client(transport.connect) as client, \
                trio.open_nursery() as nursery:
            async def close_server_side() -> None:
                with trio.fail_after(30):
                    while service.sleeping < 1:
                        await trio.sleep(0.01)
                for connection in list(server.connections):
                    await connection.aclose()

            nursery.start_soon(close_server_side)
            with pytest.raises(RpcConnectionError):
                await client.invoke(address, SLEEP, timeout=60)
            # The next call opens a new connection.
            assert (await client.invoke(address, ECHO, body=b"again")).body == b"again"

    async def test_connecting_to_nothing(self, transport: Transport,
                                         unreachable_address: str) -> None:
        async with open_rpc_client(transport.connect) as client:
            with pytest.raises(RpcConnectionError, match="cannot connect"):
                await client.invoke(unreachable_address, ECHO, timeout=30)

    async def test_oversized_response_closes_the_connection(self, transport: Transport,
                                                            listen_address: str) -> None:
        limits = ConnectionLimits(max_frame_size=1024)
        async with serving(transport, listen_address, Service().server()) as address, \
                open_rpc_client(transport.connect, limits=limits) as client:
            with pytest.raises(RpcConnectionError, match="exceeds the maximum frame size"):
                await client.invoke(address, ECHO, body=b"x" * 900 + b"y" * 900)

    @pytest.mark.parametrize("case", list(BAD_INPUT))
    async def test_bad_peer_is_cut_off_and_others_are_served(
            self, transport: Transport, listen_address: str, case: str,
            caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
        data, then_close, reason = BAD_INPUT[case]
        caplog.set_level(logging.WARNING, logger="triomq.rpc")
        limits = ConnectionLimits(max_frame_size=64 * 1024, stall_timeout=10)
        server = Service().server(limits)
        async with serving(transport, listen_address, server) as address, \
                open_rpc_client(transport.connect) as client:
            assert (await client.invoke(address, ECHO, body=b"before")).body == b"before"
            bad = await transport.connect(address)
            try:
                if then_close:
                    await bad.send_all(data)
                    await bad.aclose()
                else:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(bad.send_all, data)
                        # The server hangs up on it: an EOF or a reset.
                        assert await read_until_closed(bad) == b""
            finally:
                await trio.aclose_forcefully(bad)
            await wait_for_connections(server, 1)
            assert any(reason in record.getMessage() for record in caplog.records), \
                [record.getMessage() for record in caplog.records]
            assert (await client.invoke(address, ECHO, body=b"after")).body == b"after"

    # -- callers that give up, slow handlers, calls both ways -------------------

    @pytest.mark.parametrize("how", ["timeout", "cancel"])
    async def test_a_caller_that_gives_up_leaves_the_others_their_responses(
            self, transport: Transport, listen_address: str, how: str,
            autojump_clock: trio.testing.MockClock) -> None:
        outcome: list[str] = []
        async with serving(transport, listen_address, Service().server()) as address, \
                open_rpc_client(transport.connect) as client:
            assert (await client.invoke(address, ECHO, body=b"first")).body == b"first"

            async def give_up() -> None:
                if how == "timeout":
                    with pytest.raises(RpcTimeout):
                        await client.invoke(address, SLEEP, timeout=1)
                else:
                    with trio.move_on_after(1):
                        await client.invoke(address, SLEEP, timeout=60)
                outcome.append("gave up")

            async def wait() -> None:
                response = await client.invoke(address, DELAY, body=b"2", timeout=60)
                outcome.append(response.body.decode())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(give_up)
                await trio.sleep(0.1)
                nursery.start_soon(wait)
                await trio.sleep(0.1)
                nursery.start_soon(wait)
            assert outcome == ["gave up", "2", "2"]
            assert (await client.invoke(address, ECHO, body=b"after")).body == b"after"

    async def test_a_slow_handler_does_not_hold_up_the_next_request(
            self, transport: Transport, listen_address: str,
            autojump_clock: trio.testing.MockClock) -> None:
        service = Service()
        async with serving(transport, listen_address, service.server()) as address, \
                open_rpc_client(transport.connect) as client, trio.open_nursery() as nursery:
            async def sleep() -> None:
                await client.invoke(address, SLEEP, timeout=600)

            nursery.start_soon(sleep)
            with trio.fail_after(30):
                while service.sleeping < 1:
                    await trio.sleep(0.01)
            with trio.fail_after(1):
                assert (await client.invoke(address, ECHO, body=b"next")).body == b"next"
            nursery.cancel_scope.cancel()

    async def test_the_server_calls_back_a_waiting_caller_and_an_idle_client(
            self, transport: Transport, listen_address: str) -> None:
        service = Service()
        server = service.server()
        async with serving(transport, listen_address, server) as address, \
                open_rpc_client(transport.connect, handlers={ECHO: service.echo}) as client:
            assert (await client.invoke(address, ECHO, body=b"first")).body == b"first"
            # The server asks the client before it answers.
            response = await client.invoke(address, CALL_BACK, body=b"hello", timeout=10)
            assert response.body == b"from the server: hello"
            # The client calls nothing now: its connection answers all the same.
            (connection,) = server.connections
            with trio.fail_after(30):
                response = await connection.invoke(ECHO, body=b"to the client")
            assert response.body == b"to the client"

    async def test_a_crowd_of_callers_that_time_out_and_cancel(
            self, transport: Transport, listen_address: str,
            autojump_clock: trio.testing.MockClock) -> None:
        rng = random.Random(7)
        answered: list[bytes] = []
        service = Service()
        async with serving(transport, listen_address, service.server()) as address, \
                open_rpc_client(transport.connect, handlers={ECHO: service.echo}) as client:
            async def caller(index: int) -> None:
                for _ in range(5):
                    if rng.random() < 0.2:
                        response = await client.invoke(address, CALL_BACK, body=b"x",
                                                       timeout=60)
                        assert response.body == b"from the server: x"
                        continue
                    delay = rng.choice(["0", "0", "0.5", "2"])
                    timeout = rng.choice([1.0, 10.0])
                    with trio.move_on_after(rng.choice([0.3, 5.0, 60.0])):
                        try:
                            response = await client.invoke(address, DELAY, body=delay.encode(),
                                                           timeout=timeout)
                        except RpcTimeout:
                            assert float(delay) >= timeout
                            continue
                        assert response.body == delay.encode()
                        answered.append(response.body)
                    await trio.sleep(rng.random() / 10)

            async with trio.open_nursery() as nursery:
                for index in range(40):
                    nursery.start_soon(caller, index)
            assert len(answered) > 50
            assert (await client.invoke(address, ECHO, body=b"after")).body == b"after"

