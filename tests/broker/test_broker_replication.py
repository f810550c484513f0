"""A master and two slaves as real nodes replicate synchronous puts across epochs."""

from __future__ import annotations

import random

import pytest
import trio
from broker_nodes import Cluster, caught_up, image, wait_until

from triomq.broker.replication.replicas_manager import BrokerRole, ReplicasManager
from triomq.broker.service import broker_of
from triomq.errors import PluginError, ServiceCrashed
from triomq.ha.checkpoint import CHECKPOINT_FILE, EpochCheckpointFile, load_epoch_checkpoint
from triomq.hookspecs import hookimpl
from triomq.protocol.message import MessageRecord
from triomq.testing.direct_send import DirectProducer

SYNC_ALL = "all_ack_in_sync_state_set = true"


class RoleRecorder:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str, int]] = []

    @hookimpl
    def triomq_role_changed(self, node, broker_name, broker_id, role, master_epoch):
        self.changes.append((node.name, role, master_epoch))


async def put_synchronously(producer: DirectProducer, rng: random.Random, count: int,
                            master, slaves) -> None:
    """Each put answers SUCCESS only once every slave holds it."""
    await wait_until(lambda: len(master.replicas.sync_state_set) == 1 + len(slaves))
    for i in range(count):
        body = bytes([rng.randrange(256)]) * rng.randint(1, 700)
        result = await producer.send("orders", body, tags=f"t{i % 3}", keys=f"k{i}",
                                     queue_id=rng.randrange(2))
        record = master.log.read_record(result.physical_offset)
        assert record.body == body
        assert record.properties["KEYS"] == f"k{i}"
        size = int.from_bytes(master.log.read(result.physical_offset, 4), "big")
        end = result.physical_offset + size
        for slave in slaves:
            assert slave.log.max_offset >= end


async def test_three_brokers_across_epochs(cluster):
    rng = random.Random(5)
    recorder = RoleRecorder()
    cluster.pm.register(recorder, name="recorder")
    async with cluster.client() as client:
        # Epoch 1: static roles, a is the master.
        async with cluster.broker("a", extra=SYNC_ALL) as a:
            assert a.replicas.role is BrokerRole.MASTER
            async with (
                cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC_ALL) as b,
                cluster.broker("c", broker_id=2, master=a.ha_address, extra=SYNC_ALL) as c,
            ):
                assert b.replicas.role is BrokerRole.SLAVE
                producer = DirectProducer(client.rpc, a.node.address)
                await put_synchronously(producer, rng, 12, a, [b, c])

                # Epoch 2: b takes over through the ReplicasManagers.
                await b.replicas.change_to_master(2, b.broker_id)
                await a.replicas.change_to_slave(b.ha_address, 2, a.broker_id)
                await c.replicas.change_to_slave(b.ha_address, 2, c.broker_id)
                assert (a.replicas.role, b.replicas.role) == (BrokerRole.SLAVE, BrokerRole.MASTER)
                producer = DirectProducer(client.rpc, b.node.address)
                await put_synchronously(producer, rng, 12, b, [a, c])
                await caught_up(b, a, c)
                state = a.replicas.state()
                assert (state.role, state.master_epoch, state.master_ha_address) == (
                    BrokerRole.SLAVE, 2, b.ha_address)
                await wait_until(lambda: a.replicas.confirm_offset == b.log.max_offset)
                state = b.replicas.state()
                assert state.sync_state_set == {a.broker_id, b.broker_id, c.broker_id}
                assert state.confirm_offset == state.max_offset == b.log.max_offset

        # Epoch 3: every node restarts; a is master again with a higher epoch.
        async with (
            cluster.broker("a", epoch=3, extra=SYNC_ALL) as a,
            cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC_ALL) as b,
            cluster.broker("c", broker_id=2, master=a.ha_address, extra=SYNC_ALL) as c,
        ):
            await put_synchronously(DirectProducer(client.rpc, a.node.address), rng, 12, a, [b, c])
            await caught_up(a, b, c)
            assert image(a) == image(b) == image(c)
            assert a.log.max_offset > 2 * a.log.segment_size

    roots = [cluster.root / name for name in "abc"]
    assert [e.epoch for e in load_epoch_checkpoint(roots[0])] == [1, 2, 3]
    files = {(root / CHECKPOINT_FILE).read_bytes() for root in roots}
    assert len(files) == 1
    assert ("a", "master", 1) in recorder.changes
    assert recorder.changes.index(("b", "master", 2)) < recorder.changes.index(("a", "slave", 2))
    assert ("a", "master", 3) in recorder.changes


