"""Mixed replica groups: RocketMQ's broker and triomq's in one group, replicating over
AutoSwitch HA both ways (``rocketmq_server.py``: RocketMQ 5.3.3's broker from Maven;
triomq's a process of its own), elected by triomq's three controllers.

One group goes round four terms; in two of them the old master comes back with a
tail the new master never had, which the new master's epochs truncate:

1. RocketMQ's broker is the first master; triomq's replicates from it (RocketMQ's
   handshake answer, epochs and transfers read by triomq). triomq's broker is
   SIGKILLed: RocketMQ's master drops it from the SyncStateSet at once and
   acknowledges sends alone, then is killed too.
2. triomq's broker, restarted, is elected uncleanly (``enable_elect_unclean_master``
   for the moment): what RocketMQ's master acknowledged alone is lost, as an
   unclean election loses it. RocketMQ's broker, restarted, replicates from it:
   it truncates that tail by triomq's epochs and catches up. It is paused
   (SIGSTOP), and triomq's master stores a send it cannot replicate (answered
   FLUSH_SLAVE_TIMEOUT: a slave whose connection stays open stays in the
   SyncStateSet for ``ha_max_time_slave_not_catchup``; one whose connection
   closed would leave it at once, as in 1.) and is killed, then the slave.
3. RocketMQ's broker is elected (cleanly); triomq's, restarted, truncates its
   tail by RocketMQ's epochs and catches up.
4. RocketMQ's broker is killed and triomq's elected.

Each master joins its slave into the SyncStateSet (``allAckInSyncStateSet``:
nothing is acknowledged before the slave holds it). What the last master
serves is exactly what was acknowledged outside the unclean term's loss: no
tail survived either truncation.

Skipped, with the reason, without ``java`` or ``mvn`` or where Maven could not
fetch the jars; with both but the jars not resolved (``make rocketmq-server``,
which ``make test`` runs), the test fails saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from triomq.controller.client import ControllerClient
from triomq.namesrv.service import namesrv_of
from triomq.testing.cluster import BROKER_NAME, Cluster, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))
from broker_processes import Replica
from mixed_groups import (
    built,
    group_state,
    read_back,
    rocketmq_broker,
    send,
    unacknowledged,
)
from rocketmq_server import JavaServer, free_broker_port, unavailable_server
from scenario_clients import QUEUES, TOPIC, WAIT, create_topic_on, wait_routed

pytestmark = [
    pytest.mark.skipif(unavailable_server() is not None, reason=str(unavailable_server())),
    pytest.mark.usefixtures(built.__name__),
]


async def copied_topic(rocketmq: JavaServer, topic: str) -> None:
    """Until RocketMQ's broker has ``topic`` in its ``config/topics.json``."""
    topics = Path(str(rocketmq.settings["storePathRootDir"])) / "config" / "topics.json"
    with trio.fail_after(WAIT):
        while not (topics.exists() and f'"{topic}"' in topics.read_text(errors="replace")):
            await trio.sleep(0.5)


async def vouched(cluster: Cluster, epoch: int) -> None:
    """Until the name server holds ``epoch`` as vouched for by the group's master (its
    GET_BROKER_EPOCH_CACHE answer, RocketMQ's or triomq's, read as the group's master's)."""
    route = namesrv_of(cluster.node(cluster.namesrv_names[0])).route
    with trio.fail_after(WAIT):
        while route.vouched_version("DefaultCluster", BROKER_NAME) != epoch:
            await trio.sleep(0.1)


async def test_a_group_of_a_rocketmq_and_a_triomq_broker_replicates_both_ways(
        tmp_path: Path, refused_requests: None) -> None:
    async with open_cluster(tmp_path, transport="tcp", controllers=3, brokers=0,
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        (namesrv,) = cluster.namesrv_addresses.values()
        app = await cluster.start("app")
        client = ControllerClient(app.rpc, list(cluster.controller_addresses.values()))
        controller_addresses = list(cluster.controller_addresses.values())
        rocketmq = rocketmq_broker(
            tmp_path / "rocketmq", namesrv.removeprefix("tcp://"),
            ";".join(a.removeprefix("tcp://") for a in controller_addresses),
            slaveTimeout=1000)
        # A put waits 1 s for its slave, which has 10 s to catch up: a put the slave
        # cannot ack fails while the slave stays in the SyncStateSet, electable.
        # Its VIP channel (port - 2) is where RocketMQ's slave copies its metadata from.
        triomq = Replica("triomq", tmp_path, controller_addresses, namesrv,
                         port=free_broker_port(), vip_channel=True,
                         sync_flush_timeout=1000, ha_max_time_slave_not_catchup=10_000)
        rocketmq_at, triomq_at = "tcp://" + rocketmq.address, triomq.address
        try:
            # 1. RocketMQ's broker registers first: the group's first master.
            await rocketmq.start()
            term = await group_state(client, in_sync=1)
            await triomq.start()
            term = await group_state(client, in_sync=2)
            assert term.master_address == rocketmq.address
            for broker in (rocketmq_at, triomq_at):
                await create_topic_on(app, broker, TOPIC, QUEUES)
            await wait_routed(app, rocketmq_at, namesrv, TOPIC, QUEUES)
            await vouched(cluster, term.master_epoch)
            sent = await send(app, namesrv, "rocketmq master")
            await triomq.kill()
            term = await group_state(client, in_sync=1)
            await send(app, namesrv, "rocketmq alone")  # acknowledged, lost below
            await rocketmq.kill()

            # 2. triomq's broker is elected uncleanly; RocketMQ's truncates and follows.
            for address in controller_addresses:
                await client.update_controller_config(
                    address, {"enable_elect_unclean_master": True})
            await triomq.start()
            term = await group_state(client, master_not=term.master_broker_id, in_sync=1)
            for address in controller_addresses:
                await client.update_controller_config(
                    address, {"enable_elect_unclean_master": False})
            assert term.master_address == triomq_at.removeprefix("tcp://")
            await wait_routed(app, triomq_at, namesrv, TOPIC, QUEUES)
            await vouched(cluster, term.master_epoch)
            sent |= await send(app, namesrv, "triomq master")
            await rocketmq.start()
            term = await group_state(client, in_sync=2)
            sent |= await send(app, namesrv, "triomq master, rocketmq slave")
            # RocketMQ's slave copies its triomq master's topics (every 10 s).
            await create_topic_on(app, triomq_at, "SyncedTopic", 2)
            await copied_topic(rocketmq, "SyncedTopic")
            # Paused, not killed: a slave whose connection closed leaves the set at once,
            # one that stops answering only once it has not caught up in time.
            rocketmq.pause()
            await unacknowledged(app, namesrv, "triomq tail")
            await triomq.kill()
            await rocketmq.kill()

            # 3. RocketMQ's broker is elected; triomq's truncates its tail and follows.
            await rocketmq.start()
            term = await group_state(client, master_not=term.master_broker_id, in_sync=1)
            assert term.master_address == rocketmq.address
            await wait_routed(app, rocketmq_at, namesrv, TOPIC, QUEUES)
            await triomq.start()
            term = await group_state(client, in_sync=2)
            sent |= await send(app, namesrv, "rocketmq master, triomq slave")

            # 4. triomq's broker is elected and serves every acknowledged message.
            await rocketmq.kill()
            term = await group_state(client, master_not=term.master_broker_id, in_sync=1)
            assert term.master_address == triomq_at.removeprefix("tcp://")
            await wait_routed(app, triomq_at, namesrv, TOPIC, QUEUES)
            await read_back(app, namesrv, sent)
        finally:
            await rocketmq.stop()
            await triomq.stop()
