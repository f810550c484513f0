"""VIEW_BROKER_STATS_DATA as ``mqadmin statsAll`` sends it, over real TCP, to a real broker.

The requests are built by hand from RocketMQ's remoting layout
(``test_consume_stats_wire.call``); the answer is RocketMQ's ``BrokerStatsData``
in JSON. The clock is trio's ``MockClock`` standing still: the broker samples its
statistics when the test moves the clock past a sampling time.
"""

from __future__ import annotations

import json

import trio
import trio.testing
from broker_nodes import Cluster
from test_consume_stats_wire import call, heartbeat

from triomq.testing.direct_send import DirectProducer

HEART_BEAT, PULL_MESSAGE, UPDATE_AND_CREATE_TOPIC, VIEW_BROKER_STATS_DATA = 34, 11, 17, 315
SYSTEM_ERROR, INVALID_PARAMETER = 1, 29


def window(total: int, tps: float, avgpt: float) -> dict[str, object]:
    return {"sum": total, "tps": tps, "avgpt": avgpt}


async def moved(clock: trio.testing.MockClock, seconds: float) -> None:
    """The clock ``seconds`` on, once the broker's timers due by then have run."""
    clock.jump(seconds)
    await trio.testing.wait_all_tasks_blocked()


async def test_a_topics_puts_and_a_groups_pulls_over_the_minute_and_the_hour(
        tmp_path, mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:

            async def view(opaque: int, name: str, key: str,
                           on: trio.SocketStream = stream) -> dict[str, object]:
                header, body = await call(on, VIEW_BROKER_STATS_DATA, opaque,
                                          {"statsName": name, "statsKey": key})
                assert header["code"] == 0, header
                data = json.loads(body)
                return {w: data[f"stats{w}"] for w in ("Minute", "Hour", "Day")}

            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
                "topic": "orders", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
            assert header["code"] == 0, header
            producer = DirectProducer(client.rpc, a.node.address)
            for n in range(6):
                await producer.send("orders", b"m%d" % n, queue_id=0)
            header, _ = await call(stream, HEART_BEAT, 2, {}, heartbeat("cg", ["orders"]))
            assert header["code"] == 0, header
            header, body = await call(stream, PULL_MESSAGE, 3, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "4", "sysFlag": "0", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "1"})
            assert (header["code"], header["remark"]) == (0, "FOUND")
            pulled_bytes = len(body)

            # Nothing sampled yet: every window empty.
            assert await view(4, "TOPIC_PUT_NUMS", "orders") == {
                w: window(0, 0.0, 0.0) for w in ("Minute", "Hour", "Day")}

            # The 10-second sample: six puts of one message each, four messages pulled in
            # one pull, counted from a sample of zeros 10 s before.
            await moved(mock_clock, 10)
            assert await view(5, "TOPIC_PUT_NUMS", "orders") == {
                "Minute": window(6, 0.6, 1.0), "Hour": window(0, 0.0, 0.0),
                "Day": window(0, 0.0, 0.0)}
            assert (await view(6, "GROUP_GET_NUMS", "orders@cg"))["Minute"] \
                == window(4, 0.4, 4.0)
            assert (await view(7, "GROUP_GET_SIZE", "orders@cg"))["Minute"] \
                == window(pulled_bytes, pulled_bytes / 10, float(pulled_bytes))
            size = (await view(8, "TOPIC_PUT_SIZE", "orders"))["Minute"]
            assert size["sum"] > 6 * len(b"m0")  # whole records, as the log holds them

            # Ten minutes on: the hour's sample, and the minute's window still starting at
            # its first sample (it keeps seven). (A new connection: the broker closed the
            # first, silent for two minutes.)
            await moved(mock_clock, 590)
            async with await trio.open_tcp_stream(host, int(port)) as again:
                found = await view(9, "TOPIC_PUT_NUMS", "orders", again)
            assert found == {
                "Minute": window(6, 6 / 600, 1.0), "Hour": window(6, 6 / 600, 1.0),
                "Day": window(0, 0.0, 0.0)}


async def test_what_is_not_kept_is_refused_naming_it_and_the_connection_stays_open(
        tmp_path, mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            header, _ = await call(stream, VIEW_BROKER_STATS_DATA, 1, {"statsName": "x"})
            assert header["code"] == INVALID_PARAMETER and "statsKey" in header["remark"]
            header, _ = await call(stream, VIEW_BROKER_STATS_DATA, 2, {
                "statsName": "BROKER_PUT_NUMS", "statsKey": "DefaultCluster"})
            assert header["code"] == SYSTEM_ERROR
            assert "<BROKER_PUT_NUMS> are not kept" in header["remark"]
            assert "TOPIC_PUT_NUMS" in header["remark"]
            header, _ = await call(stream, VIEW_BROKER_STATS_DATA, 3, {
                "statsName": "TOPIC_PUT_NUMS", "statsKey": "nobody"})
            assert (header["code"], header["remark"]) \
                == (SYSTEM_ERROR, "The stats <TOPIC_PUT_NUMS> <nobody> not exist")
            header, _ = await call(stream, VIEW_BROKER_STATS_DATA, 4, {
                "statsName": "GROUP_GET_NUMS", "statsKey": "orders@nobody"})
            assert header["code"] == SYSTEM_ERROR
