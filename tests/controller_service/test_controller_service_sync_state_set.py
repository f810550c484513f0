"""A master's SyncStateSet view against the controllers' (controller_mode, HA driver)."""

from __future__ import annotations

import attrs
import pytest
from controller_service_helpers import (
    group_at,
    put_many,
    wait_full_sync_state_set,
    wait_leader,
)

from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.controller.client import ControllerClient
from triomq.ha.master_driver import MasterFenced
from triomq.plugins.transport_inproc import get_network


async def test_a_refused_proposal_reads_the_controllers_set_back(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        mode = cluster.broker(master).controller_mode
        everyone = frozenset(b.broker_id for b in cluster.brokers().values())
        # Refused as unchanged: the answer is the set the controllers hold,
        # and their SyncStateSet epoch (the master may not have learned the
        # last expansion's epoch yet).
        assert await mode.alter_sync_state_set(everyone) == everyone
        epoch = mode.sync_state_set_epoch
        assert epoch == group_at(cluster, await wait_leader(cluster)).sync_state_set_epoch
        # Refused as fenced by a stale SyncStateSet epoch (an earlier try was
        # committed, its answer lost): read back, epoch relearned.
        mode.sync_state_set_epoch = epoch - 1
        alone = frozenset({cluster.broker(master).broker_id})
        assert await mode.alter_sync_state_set(alone) == everyone
        assert mode.sync_state_set_epoch == epoch


async def test_the_master_relearns_a_set_its_view_lost(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        ha_master = cluster.broker(master).replicas.ha_master
        everyone = frozenset(b.broker_id for b in cluster.brokers().values())
        # As after an expand whose answer was lost: the view lacks the members.
        ha_master.tracker.apply({cluster.broker(master).broker_id})
        # Relearned, nothing left to propose (on a busy host a lagging slave may be
        # shrunk out and expanded back meanwhile: the set settles full again).
        await cluster.wait_for(lambda: ha_master.tracker.sync_state_set == everyone
                               and ha_master.tracker.pending is None)


async def test_a_master_told_of_a_newer_epoch_is_fenced(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        old = cluster.broker(master)
        await put_many(client, old, 3, "before")
        network = get_network(cluster.network)
        for name in cluster.controller_names:
            network.partition(f"inproc://{master}", f"inproc://{name}")
        await cluster.wait_master(epoch_above=1)
        assert old.replicas.role is BrokerRole.MASTER  # it has not heard of the election
        network.heal()
        with pytest.raises(MasterFenced):
            await old.controller_mode.alter_sync_state_set(
                frozenset({old.node.address}))
        # It learned the new master with the refusal, not at its next poll.
        assert old.controller_mode.replica_info.master_epoch > 1


async def test_an_election_without_controllers_does_not_end_the_broker(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        name = next(n for n in cluster.brokers() if n != master)
        slave = cluster.broker(name)
        mode = slave.controller_mode
        await cluster.wait_for(lambda: slave.replicas.role is BrokerRole.SLAVE)
        network = get_network(cluster.network)
        for controller in cluster.controller_names:
            network.partition(f"inproc://{name}", f"inproc://{controller}")
        mode.client = ControllerClient(mode.client.rpc, mode.client.addresses, timeout=0.3)
        no_master = attrs.evolve(mode.replica_info, master_broker_id=None, master_address=None)
        await mode._offer_or_elect(no_master)  # ControllerUnavailable: logged, not raised
        network.heal()
        leader = await wait_leader(cluster)
        assert group_at(cluster, leader).master_address == cluster.broker(master).node.address
        assert name in cluster.running and slave.replicas.role is BrokerRole.SLAVE
