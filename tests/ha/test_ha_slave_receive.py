"""A slave's receive path against a hand-written master, into real mmap logs.

Over TCP the slave scatters a read: bodies straight into its log's mapped
space at their places, headers into slots between them, as long as the
batches have the size it expects; any other read (batches of other sizes,
heartbeats, a header cut in two) is handled from a buffer. The master below
sends batches of random sizes, or full batches as a master does, across
segment ends and an epoch change, in random pieces; the slave's log must
end byte for byte the master's, with the same epochs and consume queues. A
master whose bytes are not records is dropped, and nothing of them stays.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

import triomq.ha.slave_driver as slave_driver
from triomq.ha.checkpoint import EpochCheckpointFile
from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.slave import RecordEpoch, WriteAt
from triomq.ha.slave_driver import HASlave, HASlaveConfig
from triomq.ha.streams import read_scattered
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.protocol.ha import MasterHandshake, SlaveFrameDecoder, Transfer, encode
from triomq.protocol.message import MessageRecord
from triomq.store import StoreCorruption

SEGMENT = 64 * 1024
#: A segment larger than a filled master's whole log.
ONE_SEGMENT = 16 * SEGMENT

Script = Callable[[trio.abc.Stream, int], Awaitable[None]]


async def inline(function, *args):
    return function(*args)


def filled_master(root: Path, rng: random.Random, segment_size: int = SEGMENT) -> MmapCommitLog:
    log = MmapCommitLog(str(root), segment_size=segment_size)
    while log.max_offset < 9 * SEGMENT:
        body = rng.randbytes(rng.randint(1, 3000))
        topic = f"t{rng.randrange(3)}"
        log.append(MessageRecord(topic=topic, body=body, queue_id=rng.randrange(2)))
    return log


def wire(log: MmapCommitLog, epoch_starts: list[EpochStart], rng: random.Random,
         offset: int = 0, batch: int = 0, heartbeats: float = 0.2) -> bytes:
    """The log from ``offset`` as transfers, none across an epoch's start, with
    heartbeats between some (that share of them): of random sizes, or of
    ``batch`` bytes as a master sends them (less only before an epoch's start
    and at the end)."""
    frames = []
    while offset < log.max_offset:
        current = max((e for e in epoch_starts if e.start_offset <= offset),
                      key=lambda e: e.start_offset)
        later = [e.start_offset for e in epoch_starts if e.start_offset > offset]
        end = min([offset + (batch or rng.randint(1, 40_000)), log.max_offset, *later])
        body = log.read(offset, end - offset)
        frames.append(Transfer(offset, current.epoch, current.start_offset, offset, body))
        if rng.random() < heartbeats:
            frames.append(Transfer(end, current.epoch, current.start_offset, end))
        offset = end
    return b"".join(encode(f) for f in frames)


async def wait_for_handshake(stream: trio.abc.Stream) -> int:
    """The offset the slave acks after the handshake (where it wants bytes from)."""
    decoder = SlaveFrameDecoder()
    frames = []
    while len(frames) < 2:  # the slave's handshake, then its ack of the consistent point
        frames += decoder.feed(await stream.receive_some())
    return frames[1].max_offset


async def send_in_pieces(stream: trio.abc.Stream, data: bytes, rng: random.Random) -> None:
    pos = 0
    while pos < len(data):
        n = rng.choice([1, 7, 36, 37, 500, 4096, 70_000, 300_000])
        await stream.send_all(data[pos:pos + n])
        pos += n
        await trio.sleep(0)


async def hung_up_on(session: Awaitable[None]) -> None:
    """Run a master's session; the slave may hang up on it (a bad master)."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await session