async def test_an_existing_store_without_epochs_is_adopted_and_replicated(tmp_path):
    """A log written before HA (no epoch file) becomes the master's first epoch."""
    cluster = Cluster("inproc", tmp_path)
    log = cluster.pm.log_store("commitlog", "mmap")(str(tmp_path / "a"), {"segment_size": 4096})
    for i in range(30):
        log.append(MessageRecord(topic="old", body=b"%d" % i * 50, queue_id=i % 3))
    log.close()
    async with (
        cluster.broker("a", epoch=4) as a,
        cluster.broker("b", broker_id=1, master=a.ha_address) as b,
    ):
        await caught_up(a, b)
        assert image(a) == image(b)
        assert b.log.queue_max_offset("old", 2) == 10
    assert [(e.epoch, e.start_offset) for e in load_epoch_checkpoint(tmp_path / "a")] == [(4, 0)]


async def test_the_lmdb_store_replicates_too(tmp_path):
    cluster = Cluster("inproc", tmp_path, scheme="lmdb")
    rng = random.Random(8)
    async with (
        cluster.client() as client,
        cluster.broker("a", extra=SYNC_ALL) as a,
        cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC_ALL) as b,
    ):
        await put_synchronously(DirectProducer(client.rpc, a.node.address), rng, 20, a, [b])
        await b.replicas.change_to_master(2, b.broker_id)
        await a.replicas.change_to_slave(b.ha_address, 2, a.broker_id)
        await put_synchronously(DirectProducer(client.rpc, b.node.address), rng, 20, b, [a])
        await caught_up(b, a)
        assert image(a) == image(b)


async def test_a_master_epoch_older_than_the_recorded_one_stops_the_node(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", epoch=5):
        pass
    with pytest.raises(ServiceCrashed) as info:
        async with cluster.broker("a", epoch=4):
            pass
    assert info.value.service == "broker"
    assert "master epoch 4 is older than the recorded 5" in str(info.value)


async def test_only_broker_nodes_run_a_broker(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.client() as client:
        assert client.services == []
        with pytest.raises(PluginError, match="runs no broker"):
            broker_of(client)


async def test_a_restarted_master_confirms_nothing_a_member_may_lack(tmp_path):
    # No term before (just restarted): bytes past the log's start are confirmed
    # only once every SyncStateSet member has acked them in this term.
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a:
        factory = a.node.plugins.log_store("commitlog", "mmap")
        root = tmp_path / "restarted"
        log = factory(str(root), {"segment_size": 4096})
        for _ in range(3):
            log.append(MessageRecord(topic="t", body=b"never acked by s"))
        replicas = ReplicasManager(log=log, epoch_store=EpochCheckpointFile(str(root)),
                                   address="inproc://r",
                                   ha_listener=await a.node.listen("inproc://r-ha"),
                                   connect=a.node.connect)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(replicas.run)
                await replicas.change_to_master(1, 0, frozenset({0, 1}))
                assert replicas.confirm_offset == log.min_offset < log.max_offset
                await replicas.change_to_master(2, 0)  # alone in its set: all of it confirmed
                assert replicas.confirm_offset == log.max_offset
                nursery.cancel_scope.cancel()
        finally:
            log.close()


async def test_a_slave_counts_what_it_replicates_as_a_master_counts_its_puts(cluster):
    async with (
        cluster.client() as client,
        cluster.broker("a", extra=SYNC_ALL) as a,
        cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC_ALL) as b,
    ):
        await wait_until(lambda: len(a.replicas.sync_state_set) == 2)
        stats = b.processor.stats
        before = (stats.put_messages, stats.put_bytes, b.log.max_offset)
        producer = DirectProducer(client.rpc, a.node.address)
        await put_synchronously(producer, random.Random(3), 5, a, [b])
        # Counted in its slave term, once a second.
        await wait_until(lambda: (stats.put_messages - before[0], stats.put_bytes - before[1])
                         == (5, b.log.max_offset - before[2]))
