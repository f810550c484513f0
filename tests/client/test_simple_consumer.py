"""Simple consumers (pop consumption) through ``triomq.client``, over inproc and TCP under
trio's MockClock: what is not acked comes back after its invisible time, once per revive,
what is acked never does; a longer invisible time holds a message back; a stale ack is
refused."""

from __future__ import annotations

import trio
from client_cluster import open_groups

from triomq.client.core.errors import BrokerError
from triomq.client.core.message import Message
from triomq.client.producer import Producer
from triomq.client.simple_consumer import Received, SimpleConsumer

BROKER = {"revive_interval": 200}


async def receive_until(consumer: SimpleConsumer, count: int, **kwargs) -> list[Received]:
    got: list[Received] = []
    with trio.fail_after(60):
        while len(got) < count:
            got += await consumer.receive(**kwargs)
    return got


async def test_unacked_messages_come_back_acked_ones_never(tmp_path, transport, autojump) -> None:
    async with open_groups(tmp_path, transport, groups=2, broker=BROKER) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        consumer = SimpleConsumer("simple", groups.namesrv, invisible_duration=1.0,
                                  await_duration=0.5)
        consumer.subscribe("orders", "t")
        async with consumer.start(app.connect), Producer(
                "pg", groups.namesrv).start(app.connect) as producer:
            # A group's first pop of a queue starts at its end (RocketMQ's initMode MAX):
            # one pop per broker before the sends.
            assert await consumer.receive() == [] and await consumer.receive() == []
            for n in range(6):
                await producer.send(Message("orders", b"m%d" % n, tags="t"))
            popped_after = trio.current_time()
            first = await receive_until(consumer, 6)
            assert sorted(r.message.body for r in first) == [b"m%d" % n for n in range(6)]
            assert {r.message.broker_name for r in first} == {"broker-a", "broker-b"}
            keep = {b"m1", b"m4"}
            for received in first:
                if received.message.body not in keep:
                    await consumer.ack(received)
            again = await receive_until(consumer, 2)
            # Not before its invisible time (1 s from its pop) ran out: one clock for all.
            assert trio.current_time() >= popped_after + 1.0
            assert sorted(r.message.body for r in again) == sorted(keep)
            assert all(r.message.reconsume_times == 1 and r.message.topic == "orders"
                       for r in again)
            for received in again:
                await consumer.ack(received)
            # Acked everywhere: nothing comes back, however long it waits.
            for _ in range(4):
                assert await consumer.receive(await_duration=1.0) == []


async def test_a_longer_invisible_time_and_a_stale_ack(tmp_path, transport, autojump) -> None:
    async with open_groups(tmp_path, transport, broker=BROKER) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        consumer = SimpleConsumer("simple", groups.namesrv, invisible_duration=1.0,
                                  await_duration=0.5)
        consumer.subscribe("orders")
        async with consumer.start(app.connect), Producer(
                "pg", groups.namesrv).start(app.connect) as producer:
            assert await consumer.receive() == []
            await producer.send(Message("orders", b"slow"))
            await producer.send(Message("orders", b"late"))
            slow, late = sorted(await receive_until(consumer, 2), key=lambda r: r.message.body,
                                reverse=True)
            slow = await consumer.change_invisible_duration(slow, 30.0)
            # "late" is acked after its invisible time: refused, and it comes back.
            await trio.sleep(1.5)
            try:
                await consumer.ack(late)
            except BrokerError as exc:
                assert exc.code == 208 and "expired" in (exc.remark or "")
            else:
                raise AssertionError("a stale ack was taken")
            (back,) = await receive_until(consumer, 1)
            assert back.message.body == b"late"
            await consumer.ack(back)
            await consumer.ack(slow)
            assert await consumer.receive(await_duration=2.0) == []
