"""The trio drivers over in-memory streams, with an in-memory commit log."""

from __future__ import annotations

import functools
import random
import socket
import struct

import pytest
import trio
import trio.testing

from triomq.ha.checkpoint import EpochCheckpointFile
from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import HAProtocolError
from triomq.ha.core.sync_replication import ReplicationStatus
from triomq.ha.master_driver import ApproveLocally, HAMaster, HAMasterConfig, MasterFenced
from triomq.ha.slave_driver import HASlave, HASlaveConfig
from triomq.protocol.ha import (
    Ack,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveFrameDecoder,
    Transfer,
    TransferBody,
    TransferHeader,
    encode,
)
from triomq.store import ScratchAppend, ScratchRead, read_into_by_read


class MemoryLog(ScratchAppend, ScratchRead):
    """A commit log in memory: bytes from ``base``; reads stop at segment ends."""

    segment_size = 256

    def __init__(self) -> None:
        self.base = 0
        self.data = bytearray()

    @property
    def min_offset(self) -> int:
        return self.base

    @property
    def max_offset(self) -> int:
        return self.base + len(self.data)

    def append(self, data: bytes) -> int:
        self.data += data
        return self.max_offset

    def read(self, offset: int, size: int) -> bytes:
        assert self.min_offset <= offset <= self.max_offset
        end = min(offset + size, (offset // self.segment_size + 1) * self.segment_size)
        return bytes(self.data[offset - self.base : end - self.base])

    def read_into(self, offset: int, buffer: bytearray | memoryview) -> int:
        return read_into_by_read(self.read, offset, buffer)

    def append_raw(self, offset: int, data: bytes) -> int:
        if not self.data and offset >= self.max_offset:
            self.base = offset
        elif offset != self.max_offset:
            raise AssertionError(f"gap or overlap: write at {offset}, end {self.max_offset}")
        self.data += data
        return self.max_offset

    def truncate(self, offset: int) -> None:
        if offset <= self.base:
            self.base, self.data = offset, bytearray()
        else:
            del self.data[offset - self.base :]


class MemoryEpochs:
    def __init__(self, cache: EpochCache | None = None) -> None:
        self.cache = cache or EpochCache()

    def load(self) -> EpochCache:
        return self.cache

    def save(self, cache: EpochCache) -> None:
        self.cache = cache


class Replica:
    def __init__(self, name: str, broker_id: int) -> None:
        self.name = name
        self.broker_id = broker_id
        self.log = MemoryLog()
        self.epochs = MemoryEpochs()


def write(replica: Replica, rng: random.Random, count: int) -> None:
    for _ in range(count):
        replica.log.append(bytes([rng.randrange(256)]) * rng.randint(1, 300))


def make_master(replica: Replica, epoch: int, **kwargs) -> HAMaster:
    replica.epochs.cache = replica.epochs.cache.append(epoch, replica.log.max_offset)
    config = HAMasterConfig(ha_transfer_batch_size=100, ha_send_heartbeat_interval=200, **kwargs)
    return HAMaster(
        log=replica.log,
        epochs=replica.epochs.cache,
        broker_id=replica.broker_id,
        sync_state_set=kwargs.pop("sync_state_set", frozenset({replica.broker_id})),
        confirm_offset=replica.log.max_offset,
        reporter=ApproveLocally(),
        config=config,
    )


def connector(nursery: trio.Nursery, master: HAMaster):
    async def connect() -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(master.serve, server)
        return client

    return connect


async def tcp_connector(nursery: trio.Nursery, master: HAMaster,
                        streams: list[trio.SocketStream] | None = None):
    """A ``connect`` to ``master`` served over TCP loopback; the streams it opens
    are added to ``streams``."""
    (listener,) = await nursery.start(
        functools.partial(trio.serve_tcp, master.serve, 0, host="127.0.0.1")
    )
    port = listener.socket.getsockname()[1]
    opened = [] if streams is None else streams

    async def connect() -> trio.abc.Stream:
        opened.append(await trio.open_tcp_stream("127.0.0.1", port))
        return opened[-1]

    return connect


async def inline(function, *args):
    # No threads under the autojump clock: it would jump while a thread runs.
    return function(*args)


def make_slave(replica: Replica, connect, **config) -> HASlave:
    return HASlave(
        log=replica.log,
        epoch_store=replica.epochs,
        broker_id=replica.broker_id,
        connect=connect,
        config=HASlaveConfig(ha_send_heartbeat_interval=100, **config),
        offload=inline,
    )


async def caught_up(master: Replica, *slaves: Replica) -> None:
    with trio.fail_after(60):
        while any(s.log.max_offset != master.log.max_offset for s in slaves):
            await trio.sleep(0.05)


def same(*replicas: Replica) -> bool:
    first = replicas[0]
    return all(
        (r.log.base, r.log.data, r.epochs.cache)
        == (first.log.base, first.log.data, first.epochs.cache)
        for r in replicas
    )


async def run_term(master: Replica, epoch: int, slaves: list[Replica], rng, writes: int) -> None:
    """One master term: serve the slaves while writing, until they hold everything."""
    ha = make_master(master, epoch)
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        clients = [make_slave(slave, connector(nursery, ha)) for slave in slaves]
        for client in clients:
            await nursery.start(client.run)
        for _ in range(writes):
            write(master, rng, 3)
            ha.appended()
            await trio.sleep(0.01)
        await caught_up(master, *slaves)
        nursery.cancel_scope.cancel()
    assert [(c.connections, c.last_error) for c in clients] == [(1, None)] * len(clients)


async def test_master_and_two_slaves_across_several_epochs(autojump_clock):
    rng = random.Random(7)
    a, b, c = Replica("a", 1), Replica("b", 2), Replica("c", 3)
    await run_term(a, 1, [b, c], rng, writes=5)
    assert same(a, b, c)
    write(a, rng, 4)  # a's unreplicated tail, then a fails
    await run_term(b, 2, [c], rng, writes=3)
    await run_term(b, 3, [a, c], rng, writes=3)  # a rejoins; its tail is cut
    assert same(a, b, c)
    write(b, rng, 2)  # b's tail, lost with b
    await run_term(c, 5, [a, b], rng, writes=4)
    assert same(a, b, c)
    assert [e.epoch for e in c.epochs.cache] == [1, 2, 3, 5]
    assert len(a.log.data) > 2000


async def test_bad_slave_is_closed_and_the_others_keep_replicating(autojump_clock):
    rng = random.Random(1)
    m, good = Replica("m", 0), Replica("good", 1)
    ha = make_master(m, 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        await nursery.start(make_slave(good, connector(nursery, ha)).run)
        bad, server = trio.testing.memory_stream_pair()
        nursery.start_soon(ha.serve, server)
        await bad.send_all(struct.pack(">iq", 2, 0))  # an ack before any handshake
        assert await bad.receive_some() == b""  # closed by the master
        write(m, rng, 5)
        ha.appended()
        await caught_up(m, good)
        nursery.cancel_scope.cancel()
    assert same(m, good)


async def test_raw_slave_speaks_bytes_to_the_master(autojump_clock):
    m = Replica("m", 0)
    m.epochs.cache = EpochCache([EpochStart(3, 0)])
    m.log.append(b"x" * 150)
    ha = make_master(m, 4)
    async with trio.open_nursery() as nursery:
        raw, server = trio.testing.memory_stream_pair()
        nursery.start_soon(ha.serve, server)
        await raw.send_all(struct.pack(">ihhq", 1, 0, 0, 5))
        decoder = MasterFrameDecoder()
        frames = []
        while not frames:
            frames += decoder.feed(await raw.receive_some())
        assert frames == [MasterHandshake(150, 4, (EpochStart(3, 0), EpochStart(4, 150)))]
        await raw.send_all(struct.pack(">iq", 2, 120))
        while sum(len(e.data) for e in frames if isinstance(e, TransferBody)) < 30:
            frames += decoder.feed(await raw.receive_some())
        assert frames[1] == TransferHeader(120, 3, 0, 150, 30)
        assert b"".join(e.data for e in frames[2:]) == b"x" * 30
        await raw.send_all(struct.pack(">iq", 2, 151))  # beyond the master's max offset
        with trio.fail_after(10):
            while await raw.receive_some():  # heartbeats, then the close
                pass
        nursery.cancel_scope.cancel()


async def test_slave_refuses_a_gap_and_reconnects(autojump_clock):
    """A hand-written master sends a non-contiguous batch; the slave writes nothing of it."""
    s = Replica("s", 1)
    s.log.append(b"a" * 10)
    s.epochs.cache = EpochCache([EpochStart(1, 0)])
    sessions = []

    async def scripted_master(stream: trio.abc.Stream, gap: bool) -> None:
        decoder = SlaveFrameDecoder()
        frames = []
        while len(frames) < 2:  # handshake, then the ack after truncation
            frames += decoder.feed(await stream.receive_some())
        sessions.append(frames[1])
        offset = 12 if gap else 10
        await stream.send_all(encode(Transfer(offset, 1, 0, 0, b"b" * 5)))
        with trio.move_on_after(1):
            while await stream.receive_some():
                pass

    async with trio.open_nursery() as nursery:

        async def connect():
            client, server = trio.testing.memory_stream_pair()
            gap = len(sessions) == 0

            async def serve():
                await server.send_all(encode(MasterHandshake(20, 1, (EpochStart(1, 0),))))
                await scripted_master(server, gap)

            nursery.start_soon(serve)
            return client

        slave = make_slave(s, connect)
        await nursery.start(slave.run)
        with trio.fail_after(30):
            while s.log.max_offset < 15:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert sessions == [Ack(10), Ack(10)]
    assert bytes(s.log.data) == b"a" * 10 + b"b" * 5
    assert slave.connections == 2
    assert isinstance(slave.last_error, HAProtocolError)


async def test_synchronous_put_completes_on_ack_or_times_out(autojump_clock):
    m, s = Replica("m", 0), Replica("s", 1)
    ha = make_master(m, 1, all_ack_in_sync_state_set=True)
    ha.tracker.apply({0, 1})
    async with trio.open_nursery() as nursery:
        # s is a member but not connected: the put cannot complete.
        end = m.log.append(b"p" * 50)
        ha.appended()
        assert (
            await ha.wait_replicated(end, timeout_ms=500) == ReplicationStatus.FLUSH_SLAVE_TIMEOUT
        )
        await nursery.start(make_slave(s, connector(nursery, ha)).run)
        end = m.log.append(b"q" * 50)
        ha.appended()
        assert await ha.wait_replicated(end, timeout_ms=5000) == ReplicationStatus.PUT_OK
        assert s.log.max_offset >= end, (
            ha.tracker.slaves,
            ha.tracker.effective_sync_state_set,
            s.log.max_offset,
            m.log.max_offset,
        )
        nursery.cancel_scope.cancel()


async def test_shrink_when_a_slave_stalls_and_expand_when_it_returns(autojump_clock):
    rng = random.Random(3)
    m, s = Replica("m", 0), Replica("s", 1)
    ha = make_master(m, 1, ha_max_time_slave_not_catchup=2000)
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        slave_scope = trio.CancelScope()

        async def run_slave():
            with slave_scope:
                await make_slave(s, connector(nursery, ha)).run()

        nursery.start_soon(run_slave)
        write(m, rng, 3)
        ha.appended()
        await caught_up(m, s)
        with trio.fail_after(10):
            while ha.tracker.sync_state_set != {0, 1}:
                await trio.sleep(0.1)
        slave_scope.cancel()  # s stalls
        write(m, rng, 3)
        ha.appended()
        with trio.fail_after(10):
            while ha.tracker.sync_state_set != {0}:
                await trio.sleep(0.1)
        nursery.start_soon(make_slave(s, connector(nursery, ha)).run)
        await caught_up(m, s)
        with trio.fail_after(10):
            while ha.tracker.sync_state_set != {0, 1}:
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()


class ScriptedController:
    """A SyncStateSet reporter answering from a script; records the proposals."""

    def __init__(self, *answers: frozenset[int] | Exception | None) -> None:
        self.answers = list(answers)
        self.proposals: list[frozenset[int]] = []

    async def alter_sync_state_set(self, proposal: frozenset[int]) -> frozenset[int] | None:
        self.proposals.append(proposal)
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_expand_with_unknown_outcome_stays_counted_until_read_back(autojump_clock):
    m, s = Replica("m", 0), Replica("s", 1)
    m.epochs.cache = m.epochs.cache.append(1, 0)
    controller = ScriptedController(None, None, frozenset({0, 1}))
    ha = HAMaster(log=m.log, epochs=m.epochs.cache, broker_id=0, sync_state_set=frozenset({0}),
                  confirm_offset=0, reporter=controller,
                  config=HAMasterConfig(all_ack_in_sync_state_set=True,
                                        check_sync_state_set_period=100))
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        slave_scope = trio.CancelScope()

        async def run_slave():
            with slave_scope:
                await make_slave(s, connector(nursery, ha)).run()

        nursery.start_soon(run_slave)
        with trio.fail_after(10):
            while len(controller.proposals) < 2:
                await trio.sleep(0.01)
        # Two proposals went unanswered: the expand may be committed.
        assert controller.proposals == [{0, 1}, {0, 1}]
        assert ha.tracker.effective_sync_state_set == {0, 1}
        slave_scope.cancel()  # the new member stops acking
        end = m.log.append(b"x" * 50)
        ha.appended()
        assert await ha.wait_replicated(end, 500) == ReplicationStatus.FLUSH_SLAVE_TIMEOUT
        with trio.fail_after(10):  # asked again: the read-back set is applied
            while ha.tracker.sync_state_set != {0, 1}:
                await trio.sleep(0.01)
        assert ha.tracker.pending is None
        nursery.cancel_scope.cancel()


async def test_a_fenced_master_completes_no_more_puts(autojump_clock):
    m, s = Replica("m", 0), Replica("s", 1)
    m.epochs.cache = m.epochs.cache.append(1, 0)
    controller = ScriptedController(MasterFenced("a newer master epoch"))
    ha = HAMaster(log=m.log, epochs=m.epochs.cache, broker_id=0,
                  sync_state_set=frozenset({0, 1}), confirm_offset=0, reporter=controller,
                  config=HAMasterConfig(all_ack_in_sync_state_set=True))
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        # A put waiting for s, which does not come: the shrink is fenced.
        end = m.log.append(b"x" * 50)
        ha.appended()
        waiting = []

        async def put() -> None:
            waiting.append(await ha.wait_replicated(end, 60_000))

        nursery.start_soon(put)
        with trio.fail_after(10):
            while not ha.fenced:
                await trio.sleep(0.01)
        await trio.sleep(0.01)
        assert controller.proposals == [{0}]
        assert waiting == [ReplicationStatus.FLUSH_SLAVE_TIMEOUT]
        nursery.start_soon(make_slave(s, connector(nursery, ha)).run)
        await caught_up(m, s)
        end = m.log.append(b"y" * 50)
        ha.appended()
        await caught_up(m, s)  # every replica holds it, yet the put does not complete
        assert await ha.wait_replicated(end, 500) == ReplicationStatus.FLUSH_SLAVE_TIMEOUT
        nursery.cancel_scope.cancel()


async def test_a_polled_sync_state_set_is_adopted(autojump_clock):
    m = Replica("m", 0)
    m.epochs.cache = m.epochs.cache.append(1, 0)
    ha = HAMaster(log=m.log, epochs=m.epochs.cache, broker_id=0, sync_state_set=frozenset({0}),
                  confirm_offset=0, reporter=ScriptedController(),
                  config=HAMasterConfig(all_ack_in_sync_state_set=True))
    ha.sync_state_set_committed(frozenset({0, 1}))
    end = m.log.append(b"x" * 50)
    assert await ha.wait_replicated(end, 500) == ReplicationStatus.FLUSH_SLAVE_TIMEOUT


class Killed(BaseException):
    """The process dies (not an error the slave handles)."""


class DieOnFirstSave:
    def __init__(self, store) -> None:
        self.store = store

    def load(self) -> EpochCache:
        return self.store.load()

    def save(self, cache: EpochCache) -> None:
        raise Killed


async def test_kill_right_after_truncation_leaves_no_stale_tail(autojump_clock, tmp_path):
    rng = random.Random(5)
    m, s = Replica("m", 0), Replica("s", 1)
    s.epochs = EpochCheckpointFile(tmp_path)
    await run_term(m, 1, [s], rng, writes=2)
    write(s, rng, 3)  # s was briefly master in epoch 2; nobody copied its tail
    s.epochs.save(s.epochs.load().append(2, m.log.max_offset))
    ha = make_master(m, 3)
    write(m, rng, 2)
    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(ha.run)
            store, s.epochs = s.epochs, DieOnFirstSave(s.epochs)
            await nursery.start(make_slave(s, connector(nursery, ha)).run)
    assert info.group_contains(Killed)
    s.epochs = store
    # The log was cut at the consistent point before the epoch file changed.
    assert s.log.max_offset == m.epochs.cache.find(3).start_offset
    assert s.epochs.load().last_epoch == 2
    async with trio.open_nursery() as nursery:  # restart
        await nursery.start(ha.run)
        await nursery.start(make_slave(s, connector(nursery, ha)).run)
        await caught_up(m, s)
        nursery.cancel_scope.cancel()
    assert (s.log.base, s.log.data) == (m.log.base, m.log.data)
    assert s.epochs.load() == m.epochs.cache


async def test_replication_over_tcp_loopback():
    rng = random.Random(11)
    m, s1, s2 = Replica("m", 0), Replica("s1", 1), Replica("s2", 2)
    ha = make_master(m, 1)
    write(m, rng, 20)
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        connect = await tcp_connector(nursery, ha)
        for slave in (s1, s2):
            await nursery.start(make_slave(slave, connect).run)
        for _ in range(5):
            write(m, rng, 10)
            ha.appended()
            await trio.sleep(0)
        await caught_up(m, s1, s2)
        nursery.cancel_scope.cancel()
    assert same(m, s1, s2)


async def slave_receive_buffer(size: int) -> int:
    """SO_RCVBUF of a slave's TCP connection with ``receive_buffer_size=size``,
    once it caught up with its master."""
    m, s = Replica("m", 0), Replica("s", 1)
    ha = make_master(m, 1)
    write(m, random.Random(5), 20)
    streams: list[trio.SocketStream] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        connect = await tcp_connector(nursery, ha, streams)
        await nursery.start(make_slave(s, connect, receive_buffer_size=size).run)
        await caught_up(m, s)
        found = streams[0].getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        nursery.cancel_scope.cancel()
    assert same(m, s)
    return found


async def test_a_slave_over_tcp_asks_for_its_receive_buffer():
    # The kernel doubles what it is asked (bookkeeping) and caps it at
    # net.core.rmem_max; 0 leaves the buffer to its autotuning.
    with open("/proc/sys/net/core/rmem_max") as f:
        rmem_max = int(f.read())
    wanted = 1 << 20
    assert await slave_receive_buffer(wanted) == 2 * min(wanted, rmem_max)
    assert await slave_receive_buffer(0) != 2 * min(wanted, rmem_max)


async def test_a_slave_says_when_it_cut_its_log_back_to_its_masters(autojump_clock):
    rng = random.Random(9)
    a, b = Replica("a", 1), Replica("b", 2)
    await run_term(a, 1, [b], rng, writes=2)
    write(a, rng, 4)  # a's tail, never replicated
    await run_term(b, 2, [], rng, writes=2)
    cuts: list[int] = []
    ha = make_master(b, 3)
    async with trio.open_nursery() as nursery:
        await nursery.start(ha.run)
        slave = make_slave(a, connector(nursery, ha))
        # Told once the log (and its queues) is cut: the broker's tables follow it.
        slave.on_truncated = lambda: cuts.append(a.log.max_offset)
        await nursery.start(slave.run)
        await caught_up(b, a)
        nursery.cancel_scope.cancel()
    assert cuts == [b.epochs.cache.find(2).start_offset]
    assert (a.log.base, a.log.data) == (b.log.base, b.log.data)
