"""Routes through name servers as brokers register: topics, failover, restarts.

Real nodes on the in-process transport: name servers, three controllers and
a controller-mode broker group of three, all registering with every name
server.
"""

from __future__ import annotations

import json

import pytest
import trio

from triomq.namesrv.core.processor import RequestCode
from triomq.testing.cluster import Cluster, open_cluster
from triomq.testing.direct_send import DirectProducer

TOPIC_FIELDS = {"topic": "orders", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}


async def route(cluster: Cluster, namesrv: str, topic: str = "orders") -> dict | None:
    client = cluster.node("client")
    answer = await client.rpc.invoke(cluster.namesrv_addresses[namesrv],
                                     RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json.loads(answer.body) if answer.code == 0 else None


async def master_routed(cluster: Cluster, namesrv: str, master: str) -> bool:
    found = await route(cluster, namesrv)
    address = cluster.node(master).address
    return found is not None and found["brokerDatas"][0]["brokerAddrs"].get("0") == address


async def wait_route(cluster: Cluster, namesrv: str, master: str, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not await master_routed(cluster, namesrv, master):
            await trio.sleep(0.01)


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, namesrvs=2) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        await cluster.start_brokers()
        await cluster.start("client")
        yield cluster


async def test_a_topic_is_routed_to_the_master_and_follows_a_failover(cluster) -> None:
    master = await cluster.wait_master()
    answer = await cluster.node("client").rpc.invoke(
        cluster.node(master).address, 17, TOPIC_FIELDS)
    assert answer.code == 0, answer.remark
    for namesrv in cluster.namesrv_names:
        await wait_route(cluster, namesrv, master)
    with trio.fail_after(10):  # the slaves register once they have their role
        while len((await route(cluster, "n1"))["brokerDatas"][0]["brokerAddrs"]) < 3:
            await trio.sleep(0.01)
    found = await route(cluster, "n1")
    assert found["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4,
                                    "topicSysFlag": 0, "writeQueueNums": 4}]
    assert len(found["brokerDatas"][0]["brokerAddrs"]) == 3
    # The slaves copy the master's topics, so the next master routes them too.
    await cluster.wait_for(lambda: all(
        "orders" in b.topics.table for b in cluster.brokers().values()))
    old_epoch = cluster.broker(master).replicas.master_epoch
    await cluster.kill(master)
    new_master = await cluster.wait_master(epoch_above=old_epoch)
    for namesrv in cluster.namesrv_names:
        await wait_route(cluster, namesrv, new_master)
        addrs = (await route(cluster, namesrv))["brokerDatas"][0]["brokerAddrs"]
        assert cluster.node(new_master).address == addrs["0"]
        assert len(addrs) == 2  # the killed master left at once (its connection closed)
    result = await DirectProducer(cluster.node("client").rpc,
                            cluster.node(new_master).address).send("orders", b"after")
    assert result.queue_id == 0


async def test_a_restarted_name_server_learns_the_routes_again(cluster) -> None:
    master = await cluster.wait_master()
    answer = await cluster.node("client").rpc.invoke(
        cluster.node(master).address, 17, TOPIC_FIELDS)
    assert answer.code == 0, answer.remark
    await wait_route(cluster, "n1", master)
    await cluster.kill("n1")
    await cluster.start("n1")
    assert await route(cluster, "n2") is not None
    # The brokers' next heartbeat is refused (the name server forgot them): they register.
    await wait_route(cluster, "n1", master)
