"""A slave's mmap store verifies clean after a clean stop, whatever its reads were.

A slave over TCP scatters its reads: transfer bodies land in its log's space
at their places, as if every next batch had the size of the largest so far.
A shorter batch followed by another frame in the same read is not laid out
as sent: its bytes are handled from a copy, but the scattered read had put
the next frame's header and body in the log's space past its end, shifted
by a header's size. Nothing of that may stay in the mapped file: ``store
verify`` reads the files, not the checkpoint.
"""

from __future__ import annotations

import functools
import io
import random

import pytest
import trio

from triomq.ha import streams
from triomq.ha.checkpoint import EpochCheckpointFile
from triomq.ha.slave_driver import HASlave, HASlaveConfig
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.protocol.ha import (
    Ack,
    EpochStart,
    MasterHandshake,
    SlaveFrameDecoder,
    SlaveHandshake,
    Transfer,
    encode,
)
from triomq.protocol.message import MessageRecord
from triomq.store_cli import verify_command

BATCH = 4000


async def inline(function, *args):
    return function(*args)


def master_log_bytes(root, rng: random.Random, size: int) -> tuple[bytes, list[int]]:
    """A master's commit log of at least ``size`` bytes, and its record ends."""
    ends = []
    with MmapCommitLog(str(root), segment_size=1 << 20) as log:
        while log.max_offset < size:
            body = bytes([rng.randrange(256)]) * rng.randint(50, 400)
            log.append(MessageRecord(topic="t", body=body, queue_id=rng.randrange(2)))
            ends.append(log.max_offset)
        return log.read(0, log.max_offset), ends


class ScriptedMaster:
    """Sends the frames it is told to over one TCP connection; reads the acks."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.stream: trio.abc.Stream | None = None
        self.acks: list[int] = []
        self.joined = trio.Event()
        self._acked = trio.Event()

    async def serve(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        decoder = SlaveFrameDecoder()
        while data := await stream.receive_some():
            for frame in decoder.feed(data):
                if isinstance(frame, SlaveHandshake):
                    await stream.send_all(encode(MasterHandshake(
                        len(self.data), 1, (EpochStart(1, 0),))))
                else:
                    assert isinstance(frame, Ack)
                    self.acks.append(frame.max_offset)
                    self.joined.set()
                    self._acked.set()
                    self._acked = trio.Event()

    def frames(self, *cuts: tuple[int, int]) -> bytes:
        return b"".join(encode(Transfer(lo, 1, 0, lo, self.data[lo:hi])) for lo, hi in cuts)

    async def send_and_wait(self, frames: bytes, acked: int) -> None:
        """Send ``frames`` in one write (the slave reads them at once: it runs in
        this thread too), and wait until the slave acks ``acked``."""
        assert self.stream is not None
        await self.stream.send_all(frames)
        with trio.fail_after(10):
            while not self.acks or self.acks[-1] < acked:
                await self._acked.wait()


@pytest.fixture(params=["C", "pure Python"])
def scattered_reads(request, monkeypatch):
    """Scattered reads by the C extension (where built) or by the pure-Python version."""
    if request.param == "pure Python":
        monkeypatch.setattr(streams, "_speedups", None)
    elif streams._speedups is None:
        pytest.skip("the C extension is not built")


async def replicate_then_stop(tmp_path, cuts: list[tuple[int, int]], data: bytes) -> None:
    """A slave over TCP gets the frames ``cuts`` of ``data``: the first alone,
    the others in one read; then it stops and its log closes."""
    master = ScriptedMaster(data)
    slave_root = tmp_path / "slave"
    log = MmapCommitLog(str(slave_root), segment_size=1 << 20)
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, master.serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        slave = HASlave(log=log, epoch_store=EpochCheckpointFile(slave_root), broker_id=1,
                        connect=lambda: trio.open_tcp_stream("127.0.0.1", port),
                        config=HASlaveConfig(ha_send_heartbeat_interval=100), offload=inline)
        await nursery.start(slave.run)
        with trio.fail_after(10):
            await master.joined.wait()
        await master.send_and_wait(master.frames(cuts[0]), cuts[0][1])
        await master.send_and_wait(master.frames(*cuts[1:]), cuts[-1][1])
        assert slave.last_error is None
        nursery.cancel_scope.cancel()
    assert log.max_offset == cuts[-1][1]
    assert log.read(0, log.max_offset) == data[:log.max_offset]
    log.close()


def stops_clean(root) -> None:
    err = io.StringIO()
    assert verify_command(str(root), io.StringIO(), err) == 0, err.getvalue()


async def test_a_short_batch_then_another_frame_leaves_nothing_past_the_end(
        tmp_path, scattered_reads):
    data, ends = master_log_bytes(tmp_path / "master", random.Random(3), 3 * BATCH)
    # A full batch first: the slave then lays its reads out for batches of BATCH.
    short = next(end for end in ends if end > BATCH + 500) - 200  # inside a record
    last = next(end for end in ends if end > short + 300)  # a record's end
    assert last - BATCH < BATCH - 36
    # The short batch and the next frame in one read: not laid out as sent, the
    # next frame's body landed a header's size past its place.
    await replicate_then_stop(tmp_path, [(0, BATCH), (BATCH, short), (short, last)], data)
    stops_clean(tmp_path / "slave")



async def test_a_slave_stopped_inside_a_record_keeps_its_whole_records(tmp_path):
    data, ends = master_log_bytes(tmp_path / "master", random.Random(5), 3 * BATCH)
    inside = next(end for end in ends if end > 2 * BATCH) - 100  # a record's last 100 bytes missing
    await replicate_then_stop(tmp_path, [(0, BATCH), (BATCH, inside)], data)
    stops_clean(tmp_path / "slave")
    with MmapCommitLog(str(tmp_path / "slave"), segment_size=1 << 20) as log:
        assert log.max_offset == max(end for end in ends if end <= inside)
