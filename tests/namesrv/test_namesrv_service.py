"""The name-server role as a node runs it, over the in-process transport, under a mock clock."""

from __future__ import annotations

import json
import zlib

import trio

from triomq.namesrv.config import NamesrvConfig
from triomq.namesrv.core.processor import RequestCode
from triomq.namesrv.service import namesrv_of

BODY = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"stateVersion":0,'
        b'"timestamp":5},"topicConfigTable":{"orders":{"topicName":"orders","perm":6,'
        b'"readQueueNums":4,"writeQueueNums":4}}}}')


def registration(broker_id: int, address: str, timeout_ms: int = 3000) -> dict[str, str]:
    return {"brokerName": "broker-a", "brokerAddr": address, "clusterName": "DefaultCluster",
            "haServerAddr": "", "brokerId": str(broker_id), "compressed": "false",
            "bodyCrc32": str(zlib.crc32(BODY) & 0x7FFFFFFF),
            "heartbeatTimeoutMillis": str(timeout_ms)}


async def route_addrs(client, namesrv: str) -> dict[str, str] | None:
    answer = await client.rpc.invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                     {"topic": "orders"})
    if answer.code == 17:
        return None
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)["brokerDatas"][0]["brokerAddrs"]


async def test_a_broker_whose_connection_closes_leaves_the_route_at_once(
        temporary_node, autojump_clock) -> None:
    async with temporary_node("ns", role="nameserver", listen="inproc://ns") as ns, \
            temporary_node("b0") as b0, temporary_node("b1") as b1:
        for node, broker_id in ((b0, 0), (b1, 1)):
            answer = await node.rpc.invoke("inproc://ns", RequestCode.REGISTER_BROKER,
                                           registration(broker_id, f"{node.name}:10911"), BODY)
            assert answer.code == 0, answer.remark
        assert await route_addrs(ns, "inproc://ns") == {"0": "b0:10911", "1": "b1:10911"}
        await b0.rpc.close("inproc://ns")
        with trio.fail_after(1):
            while await route_addrs(ns, "inproc://ns") != {"1": "b1:10911"}:
                await trio.sleep(0.001)
        assert namesrv_of(ns).route.member_group("DefaultCluster", "broker-a").broker_addrs == {
            1: "b1:10911"}


async def test_a_silent_broker_leaves_after_its_timeout(temporary_node, autojump_clock) -> None:
    config = NamesrvConfig(scan_not_active_broker_interval=100)
    async with temporary_node("ns", role="nameserver", listen="inproc://ns",
                              sections={"namesrv": config}) as ns, \
            temporary_node("b0") as b0:
        await b0.rpc.invoke("inproc://ns", RequestCode.REGISTER_BROKER,
                            registration(0, "b0:10911", timeout_ms=1000), BODY)
        heartbeat = {"clusterName": "DefaultCluster", "brokerAddr": "b0:10911",
                     "brokerName": "broker-a"}
        for _ in range(5):  # heartbeats keep it for 2.5 s, past its 1 s timeout
            await trio.sleep(0.5)
            answer = await b0.rpc.invoke("inproc://ns", RequestCode.BROKER_HEARTBEAT,
                                         heartbeat)
            assert answer.code == 0, answer.remark
        assert await route_addrs(ns, "inproc://ns") == {"0": "b0:10911"}
        await trio.sleep(1.2)  # silent past its timeout and one scan
        assert await route_addrs(ns, "inproc://ns") is None
        late = await b0.rpc.invoke("inproc://ns", RequestCode.BROKER_HEARTBEAT, heartbeat)
        assert late.code == 1 and "not registered" in (late.remark or "")
