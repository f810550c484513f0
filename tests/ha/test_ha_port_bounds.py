"""What a peer of the HA port may hold: silent connections, the connection cap, a
slave that stops reading.

A connection that sends no slave handshake holds no send buffer, is woken by
no put and is closed after ``ha_handshake_timeout``; the port serves at most
``ha_max_connections``; a slave that takes in no bytes for
``ha_write_timeout`` is dropped and shrunk out of the SyncStateSet.
"""

from __future__ import annotations

import gc
import resource
import socket
import time
import tracemalloc

import pytest
import trio
import trio.testing
from test_ha_driver import MemoryLog, Replica, inline, make_slave

from triomq.broker.replication.replicas_manager import ReplicasManager
from triomq.ha.master_driver import HAMaster, HAMasterConfig
from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.plugins.transport_tcp.transport import TcpTransport
from triomq.protocol.ha import Ack, SlaveHandshake, encode

SILENT = 2000


class AtMostOne:
    def __eq__(self, other: object) -> bool:
        return other in (0, 1)

    def __repr__(self) -> str:
        return "0 or 1"


AT_MOST_ONE = AtMostOne()


class TermLog(MemoryLog):
    """An in-memory log as a role change needs it: it never has a torn tail."""

    def truncate_to_last_whole_record(self) -> int:
        return self.max_offset


class Node(Replica):
    def __init__(self, name: str, broker_id: int,
                 segment_size: int = MemoryLog.segment_size) -> None:
        super().__init__(name, broker_id)
        self.log = TermLog()
        self.log.segment_size = segment_size


def inproc() -> tuple[InprocTransport, str]:
    return InprocTransport(InprocNetwork(seed=5), backlog=SILENT + 16), "inproc://m-ha"


def tcp() -> tuple[TcpTransport, str]:
    return TcpTransport(backlog=SILENT + 16), "tcp://127.0.0.1:0"


def tcp_connections_allowed() -> int:
    """Silent TCP connections this process has descriptors for (two each: both ends)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return min(SILENT, (soft - 256) // 2)


async def start_master(nursery: trio.Nursery, transport, address: str, m: Node,
                       **config) -> tuple[ReplicasManager, HAMaster]:
    manager = ReplicasManager(
        log=m.log, epoch_store=m.epochs, address=m.name,
        ha_listener=await transport.listen(address), connect=transport.connect,
        master_config=HAMasterConfig(ha_transfer_batch_size=100, **config), offload=inline)
    await nursery.start(manager.run)
    await manager.change_to_master(1, m.broker_id, frozenset({m.broker_id, 1}))
    assert manager.ha_master is not None
    return manager, manager.ha_master


async def put(manager: ReplicasManager, m: Node, size: int = 200) -> tuple[int, str]:
    """Append a put and wait for it as a synchronous put does: the connections
    woken by its appending, and its outcome."""
    end = m.log.append(b"p" * size)
    master = manager.ha_master
    assert master is not None
    woken = master.connections_woken
    manager.appended()
    woken = master.connections_woken - woken
    status = await manager.wait_replicated(end, timeout_ms=1000)
    return woken, status.name if status is not None else "no master"


async def wait_for(predicate, seconds: float = 30) -> None:
    with trio.fail_after(seconds):
        while not predicate():
            await trio.sleep(0.01)


async def spin_until(predicate, seconds: float = 60) -> None:
    """``wait_for`` while the clock stands still (bounded in real time)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await trio.sleep(0)


async def silent_connections_keep_out_of_puts(transport, address: str, count: int, wait,
                                              pass_time) -> None:
    """``count`` silent connections and a slave: the puts wake the slave's connection
    only, and the silent ones are closed once ``pass_time`` passed the handshake
    timeout."""
    m, s = Node("m", 0), Node("s", 1)
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(
            nursery, transport, address, m, all_ack_in_sync_state_set=True,
            ha_max_connections=count + 1, ha_handshake_timeout=3000)
        ha_address = manager.ha_address
        silent = [await transport.connect(ha_address) for _ in range(count)]
        await wait(lambda: master.handshaking == count)
        await nursery.start(make_slave(s, lambda: transport.connect(ha_address)).run)
        await wait(lambda: master.tracker.effective_sync_state_set == {0, 1})

        # Woken per put: at most the slave's connection (unless it is busy anyway).
        assert [await put(manager, m) for _ in range(20)] == [(AT_MOST_ONE, "PUT_OK")] * 20
        assert (master.handshaking, master.transferring) == (count, 1)
        assert s.log.data == m.log.data

        await pass_time(3.0)
        await wait(lambda: master.handshaking == 0)
        assert master.handshake_timeouts == count
        for stream in silent:
            assert await stream.receive_some() == b""  # closed by the master
            await stream.aclose()
        assert manager.ha_connections == 1
        await wait(lambda: master.tracker.effective_sync_state_set == {0, 1})
        assert await put(manager, m) == (AT_MOST_ONE, "PUT_OK")
        nursery.cancel_scope.cancel()


async def test_silent_connections_cost_puts_nothing_and_are_closed_in_time(autojump_clock):
    transport, address = inproc()
    await silent_connections_keep_out_of_puts(transport, address, SILENT, wait_for, trio.sleep)


async def test_silent_tcp_connections_cost_puts_nothing_and_are_closed(mock_clock):
    # The clock stands still until jumped: however long the connections take to
    # open on a busy machine, none times out before the puts.
    async def pass_time(seconds: float) -> None:
        mock_clock.jump(seconds)
        await trio.sleep(0)

    transport, address = tcp()
    await silent_connections_keep_out_of_puts(transport, address, tcp_connections_allowed(),
                                              spin_until, pass_time)


