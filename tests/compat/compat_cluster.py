"""The triomq cluster RocketMQ's own clients meet, and what triomq's client sees of it.

``open_compat_cluster``: a name server, three controllers and group
``broker-a`` of three replicas in controller mode with
``all_ack_in_sync_state_set``, over TCP in the test's process
(``triomq.testing.cluster``), topic ``TOPIC`` created on its master, and a
triomq client node beside the clients under test.

``open_acting_group`` is a static group whose slave acts for its master
once it is gone, for the clients that read through an acting slave.

``failover`` runs a client's ``failover`` scenario (a producer sending without
pause) through a SIGKILL of the master: there the replicas are processes of
their own (``tests/chaos/broker_processes.py``).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from triomq.client import ConsumeFromWhere, LitePullConsumer, Message, MessageExt, Producer
from triomq.controller.client import ControllerClient
from triomq.runtime import Node
from triomq.testing.cluster import Cluster, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acting_master"))
from acting_nodes import Groups, open_static_groups, route, wait_for
from broker_processes import Replica, wait_group
from scenario_clients import TOPIC, WAIT, ScenarioClient, create_topic


async def read_until(app: Node, namesrv: list[str], enough: Callable[[list[MessageExt]], bool],
                     group: str = "triomq-reader") -> list[MessageExt]:
    """The topic from its first offset through triomq's lite pull consumer of ``group``,
    until ``enough(what was read)``; the group's offsets are committed then."""
    reader = LitePullConsumer(group, namesrv,
                              consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    reader.subscribe(TOPIC, "*")
    got: list[MessageExt] = []
    async with reader.start(app.connect):
        with trio.fail_after(WAIT):
            while not enough(got):
                got += await reader.poll(timeout=1)
        await reader.commit_sync()
    return got


class CompatCluster:
    """The cluster, its master and a triomq client node beside the clients under test."""

    def __init__(self, cluster: Cluster, master: str, app: Node) -> None:
        self.cluster = cluster
        self.master = master
        self.app = app

    @property
    def master_address(self) -> str:
        return self.cluster.node(self.master).address

    @property
    def namesrv(self) -> list[str]:
        return list(self.cluster.namesrv_addresses.values())

    async def send(self, count: int, *, prefix: str = "m") -> list[Any]:
        """``count`` messages sent by triomq's producer, tags TagA/TagB/TagC in turn."""
        async with Producer("triomq-producer", self.namesrv).start(self.app.connect) as producer:
            return [await producer.send(Message(
                TOPIC, f"{prefix} {i}".encode(), tags=f"Tag{'ABC'[i % 3]}", keys=f"{prefix}-{i}",
                properties={"scenario": prefix, "seq": str(i)})) for i in range(count)]

    async def read_all(self, count: int, group: str = "triomq-reader") -> list[MessageExt]:
        """The topic from its first offset through triomq's lite pull consumer."""
        return await read_until(self.app, self.namesrv, lambda got: len(got) >= count, group)


@asynccontextmanager
async def open_compat_cluster(root: Path, **broker: object) -> AsyncIterator[CompatCluster]:
    """The cluster, started, with ``TOPIC`` routed to its master (``broker``: more of the
    replicas' ``[broker]`` keys)."""
    async with open_cluster(root, transport="tcp", namesrvs=1,
                            broker={"all_ack_in_sync_state_set": True, **broker}) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master(timeout=60)
        # Every replica in sync from the start: the sends wait for all three.
        await cluster.wait_for(lambda: len(cluster.broker(master).replicas.sync_state_set) == 3,
                               timeout=60)
        app = await cluster.start("app")
        (namesrv,) = cluster.namesrv_addresses.values()
        await create_topic(app, cluster.node(master).address, namesrv)
        yield CompatCluster(cluster, master, app)


class ActingGroup:
    """Static group ``broker-a`` (master ``a0``, slave ``a1``, acting masters enabled) beside
    a name server with ``support_acting_master``, ``TOPIC`` created on ``a0``, and the
    client under test."""

    def __init__(self, cluster: Cluster, groups: Groups, admin: Node,
                 client: ScenarioClient) -> None:
        self.cluster, self.groups, self.admin, self.client = cluster, groups, admin, client
        (self.namesrv,) = cluster.namesrv_addresses.values()

    async def stop_master(self) -> None:
        """Kill ``a0`` once ``a1`` holds all it wrote; return once the route names ``a1``
        as id 0."""
        master, slave = self.cluster.broker("a0"), self.cluster.broker("a1")
        await self.cluster.wait_for(lambda: slave.replicas.confirm_offset
                                    == master.log.max_offset and TOPIC in slave.topics.table)
        await self.cluster.kill("a0")

        async def acting_route() -> bool:
            (broker,) = (await route(self.admin, self.namesrv, TOPIC))["brokerDatas"]
            return broker["brokerAddrs"].get("0") == self.groups.location("a1")
        await wait_for(acting_route)


@asynccontextmanager
async def open_acting_group(root: Path, client: Callable[[Cluster], ScenarioClient]
                            ) -> AsyncIterator[ActingGroup]:
    """The group, started over TCP, with ``client`` made for its cluster."""
    async with open_static_groups(root, ("a0", "a1"), transport="tcp") as (cluster, groups):
        (namesrv,) = cluster.namesrv_addresses.values()
        admin = await cluster.start("app")
        await create_topic(admin, cluster.node("a0").address, namesrv)
        yield ActingGroup(cluster, groups, admin, client(cluster))


async def failover(root: Path, client: Callable[[Cluster], ScenarioClient],
                   **options: object) -> None:
    """``client``'s producer sends through a SIGKILL of the master: it goes on with the new
    master, and every message acknowledged is stored where its answer said."""
    async with open_cluster(root, transport="tcp", brokers=0, namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        app = await cluster.start("app")
        (namesrv,) = cluster.namesrv_addresses.values()
        addresses = list(cluster.controller_addresses.values())
        replicas = {r.address: r for r in (
            Replica(f"b{i}", root, addresses, namesrv.removeprefix("tcp://"))
            for i in (1, 2, 3))}
        controllers = ControllerClient(app.rpc, addresses)
        try:
            for replica in replicas.values():
                await replica.start()
            old = await wait_group(controllers, replicas)
            await create_topic(app, old.master_address, namesrv)

            def acked(by: set[str]) -> list[dict[str, Any]]:
                return [line for line in producer.lines if line.get("sendStatus") == "SEND_OK"
                        and "tcp://" + line["storeHost"] in by]

            async with client(cluster).running("failover", group="failover-producer",
                                               **options) as producer:
                await producer.until(lambda: len(acked({old.master_address})) >= 50)
                await replicas[old.master_address].kill()
                new = await wait_group(controllers, replicas, epoch_above=old.master_epoch,
                                       in_sync=2)
                assert new.master_address != old.master_address
                # Acknowledged by the new master (or, should the controllers have moved the
                # group on again meanwhile, the one after it).
                others = set(replicas) - {old.master_address}
                await producer.until(lambda: len(acked(others)) >= 50)

            sent = {line["msgId"]: line for line in producer.lines
                    if line.get("sendStatus") == "SEND_OK"}
            assert len(sent) == len(acked(set(replicas))), producer.lines
            got = await read_until(app, [namesrv],
                                   lambda got: sent.keys() <= {m.msg_id for m in got})
            # Every acknowledged message is where its answer said, on the new master too.
            where = {m.msg_id: (m.queue_id, m.queue_offset, m.body.decode()) for m in got}
            assert {i: where[i] for i in sent} == {
                i: (s["queueId"], s["queueOffset"], f"failover {s['i']}")
                for i, s in sent.items()}
        finally:
            for replica in replicas.values():
                await replica.stop()
