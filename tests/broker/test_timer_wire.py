"""Timer messages over inproc and TCP, with frames built by hand from RocketMQ's remoting
layout, under trio's ``MockClock``: SEND_MESSAGE_V2 with TIMER_DELAY_MS, TIMER_DELAY_SEC
or TIMER_DELIVER_MS waits in rmq_sys_wheel_timer and is delivered to its topic once, no
earlier than its time and within one tick (``timer_precision_ms``) after it, by the
broker's clock; a bad, too distant or past time is refused with its code and a remark
naming the property and nothing is stored; config/timerCheckpoint.json is written, read
back after a restart (nothing delivered again) and copied by a slave;
GET_BROKER_RUNTIME_INFO reports the running wheel."""

from __future__ import annotations

import functools
import json
import os

import trio
from broker_nodes import Cluster, caught_up, wait_until
from test_delay_wire import pull, send_fields, stream_to
from test_pull_wire import call
from test_send_wire import SEND_MESSAGE_V2, properties

from triomq.broker.service import Broker

PRECISION = 100
WHEEL = f"timer_precision_ms = {PRECISION}"
MESSAGE_ILLEGAL = 13
GET_BROKER_RUNTIME_INFO, GET_TIMER_CHECK_POINT = 28, 60


def delivered(broker: Broker) -> list:
    return [r for r in broker.log.iter_records() if r.topic == "orders"]