async def test_the_handshake_timeout_is_measured_from_the_connection(autojump_clock):
    m = Node("m", 0)
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m,
                                             ha_handshake_timeout=3000)
        start = trio.current_time()
        silent = await transport.connect(manager.ha_address)
        # A handshake's first bytes only: not a handshake.
        await silent.send_all(encode(SlaveHandshake(9))[:10])
        assert await silent.receive_some() == b""
        assert trio.current_time() - start == pytest.approx(3.0)
        assert master.handshake_timeouts == 1
        nursery.cancel_scope.cancel()


async def test_a_silent_connection_holds_no_send_buffer(autojump_clock):
    m = Node("m", 0)
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m,
                                             ha_max_connections=1000)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            silent = [await transport.connect(manager.ha_address) for _ in range(200)]
            await wait_for(lambda: master.handshaking == 200)
            gc.collect()
            held = (tracemalloc.get_traced_memory()[0] - before) / len(silent)
        finally:
            tracemalloc.stop()
        # Both ends of an in-process connection and its task, not a 256 KiB scratch.
        assert held < 32 * 1024
        nursery.cancel_scope.cancel()


async def test_connections_past_the_cap_take_the_oldest_silent_ones_slots(autojump_clock):
    m, s = Node("m", 0), Node("s", 1)
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m,
                                             ha_max_connections=3, ha_handshake_timeout=3000)
        silent = [await transport.connect(manager.ha_address) for _ in range(5)]
        assert [await stream.receive_some() for stream in silent[:2]] == [b"", b""]
        await wait_for(lambda: master.handshaking == 3)
        assert (manager.ha_connections, manager.ha_connections_evicted) == (3, 2)

        # The port is full of silent connections: a slave gets in all the same.
        await nursery.start(make_slave(s, lambda: transport.connect(manager.ha_address)).run)
        await wait_for(lambda: master.transferring == 1)
        assert master.handshake_timeouts == 0
        m.log.append(b"q" * 300)
        manager.appended()
        await wait_for(lambda: s.log.data == m.log.data)
        nursery.cancel_scope.cancel()


async def handshake_then_stop_reading(stream: trio.abc.Stream) -> None:
    """A slave that introduces itself, acks an empty log, and reads nothing more."""
    await stream.send_all(encode(SlaveHandshake(1)) + encode(Ack(0)))


async def test_a_slave_that_stops_reading_is_dropped_and_shrunk_out(autojump_clock):
    m = Node("m", 0, segment_size=1 << 20)
    m.log.append(b"x" * (1 << 20))  # more than the link holds
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m,
                                             ha_write_timeout=3000,
                                             ha_max_time_slave_not_catchup=2000)
        assert master.tracker.sync_state_set == {0, 1}
        stalled = await transport.connect(manager.ha_address)
        await handshake_then_stop_reading(stalled)
        await wait_for(lambda: master.transferring == 1)
        start = trio.current_time()
        await wait_for(lambda: master.transferring == 0)
        # The link filled at once; then no progress for the write timeout.
        assert trio.current_time() - start == pytest.approx(3.0, abs=0.01)
        assert master.write_timeouts == 1
        assert not master.tracker.slaves[1].connected
        await wait_for(lambda: master.tracker.sync_state_set == {0})
        assert manager.ha_connections == 0
        nursery.cancel_scope.cancel()


async def test_a_tcp_slave_that_stops_reading_is_dropped():
    m = Node("m", 0, segment_size=16 << 20)
    m.log.append(b"x" * (16 << 20))  # more than both sockets' buffers hold
    transport, address = tcp()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m,
                                             ha_write_timeout=300)
        stalled = await transport.connect(manager.ha_address)
        assert isinstance(stalled, trio.SocketStream)
        # A fixed receive buffer: the kernel does not grow it while nobody reads.
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        await handshake_then_stop_reading(stalled)
        await wait_for(lambda: master.write_timeouts == 1)
        assert master.transferring == 0
        assert not master.tracker.slaves[1].connected
        await stalled.aclose()
        nursery.cancel_scope.cancel()


async def handshake_and_ack(stream: trio.abc.Stream, slave: int, offset: int) -> None:
    await stream.send_all(encode(SlaveHandshake(slave)) + encode(Ack(offset)))


async def test_acks_count_for_the_slave_of_their_connection_only(autojump_clock):
    m = Node("m", 0)
    m.log.append(b"x" * 300)
    transport, address = inproc()
    async with trio.open_nursery() as nursery:
        manager, master = await start_master(nursery, transport, address, m)
        first = await transport.connect(manager.ha_address)
        await handshake_and_ack(first, 1, 0)
        await wait_for(lambda: master.tracker.ack_offset(1, 300) == 0)

        # A second handshake claiming the same slave replaces the first connection.
        second = await transport.connect(manager.ha_address)
        await handshake_and_ack(second, 1, 0)
        await wait_for(lambda: manager.ha_connections_evicted == 1)
        with pytest.raises(trio.BrokenResourceError):
            while await first.receive_some():
                pass  # the master's answers, then the end
            await first.send_all(encode(Ack(300)))
        assert master.tracker.slaves[1].connections == 1

        # Another slave's acks never count for slave 1.
        other = await transport.connect(manager.ha_address)
        await handshake_and_ack(other, 2, 0)
        received = b""
        while received.count(b"x") < 300:  # the log's bytes, in batches
            received += await other.receive_some()
        await other.send_all(encode(Ack(300)))
        await wait_for(lambda: master.tracker.ack_offset(2, 300) == 300)
        assert master.tracker.ack_offset(1, 300) == 0
        assert (manager.ha_connections, master.transferring) == (2, 2)
        nursery.cancel_scope.cancel()
