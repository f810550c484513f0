"""Push consumers against name servers and brokers: groups, rebalancing, offsets, order."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from contextlib import AsyncExitStack

import pytest
import trio
from client_cluster import Groups, open_groups, start_replicated_topic

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import NoRouteError
from triomq.client.core.listener import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageListenerConcurrently,
    MessageListenerOrderly,
)
from triomq.client.core.message import Message, MessageExt, MessageQueue
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer
from triomq.testing.cluster import open_cluster

FAST = {"rebalance_interval": 0.5, "persist_consumer_offset_interval": 0.2,
        "pull_delay_on_exception": 0.1,
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET}


class Recorder:
    """A listener that records what it consumed, by consumer."""

    def __init__(self) -> None:
        self.seen: dict[str, list[MessageExt]] = defaultdict(list)

    def concurrently(self, name: str) -> MessageListenerConcurrently:
        async def consume(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            self.seen[name].extend(messages)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        return MessageListenerConcurrently(consume)

    def bodies(self, name: str | None = None) -> list[bytes]:
        names = [name] if name else list(self.seen)
        return [m.body for n in names for m in self.seen[n]]


async def produce(groups: Groups, topic: str, count: int, prefix: str = "m") -> None:
    app = groups.cluster.node("app")
    async with Producer("pg", groups.namesrv).start(app.connect) as producer:
        for n in range(count):
            await producer.send(Message(topic, f"{prefix}{n}".encode(), tags=f"t{n % 2}"))


def consumer(groups: Groups, name: str, listener, topic: str = "orders", expression: str = "*",
             **options) -> PushConsumer:
    made = PushConsumer("cg", groups.namesrv, instance_name=name, **{**FAST, **options})
    made.subscribe(topic, expression)
    made.register_message_listener(listener)
    return made


def topic_queues(made: PushConsumer) -> set[MessageQueue]:
    """The queues of the subscribed topics ``made`` holds (not its group's retry topic)."""
    return {q for q in made.assignment if not q.topic.startswith("%RETRY%")}


async def settled(consumers: list[PushConsumer], queues: int) -> None:
    """Until the consumers hold every queue between them, each once."""
    with trio.fail_after(20):
        while True:
            held = [q for c in consumers for q in topic_queues(c)]
            if len(held) == len(set(held)) == queues and all(topic_queues(c)
                                                              for c in consumers):
                return
            await trio.sleep(0.02)


async def until(predicate, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def test_a_group_of_two_splits_the_queues_and_consumes_each_message(
        tmp_path, transport, clock) -> None:
    async with open_groups(tmp_path, transport, groups=2) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        await produce(groups, "orders", 10, "before")
        recorder = Recorder()
        one = consumer(groups, "one", recorder.concurrently("one"))
        two = consumer(groups, "two", recorder.concurrently("two"))
        async with one.start(app.connect), two.start(app.connect):
            await settled([one, two], 4)
            await produce(groups, "orders", 30, "after")
            await until(lambda: {f"after{n}".encode() for n in range(30)}
                        <= set(recorder.bodies()))
            # Each consumer got only the queues it held, and both got some.
            for name, mine in (("one", one), ("two", two)):
                after = [m for m in recorder.seen[name] if m.body.startswith(b"after")]
                assert after and {m.message_queue for m in after} <= mine.assignment
        # From the first offset: what was sent before the group existed too.
        assert {f"before{n}".encode() for n in range(10)} <= set(recorder.bodies())
        assert all(m.msg_id and m.store_timestamp and m.broker_name
                   for ms in recorder.seen.values() for m in ms)


async def test_a_tag_expression_filters(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        await produce(groups, "orders", 10)
        recorder = Recorder()
        only = consumer(groups, "one", recorder.concurrently("one"), expression="t1 || t7")
        async with only.start(app.connect):
            await until(lambda: len(recorder.bodies()) >= 5)
            await trio.sleep(0.3)
        assert sorted(recorder.bodies()) == sorted(f"m{n}".encode() for n in range(1, 10, 2))
        assert {m.tags for m in recorder.seen["one"]} == {"t1"}


async def test_rebalancing_when_a_consumer_joins_and_leaves(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=4)
        app = await groups.client()
        recorder = Recorder()
        # No periodic rebalance within the test: only the broker's notices move queues.
        notified = {"rebalance_interval": 3600}
        one = consumer(groups, "one", recorder.concurrently("one"), **notified)
        async with one.start(app.connect):
            await settled([one], 4)
            two = consumer(groups, "two", recorder.concurrently("two"), **notified)
            async with two.start(app.connect):
                # The broker tells "one" the group changed: it lets two queues go.
                await settled([one, two], 4)
                assert len(topic_queues(one)) == len(topic_queues(two)) == 2
            await settled([one], 4)
            await produce(groups, "orders", 8)
            await until(lambda: len(recorder.bodies("one")) >= 8)


async def test_offsets_are_committed_and_resumed_after_a_restart(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        await produce(groups, "orders", 10, "first")
        recorder = Recorder()
        async with consumer(groups, "one", recorder.concurrently("one")).start(app.connect):
            await until(lambda: len(recorder.bodies()) >= 10)
        await produce(groups, "orders", 5, "second")
        again = Recorder()
        async with consumer(groups, "one", again.concurrently("one")).start(app.connect):
            await until(lambda: len(again.bodies()) >= 5)
            await trio.sleep(0.3)
        # The restarted consumer starts where the first one stopped: nothing twice.
        assert sorted(again.bodies()) == sorted(f"second{n}".encode() for n in range(5))


async def test_reconsume_later_delivers_again_with_the_count_one_higher(
        tmp_path, autojump_clock) -> None:
    # Short delay levels: each retry waits out its level in SCHEDULE_TOPIC_XXXX.
    levels = " ".join(f"{10 * level}ms" for level in range(1, 19))
    async with open_groups(tmp_path, message_delay_level=levels) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        await produce(groups, "orders", 3)
        attempts: list[tuple[bytes, int]] = []

        async def flaky(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            attempts.extend((m.body, m.reconsume_times) for m in messages)
            if messages[0].body == b"m1" and messages[0].reconsume_times < 2:
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        made = consumer(groups, "one", MessageListenerConcurrently(flaky),
                        reconsume_later_delay=0.05)
        async with made.start(app.connect):
            await until(lambda: (b"m1", 2) in attempts)
            queue = MessageQueue("orders", "broker-a", 0)
            await until(lambda: made.offsets.read(queue) == 3)
        assert [t for t in attempts if t[0] == b"m1"] == [(b"m1", 0), (b"m1", 1), (b"m1", 2)]


async def test_orderly_consumption_keeps_queue_order_across_a_restart(
        tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        seen: list[MessageExt] = []
        busy: set[int] = set()

        async def in_order(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
            queue_id = messages[0].queue_id
            assert queue_id not in busy, "two calls at once for one queue"
            busy.add(queue_id)
            await trio.sleep(0.001)
            busy.discard(queue_id)
            if messages[0].body == b"k0-3" and messages[0].reconsume_times == 0:
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            seen.extend(messages)
            return ConsumeOrderlyStatus.SUCCESS

        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            for n in range(20):
                queue = MessageQueue("orders", "broker-a", n % 2)
                await producer.send(Message("orders", f"k{n % 2}-{n // 2}".encode()), queue)
        orderly = dict(suspend_current_queue_time=0.05)
        async with consumer(groups, "one", MessageListenerOrderly(in_order),
                            **orderly).start(app.connect):
            await until(lambda: len(seen) >= 12)
        async with consumer(groups, "one", MessageListenerOrderly(in_order),
                            **orderly).start(app.connect):
            await until(lambda: {m.body for m in seen} >= {
                f"k{q}-{i}".encode() for q in (0, 1) for i in range(10)})
        for queue_id in (0, 1):
            offsets = [m.queue_offset for m in seen if m.queue_id == queue_id]
            # In order; one restart may deliver the message being consumed again, never skip.
            assert offsets == sorted(offsets) and set(offsets) == set(range(10))


async def test_two_orderly_consumers_never_share_a_queue(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=4)
        app = await groups.client()
        recorder: dict[str, list[MessageExt]] = defaultdict(list)

        def listener(name: str) -> MessageListenerOrderly:
            async def consume(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
                recorder[name].extend(messages)
                return ConsumeOrderlyStatus.SUCCESS
            return MessageListenerOrderly(consume)

        async with AsyncExitStack() as stack:
            made = [consumer(groups, n, listener(n)) for n in ("one", "two")]
            for c in made:
                await stack.enter_async_context(c.start(app.connect))
            await settled(made, 4)
            await produce(groups, "orders", 20)
            await until(lambda: sum(len(v) for v in recorder.values()) >= 20)
        queues = [{m.queue_id for m in recorder[n]} for n in ("one", "two")]
        assert not queues[0] & queues[1]


async def test_a_batch_is_stored_and_consumed_message_by_message(tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            result = await producer.send_batch(
                [Message("orders", f"b{n}".encode(), tags="batch", keys=f"k{n}")
                 for n in range(3)])
        ids = result.msg_id.split(",")
        assert len(ids) == 3 and len(result.offset_msg_id.split(",")) == 3
        assert result.queue_offset == 0
        recorder = Recorder()
        async with consumer(groups, "one", recorder.concurrently("one")).start(app.connect):
            await until(lambda: len(recorder.bodies()) >= 3)
        got = sorted(recorder.seen["one"], key=lambda m: m.queue_offset)
        assert [(m.body, m.msg_id, m.keys, m.tags) for m in got] == [
            (f"b{n}".encode(), ids[n], (f"k{n}",), "batch") for n in range(3)]


async def test_where_a_new_group_starts(tmp_path) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        await produce(groups, "orders", 3, "old")
        # The messages stored before are older than the timestamp.
        await trio.sleep(0.05)
        since = time.time_ns() // 1_000_000
        await trio.sleep(0.05)
        await produce(groups, "orders", 2, "new")
        got: dict[str, Recorder] = {}
        for name, where in (("last", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
                            ("stamp", ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)):
            got[name] = Recorder()
            made = PushConsumer(f"cg-{name}", groups.namesrv, **{
                **FAST, "consume_from_where": where, "consume_timestamp_ms": since})
            made.subscribe("orders")
            made.register_message_listener(got[name].concurrently(name))
            async with made.start(app.connect):
                queue = MessageQueue("orders", "broker-a", 0)
                await until(lambda made=made, queue=queue: queue in made.states
                            and made.states[queue].next_offset >= 0)
                await produce(groups, "orders", 1, f"{name}-live")
                await until(lambda name=name: f"{name}-live0".encode()
                            in got[name].bodies())
                await trio.sleep(0.2)
        # From the timestamp: only what was stored after it.
        assert sorted(got["stamp"].bodies()) == [
            b"last-live0", b"new0", b"new1", b"stamp-live0"]
        # From the last offset, a brand-new group on a queue that never lost a message
        # starts at 0 (the broker's answer, as RocketMQ's), so it misses nothing.
        assert b"old0" in got["last"].bodies()


async def test_a_group_started_before_its_topic_exists_consumes_once_it_is_created(
        tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        app = await groups.client()
        recorder = Recorder()
        early = consumer(groups, "early", recorder.concurrently("early"), topic="later")
        async with early.start(app.connect):
            await trio.sleep(1)  # its start found no route
            start = trio.current_time()
            await groups.create_topic("later", queues=2)
            await produce(groups, "later", 4)
            await until(lambda: len(recorder.bodies()) == 4)
            # The brokers learn the client as soon as it finds the route, not at its
            # next periodic heartbeat (heartbeat_broker_interval, 30 s).
            assert trio.current_time() - start < early.heartbeat_broker_interval


async def test_a_running_group_reads_again_from_where_an_admin_reset_its_offsets(
        tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        await produce(groups, "orders", 6)
        recorder = Recorder()
        one = consumer(groups, "one", recorder.concurrently("one"))
        async with one.start(app.connect):
            await until(lambda: len(recorder.bodies()) == 6)
            # As mqadmin resetOffsetByTime -s 0 asks the group's broker.
            answer = await app.rpc.invoke(groups.cluster.node("a").address, 222, {
                "group": "cg", "topic": "orders", "timestamp": "0", "isForce": "true",
                "queueId": "-1", "offset": "-1"})
            assert answer.code == 0, answer.remark
            await until(lambda: len(recorder.bodies()) == 12)
        assert sorted(recorder.bodies()) == sorted([f"m{n}".encode() for n in range(6)] * 2)


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_a_consumer_pulls_from_the_new_master_as_soon_as_it_is_routed(
        tmp_path, transport) -> None:
    """The group's master is killed. The consumer's route poll and its pause after a
    failed pull are an hour (a rebalance, which fetches routes too, wakes no paused
    pull): it reaches the new master only by fetching the route itself while its pulls
    fail, and pulls the first message stored there from the offsets it had."""
    async with open_cluster(tmp_path, transport=transport, namesrvs=1) as cluster:
        app, master = await start_replicated_topic(cluster, "orders", app="app")
        namesrv = list(cluster.namesrv_addresses.values())
        seen: list[MessageExt] = []

        async def listen(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            seen.extend(messages)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        hour = 3600.0
        member = PushConsumer("cg", namesrv, poll_name_server_interval=hour,
                              pull_delay_on_exception=hour, rebalance_interval=1.0,
                              consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        member.subscribe("orders", "*")
        member.register_message_listener(MessageListenerConcurrently(listen))
        producer = Producer("pg", namesrv)
        async with producer.start(app.connect):
            with trio.fail_after(20):  # until the master has registered the topic
                while True:
                    with contextlib.suppress(NoRouteError):
                        await producer.send(Message("orders", b"before"))
                        break
                    await trio.sleep(0.05)
            async with member.start(app.connect):
                await until(lambda: seen)
                epoch = cluster.broker(master).replicas.master_epoch
                await cluster.kill(master)
                new_master = await cluster.wait_master(epoch_above=epoch)
                stored = [await producer.send(Message("orders", f"after {n}".encode()))
                          for n in range(4)]
                assert {r.message_queue.broker_name for r in stored} == {"broker-a"}
                await until(lambda: {m.msg_id for m in seen} >= {r.msg_id for r in stored})
        assert [m.body for m in seen].count(b"before") == 1  # resumed at the offsets it had
        address = cluster.node(new_master).address.removeprefix("tcp://")
        assert all(f"{m.store_host[0]}:{m.store_host[1]}" == address
                   for m in seen if m.body.startswith(b"after")) or transport == "inproc"
