"""The key index is built behind the commit log: puts and a slave's appends never
wait for it, queries answer from what it has indexed, and it catches up, after a
restart too, from the checkpoint in its newest file."""

from __future__ import annotations

import threading

import pytest
import trio
from broker_nodes import Cluster, caught_up, plugins, wait_until
from test_queries import INDEX, query, records

from triomq.broker.config import BrokerConfig
from triomq.broker.core.codes import ResponseCode
from triomq.broker.index import index_service
from triomq.broker.index.core import index_dispatch
from triomq.broker.index.index_service import IndexService
from triomq.protocol.message import MessageRecord
from triomq.testing.direct_send import DirectProducer

SYNC_ALL = "all_ack_in_sync_state_set = true"


@pytest.fixture
def held_index(monkeypatch) -> trio.Event:
    """Every broker's index waits before each batch until the event is set."""
    release = trio.Event()
    index_batch = IndexService._index

    async def held(self, store, data, start):
        await release.wait()
        return await index_batch(self, store, data, start)

    monkeypatch.setattr(IndexService, "_index", held)
    return release


async def test_a_put_completes_while_the_index_is_behind(tmp_path, held_index) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra=INDEX) as a, cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        sent = [await producer.send("orders", f"m{i}".encode(), keys=f"k{i}")
                for i in range(3)]
        assert a.index.position <= sent[0].physical_offset  # nothing of it indexed
        behind = await query(client, a.node.address, "k2")
        assert behind.code == ResponseCode.QUERY_NOT_FOUND
        assert int(behind.ext_fields["indexLastUpdatePhyoffset"]) < sent[2].physical_offset
        held_index.set()
        await wait_until(lambda: a.index.caught_up)
        answer = await query(client, a.node.address, "k2")
        assert [r.body for r in records(answer.body)] == [b"m2"]
        assert int(answer.ext_fields["indexLastUpdatePhyoffset"]) == sent[2].physical_offset


async def test_a_slave_acks_a_put_while_its_index_is_behind(tmp_path, held_index) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("m", extra=f"{INDEX}\n{SYNC_ALL}") as m, \
            cluster.broker("s", broker_id=1, master=m.ha_address,
                           extra=f"{INDEX}\n{SYNC_ALL}") as s, \
            cluster.client() as client:
        await wait_until(lambda: len(m.replicas.sync_state_set) == 2)
        producer = DirectProducer(client.rpc, m.node.address)
        for i in range(3):  # each put waits for the slave's ack
            await producer.send("orders", f"r{i}".encode(), keys=f"rk{i}")
        await caught_up(m, s)
        assert s.index.position < s.log.max_offset and m.index.position < m.log.max_offset
        held_index.set()
        await wait_until(lambda: s.index.caught_up)
        answer = await query(client, s.node.address, "rk1")
        assert [r.body for r in records(answer.body)] == [b"r1"]


async def test_the_index_catches_up_from_its_checkpoint_after_a_restart(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra=INDEX) as a, cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        for i in range(4):
            await producer.send("orders", f"old{i}".encode(), keys=f"o{i} all")
        await wait_until(lambda: a.index.caught_up)
    # The log grows while no index follows it (as if the broker stopped before the
    # index's batch was in).
    async with cluster.broker("a", extra="message_index_enable = false") as a, \
            cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        for i in range(4):
            await producer.send("orders", f"new{i}".encode(), keys=f"n{i} all")
    async with cluster.broker("a", extra=INDEX) as a, cluster.client() as client:
        await wait_until(lambda: a.index.caught_up)
        answer = await query(client, a.node.address, "n3")
        assert [r.body for r in records(answer.body)] == [b"new3"]
        every = await query(client, a.node.address, "all")
        assert sorted(r.body for r in records(every.body)) == sorted(
            [f"old{i}".encode() for i in range(4)] + [f"new{i}".encode() for i in range(4)])
        # Each record's two keys and its UNIQ_KEY once: it resumed at its checkpoint,
        # nothing indexed twice.
        assert sum(f.index.header.index_count - 1 for f in a.index.store._files) == 8 * 3


async def test_a_backlog_is_indexed_in_batches_by_a_worker_thread(tmp_path, monkeypatch) -> None:
    log = plugins().log_store("commitlog", "mmap")(str(tmp_path), {"segment_size": 1 << 20})
    records = [MessageRecord(topic="orders", body=bytes(1000), properties={
        "UNIQ_KEY": f"{i:032X}", "KEYS": f"k{i} all"}) for i in range(300)]
    log.append_batch(records)  # 300 KB: batches of THREAD_BYTES and more
    threads = []
    index_batch = index_service._index_batch

    def recorded(*args):
        threads.append(threading.current_thread() is threading.main_thread())
        return index_batch(*args)

    monkeypatch.setattr(index_service, "_index_batch", recorded)
    index = IndexService(log, str(tmp_path), BrokerConfig(max_hash_slot_num=64,
                                                          max_index_num=4096))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            await wait_until(lambda: index.caught_up)
            found = await index.query("orders#k123", 8, 0, 2**62)
            every = await index.query("orders#all", 1000, 0, 2**62)
            nursery.cancel_scope.cancel()
        assert [log.read_record(offset).properties["KEYS"] for offset in found.offsets] == [
            "k123 all"]
        assert len(set(every.offsets)) == 300
    finally:
        log.close()
    if index_dispatch.SPEEDUPS:
        assert threads and not any(threads)  # never on the loop's thread
