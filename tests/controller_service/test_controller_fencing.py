"""Fencing a master cut off from the controllers, and unclean elections."""

from __future__ import annotations

import logging

import attrs
import pytest
import trio
from controller_service_helpers import (
    controllers,
    group_at,
    missing,
    put,
    put_many,
    wait_full_sync_state_set,
    wait_leader,
)

from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.controller import ResponseCode
from triomq.controller.client import ControllerClient, ControllerError
from triomq.plugins.transport_inproc import get_network
from triomq.testing.cluster import BROKER_NAME
from triomq.testing.direct_send import FlushSlaveTimeout


async def test_master_cut_off_from_the_controllers(make_cluster):
    # The stray put's wait for acks ends before the client's 3 s timeout does.
    async with make_cluster(broker={"sync_flush_timeout": 2000}) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        acked = await put_many(client, cluster.broker(master), 10, "before")
        old = cluster.broker(master)

        # Cut the master off from every controller; clients and slaves still reach it.
        network = get_network(cluster.network)
        for name in cluster.controller_names:
            network.partition(f"inproc://{master}", f"inproc://{name}")
        new_master = await cluster.wait_master(epoch_above=1)
        new = cluster.broker(new_master)
        others = [b for n, b in cluster.brokers().items() if n != master]
        await cluster.wait_for(lambda: all(b.replicas.master_epoch == 2 for b in others))
        assert old.replicas.role is BrokerRole.MASTER  # it has not heard of the election

        # Its slaves left it and it cannot shrink its SyncStateSet without the
        # controllers: a synchronous put is stored but never acknowledged.
        with pytest.raises(FlushSlaveTimeout) as stray:
            await put(client, old, b"written alone by the old master" * 3)
        stray_offset = stray.value.result.physical_offset
        assert old.log.max_offset > stray_offset
        acked.update(await put_many(client, new, 5, "after"))

        # Reconnected, it learns the new master, becomes its slave and truncates.
        network.heal()
        await cluster.wait_for(lambda: old.replicas.role is BrokerRole.SLAVE
                               and old.replicas.master_epoch == 2
                               and old.log.max_offset == new.log.max_offset)
        assert missing(old, acked) == []
        size = new.log.max_offset - new.log.min_offset
        assert old.log.read(new.log.min_offset, size) == new.log.read(new.log.min_offset, size)
        assert old.log.read_record(stray_offset).body != b"written alone by the old master" * 3
        assert cluster.masters() == [new_master]


async def learners_behind_a_master(cluster):
    """b1 master alone in its SyncStateSet; b2 and b3 async learners, b3 ahead of b2."""
    await cluster.start_controllers()
    await cluster.start("b1")
    await cluster.wait_master()
    for name in ("b2", "b3"):
        config = cluster.broker_config(name)
        await cluster.start(name, attrs.evolve(
            config, broker=attrs.evolve(config.broker, is_async_learner=True)))
    client = await cluster.start("client")
    b1, b2, b3 = (cluster.broker(n) for n in ("b1", "b2", "b3"))
    await put_many(client, b1, 5, "all")
    await cluster.wait_for(lambda: b2.log.max_offset == b3.log.max_offset == b1.log.max_offset)
    get_network(cluster.network).partition("inproc://b2", "inproc://b1-ha")
    await put_many(client, b1, 5, "b3 only")
    await cluster.wait_for(lambda: b3.log.max_offset == b1.log.max_offset)
    assert b2.log.max_offset < b3.log.max_offset
    leader = await wait_leader(cluster)
    assert group_at(cluster, leader).sync_state_set == {b1.broker_id}
    # The controllers must know b3 is ahead (heartbeats carry max offsets).
    await cluster.wait_for(lambda: controllers(cluster)[leader].heartbeats.get(
        "DefaultCluster", BROKER_NAME, b3.broker_id).max_offset == b3.log.max_offset)
    await cluster.kill("b1")
    return client


async def test_unclean_election_off_then_on(make_cluster, caplog):
    caplog.set_level(logging.WARNING, "triomq.controller")
    async with make_cluster() as cluster:
        client = await learners_behind_a_master(cluster)
        b3 = cluster.broker("b3")
        leader = await wait_leader(cluster)
        # Off: the only in-sync replica is dead, so the group stays without a master...
        await cluster.wait_for(lambda: group_at(cluster, leader).master_epoch == 2)
        group = group_at(cluster, leader)
        assert group.master_broker_id is None
        await trio.sleep(1)
        assert cluster.masters() == []
        # ... and says why.
        controller = ControllerClient(client.rpc, list(cluster.controller_addresses.values()))
        with pytest.raises(ControllerError) as refused:
            await controller.elect_master("DefaultCluster", BROKER_NAME)
        assert refused.value.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
        assert "unclean election is disabled" in refused.value.remark
        info = await controller.get_replica_info(BROKER_NAME)
        assert (info.master_broker_id, info.master_epoch) == (None, 2)

        # On: the most up-to-date alive replica (b3) is elected; the loss is reported.
        for address in cluster.controller_addresses.values():
            await controller.update_controller_config(
                address, {"enable_elect_unclean_master": True})
        new_master = await cluster.wait_master(epoch_above=2)
        assert new_master == "b3"
        assert b3.replicas.master_epoch == 3
        assert any("unclean election" in r.getMessage() for r in caplog.records
                   if r.name == "triomq.controller")
        info = await controller.get_replica_info(BROKER_NAME)
        assert (info.master_broker_id, info.sync_state_set) == (b3.broker_id, {b3.broker_id})


async def test_unclean_election_on_elects_the_most_up_to_date(make_cluster):
    async with make_cluster(controller={"enable_elect_unclean_master": True}) as cluster:
        client = await learners_behind_a_master(cluster)
        assert await cluster.wait_master(epoch_above=1) == "b3"
        # b2 follows b3 (truncating nothing: it is behind) and the group serves again.
        b2, b3 = cluster.broker("b2"), cluster.broker("b3")
        get_network(cluster.network).heal()
        await cluster.wait_for(lambda: b2.replicas.role is BrokerRole.SLAVE
                               and b2.replicas.master_epoch == 2)
        await put(client, b3, b"served by the unclean master")
