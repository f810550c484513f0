"""Lite pull consumers: assign and poll, subscribe in a group, commits auto and by hand."""

from __future__ import annotations

import trio
from client_cluster import Groups, open_groups

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import NoRouteError
from triomq.client.core.message import Message, MessageExt, MessageQueue
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.client.producer import Producer

FAST = {"rebalance_interval": 0.5, "pull_delay_on_exception": 0.1,
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET}


async def produce(groups: Groups, count: int, prefix: str = "m",
                  queue: MessageQueue | None = None) -> None:
    app = groups.cluster.node("app")
    async with Producer("pg", groups.namesrv).start(app.connect) as producer:
        for n in range(count):
            await producer.send(Message("orders", f"{prefix}{n}".encode()), queue)


async def poll_until(consumer: LitePullConsumer, count: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    with trio.fail_after(20):
        while len(got) < count:
            got += await consumer.poll(timeout=0.5)
    return got


async def test_assign_then_poll_each_queue_in_order(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path, groups=2) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        await produce(groups, 12)
        consumer = LitePullConsumer("lite", groups.namesrv, **FAST)
        async with consumer.start(app.connect):
            queues = await consumer.fetch_message_queues("orders")
            assert len(queues) == 4
            with_b = [q for q in queues if q.broker_name == "broker-b"]
            consumer.assign(with_b)
            got = await poll_until(consumer, 6)
            assert {m.message_queue for m in got} == set(with_b)
            for queue in with_b:
                offsets = [m.queue_offset for m in got if m.message_queue == queue]
                assert offsets == list(range(len(offsets)))
            assert await consumer.poll(timeout=0.2) == []
            # A seek pulls again from there.
            await consumer.seek(with_b[0], 1)
            again = await poll_until(consumer, 2)
            assert [m.queue_offset for m in again] == [1, 2]
            try:
                await consumer.fetch_message_queues("nowhere")
                raise AssertionError("no route expected")
            except NoRouteError:
                pass


async def test_commit_sync_and_a_restart_without_auto_commit(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        queue = MessageQueue("orders", "broker-a", 0)
        await produce(groups, 6, queue=queue)
        consumer = LitePullConsumer("lite", groups.namesrv, auto_commit=False,
                                    pull_batch_size=2, **FAST)
        consumer.assign([queue])
        async with consumer.start(app.connect):
            first = await poll_until(consumer, 2)
            await consumer.commit_sync()
            assert consumer.committed(queue) == first[-1].queue_offset + 1
            await poll_until(consumer, 2)  # polled, never committed
        restarted = LitePullConsumer("lite", groups.namesrv, auto_commit=False, **FAST)
        restarted.assign([queue])
        async with restarted.start(app.connect):
            rest = await poll_until(restarted, 6 - len(first))
        assert [m.queue_offset for m in rest] == list(range(len(first), 6))


async def test_a_subscribed_group_of_two_splits_the_queues_with_auto_commit(
        tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=4)
        app = await groups.client()
        await produce(groups, 20)
        one = LitePullConsumer("lite", groups.namesrv, instance_name="one",
                               auto_commit_interval=0.1, **FAST)
        two = LitePullConsumer("lite", groups.namesrv, instance_name="two",
                               auto_commit_interval=0.1, **FAST)
        one.subscribe("orders")
        two.subscribe("orders")
        async with one.start(app.connect), two.start(app.connect):
            with trio.fail_after(20):
                while not (len(one.assignment) == len(two.assignment) == 2):
                    await trio.sleep(0.02)
            got: dict[str, list[MessageExt]] = {"one": [], "two": []}

            async def drain(name: str, consumer: LitePullConsumer) -> None:
                while True:
                    got[name] += await consumer.poll(timeout=0.2)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, "one", one)
                nursery.start_soon(drain, "two", two)
                with trio.fail_after(20):
                    while len({m.body for ms in got.values() for m in ms}) < 20:
                        await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
            assert got["one"] and got["two"]
            assert {m.message_queue for m in got["one"]} <= one.assignment
            # Auto commit stores what was polled.
            with trio.fail_after(20):
                while sum(one.committed(q) or 0 for q in one.assignment) + sum(
                        two.committed(q) or 0 for q in two.assignment) < 20:
                    await trio.sleep(0.02)


async def test_the_offsets_of_a_closing_consumer_are_stored_while_its_pulls_wait(
        tmp_path, caplog) -> None:
    # Its pulls are parked on the brokers (long polling) when the block ends: the
    # commit on close must not share their fate.
    async with open_groups(tmp_path, groups=1) as groups:
        await groups.create_topic("orders", queues=4)
        app = await groups.client()
        await produce(groups, 3)
        consumer = LitePullConsumer("closing", groups.namesrv, **FAST)
        async with consumer.start(app.connect):
            consumer.assign(await consumer.fetch_message_queues("orders"))
            got = await poll_until(consumer, 3)
        assert "not stored" not in caplog.text
        reader = LitePullConsumer("closing", groups.namesrv, **FAST)
        async with reader.start(app.connect):
            await reader.fetch_message_queues("orders")
            for message in got:
                stored = await reader.offsets.fetch(message.message_queue)
                assert stored == message.queue_offset + 1
