"""Brokers of one kind elected by controllers of the other, through a master's SIGKILL
(``rocketmq_server.py``: RocketMQ 5.3.3's broker and controller from Maven).

- Two RocketMQ brokers in controller mode with triomq's three controllers: the
  controllers give them their ids, elect the first master, grow its
  SyncStateSet, notice the master's death by its missed heartbeats, elect the
  slave and tell it so (NOTIFY_BROKER_ROLE_CHANGED).
- Two triomq brokers with RocketMQ's controller (DLedger, a group of one),
  the same way round.

Either way every message acknowledged before the kill is read back from the
new master, which the name server then routes, and takes sends.

Skipped, with the reason, without ``java`` or ``mvn`` or where Maven could not
fetch the jars; with both but the jars not resolved (``make rocketmq-server``,
which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from triomq.controller.client import ControllerClient
from triomq.testing.cluster import free_tcp_port, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mixed_groups import built, group_state, read_back, rocketmq_broker, send
from rocketmq_server import controller, unavailable_server
from scenario_clients import QUEUES, TOPIC, WAIT, create_topic, create_topic_on, wait_routed

pytestmark = [
    pytest.mark.skipif(unavailable_server() is not None, reason=str(unavailable_server())),
    pytest.mark.usefixtures(built.__name__),
]


async def test_rocketmq_brokers_elected_by_triomqs_controllers(
        tmp_path: Path, refused_requests: None) -> None:
    async with open_cluster(tmp_path, transport="tcp", controllers=3, brokers=0,
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        (namesrv,) = cluster.namesrv_addresses.values()
        app = await cluster.start("app")
        client = ControllerClient(app.rpc, list(cluster.controller_addresses.values()))
        controllers = ";".join(a.removeprefix("tcp://")
                               for a in cluster.controller_addresses.values())
        brokers = [rocketmq_broker(tmp_path / f"rocketmq-{i}", namesrv.removeprefix("tcp://"),
                                   controllers) for i in (1, 2)]
        try:
            for server in brokers:
                await server.start()
            first = await group_state(client, in_sync=2)
            by_address = {server.address: server for server in brokers}
            master = by_address[first.master_address or ""]
            (survivor,) = (s for s in brokers if s is not master)
            # RocketMQ's slave copies the master's topics every 10 s only: it is given
            # the topic itself, as an operator creates a topic on every broker.
            await create_topic(app, "tcp://" + master.address, namesrv, TOPIC, QUEUES)
            await create_topic_on(app, "tcp://" + survivor.address, TOPIC, QUEUES)
            sent = await send(app, namesrv, "before")

            await master.kill()
            second = await group_state(client, master_not=first.master_broker_id, in_sync=1)
            assert second.master_epoch > first.master_epoch
            assert second.master_address == survivor.address
            # The new master registers as the group's broker 0 and takes sends.
            await wait_routed(app, "tcp://" + survivor.address, namesrv, TOPIC, QUEUES)
            sent |= await send(app, namesrv, "after")
            await read_back(app, namesrv, sent)
        finally:
            for server in brokers:
                await server.stop()


async def test_triomq_brokers_elected_by_rocketmqs_controller(
        tmp_path: Path, refused_requests: None) -> None:
    dledger = free_tcp_port()
    rocketmq = controller(tmp_path / "rocketmq", "n0", {"n0": dledger})
    await rocketmq.start()
    try:
        async with open_cluster(
                tmp_path, transport="tcp", controllers=0, brokers=2, namesrvs=1,
                broker={"controller_addresses": ["tcp://" + rocketmq.address],
                        "all_ack_in_sync_state_set": True,
                        "controller_heartbeat_timeout": 3000}) as cluster:
            await cluster.start_namesrvs()
            (namesrv,) = cluster.namesrv_addresses.values()
            app = await cluster.start("app")
            client = ControllerClient(app.rpc, ["tcp://" + rocketmq.address])
            await cluster.start_brokers()
            first = await group_state(client, in_sync=2)
            master = await cluster.wait_master(timeout=WAIT)
            master_address = cluster.node(master).address
            assert first.master_address == master_address.removeprefix("tcp://")
            await create_topic(app, master_address, namesrv, TOPIC, QUEUES)
            sent = await send(app, namesrv, "before")

            await cluster.kill(master)
            second = await group_state(client, master_not=first.master_broker_id, in_sync=1)
            assert second.master_epoch > first.master_epoch
            (survivor,) = (name for name in cluster.broker_names if name != master)
            await cluster.wait_for(lambda: cluster.broker(survivor).replicas.is_master,
                                   timeout=WAIT)
            await wait_routed(app, cluster.node(survivor).address, namesrv, TOPIC, QUEUES)
            sent |= await send(app, namesrv, "after")
            await read_back(app, namesrv, sent)
    finally:
        await rocketmq.stop()
