"""``triomq admin pending-delayed``, ``pending-half`` and ``pending-popped`` against a name
server and a broker, in-process and over TCP: a message waiting shows up, and once
delivered, committed or acked it does not.

Real time (the schedule and the timer wheel read the wall clock): what must stay
pending waits an hour, what must be delivered a few hundred ms, and the views are
polled until the delivery shows, never raced. The half message and its commit are
SEND_MESSAGE_V2 and END_TRANSACTION frames with RocketMQ's header fields.
"""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import pytest
import trio
from client_cluster import open_groups
from test_client_cli import call, namesrv

from triomq.client.core.message import Message
from triomq.client.producer import Producer
from triomq.client.simple_consumer import SimpleConsumer
from triomq.plugins.client_cli.pending import pending
from triomq.runtime import Node

TOPIC = "orders"
SEND_MESSAGE_V2, END_TRANSACTION, GET_PENDING_MESSAGES = 310, 37, 7001


async def view(app: Node, ns: str, kind: str, *more: str) -> dict[str, Any]:
    """The ``kind`` view of broker-a (``--json``), which must answer."""
    code, out = await call(lambda args, node, out: pending(kind, args, node, out), app,
                           "admin", f"pending-{kind}", "-n", ns, "--json", *more)
    assert code == 0, out
    return json.loads(out)["brokers"]["broker-a"]