async def test_a_timer_send_is_delivered_once_no_earlier_than_its_time(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a", extra=WHEEL) as a, stream_to(cluster, a) as stream:
        # Off the wheel's ticks: a time inside a slot, not on its edge.
        await trio.sleep(0.037)
        header, _ = await call(stream, SEND_MESSAGE_V2, 1, send_fields(
            "TIMER_DELAY_MS\x01500\x02TAGS\x01t\x02"
            "UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02"), b"later")
        assert header["code"] == 0, header.get("remark")
        assert header["extFields"]["queueId"] == "1"
        # An absolute time, on the broker's clock, and a delay in seconds.
        deliver_ms = a.clock() + 730
        header, _ = await call(stream, SEND_MESSAGE_V2, 2, send_fields(
            f"TIMER_DELIVER_MS\x01{deliver_ms}\x02"), b"absolute")
        assert header["code"] == 0, header.get("remark")
        header, _ = await call(stream, SEND_MESSAGE_V2, 3, send_fields(
            "TIMER_DELAY_SEC\x011\x02"), b"seconds")
        assert header["code"] == 0, header.get("remark")
        waiting = {r.body: r for r in a.log.iter_records()}
        assert {(r.topic, r.queue_id) for r in waiting.values()} == {("rmq_sys_wheel_timer", 0)}
        props = waiting[b"later"].properties
        assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("orders", "1")
        due = {b"later": waiting[b"later"].store_timestamp + 500, b"absolute": deliver_ms,
               b"seconds": waiting[b"seconds"].store_timestamp + 1000}
        for body, record in waiting.items():
            out = int(record.properties["TIMER_OUT_MS"])
            # Its slot: the one holding its time.
            assert out % PRECISION == 0 and out < due[body] <= out + PRECISION

        # Not before its time: nothing in its topic until the clock reads it.
        await a.clock.sleep_until(due[b"later"] - 1)
        assert delivered(a) == [] and await pull(stream, 4) == []
        got: list[dict] = []
        opaque = 5
        with trio.fail_after(60):
            while len(got) < 3:
                got = await pull(stream, opaque)
                opaque += 1
                await trio.sleep(0.01)
        assert [m["body"] for m in got] == [b"later", b"absolute", b"seconds"]
        for message in got:
            at = due[message["body"]]
            assert at <= message["storeTimestamp"] <= at + PRECISION
            props = properties(message["properties"])
            assert "REAL_TOPIC" not in props and "REAL_QID" not in props
            assert props["TIMER_OUT_MS"] == waiting[message["body"]].properties["TIMER_OUT_MS"]
            assert at <= int(props["TIMER_DEQUEUE_MS"]) <= at + PRECISION
        props = properties(got[0]["properties"])
        assert props["TIMER_DELAY_MS"] == "500" and props["TAGS"] == "t"
        assert props["UNIQ_KEY"] == "C0A8000100002A9F0000000000000001"

        # Once: long after, none is delivered again.
        await trio.sleep(10)
        assert [r.body for r in delivered(a)] == [b"later", b"absolute", b"seconds"]
        assert a.timer is not None and a.timer.table.checkpoint.queue_offset == 3


async def test_a_bad_too_distant_or_past_time_is_refused_and_nothing_stored(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a", extra=WHEEL + "\ntimer_max_delay_sec = 60") as a, \
            stream_to(cluster, a) as stream:
        now = a.clock()
        cases = [
            ("TIMER_DELIVER_MS\x01tomorrow\x02", ("TIMER_DELIVER_MS", "'tomorrow'")),
            ("TIMER_DELAY_SEC\x0161\x02", ("60000 ms", "timer_max_delay_sec")),
            ("TIMER_DELAY_SEC\x01-1\x02", ("property TIMER_DELAY_SEC", "negative")),
            ("TIMER_DELAY_MS\x01-500\x02", ("property TIMER_DELAY_MS", "negative")),
            (f"TIMER_DELIVER_MS\x01{now - 5000}\x02",
             ("property TIMER_DELIVER_MS", "the past", "timer_precision_ms (100)")),
        ]
        for opaque, (props, words) in enumerate(cases, 1):
            header, _ = await call(stream, SEND_MESSAGE_V2, opaque, send_fields(props), b"x")
            assert header["code"] == MESSAGE_ILLEGAL, (props, header)
            assert all(word in header["remark"] for word in words), header["remark"]
        assert a.log.max_offset == 0
        # The broker keeps serving; a time a little behind its clock (within the
        # precision) is due: stored as it came, at once in its topic.
        header, _ = await call(stream, SEND_MESSAGE_V2, 9, send_fields(
            f"TIMER_DELIVER_MS\x01{a.clock() - PRECISION // 2}\x02"), b"now")
        assert header["code"] == 0, header.get("remark")
        assert [(r.topic, r.body) for r in a.log.iter_records()] == [("orders", b"now")]


def checkpoint_file(root) -> dict:
    with open(os.path.join(root, "config", "timerCheckpoint.json"), "rb") as file:
        return json.loads(file.read())


async def run_broker(cluster: Cluster, name: str, stop: trio.Event, *,
                     task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED,
                     **kwargs) -> None:
    async with cluster.broker(name, **kwargs) as broker:
        task_status.started(broker)
        await stop.wait()


async def test_the_checkpoint_is_written_read_back_after_a_restart_and_copied(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    extra = WHEEL + "\nslave_synchronize_period = 50\ntimer_flush_interval_ms = 50"
    slave_stop = trio.Event()
    async with trio.open_nursery() as nursery:
        async with cluster.broker("a", extra=extra) as a:
            # The slave outlives the master: the mock clock races on while a node closes
            # (its files are written in threads), and the master's wheel must be gone by
            # then, or the far message is due before the restart.
            b = await nursery.start(functools.partial(
                run_broker, cluster, "b", slave_stop, broker_id=1, master=a.ha_address,
                extra=extra))
            b.master_rpc_address = lambda: a.node.address  # no name server tells it
            async with stream_to(cluster, a) as stream:
                for n in range(2):
                    header, _ = await call(stream, SEND_MESSAGE_V2, n, send_fields(
                        "TIMER_DELAY_MS\x01200\x02"), b"m%d" % n)
                    assert header["code"] == 0
                # A far one stays pending across the restart.
                header, _ = await call(stream, SEND_MESSAGE_V2, 5, send_fields(
                    "TIMER_DELAY_SEC\x01300\x02"), b"far")
                assert header["code"] == 0
                far_due = next(r.store_timestamp for r in a.log.iter_records()
                               if r.body == b"far") + 300_000
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
        slave_stop.set()
    assert checkpoint_file(tmp_path / "b")["queueOffset"] == 2
    written = checkpoint_file(tmp_path / "a")
    assert (written["queueOffset"], written["scanOffset"]) == (2, 3)
    assert set(written["dataVersion"]) == {"counter", "stateVersion", "timestamp"}

    async with cluster.broker("a", extra=extra) as a:
        # Read back (from 0 the wheel would deliver m0 and m1 again); the mock clock may
        # have raced on while the node started.
        assert a.timer is not None and a.timer.table.checkpoint.queue_offset >= 2
        # The pending one is delivered, the delivered ones are not again.
        await a.clock.sleep_until(far_due)
        await wait_until(lambda: len(delivered(a)) >= 3)
        # (One slot's puts are under way at once: in any order.)
        bodies = [r.body for r in delivered(a)]
        assert sorted(bodies[:2]) == [b"m0", b"m1"] and bodies[2:] == [b"far"]