async def run_slave(tmp_path: Path, kind: str, script: Script,
                    until: Callable[[HASlave], bool], *, close: bool = False,
                    log_type: type[MmapCommitLog] = MmapCommitLog,
                    ack_interval_ms: int = 200, segment_size: int = SEGMENT) -> HASlave:
    """Replicate from ``script`` (called per connection with its number) until ``until``;
    with ``close``, cancel the slave from outside and close its log while the
    cancellation unwinds (as a broker does on a role change or shutdown)."""
    root = tmp_path / "slave"
    log = log_type(str(root), segment_size=segment_size)
    slaves: list[HASlave] = []
    config = HASlaveConfig(reconnect_min=10, reconnect_max=10,
                           ha_send_heartbeat_interval=ack_interval_ms)
    with trio.CancelScope() as outside:
        try:
            await _replicate(root, log, kind, script, until, slaves, config,
                             outside if close else None)
        finally:
            if close:
                log.close()  # raises BufferError if a view of it were still alive
    return slaves[0]


async def _replicate(root: Path, log: MmapCommitLog, kind: str, script: Script,
                     until: Callable[[HASlave], bool], slaves: list[HASlave],
                     config: HASlaveConfig, cancel: trio.CancelScope | None) -> None:
    sessions = 0
    async with trio.open_nursery() as nursery:
        if kind == "tcp":
            async def handler(stream: trio.SocketStream) -> None:
                nonlocal sessions
                sessions += 1
                async with stream:
                    await hung_up_on(script(stream, sessions))

            (listener,) = await nursery.start(
                functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            port = listener.socket.getsockname()[1]

            async def connect() -> trio.abc.Stream:
                return await trio.open_tcp_stream("127.0.0.1", port)
        else:
            async def connect() -> trio.abc.Stream:
                nonlocal sessions
                sessions += 1
                client, server = trio.testing.memory_stream_pair()
                nursery.start_soon(hung_up_on, script(server, sessions))
                return client

        slave = HASlave(log=log, epoch_store=EpochCheckpointFile(root), broker_id=1,
                        connect=connect, offload=inline, config=config)
        slaves.append(slave)
        await nursery.start(slave.run)
        with trio.fail_after(30):
            while not until(slave):
                await trio.sleep(0)
        if cancel is not None:
            cancel.cancel()
            await trio.sleep_forever()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("kind", ["tcp", "memory"])
@pytest.mark.parametrize(("seed", "batch"), [(1, 0), (2, 0), (3, 0), (4, 4096), (5, 30_000)])
async def test_batches_in_any_pieces_land_where_they_belong(tmp_path, kind, seed, batch):
    rng = random.Random(seed)
    master = filled_master(tmp_path / "master", rng)
    records = list(master.iter_records())
    epoch_starts = [EpochStart(1, 0), EpochStart(3, records[len(records) // 2].physical_offset)]
    data = wire(master, epoch_starts, rng, batch=batch)
    handshake = encode(MasterHandshake(master.max_offset, 3, tuple(epoch_starts)))

    async def script(stream: trio.abc.Stream, session: int) -> None:
        await stream.send_all(handshake)
        await wait_for_handshake(stream)
        await send_in_pieces(stream, data, rng)
        await trio.sleep_forever()

    slave = await run_slave(tmp_path, kind, script,
                            lambda s: s.log.max_offset == master.max_offset)
    assert slave.connections == 1 and slave.last_error is None
    assert slave.log.read(0, master.max_offset) == master.read(0, master.max_offset)
    assert slave.epochs == EpochCache(epoch_starts)
    assert EpochCheckpointFile(tmp_path / "slave").load() == EpochCache(epoch_starts)
    for topic, queue_id in master.queues():
        assert (slave.log.queue_entries(topic, queue_id, 0, 10_000)
                == master.queue_entries(topic, queue_id, 0, 10_000))
    slave.log.close()
    master.close()


async def test_a_masters_full_batches_are_read_into_place(tmp_path, monkeypatch):
    """Over TCP, the bodies of a master's full batches land in the log's space at
    their places: (nearly) every read is laid out as sent, none is copied."""
    rng = random.Random(6)
    master = filled_master(tmp_path / "master", rng)
    epoch_starts = [EpochStart(1, 0)]
    data = wire(master, epoch_starts, rng, batch=8192, heartbeats=0.01)
    handshake = encode(MasterHandshake(master.max_offset, 1, tuple(epoch_starts)))
    claimed = []

    def counted(*args):
        got = read_scattered(*args)
        if got is not None and got[0]:
            claimed.append(got[1] >= 0)
        return got

    monkeypatch.setattr(slave_driver, "read_scattered", counted)

    async def script(stream: trio.abc.Stream, session: int) -> None:
        await stream.send_all(handshake)
        await wait_for_handshake(stream)
        for pos in range(0, len(data), 100_000):
            await stream.send_all(data[pos:pos + 100_000])
            await trio.sleep(0)
        await trio.sleep_forever()

    slave = await run_slave(tmp_path, "tcp", script,
                            lambda s: s.log.max_offset == master.max_offset)
    assert slave.log.read(0, master.max_offset) == master.read(0, master.max_offset)
    # Only a read that meets a heartbeat, or the last batch, is not laid out as sent.
    assert claimed and sum(claimed) >= 0.8 * len(claimed)
    slave.log.close()
    master.close()


class CountingLog(MmapCommitLog):
    """Counts its appends of replicated bytes."""

    appends = 0

    def append_written(self, offset: int, size: int) -> int:
        self.appends += 1
        return super().append_written(offset, size)


async def test_reads_are_appended_together_and_acks_report_only_appended_bytes(tmp_path,
                                                                            mock_clock):
    """Over TCP a slave holds reads that brought only bodies in place and appends
    them together: apart from the reads it could not hold, it appends only when
    an ack reports the bytes (after reads, or periodic while a frame is still
    coming), and every ack reports only bytes its log holds. The slave's own
    counts say which reads it held, however the reads were cut; the clock
    moves only when the master pauses."""
    rng = random.Random(8)
    # One segment: no segment's end makes the slave append what it holds.
    master = filled_master(tmp_path / "master", rng, segment_size=ONE_SEGMENT)
    epoch_starts = [EpochStart(1, 0)]
    data = wire(master, epoch_starts, rng, batch=8192, heartbeats=0)
    handshake = encode(MasterHandshake(master.max_offset, 1, tuple(epoch_starts)))
    slaves: list[HASlave] = []
    acks: list[tuple[int, int]] = []  # (acked, the slave log's max offset then)

    async def read_acks(stream: trio.abc.Stream) -> None:
        decoder = SlaveFrameDecoder()
        while True:
            for frame in decoder.feed(await stream.receive_some()):
                acks.append((frame.max_offset, slaves[0].log.max_offset))

    async def script(stream: trio.abc.Stream, session: int) -> None:
        await stream.send_all(handshake)
        await wait_for_handshake(stream)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_acks, stream)
            pos = 0
            while pos < len(data):
                n = rng.choice([5_000, 30_000, 200_000])
                await stream.send_all(data[pos:pos + n])
                pos += n
                # Pauses, often inside a frame: periodic acks come meanwhile.
                if rng.random() < 0.2:
                    mock_clock.jump(0.003)
                await trio.sleep(0)
            while not acks or acks[-1][0] < master.max_offset:
                await trio.sleep(0)
            nursery.cancel_scope.cancel()
        await trio.sleep_forever()

    slave = await run_slave(
        tmp_path, "tcp", script,
        lambda s: (slaves or slaves.append(s)) and acks and acks[-1][0] == master.max_offset,
        log_type=CountingLog, ack_interval_ms=1, segment_size=ONE_SEGMENT)
    assert slave.log.read(0, master.max_offset) == master.read(0, master.max_offset)
    assert all(acked <= held for acked, held in acks)
    assert slave.reads_held >= 2
    # Held reads wait for an ack (the handshake's ack aside).
    assert slave.log.appends <= (slave.reads - slave.reads_held) + (len(acks) - 1)
    assert slave.log.appends < slave.reads
    slave.log.close()
    master.close()


@pytest.mark.parametrize("kind", ["tcp", "memory"])
async def test_a_master_whose_bytes_are_not_records_is_dropped(tmp_path, kind):
    rng = random.Random(4)
    master = filled_master(tmp_path / "master", rng)
    epoch_starts = (EpochStart(1, 0),)
    handshake = encode(MasterHandshake(master.max_offset, 1, epoch_starts))
    # Well-formed frames; the second batch's body is no record.
    first = master.read(0, 30_000)
    garbage = (encode(Transfer(0, 1, 0, 0, first))
               + encode(Transfer(len(first), 1, 0, 0, b"\x01" * 100_000)))

    async def script(stream: trio.abc.Stream, session: int) -> None:
        await stream.send_all(handshake)
        acked = await wait_for_handshake(stream)
        good = wire(master, list(epoch_starts), rng, acked)
        await send_in_pieces(stream, garbage if session == 1 else good, rng)
        await trio.sleep_forever()

    slave = await run_slave(tmp_path, kind, script,
                            lambda s: s.log.max_offset == master.max_offset)
    assert slave.connections == 2
    assert isinstance(slave.last_error, StoreCorruption)
    assert slave.log.read(0, master.max_offset) == master.read(0, master.max_offset)
    slave.log.close()
    master.close()


@pytest.mark.parametrize("kind", ["tcp", "memory"])
async def test_a_slave_cancelled_mid_transfer_leaves_a_closable_log(tmp_path, kind):
    """A role change cancels the slave anywhere: no view of the log's space may
    outlive it (the log is closed or truncated next), and the log holds a prefix."""
    rng = random.Random(5)
    master = filled_master(tmp_path / "master", rng)
    epoch_starts = [EpochStart(1, 0), EpochStart(2, master.max_offset // 2)]
    handshake = encode(MasterHandshake(master.max_offset, 2, tuple(epoch_starts)))

    async def script(stream: trio.abc.Stream, session: int) -> None:
        await stream.send_all(handshake)
        acked = await wait_for_handshake(stream)
        await send_in_pieces(stream, wire(master, epoch_starts, rng, acked), rng)
        await trio.sleep_forever()

    for round_ in range(12):
        target = (round_ + 1) * master.max_offset // 13
        await run_slave(tmp_path, kind, script,
                        lambda s, target=target: s.log.max_offset >= target, close=True)
        with MmapCommitLog(str(tmp_path / "slave"), segment_size=SEGMENT) as log:
            assert log.read(0, log.max_offset) == master.read(0, log.max_offset)
    master.close()


class PunchingLog(MmapCommitLog):
    """Zeroes its lent space past its end after every append, as the page warmer
    may (it punches the folios warmed ahead of a writer that turned to a
    trickle out of the file at the writer's next write)."""

    def append_written(self, offset: int, size: int) -> int:
        end = super().append_written(offset, size)
        with self.append_buffer(end, SEGMENT) as space:
            space[:] = bytes(len(space))
        return end


async def test_bytes_of_a_new_epoch_received_in_place_survive_the_append_before_it(tmp_path):
    """A read whose bytes land in place across an epoch change: the bytes before it
    are appended, the epoch saved, then the rest; changes to the log's space
    past its end in between must not reach the rest."""
    rng = random.Random(7)
    master = filled_master(tmp_path / "master", rng)
    records = list(master.iter_records())
    cut = records[3].physical_offset
    end = records[6].physical_offset
    log = PunchingLog(str(tmp_path / "slave"), segment_size=SEGMENT)
    slave = HASlave(log=log, epoch_store=EpochCheckpointFile(tmp_path / "slave"), broker_id=1,
                    connect=trio.open_tcp_stream, offload=inline)
    slave.epochs = EpochCache([EpochStart(1, 0)])
    space = log.append_buffer(0, end)
    space[:end] = master.read(0, end)  # received in place, as a scattered read lands them
    actions = [
        WriteAt(0, space[:cut].toreadonly()),
        RecordEpoch(2, cut, EpochCache([EpochStart(1, 0), EpochStart(2, cut)])),
        WriteAt(cut, space[cut:end].toreadonly()),
    ]
    space.release()

    await slave._apply_actions(actions, (0, end))

    assert log.max_offset == end
    assert log.read(0, end) == master.read(0, end)
    assert EpochCheckpointFile(tmp_path / "slave").load() == EpochCache(
        [EpochStart(1, 0), EpochStart(2, cut)])
    log.close()
    master.close()
