"""The confirm offset reaches RocketMQ's ``checkpoint`` file, for readers of the files alone."""

from __future__ import annotations

import os

from broker_nodes import Cluster, caught_up, wait_until

from triomq.broker.replication.confirm_checkpoint import ConfirmOffsetCheckpoint
from triomq.protocol.store_checkpoint import CONFIRM_PHY_OFFSET, FILE_SIZE
from triomq.testing.direct_send import DirectProducer

SYNC = "all_ack_in_sync_state_set = true\nflush_interval = 20\n"


async def test_every_replica_records_the_confirm_offset(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with (
        cluster.client() as client,
        cluster.broker("a", extra=SYNC) as a,
        cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC) as b,
    ):
        await wait_until(lambda: len(a.replicas.sync_state_set) == 2)
        producer = DirectProducer(client.rpc, a.node.address)
        for i in range(20):
            await producer.send("t", b"m%d" % i)
        await caught_up(a, b)
        end = a.log.max_offset
        files = [ConfirmOffsetCheckpoint(str(tmp_path / name)) for name in ("a", "b")]
        await wait_until(lambda: all(f.read() == end for f in files))


def test_writing_keeps_the_other_fields(tmp_path):
    other = bytes(range(256)) * (FILE_SIZE // 256)
    (tmp_path / "checkpoint").write_bytes(other)
    checkpoint = ConfirmOffsetCheckpoint(str(tmp_path))
    checkpoint.write(123456789)
    data = (tmp_path / "checkpoint").read_bytes()
    assert checkpoint.read() == 123456789
    assert data[:CONFIRM_PHY_OFFSET] == other[:CONFIRM_PHY_OFFSET]
    assert data[CONFIRM_PHY_OFFSET + 8:] == other[CONFIRM_PHY_OFFSET + 8:]


def test_a_missing_file_reads_none_and_is_created_whole(tmp_path):
    checkpoint = ConfirmOffsetCheckpoint(str(tmp_path))
    assert checkpoint.read() is None
    checkpoint.write(7)
    assert os.path.getsize(tmp_path / "checkpoint") == FILE_SIZE
    assert checkpoint.read() == 7


async def test_the_spark_reader_sees_what_the_broker_recorded(tmp_path):
    from triomq.plugins.spark_export.store_files import StoreFiles

    cluster = Cluster("inproc", tmp_path)
    async with (
        cluster.client() as client,
        cluster.broker("a", extra=SYNC) as a,
    ):
        await DirectProducer(client.rpc, a.node.address).send("t", b"only")
        await wait_until(lambda: StoreFiles(str(tmp_path / "a")).confirm_offset()
                         == a.log.max_offset)


def test_a_short_file_is_completed_with_its_bytes_kept(tmp_path):
    (tmp_path / "checkpoint").write_bytes(b"\x01" * 16)
    ConfirmOffsetCheckpoint(str(tmp_path)).write(9)
    data = (tmp_path / "checkpoint").read_bytes()
    assert len(data) == FILE_SIZE
    assert data[:16] == b"\x01" * 16
    assert ConfirmOffsetCheckpoint(str(tmp_path)).read() == 9
    assert not (tmp_path / "checkpoint.tmp").exists()
