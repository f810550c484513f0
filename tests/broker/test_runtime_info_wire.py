"""GET_BROKER_RUNTIME_INFO and GET_BROKER_CONFIG as ``mqadmin`` sends them, over real TCP.

The requests are written from RocketMQ's remoting layout (``call`` of
``test_consume_stats_wire``); the answers are read as mqadmin reads them:
the runtime info as ``{"table": {...}}`` whose rates ``clusterList`` splits
on spaces, the config as the lines of a Java properties text.

In the first test trio's ``MockClock`` stands still and moves when told:
the broker samples its counters once a second of that clock, so the rates
are exact.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing
from broker_nodes import Cluster, caught_up, wait_until
from test_consume_stats_wire import call, heartbeat
from test_pull_wire import decode_messages

from triomq.testing.direct_send import DirectProducer

GET_BROKER_CONFIG, GET_BROKER_RUNTIME_INFO, HEART_BEAT = 26, 28, 34
GET_BROKER_HA_STATUS = 907
PULL_MESSAGE, UPDATE_AND_CREATE_TOPIC = 11, 17


async def open_stream(address: str) -> trio.SocketStream:
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    return await trio.open_tcp_stream(host, int(port))


async def runtime_table(stream: trio.SocketStream, opaque: int) -> dict[str, str]:
    header, body = await call(stream, GET_BROKER_RUNTIME_INFO, opaque, {})
    assert (header["code"], header.get("remark")) == (0, None)
    table = json.loads(body)["table"]
    assert all(isinstance(v, str) for v in table.values())
    return table


async def seconds_pass(mock_clock, seconds: int) -> None:
    """Let the clock move a second at a time, the broker sampling after each."""
    for _ in range(seconds):
        mock_clock.jump(1)
        await trio.testing.wait_all_tasks_blocked()


def pull(offset: int, max_nums: int) -> dict:
    return {"consumerGroup": "cg", "topic": "orders", "queueId": "0",
            "queueOffset": str(offset), "maxMsgNums": str(max_nums), "sysFlag": "0",
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "1"}


async def test_the_rates_and_totals_clusterlist_reads(tmp_path, mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
                "topic": "orders", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
            assert header["code"] == 0
            header, _ = await call(stream, HEART_BEAT, 2, {}, heartbeat("cg", ["orders"]))
            assert header["code"] == 0
            await seconds_pass(mock_clock, 1)
            producer = DirectProducer(client.rpc, a.node.address)
            for n in range(7):
                await producer.send("orders", b"m%d" % n, queue_id=0)
            # A pull that finds three messages, then one at the queue's end (a miss).
            header, body = await call(stream, PULL_MESSAGE, 3, pull(0, 3))
            assert header["code"] == 0
            first = decode_messages(body)[0]
            header, _ = await call(stream, PULL_MESSAGE, 4, pull(7, 3))
            assert header["code"] == 19  # PULL_NOT_FOUND
            await seconds_pass(mock_clock, 10)

            table = await runtime_table(stream, 5)
            # Over the last 10 s (the 60 s and 600 s rates need more samples yet).
            assert {k: table[k] for k in (
                "putTps", "getFoundTps", "getMissTps", "getTotalTps", "getTransferredTps",
                "getTransferedTps", "msgPutTotalTodayNow", "msgGetTotalTodayNow",
                "msgPutTotalTodayMorning", "msgPutTotalYesterdayMorning",
                "putMessageTimesTotal")} == {
                "putTps": "0.7  ", "getFoundTps": "0.1  ", "getMissTps": "0.1  ",
                "getTotalTps": "0.2 0.0 0.0", "getTransferredTps": "0.3  ",
                "getTransferedTps": "0.3  ", "msgPutTotalTodayNow": "7",
                "msgGetTotalTodayNow": "3", "msgPutTotalTodayMorning": "0",
                "msgPutTotalYesterdayMorning": "0", "putMessageTimesTotal": "7"}
            # What clusterList computes from them.
            assert float(table["putTps"].split(" ")[0]) == 0.7
            assert float(table["getTransferedTps"].split(" ")[0]) == 0.3
            assert table["earliestMessageTimeStamp"] == str(first["storeTimestamp"])
            assert 0 <= float(table["commitLogDiskRatio"]) <= 1
            assert table["commitLogDirCapacity"].startswith("Total : ")
            assert {k: table[k] for k in (
                "brokerVersionDesc", "brokerVersion", "brokerId", "brokerRole",
                "brokerActive", "sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
                "sendThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills",
                "dispatchBehindBytes", "timerReadBehind", "timerEnqueueTps")} == {
                "brokerVersionDesc": "V5_3_3", "brokerVersion": "479", "brokerId": "0",
                "brokerRole": "MASTER", "brokerActive": "true",
                "sendThreadPoolQueueSize": "0", "pullThreadPoolQueueSize": "0",
                "sendThreadPoolQueueHeadWaitTimeMills": "0", "pageCacheLockTimeMills": "0",
                "dispatchBehindBytes": "0", "timerReadBehind": "0", "timerEnqueueTps": "0.0"}

            # A minute of quiet: the 10 s rate falls to 0, the 60 s one is there.
            await seconds_pass(mock_clock, 50)
            table = await runtime_table(stream, 6)
            assert table["putTps"] == "0.0 0.11666666666666667 "
            assert table["msgPutTotalTodayNow"] == "7"


@asynccontextmanager
async def replicated(tmp_path) -> AsyncIterator[tuple]:
    """A master and its slave, five messages put and replicated."""
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as master, cluster.client() as client, \
            cluster.broker("b", broker_id=1, master=master.ha_address) as slave:
        producer = DirectProducer(client.rpc, master.node.address)
        for n in range(5):
            await producer.send("orders", b"m%d" % n)
        await caught_up(master, slave)
        yield master, slave


async def test_a_slave_counts_what_it_replicated(tmp_path) -> None:
    async with replicated(tmp_path) as (master, slave):
        stream = await open_stream(slave.node.address)
        async with stream:
            table: dict[str, str] = {}

            async def counted() -> bool:
                table.update(await runtime_table(stream, 1))
                return table["putMessageTimesTotal"] == "5"

            # Sampled once a second: poll the broker until it has.
            with trio.fail_after(10):
                while not await counted():
                    await trio.sleep(0.1)
        assert table["putMessageSizeTotal"] == str(master.log.max_offset)
        # RocketMQ's slave counts no send of its own, and is no active master.
        assert (table["msgPutTotalTodayNow"], table["brokerActive"], table["brokerId"],
                table["brokerRole"]) == ("0", "false", "1", "SLAVE")


async def test_the_config_as_a_properties_text_under_rocketmqs_names(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a", extra='namesrv_addr = ["10.0.0.1:9876", "10.0.0.2:9876"]'
                              ) as a:
        await wait_until(lambda: a.replicas.is_master)
        stream = await open_stream(a.node.address)
        async with stream:
            header, body = await call(stream, GET_BROKER_CONFIG, 1, {})
    assert (header["code"], header.get("remark")) == (0, None)
    # GetBrokerConfigResponseHeader.version: the configuration's DataVersion.
    assert set(json.loads(header["extFields"]["version"])) == {
        "counter", "stateVersion", "timestamp"}
    text = body.decode()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines == sorted(lines)
    properties = dict(line.split("=", 1) for line in lines)
    port = a.node.address.rpartition(":")[2]
    assert {k: properties[k] for k in (
        "brokerName", "brokerClusterName", "brokerId", "brokerRole", "brokerIP1",
        "listenPort", "haListenPort", "namesrvAddr", "flushDiskType", "autoCreateTopicEnable",
        "defaultTopicQueueNums", "storePathRootDir")} == {
        "brokerName": "broker-a", "brokerClusterName": "DefaultCluster", "brokerId": "0",
        "brokerRole": "SYNC_MASTER", "brokerIP1": "127.0.0.1", "listenPort": port,
        "haListenPort": a.ha_address.rpartition(":")[2],
        "namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876", "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": "true", "defaultTopicQueueNums": "8",
        "storePathRootDir": str(tmp_path / "a")}


async def test_the_ha_status_hastatus_prints(tmp_path) -> None:
    """GET_BROKER_HA_STATUS (907) read as RocketMQ's ``HARuntimeInfo``: the master lists its
    slave's connection by the slave's socket address, the slave names its master."""
    async with replicated(tmp_path) as (master, slave):
        end = master.log.max_offset
        async with await open_stream(master.node.address) as stream:
            header, body = await call(stream, GET_BROKER_HA_STATUS, 1, {})
        assert header["code"] == 0
        info = json.loads(body)
        assert (info["master"], info["masterCommitLogMaxOffset"]) == (True, end)
        (row,) = info["haConnectionInfo"]
        assert (row["slaveAckOffset"], row["diff"], row["transferFromWhere"]) == (end, 0, end)
        host, _, port = row["addr"].rpartition(":")
        assert host == "/127.0.0.1" and port.isdigit()
        assert row["inSync"] is True and row["transferredByteInSecond"] >= 0
        async with await open_stream(slave.node.address) as stream:
            header, body = await call(stream, GET_BROKER_HA_STATUS, 2, {})
        client_info = json.loads(body)["haClientRuntimeInfo"]
        assert json.loads(body)["master"] is False
        assert (client_info["masterAddr"], client_info["maxOffset"]) == (master.ha_address, end)
        assert client_info["lastReadTimestamp"] > 0 and client_info["lastWriteTimestamp"] > 0
