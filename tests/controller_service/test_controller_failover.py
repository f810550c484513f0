"""Registration, election and failover of one broker group under three controllers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import attrs
import pytest
import trio
from controller_service_helpers import (
    controllers,
    group_at,
    missing,
    put,
    put_many,
    put_until_success,
    wait_full_sync_state_set,
    wait_leader,
)

import triomq.plugins.controller_dledger
from triomq.broker.replication.controller_mode import IDENTITY_FILE
from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.controller.core.config import ControllerConfig
from triomq.hookspecs import hookimpl
from triomq.testing.cluster import BROKER_NAME


async def test_registration_and_first_election(make_cluster, tmp_path):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        leader = await wait_leader(cluster)
        group = group_at(cluster, leader)
        brokers = cluster.brokers()
        # Ids 1..3 went to the three replicas, each at its own address.
        assert {m.broker_id for m in group.members} == {1, 2, 3}
        assert {m.address for m in group.members} == {b.node.address for b in brokers.values()}
        assert {b.broker_id for b in brokers.values()} == {1, 2, 3}
        # One master, of epoch 1; the controllers' SyncStateSet grew to all three.
        assert cluster.masters() == [master]
        assert group.master_broker_id == brokers[master].broker_id
        assert group.master_epoch == 1
        await cluster.wait_for(lambda: group_at(cluster, leader).sync_state_set == {1, 2, 3})
        for name, broker in brokers.items():
            if name != master:
                assert broker.replicas.role is BrokerRole.SLAVE
                assert broker.replicas.master_epoch == 1
            saved = json.loads((tmp_path / name / IDENTITY_FILE).read_text())
            assert (saved["brokerName"], saved["brokerId"]) == (BROKER_NAME, broker.broker_id)
        # Every controller applied the same state.
        await cluster.wait_for(lambda: len({s.manager.snapshot()
                                            for s in controllers(cluster).values()}) == 1)

        # A restarted replica keeps its id (from its identity file) and rejoins as a slave.
        slave = next(n for n in brokers if n != master)
        old_id = brokers[slave].broker_id
        await cluster.kill(slave)
        await cluster.start(slave)
        await cluster.wait_for(lambda: cluster.broker(slave).replicas.role is BrokerRole.SLAVE)
        assert cluster.broker(slave).broker_id == old_id
        assert {m.broker_id for m in group_at(cluster, leader).members} == {1, 2, 3}


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_master_killed_new_master_from_sync_state_set(make_cluster, transport):
    async with make_cluster(transport=transport) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        acked = await put_many(client, cluster.broker(master), 30, "before")
        leader = await wait_leader(cluster)
        in_sync = group_at(cluster, leader).sync_state_set

        await cluster.kill(master)
        new_master = await cluster.wait_master(epoch_above=1)
        new = cluster.broker(new_master)
        assert new.broker_id in in_sync
        assert new.replicas.master_epoch == 2
        # The new master serves, and holds every message acknowledged before.
        offset = await put_until_success(client, new, b"after the failover")
        acked[offset] = b"after the failover"
        acked.update(await put_many(client, new, 10, "after"))
        assert missing(new, acked) == []
        # The remaining slave follows the new master and holds everything too.
        slave = next(b for n, b in cluster.brokers().items() if n != new_master)
        await cluster.wait_for(lambda: slave.replicas.role is BrokerRole.SLAVE
                               and slave.log.max_offset == new.log.max_offset)
        assert missing(slave, acked) == []


async def test_controller_leader_killed_during_election(make_cluster):
    async with make_cluster() as cluster, trio.open_nursery() as nursery:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        acked = await put_many(client, cluster.broker(master), 10, "m")
        leader = await wait_leader(cluster)
        service = controllers(cluster)[leader]
        propose = service.raft.propose
        proposals: list[bytes] = []

        async def propose_then_die(data: bytes, *, timeout: float = 3.0):
            # The leader proposes the election and is killed at once: the
            # entry may or may not commit; either way exactly one election.
            if b'"type":"ElectMaster"' in data and not proposals:
                proposals.append(data)
                nursery.start_soon(cluster.kill, leader)
            return await propose(data, timeout=timeout)

        service.raft.propose = propose_then_die
        await cluster.kill(master)
        new_master = await cluster.wait_master(epoch_above=1)
        assert proposals, "the old leader never proposed the election"
        new_leader = await wait_leader(cluster)
        assert new_leader != leader
        await trio.sleep(1.5)  # time for a second election to happen (there must be none)
        assert cluster.masters() == [new_master]
        for name in controllers(cluster):
            group = group_at(cluster, name)
            assert group.master_epoch == 2
            assert group.master_broker_id == cluster.broker(new_master).broker_id
        assert {b.replicas.master_epoch for b in cluster.brokers().values()} == {2}
        await put_until_success(client, cluster.broker(new_master), b"x")
        assert missing(cluster.broker(new_master), acked) == []
        nursery.cancel_scope.cancel()


async def test_group_of_two_replicas(make_cluster):
    async with make_cluster(brokers=2) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        acked = await put_many(client, cluster.broker(master), 20, "two")
        await cluster.kill(master)
        survivor = await cluster.wait_master(epoch_above=1)
        new = cluster.broker(survivor)
        assert missing(new, acked) == []
        # Alone in its SyncStateSet, the survivor acknowledges puts by itself.
        await cluster.wait_for(lambda: new.replicas.sync_state_set == {new.broker_id})
        await put(client, new, b"alone")
        # The old master comes back as a slave of the new one and catches up.
        await cluster.start(master)
        back = cluster.broker(master)
        await cluster.wait_for(lambda: back.replicas.role is BrokerRole.SLAVE
                               and back.log.max_offset == new.log.max_offset)
        await wait_full_sync_state_set(cluster, survivor)
        assert back.replicas.master_epoch == 2


class HighestIdPolicy:
    """A third-party election policy: the alive in-sync replica with the highest id."""

    @hookimpl
    def triomq_election_policy(self):
        def highest(group, live_info, designated_broker_id, enable_elect_unclean_master):
            alive = [i for i in group.sync_state_set
                     if (info := live_info(i)) is not None and info.alive]
            return max(alive, default=None)

        return {"highest": highest}


async def test_election_policy_from_a_plugin(make_cluster):
    async with make_cluster(controller={"election_policy": "highest"}) as cluster:
        cluster.plugins.register(HighestIdPolicy(), name="highest_policy")
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        survivors = {n: b.broker_id for n, b in cluster.brokers().items() if n != master}
        await cluster.kill(master)
        new_master = await cluster.wait_master(epoch_above=1)
        assert survivors[new_master] == max(survivors.values())


async def test_controller_embedded_in_a_nameserver(make_cluster):
    async with make_cluster(brokers=2, controller={"enable_controller_in_namesrv": True}
                            ) as cluster:
        for name in cluster.controller_names:
            config = attrs.evolve(cluster.controller_config(name), role="nameserver")
            await cluster.start(name, config)
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        assert {cluster.node(n).role for n in cluster.controller_names} == {"nameserver"}
    disabled = SimpleNamespace(role="nameserver", config=SimpleNamespace(
        controller=ControllerConfig()))
    assert triomq.plugins.controller_dledger.triomq_node_services(disabled) is None


async def test_repeated_failovers_lose_no_acknowledged_message(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        client = await cluster.start("client")
        acked: dict[int, bytes] = {}
        epoch = 0
        for round_number in range(3):
            master = await cluster.wait_master(epoch_above=epoch)
            epoch = cluster.broker(master).replicas.master_epoch
            await wait_full_sync_state_set(cluster, master)
            acked.update(await put_many(client, cluster.broker(master), 8, f"r{round_number}"))
            await cluster.kill(master)
            await cluster.wait_master(epoch_above=epoch)
            await cluster.start(master)
        master = await cluster.wait_master(epoch_above=epoch)
        await wait_full_sync_state_set(cluster, master)
        # Three failovers, three new epochs at least: a busy host may miss a
        # heartbeat and have the controllers elect once more.
        assert cluster.broker(master).replicas.master_epoch >= 4
        for broker in cluster.brokers().values():
            await cluster.wait_for(
                lambda b=broker: b.log.max_offset == cluster.broker(master).log.max_offset)
            assert missing(broker, acked) == []


async def test_a_master_killed_while_it_proposes_a_sync_state_set_stops_cleanly(make_cluster):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        mode, address = cluster.broker(master).controller_mode, cluster.broker(master).node.address
        assert mode is not None
        await cluster.kill(master)
        # Its HA master's last proposal on the way out: nothing is sent for it any more,
        # and it waits to be cancelled with the rest of the broker.
        with trio.move_on_after(0.2) as waited:
            await mode.alter_sync_state_set(frozenset({address}))
        assert waited.cancelled_caught
