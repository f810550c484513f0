"""Helpers of the controller-service tests: puts, leaders, controller state."""

from __future__ import annotations

import trio

import triomq.plugins.broker
import triomq.plugins.controller_dledger
from triomq.broker.service import Broker
from triomq.controller import BrokerGroup
from triomq.controller.service import ControllerService, controller_of
from triomq.plugin_manager import PluginManager
from triomq.runtime import Node
from triomq.testing.cluster import BROKER_NAME, Cluster
from triomq.testing.direct_send import DirectProducer, SendError


def controller_plugins() -> PluginManager:
    """Discovered plugins plus the broker and controller plugins, registered explicitly
    (so the tests run whether or not their entry points are installed)."""
    pm = PluginManager.discover(disable={"broker", "controller_dledger"})
    pm.register(triomq.plugins.broker, name="broker")
    pm.register(triomq.plugins.controller_dledger, name="controller_dledger")
    return pm


async def put(client: Node, broker: Broker, body: bytes) -> int:
    """Put one message synchronously on ``broker``; its commit-log offset."""
    result = await DirectProducer(client.rpc, broker.node.address).send("orders", body)
    return result.physical_offset


async def put_many(client: Node, broker: Broker, count: int, tag: str) -> dict[int, bytes]:
    """Put ``count`` messages; offset -> body of each acknowledged one."""
    acked = {}
    for i in range(count):
        body = f"{tag}-{i}".encode() * 7
        acked[await put(client, broker, body)] = body
    return acked


async def put_until_success(client: Node, broker: Broker, body: bytes) -> int:
    """Retry a put until the broker acknowledges it (e.g. right after a failover)."""
    while True:
        try:
            return await put(client, broker, body)
        except SendError:
            await trio.sleep(0.01)


def missing(broker: Broker, acked: dict[int, bytes]) -> list[int]:
    """Offsets of acknowledged messages ``broker`` does not hold."""
    lost = []
    for offset, body in sorted(acked.items()):
        if offset >= broker.log.max_offset or broker.log.read_record(offset).body != body:
            lost.append(offset)
    return lost


def controllers(cluster: Cluster) -> dict[str, ControllerService]:
    """The running controllers' services, by node name."""
    return {n: controller_of(cluster.node(n)) for n in cluster.controller_names
            if n in cluster.running}


def leader(cluster: Cluster) -> str | None:
    """The name of the controller that leads now, if any."""
    for name, service in controllers(cluster).items():
        if service.raft.is_leader:
            return name
    return None


def group_at(cluster: Cluster, name: str) -> BrokerGroup | None:
    """The broker group as controller ``name`` has applied it."""
    return controllers(cluster)[name].manager.group(BROKER_NAME)


async def wait_leader(cluster: Cluster) -> str:
    """Wait until a controller leads."""
    return await cluster.wait_for(lambda: leader(cluster))


async def wait_full_sync_state_set(cluster: Cluster, master: str) -> None:
    """Wait until every running broker is in the SyncStateSet, at the master and as committed.

    (The master counts a joining slave at once; the controllers only once
    its expansion is committed, and only then may that slave be elected.)
    """
    def done() -> bool:
        ids = {b.broker_id for b in cluster.brokers().values()}
        name = leader(cluster)
        group = group_at(cluster, name) if name is not None else None
        return (cluster.broker(master).replicas.sync_state_set == ids
                and group is not None and group.sync_state_set == ids)

    await cluster.wait_for(done)
