"""Delayed messages over inproc and TCP, with frames built by hand from RocketMQ's remoting
layout, under trio's ``MockClock``: SEND_MESSAGE_V2 with a DELAY property is delivered to
its topic once, no earlier than its level and within one scan interval after it (by the
broker's clock, its store times'); a bad DELAY, and a timer message with the timer wheel
off, are refused and nothing is stored; config/delayOffset.json is written, read back
after a restart and copied by a slave."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from broker_nodes import Cluster, caught_up, wait_until
from test_pull_wire import PULL_MESSAGE, call, decode_messages, receive_exactly
from test_send_wire import (
    SEND_MESSAGE,
    SEND_MESSAGE_V2,
    go_frame,
    go_send_header,
    properties,
)

from triomq.broker.secondary.core.schedule import SCAN_INTERVAL_MS
from triomq.broker.service import Broker
from triomq.protocol.delay_levels import SCHEDULE_TOPIC

LEVELS = 'message_delay_level = "400ms 1s"'
MESSAGE_ILLEGAL, SYSTEM_ERROR = 13, 1


def send_fields(props: str) -> dict[str, str]:
    return {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "1", "f": "0",
            "g": "1700000000000", "h": "0", "i": props, "j": "0", "k": "false"}


async def pull(stream: trio.abc.Stream, opaque: int, offset: int = 0) -> list[dict]:
    header, body = await call(stream, PULL_MESSAGE, opaque, {
        "consumerGroup": "cg", "topic": "orders", "queueId": "1",
        "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
        "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
    return decode_messages(body) if header["code"] == 0 else []


@asynccontextmanager
async def stream_to(cluster: Cluster, broker: Broker) -> AsyncIterator[trio.abc.Stream]:
    """A raw stream to ``broker`` over the cluster's transport, from a client node."""
    async with cluster.client() as client, await client.connect(broker.node.address) as stream:
        yield stream


def delivered(broker: Broker) -> list:
    return [r for r in broker.log.iter_records() if r.topic == "orders"]