async def until_view(app: Node, ns: str, kind: str, done, timeout: float = 30.0
                     ) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while not done(answer := await view(app, ns, kind)):
            await trio.sleep(0.1)
    return answer


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_delayed_and_timer_messages_pending_until_delivered(tmp_path, transport) -> None:
    settings = {"message_delay_level": "300ms 1h", "timer_precision_ms": 100}
    async with open_groups(tmp_path, transport, broker=settings) as groups:
        await groups.create_topic(TOPIC, queues=1)
        app = await groups.client()
        ns = namesrv(groups)
        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            soon = await producer.send(Message(TOPIC, b"soon", delay_time_level=1))
            later = await producer.send(Message(TOPIC, b"later", delay_time_level=2))
            at = wall_ms() + 3_600_000
            timer = await producer.send(Message(TOPIC, b"timer", deliver_time_ms=at))
            await producer.send(Message(TOPIC, b"timer-soon", deliver_time_ms=wall_ms() + 300))

        def delivered(answer: dict[str, Any]) -> bool:
            return answer["levels"][0]["count"] == 0 and answer["timer"]["count"] == 1

        answer = await until_view(app, ns, "delayed", delivered)
        first, second = answer["levels"]
        assert (first["level"], first["deliveryOffset"], first["maxOffset"]) == (1, 1, 1)
        assert (second["level"], second["count"], second["maxOffset"]) == (2, 1, 1)
        (waiting,) = second["messages"]
        assert (waiting["topic"], waiting["queueId"], waiting["msgId"]) == (
            TOPIC, 0, later.msg_id)
        assert waiting["offsetMsgId"] == later.offset_msg_id
        assert waiting["deliverTimeMs"] >= waiting["storeTimestamp"] + 3_600_000
        (pending_timer,) = answer["timer"]["messages"]
        assert (pending_timer["msgId"], pending_timer["topic"]) == (timer.msg_id, TOPIC)
        # Its slot: the time rounded down to the precision, one precision less when the
        # time is on it (RocketMQ's rule: the slot fires at its end).
        assert pending_timer["deliverTimeMs"] == (at - 100 if at % 100 == 0 else at // 100 * 100)
        assert soon.msg_id not in json.dumps(answer)

        code, out = await call(lambda args, node, out: pending("delayed", args, node, out),
                               app, "admin", "pending-delayed", "-n", ns, "--max-num", "1")
        assert code == 0
        assert "delayed messages pending: 1" in out and later.msg_id in out
        assert "timer messages pending: 1" in out and timer.msg_id in out


def half_fields(unique: str) -> dict[str, str]:
    """SEND_MESSAGE_V2's header of a half message, as ``DefaultMQProducerImpl`` sends it."""
    properties = f"TRAN_MSG\x01true\x02PGROUP\x01tx-group\x02UNIQ_KEY\x01{unique}\x02"
    return {"a": "tx-group", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "4",
            "g": str(wall_ms()), "h": "0", "i": properties, "j": "0", "k": "false",
            "m": "false", "n": "broker-a"}


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_a_half_message_is_pending_until_committed(tmp_path, transport) -> None:
    async with open_groups(tmp_path, transport) as groups:
        await groups.create_topic(TOPIC, queues=1)
        app = await groups.client()
        ns = namesrv(groups)
        broker = groups.cluster.node("a").address
        unique = "C0A800010000303900000000000000AB"
        sent = await app.rpc.invoke(broker, SEND_MESSAGE_V2, half_fields(unique), b"half")
        assert sent.code == 0, sent.remark
        answer = await view(app, ns, "half")
        assert answer["count"] == 1
        (half,) = answer["messages"]
        assert (half["producerGroup"], half["transactionId"], half["topic"]) == (
            "tx-group", unique, TOPIC)
        assert (half["msgId"], half["checkTimes"], half["queueOffset"]) == (unique, 0, 0)
        assert half["ageMs"] >= 0
        code, out = await call(lambda args, node, out: pending("half", args, node, out), app,
                               "admin", "pending-half", "-n", ns)
        assert code == 0 and "open transactions: 1" in out and "tx-group" in out

        msg_id = sent.ext_fields["msgId"]
        commit = {"producerGroup": "tx-group", "tranStateTableOffset": sent.ext_fields[
                      "queueOffset"],
                  "commitLogOffset": str(struct.unpack(">q", bytes.fromhex(msg_id)[-8:])[0]),
                  "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": msg_id}
        ended = await app.rpc.invoke(broker, END_TRANSACTION, commit)
        assert ended.code == 0, ended.remark
        answer = await until_view(app, ns, "half", lambda a: a["count"] == 0)
        assert answer["messages"] == []


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_a_popped_message_is_pending_until_acked(tmp_path, transport) -> None:
    async with open_groups(tmp_path, transport) as groups:
        await groups.create_topic(TOPIC, queues=1)
        app = await groups.client()
        ns = namesrv(groups)
        consumer = SimpleConsumer("simple", groups.namesrv, invisible_duration=3600.0,
                                  await_duration=0.5)
        consumer.subscribe(TOPIC)
        async with consumer.start(app.connect), Producer(
                "pg", groups.namesrv).start(app.connect) as producer:
            # A group's first pop of a queue starts at its end: pop once before the send.
            assert await consumer.receive() == []
            await producer.send(Message(TOPIC, b"popped"))
            with trio.fail_after(30):
                while not (got := await consumer.receive()):
                    pass
            (received,) = got
            answer = await until_view(app, ns, "popped", lambda a: a["count"] == 1)
            assert answer["queues"] == [
                {"group": "simple", "topic": TOPIC, "queueId": 0, "count": 1}]
            (ck,) = answer["checkpoints"]
            assert (ck["offsets"], ck["due"]) == ([received.message.queue_offset], False)
            assert ck["invisibleUntil"] >= ck["popTime"] + 3_600_000
            code, out = await call(lambda args, node, out: pending("popped", args, node, out),
                                   app, "admin", "pending-popped", "-n", ns)
            assert code == 0 and "popped messages not acked: 1" in out and "simple" in out

            await consumer.ack(received)
            answer = await until_view(app, ns, "popped", lambda a: a["count"] == 0)
            assert (answer["queues"], answer["checkpoints"]) == ([], [])


async def test_an_unknown_view_is_refused_and_a_missing_group_named(tmp_path) -> None:
    async with open_groups(tmp_path, "inproc") as groups:
        app = await groups.client()
        broker = groups.cluster.node("a").address
        refused = await app.rpc.invoke(broker, GET_PENDING_MESSAGES, {"kind": "lost"})
        assert refused.code == 29 and "delayed, half, popped" in refused.remark
        code, out = await call(lambda args, node, out: pending("half", args, node, out), app,
                               "admin", "pending-half", "-n", namesrv(groups), "-b", "nope")
        assert (code, out.strip()) == (
            1, "error: broker nope: no such broker group in the cluster info")
