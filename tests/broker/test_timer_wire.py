"""Timer messages over real TCP, with frames built by hand from RocketMQ's remoting
layout: SEND_MESSAGE_V2 with TIMER_DELAY_MS or TIMER_DELIVER_MS waits in
rmq_sys_wheel_timer and is delivered to its topic at or after its time, once; a bad or
too distant time is refused with its code and remark and nothing is stored;
config/timerCheckpoint.json is written, read back after a restart (nothing delivered
again) and copied by a slave; GET_BROKER_RUNTIME_INFO reports the running wheel."""

from __future__ import annotations

import json
import os
import time

import trio
from broker_nodes import Cluster, caught_up, wait_until
from test_delay_wire import connect, pull, send_fields
from test_pull_wire import call
from test_send_wire import SEND_MESSAGE_V2, properties

from triomq.broker.service import Broker

WHEEL = "timer_precision_ms = 100"
MESSAGE_ILLEGAL = 13
GET_BROKER_RUNTIME_INFO, GET_TIMER_CHECK_POINT = 28, 60


def delivered(broker: Broker) -> list:
    return [r for r in broker.log.iter_records() if r.topic == "orders"]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_timer_send_is_delivered_once_at_or_after_its_time(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a", extra=WHEEL) as a:
        stream = await connect(a)
        async with stream:
            header, _ = await call(stream, SEND_MESSAGE_V2, 1, send_fields(
                "TIMER_DELAY_MS\x01500\x02TAGS\x01t\x02"
                "UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02"), b"later")
            assert header["code"] == 0, header.get("remark")
            assert header["extFields"]["queueId"] == "1"
            (waiting,) = list(a.log.iter_records())
            assert (waiting.topic, waiting.queue_id) == ("rmq_sys_wheel_timer", 0)
            props = waiting.properties
            assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("orders", "1")
            out = int(props["TIMER_OUT_MS"])
            # Its slot: the one holding its time (stored with the put's clock).
            assert out % 100 == 0 and out < waiting.store_timestamp + 500 <= out + 100

            got: list[dict] = []
            opaque = 2
            with trio.fail_after(20):
                while not got:
                    got = await pull(stream, opaque)
                    opaque += 1
                    await trio.sleep(0.02)
            (message,) = got
            assert message["body"] == b"later"
            props = properties(message["properties"])
            assert "REAL_TOPIC" not in props and "REAL_QID" not in props
            assert props["TIMER_OUT_MS"] == str(out) and props["TIMER_DELAY_MS"] == "500"
            assert int(props["TIMER_DEQUEUE_MS"]) >= out + 100
            assert props["TAGS"] == "t"
            assert props["UNIQ_KEY"] == "C0A8000100002A9F0000000000000001"
            assert message["storeTimestamp"] >= out + 100

            # An absolute time; the first is not delivered again.
            header, _ = await call(stream, SEND_MESSAGE_V2, opaque, send_fields(
                f"TIMER_DELIVER_MS\x01{wall_ms() + 300}\x02"), b"second")
            assert header["code"] == 0
            await wait_until(lambda: len(delivered(a)) >= 2)
            assert [r.body for r in delivered(a)] == [b"later", b"second"]
            assert a.timer is not None
            await wait_until(lambda: a.timer.table.checkpoint.queue_offset == 2)


async def test_a_bad_or_too_distant_time_is_refused_and_nothing_stored(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a", extra=WHEEL + "\ntimer_max_delay_sec = 60") as a:
        stream = await connect(a)
        async with stream:
            header, _ = await call(stream, SEND_MESSAGE_V2, 1,
                                   send_fields("TIMER_DELIVER_MS\x01tomorrow\x02"), b"x")
            assert header["code"] == MESSAGE_ILLEGAL
            assert "TIMER_DELIVER_MS" in header["remark"] and "'tomorrow'" in header["remark"]
            header, _ = await call(stream, SEND_MESSAGE_V2, 2,
                                   send_fields("TIMER_DELAY_SEC\x0161\x02"), b"x")
            assert header["code"] == MESSAGE_ILLEGAL
            assert "60000 ms" in header["remark"]
            assert "timer_max_delay_sec" in header["remark"]
            assert a.log.max_offset == 0
            # The broker keeps serving; a time already past is stored as it came.
            header, _ = await call(stream, SEND_MESSAGE_V2, 3, send_fields(
                "TIMER_DELIVER_MS\x011000\x02"), b"now")
            assert header["code"] == 0
            assert [(r.topic, r.body) for r in a.log.iter_records()] == [("orders", b"now")]


def checkpoint_file(root) -> dict:
    with open(os.path.join(root, "config", "timerCheckpoint.json"), "rb") as file:
        return json.loads(file.read())


async def test_the_checkpoint_is_written_read_back_after_a_restart_and_copied(
        tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    extra = WHEEL + "\nslave_synchronize_period = 50\ntimer_flush_interval_ms = 50"
    async with cluster.broker("a", extra=extra) as a:
        async with cluster.broker("b", broker_id=1, master=a.ha_address, extra=extra) as b:
            b.master_rpc_address = lambda: a.node.address  # no name server tells it
            stream = await connect(a)
            async with stream:
                for n in range(2):
                    header, _ = await call(stream, SEND_MESSAGE_V2, n, send_fields(
                        "TIMER_DELAY_MS\x01200\x02"), b"m%d" % n)
                    assert header["code"] == 0
                # A far one stays pending across the restart.
                header, _ = await call(stream, SEND_MESSAGE_V2, 5, send_fields(
                    "TIMER_DELAY_SEC\x013\x02"), b"far")
                assert header["code"] == 0
                await wait_until(lambda: len(delivered(a)) == 2)
                assert a.timer is not None and b.timer is not None
                await wait_until(lambda: a.timer.table.checkpoint.queue_offset == 2)
                await wait_until(lambda: b.timer.table.checkpoint.queue_offset == 2)
                header, body = await call(stream, GET_TIMER_CHECK_POINT, 6, {})
                assert header["code"] == 0
                assert json.loads(body)["queueOffset"] == 2
                header, body = await call(stream, GET_BROKER_RUNTIME_INFO, 7, {})
                table = json.loads(body)["table"]
                assert table["timerCongestNum"] == "1"
                assert table["timerOffsetBehind"] == "0"
                assert float(table["timerEnqueueTps"]) >= 0.0
            await caught_up(a, b)
        assert checkpoint_file(tmp_path / "b")["queueOffset"] == 2
    written = checkpoint_file(tmp_path / "a")
    assert (written["queueOffset"], written["scanOffset"]) == (2, 3)
    assert set(written["dataVersion"]) == {"counter", "stateVersion", "timestamp"}

    async with cluster.broker("a", extra=extra) as a:
        assert a.timer is not None and a.timer.table.checkpoint.queue_offset == 2
        # The pending one is delivered, the delivered ones are not again.
        await wait_until(lambda: len(delivered(a)) >= 3, timeout=20)
        # (One slot's puts are under way at once: in any order.)
        bodies = [r.body for r in delivered(a)]
        assert sorted(bodies[:2]) == [b"m0", b"m1"] and bodies[2:] == [b"far"]