async def test_a_delayed_send_is_delivered_once_no_earlier_than_its_level(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a", extra=LEVELS) as a, stream_to(cluster, a) as stream:
        # Off the levels' scans (every 400 ms and 1 s from the start): each sees its
        # message before it is due, and must wait for it.
        await trio.sleep(0.15)
        header, _ = await call(stream, SEND_MESSAGE_V2, 1, send_fields(
            "DELAY\x011\x02TAGS\x01t\x02UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02"),
            b"later")
        assert header["code"] == 0, header.get("remark")
        assert header["extFields"]["queueId"] == "1"
        header, _ = await call(stream, SEND_MESSAGE_V2, 2, send_fields("DELAY\x012\x02"),
                               b"second")
        assert header["code"] == 0, header.get("remark")
        # Waiting in the schedule topic's queues of levels 1 and 2, not in their own.
        first, second = [r for r in a.log.iter_records() if r.topic == SCHEDULE_TOPIC]
        assert (first.queue_id, second.queue_id) == (0, 1)
        assert (first.properties["REAL_TOPIC"], first.properties["REAL_QID"]) == (
            "orders", "1")
        due = {b"later": first.store_timestamp + 400, b"second": second.store_timestamp + 1000}

        # Not before its level: nothing in its topic until the clock reads its time.
        await a.clock.sleep_until(due[b"later"] - 1)
        assert delivered(a) == [] and await pull(stream, 3) == []
        got: list[dict] = []
        opaque = 4
        with trio.fail_after(60):
            while len(got) < 2:
                got = await pull(stream, opaque)
                opaque += 1
                await trio.sleep(0.01)
        assert [m["body"] for m in got] == [b"later", b"second"]
        for message in got:
            at = due[message["body"]]
            assert at <= message["storeTimestamp"] <= at + SCAN_INTERVAL_MS
        props = properties(got[0]["properties"])
        assert "DELAY" not in props
        assert props["TAGS"] == "t"
        assert props["UNIQ_KEY"] == "C0A8000100002A9F0000000000000001"

        # Once: long after, neither is delivered again.
        await trio.sleep(10)
        assert [r.body for r in delivered(a)] == [b"later", b"second"]
        assert a.schedule is not None
        assert (a.schedule.table.offset(1), a.schedule.table.offset(2)) == (1, 1)


async def test_a_bad_delay_and_a_timer_message_are_refused_and_nothing_stored(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    # With the timer wheel off, as RocketMQ's timerWheelEnable = false.
    async with cluster.broker("a", extra=LEVELS + "\ntimer_wheel_enable = false") as a, \
            stream_to(cluster, a) as stream:
        header, _ = await call(stream, SEND_MESSAGE_V2, 1,
                               send_fields("DELAY\x01soon\x02"), b"x")
        assert header["code"] == MESSAGE_ILLEGAL
        assert "DELAY" in header["remark"] and "'soon'" in header["remark"]
        header, _ = await call(stream, SEND_MESSAGE_V2, 2,
                               send_fields("TIMER_DELAY_SEC\x0110\x02"), b"x")
        assert header["code"] == SYSTEM_ERROR
        assert header["remark"] == ("accurate timer message is not enabled, "
                                    "timerWheelEnable is false")
        assert a.log.max_offset == 0
        # The broker keeps serving.
        header, _ = await call(stream, SEND_MESSAGE_V2, 3, send_fields(""), b"now")
        assert header["code"] == 0
        assert [r.body for r in a.log.iter_records()] == [b"now"]


def delay_offsets_file(root) -> dict:
    with open(os.path.join(root, "config", "delayOffset.json"), "rb") as file:
        return json.loads(file.read())


async def test_the_delay_offsets_are_written_read_back_after_a_restart_and_copied(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    extra = LEVELS + "\nslave_synchronize_period = 50"
    async with cluster.broker("a", extra=extra) as a:
        async with cluster.broker("b", broker_id=1, master=a.ha_address, extra=extra) as b:
            b.master_rpc_address = lambda: a.node.address  # no name server tells it
            async with stream_to(cluster, a) as stream:
                for n in range(2):
                    header, _ = await call(stream, SEND_MESSAGE_V2, n, send_fields(
                        "DELAY\x012\x02"), b"m%d" % n)
                    assert header["code"] == 0
            await wait_until(lambda: len(delivered(a)) == 2)
            assert a.schedule is not None and b.schedule is not None
            await wait_until(lambda: a.schedule.table.offset(2) == 2)
            await wait_until(lambda: b.schedule.table.offsets() == {2: 2})
            await caught_up(a, b)
        assert delay_offsets_file(tmp_path / "b")["offsetTable"] == {"2": 2}
    written = delay_offsets_file(tmp_path / "a")
    assert written["offsetTable"] == {"2": 2}
    assert set(written["dataVersion"]) == {"counter", "stateVersion", "timestamp"}

    async with cluster.broker("a", extra=extra) as a:
        assert a.schedule is not None and a.schedule.table.offset(2) == 2
        async with stream_to(cluster, a) as stream:
            header, _ = await call(stream, SEND_MESSAGE_V2, 9, send_fields("DELAY\x012\x02"),
                                   b"m2")
            assert header["code"] == 0
        # The old ones, behind the offset, are not delivered again: a few of the levels'
        # looks after the new one (the two due together may land in either order).
        await wait_until(lambda: len(delivered(a)) >= 3)
        await trio.sleep(3)
        bodies = [r.body for r in delivered(a)]
        assert sorted(bodies[:2]) == [b"m0", b"m1"] and bodies[2:] == [b"m2"]


async def test_a_go_clients_send_message_with_a_delay_waits_in_the_schedule_topic(
        tmp_path, kind, clock) -> None:
    """SEND_MESSAGE (10) as RocketMQ's Go client frames it, every header field spelt out."""
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a", extra=LEVELS) as a, stream_to(cluster, a) as stream:
        await stream.send_all(go_frame(SEND_MESSAGE, 1, go_send_header(
            1, "DELAY\x012\x02TAGS\x01go\x02"), b"from go"))
        (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
        rest = await receive_exactly(stream, length)
        header = json.loads(rest[4:4 + (struct.unpack_from(">I", rest)[0] & 0xFFFFFF)])
        assert header["code"] == 0, header.get("remark")
        (waiting,) = list(a.log.iter_records())
        assert (waiting.topic, waiting.queue_id) == (SCHEDULE_TOPIC, 1)
        assert waiting.properties["REAL_TOPIC"] == "orders"
        await wait_until(lambda: [r.body for r in delivered(a)] == [b"from go"])
        (message,) = delivered(a)
        due = waiting.store_timestamp + 1000
        assert due <= message.store_timestamp <= due + SCAN_INTERVAL_MS
