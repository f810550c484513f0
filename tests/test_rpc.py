"""triomq.rpc beyond the conformance suite: faults injected on inproc, backoff, edges.

The conformance suite (tests/transports/test_conformance.py) runs the RPC
behaviour every transport must support; here are the cases that need the
in-process network's fault injection or look inside the RPC layer.
"""

from __future__ import annotations

import errno
import json
import logging
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.protocol import remoting
from triomq.protocol.remoting import (
    FLAG_RESPONSE,
    REQUEST_CODE_NOT_SUPPORTED,
    SUCCESS,
    SYSTEM_ERROR,
    FrameDecoder,
    FrameError,
    RemotingCommand,
)
from triomq.rpc import (
    Backoff,
    ConnectionLimits,
    RpcClient,
    RpcConnection,
    RpcConnectionError,
    RpcServer,
    RpcTimeout,
    describe_peer,
    open_rpc_client,
)

SERVER = "inproc://server"
CLIENT = "inproc://client"
ECHO = 1
SLEEP = 2
ASK_CLIENT = 3


async def echo(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
    return RemotingCommand.response(body=request.body, ext_fields={"peer": peer.peer})


async def sleep(request: RemotingCommand, peer: RpcConnection) -> None:
    await trio.sleep_forever()


async def ask_client(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
    answer = await peer.invoke(ECHO, body=b"?")
    return RemotingCommand.response(answer.code, remark=answer.remark)


@pytest.fixture
def network() -> InprocNetwork:
    return InprocNetwork("test-rpc", seed=42)


@asynccontextmanager
async def cluster(network: InprocNetwork, server: RpcServer | None = None, **client_options
                  ) -> AsyncIterator[tuple[RpcServer, RpcClient]]:
    """A server on SERVER and a client connecting from CLIENT."""
    server = server or RpcServer({ECHO: echo, SLEEP: sleep, ASK_CLIENT: ask_client})
    server_transport = InprocTransport(network, SERVER)
    client_transport = InprocTransport(network, CLIENT)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, await server_transport.listen(SERVER))
        async with open_rpc_client(client_transport.connect, **client_options) as client:
            yield server, client
        nursery.cancel_scope.cancel()


async def test_partition_times_out_and_heal_recovers(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with cluster(network) as (_, client):
        assert (await client.invoke(SERVER, ECHO, body=b"1")).body == b"1"
        network.partition(CLIENT, SERVER)
        with pytest.raises(RpcTimeout):
            await client.invoke(SERVER, ECHO, body=b"lost", timeout=1)
        network.heal()
        # Same connection: the held request and its late answer arrive and are dropped.
        response = await client.invoke(SERVER, ECHO, body=b"2")
        assert response.body == b"2"
        assert len(network.connections(CLIENT, SERVER)) == 1


async def test_requests_declare_the_clients_version(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    versions: list[tuple[int, bool]] = []

    async def record(request: RemotingCommand, peer: RpcConnection) -> None:
        versions.append((request.version, request.is_oneway))

    async with cluster(network, RpcServer({ECHO: record}), version=479) as (_, client):
        await client.invoke(SERVER, ECHO)
        await client.invoke_oneway(SERVER, ECHO)
        with trio.fail_after(1):
            while len(versions) < 2:
                await trio.sleep(0.01)
    assert versions == [(479, False), (479, True)]


async def test_one_way_partition_loses_the_answers(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    received: list[bytes] = []

    async def record(request: RemotingCommand, peer: RpcConnection) -> None:
        received.append(request.body)

    async with cluster(network, RpcServer({ECHO: record})) as (_, client):
        await client.invoke(SERVER, ECHO, body=b"warm")
        network.partition(SERVER, CLIENT, one_way=True)
        with pytest.raises(RpcTimeout):
            await client.invoke(SERVER, ECHO, body=b"heard", timeout=1)
        assert received == [b"warm", b"heard"]


async def test_reset_fails_the_call_and_the_next_call_reconnects(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with cluster(network) as (server, client), trio.open_nursery() as nursery:
        async def reset_soon() -> None:
            await trio.sleep(1)
            assert network.reset(CLIENT, SERVER) == 1

        nursery.start_soon(reset_soon)
        with pytest.raises(RpcConnectionError, match="reset by fault injection"):
            await client.invoke(SERVER, SLEEP, timeout=10)
        assert (await client.invoke(SERVER, ECHO, body=b"back")).body == b"back"
        assert len(network.connections()) == 1
        with trio.fail_after(1):
            while len(server.connections) != 1:
                await trio.sleep(0.01)


async def test_graceful_close_fails_the_call(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with cluster(network) as (_, client), trio.open_nursery() as nursery:
        async def close_soon() -> None:
            await trio.sleep(1)
            network.close(SERVER)

        nursery.start_soon(close_soon)
        with pytest.raises(RpcConnectionError, match="peer closed the connection"):
            await client.invoke(SERVER, SLEEP, timeout=10)


async def test_latency_is_applied_both_ways(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with cluster(network) as (_, client):
        await client.invoke(SERVER, ECHO)
        network.delay(CLIENT, SERVER, 0.25)
        start = trio.current_time()
        await client.invoke(SERVER, ECHO)
        assert trio.current_time() - start == pytest.approx(0.5)


async def test_a_write_the_peer_never_reads_closes_the_connection(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="triomq.rpc")
    async with cluster(network) as (_, client):
        await client.invoke(SERVER, ECHO)
        network.partition(CLIENT, SERVER)
        # More than the link holds: the write itself cannot finish.
        with pytest.raises(RpcTimeout):
            await client.invoke(SERVER, ECHO, body=b"x" * (2 * network.buffer_size), timeout=1)
        assert "read nothing we wrote" in caplog.text
        network.heal()
        assert (await client.invoke(SERVER, ECHO, body=b"new")).body == b"new"


async def test_stalled_oneway_calls_time_out(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    limits = ConnectionLimits(send_buffer=1024)
    async with cluster(network, limits=limits) as (_, client), trio.open_nursery() as nursery:
        await client.invoke(SERVER, ECHO)
        network.partition(CLIENT, SERVER)
        big = b"x" * (2 * network.buffer_size)

        async def stuck_writer() -> None:
            with pytest.raises(RpcTimeout, match="not written by its deadline"):
                await client.invoke_oneway(SERVER, ECHO, body=big, timeout=10)

        nursery.start_soon(stuck_writer)
        await trio.testing.wait_all_tasks_blocked()
        # Queued behind the stuck write until the queue is full, then refused.
        with pytest.raises(RpcTimeout, match="send buffer still full"):
            for _ in range(1000):
                await client.invoke_oneway(SERVER, ECHO, body=b"y" * 100, timeout=1)


async def test_reconnect_backoff(network: InprocNetwork,
                                 autojump_clock: trio.testing.MockClock) -> None:
    backoff = Backoff(initial=1.0, maximum=4.0, multiplier=2.0)
    client_transport = InprocTransport(network, CLIENT)
    async with open_rpc_client(client_transport.connect, backoff=backoff) as client:
        start = trio.current_time()
        with pytest.raises(RpcConnectionError, match="cannot connect"):
            await client.invoke(SERVER, ECHO, timeout=0.5)
        # The next attempt is due after the call's deadline: a fast failure that says when.
        with pytest.raises(RpcConnectionError, match=r"1 connect attempts failed .* 1\.000 s"):
            await client.invoke(SERVER, ECHO, timeout=0.5)
        # A call with time enough waits for the attempt.
        with pytest.raises(RpcConnectionError, match="cannot connect"):
            await client.invoke(SERVER, ECHO, timeout=5)
        assert trio.current_time() - start == pytest.approx(1.0)
        with pytest.raises(RpcConnectionError, match=r"2 connect attempts failed .* 2\.000 s"):
            await client.invoke(SERVER, ECHO, timeout=0.5)
        server_transport = InprocTransport(network, SERVER)
        async with trio.open_nursery() as nursery:
            await nursery.start(RpcServer({ECHO: echo}).serve,
                                await server_transport.listen(SERVER))
            assert (await client.invoke(SERVER, ECHO, body=b"up")).body == b"up"
            assert trio.current_time() - start == pytest.approx(3.0)
            nursery.cancel_scope.cancel()


def test_backoff_grows_and_caps() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0, multiplier=3.0)
    assert [backoff.delay(n) for n in range(1, 5)] == pytest.approx([0.1, 0.3, 0.9, 1.0])


async def test_a_peer_that_hangs_up_at_once_counts_as_a_failed_attempt(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    listener = await InprocTransport(network, SERVER).listen(SERVER)

    async def hang_up() -> None:
        while True:
            stream = await listener.accept()
            await stream.aclose()

    async with trio.open_nursery() as nursery, \
            open_rpc_client(InprocTransport(network, CLIENT).connect) as client:
        nursery.start_soon(hang_up)
        with pytest.raises(RpcConnectionError, match="peer closed the connection"):
            await client.invoke(SERVER, ECHO)
        with pytest.raises(RpcConnectionError, match="next attempt in"):
            await client.invoke(SERVER, ECHO, timeout=0.01)
        nursery.cancel_scope.cancel()


async def test_connect_timeout_counts_against_the_call(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with cluster(network) as (_, client):
        network.partition(CLIENT, SERVER)
        with pytest.raises(RpcTimeout, match="not connected by the call's deadline"):
            await client.invoke(SERVER, ECHO, timeout=1)


async def test_handler_answers_are_stamped_and_none_is_success(
        network: InprocNetwork) -> None:
    async def sloppy(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand(code=7, opaque=12345, body=b"no flag, wrong opaque")

    async def nothing(request: RemotingCommand, peer: RpcConnection) -> None:
        return None

    async with cluster(network, RpcServer({ECHO: sloppy, SLEEP: nothing})) as (_, client):
        response = await client.invoke(SERVER, ECHO)
        assert response.code == 7
        assert response.flag & FLAG_RESPONSE
        assert response.body == b"no flag, wrong opaque"
        empty = await client.invoke(SERVER, SLEEP)
        assert (empty.code, empty.body) == (SUCCESS, b"")


async def test_inline_handlers(network: InprocNetwork) -> None:
    order: list[int] = []

    async def inline(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        order.append(int(request.body))
        return RemotingCommand.response(body=request.body)

    server = RpcServer()
    server.register(ECHO, inline, inline=True)
    with pytest.raises(ValueError, match="already has a handler"):
        server.register(ECHO, echo)
    async with cluster(network, server) as (_, client), trio.open_nursery() as nursery:
        for index in range(50):
            nursery.start_soon(client.invoke, SERVER, ECHO, None, str(index).encode())
    assert sorted(order) == list(range(50))


async def test_requests_to_a_client_without_handlers(network: InprocNetwork) -> None:
    async with cluster(network) as (_, client):
        response = await client.invoke(SERVER, ASK_CLIENT)
        assert response.code == REQUEST_CODE_NOT_SUPPORTED
        assert response.remark == f"request code {ECHO} not supported"


async def test_peer_names(network: InprocNetwork) -> None:
    async with cluster(network) as (server, client):
        response = await client.invoke(SERVER, ECHO)
        assert response.ext_fields == {"peer": CLIENT}
        [connection] = server.connections
        assert describe_peer(connection.stream) == CLIENT
        assert repr(connection) == f"<RpcConnection {CLIENT} open>"


async def test_connections_are_released(network: InprocNetwork) -> None:
    server = RpcServer({ECHO: echo})
    async with cluster(network, server) as (_, client):
        await client.invoke(SERVER, ECHO)
        connection = await client.connection(SERVER)
        await client.close(SERVER)
        assert connection.closed and connection.closed_locally
        with trio.fail_after(5):
            while server.connections:
                await trio.sleep(0.01)
        assert network.connections() == []
        with pytest.raises(RpcConnectionError, match="closed locally"):
            await connection.invoke(ECHO)


async def test_closing_a_connection_that_never_ran(network: InprocNetwork) -> None:
    listener = await InprocTransport(network, SERVER).listen(SERVER)
    stream = await InprocTransport(network, CLIENT).connect(SERVER)
    connection = RpcConnection(stream)
    await connection.aclose()
    assert connection.closed_locally
    with pytest.raises(trio.ClosedResourceError):
        await stream.send_all(b"x")
    await listener.aclose()


async def test_bad_handler_answers_are_system_errors(
        network: InprocNetwork, caplog: pytest.LogCaptureFixture) -> None:
    async def wrong_type(request: RemotingCommand, peer: RpcConnection) -> str:
        return "not a command"

    async def unencodable(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(body="text, not bytes")  # type: ignore[arg-type]

    server = RpcServer({ECHO: echo, SLEEP: wrong_type,  # type: ignore[dict-item]
                        ASK_CLIENT: unencodable})
    async with cluster(network, server) as (_, client):
        response = await client.invoke(SERVER, SLEEP)
        assert (response.code, response.remark) == (SYSTEM_ERROR, "handler returned a str")
        response = await client.invoke(SERVER, ASK_CLIENT)
        assert response.code == SYSTEM_ERROR
        assert response.remark == "bad response: body must be bytes, got str"
        assert (await client.invoke(SERVER, ECHO, body=b"fine")).body == b"fine"
    assert "returned 'not a command'" in caplog.text


async def test_server_rides_out_accept_errors(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    inner = await InprocTransport(network, SERVER).listen(SERVER)

    class FlakyListener:
        """Fails its first accept as a process out of file descriptors would."""

        address = inner.address
        failed = False

        async def accept(self) -> trio.abc.Stream:
            if not self.failed:
                self.failed = True
                raise OSError(errno.EMFILE, "Too many open files")
            return await inner.accept()

        async def aclose(self) -> None:
            await inner.aclose()

    async with trio.open_nursery() as nursery, \
            open_rpc_client(InprocTransport(network, CLIENT).connect) as client:
        await nursery.start(RpcServer({ECHO: echo}).serve, FlakyListener())
        assert (await client.invoke(SERVER, ECHO, body=b"served")).body == b"served"
        nursery.cancel_scope.cancel()
    assert "Too many open files" in caplog.text
    assert network.listening() == []


async def test_oneway_only_connections_that_lived_reset_the_backoff(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    """A peer that only ever receives oneway frames and restarts now and then
    must not push its callers' reconnect delay up to the maximum."""
    backoff = Backoff(initial=1.0, maximum=60.0, multiplier=2.0)
    received: list[bytes] = []

    async def sink(request, peer):
        received.append(request.body)

    async with open_rpc_client(InprocTransport(network, CLIENT).connect,
                               backoff=backoff) as client:
        for restart in range(5):
            async with trio.open_nursery() as nursery:
                await nursery.start(RpcServer({ECHO: sink}).serve,
                                    await InprocTransport(network, SERVER).listen(SERVER))
                before = trio.current_time()
                await client.invoke_oneway(SERVER, ECHO, body=b"%d" % restart, timeout=5)
                # Reconnecting takes no backoff delay: the last connection proved the peer.
                assert trio.current_time() - before < backoff.initial
                await trio.sleep(2)
                nursery.cancel_scope.cancel()
            await trio.sleep(0.1)
    assert received == [b"0", b"1", b"2", b"3", b"4"]


# -- callers and workers --------------------------------------------------------


async def test_closing_the_connection_fails_the_calls_waiting(
        network: InprocNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with cluster(network) as (_, client), trio.open_nursery() as nursery:
        connection = await client.connection(SERVER)

        async def wait_forever() -> None:
            with pytest.raises(RpcConnectionError, match="closed locally"):
                await connection.invoke(SLEEP, timeout=600)

        for _ in range(3):
            nursery.start_soon(wait_forever)
        await trio.testing.wait_all_tasks_blocked()
        await connection.aclose()


async def test_workers_are_reused_and_few_stay_idle(network: InprocNetwork) -> None:
    release = trio.Event()

    async def pause(request: RemotingCommand, peer: RpcConnection) -> None:
        await release.wait()

    server = RpcServer({ECHO: echo, SLEEP: pause})
    async with cluster(network, server) as (_, client):
        # One call at a time: the same two tasks take turns reading and handling.
        for _ in range(50):
            await client.invoke(SERVER, ECHO)
        (connection,) = server.connections
        assert len(connection._idle) <= 1
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(client.invoke, SERVER, SLEEP)
            await trio.testing.wait_all_tasks_blocked()
            assert connection._handling == 20
            release.set()
        # After the burst, a few workers wait for work; the rest ended.
        assert connection._handling == 0
        assert 1 <= len(connection._idle) <= 8
        assert (await client.invoke(SERVER, ECHO)).code == SUCCESS


# -- decoding: the fast path for our own headers agrees with the JSON parser ---

_numbers = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(10**12), 10**12))


@st.composite
def _own_style_headers(draw: st.DrawFn) -> bytes:
    """Headers as this project writes them, some bent a little."""
    def number() -> bytes:
        text = str(draw(_numbers)).encode()
        return draw(st.sampled_from([text, b"0" + text, text + b".0", b" " + text]))
    language = draw(st.sampled_from([b"PYTHON", b"JAVA", b"GO_2", b"", b"P\\u0041", b"x" * 40]))
    header = (b'{"code":' + number() + b',"language":"' + language + b'","version":' + number()
              + b',"opaque":' + number() + b',"flag":' + number())
    ext = draw(st.one_of(
        st.none(),
        st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3).map(
            lambda fields: json.dumps(fields, separators=(",", ":")).encode()),
        st.sampled_from([b'{"a":1}', b'{"a":"b"},"code":"x"', b'{"a":"b"}}', b"{", b'{"\xff":"a"}',
                         b'{"a":"b"},"extFields":{"c":"d"}', b"[]"])))
    if ext is not None:
        header += b',"extFields":' + ext
    return header + draw(st.sampled_from([b"}", b"}}", b" }", b"", b',"remark":"r"}']))


def _decode(header: bytes) -> RemotingCommand | str:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">iI", 4 + len(header), len(header)) + header)
    try:
        command = decoder.next_command()
    except FrameError as exc:
        return str(exc).split(": ", 1)[1].split(":")[0]
    assert command is not None
    return command


@given(_own_style_headers())
def test_fuzz_fast_header_path_matches_the_parser(header: bytes) -> None:
    # A space after the opening brace is still the same JSON, but not our own format.
    assert _decode(header) == _decode(b"{ " + header[1:])


@pytest.mark.skipif(not remoting.SPEEDUPS, reason="built without the C fast paths")
@given(_own_style_headers())
def test_fuzz_c_header_parser_matches_python(header: bytes) -> None:
    assert remoting.parse_own_header(header) == remoting._parse_own_header(header)
    assert remoting.parse_own_header(bytearray(header)) == remoting._parse_own_header(header)


@pytest.mark.skipif(not remoting.SPEEDUPS, reason="built without the C fast paths")
@given(st.one_of(_numbers, st.integers(), st.booleans(), st.text(max_size=3)),
       st.one_of(st.sampled_from(["PYTHON", "JAVA", "GO_2", "", "é", "a b", "x" * 33]),
                 st.text(max_size=6)),
       _numbers, _numbers, _numbers)
def test_fuzz_c_header_writer_matches_python(code: object, language: str, version: int,
                                             opaque: int, flag: int) -> None:
    assert remoting.own_header_json(code, language, version, opaque, flag) \
        == remoting._own_header_json(code, language, version, opaque, flag)  # type: ignore[arg-type]



async def test_a_write_to_a_reset_tcp_peer_fails_the_call_and_closes_the_connection():
    # Frames go to a plain socket at once (no writer task); the peer's reset
    # must still end the call with RpcConnectionError and close the connection.
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        peer = await listener.accept()
        # SO_LINGER 0: closing sends a reset instead of a FIN.
        peer.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, struct.pack("ii", 1, 0))
        await peer.aclose()
        connection = RpcConnection(stream)
        await nursery.start(connection.run)
        with pytest.raises(RpcConnectionError):
            for _ in range(100):  # the reset may arrive after a first write
                await connection.invoke(ECHO, body=b"x" * 1024, timeout=5)
        assert connection.closed
        await listener.aclose()


async def test_calls_while_a_connection_opens_wait_for_it(network: InprocNetwork) -> None:
    """A call made while another call's connection is still opening (its stream's
    first write in progress) waits for it, instead of writing on the stream at
    the same time."""
    async with cluster(network) as (_, client):
        answers: list[bytes] = []

        async def call(i: int) -> None:
            answers.append((await client.invoke(SERVER, ECHO, body=b"%d" % i)).body)

        async with trio.open_nursery() as nursery:
            for i in range(20):  # one call per scheduler pass: some land mid-open
                nursery.start_soon(call, i)
                await trio.lowlevel.checkpoint()
        assert sorted(answers) == sorted(b"%d" % i for i in range(20))
