"""Retries through the broker: a push consumer's failed messages come back from its group's
retry topic, and go to its dead-letter topic after ``max_reconsume_times``.

The assertions say what comes back and with which properties, never when: a
broker that delays the retry copies (their ``DELAY`` level) delivers them later.
"""

from __future__ import annotations

import trio
from client_cluster import Groups, open_groups
from test_client_push_consumer import FAST, until

from triomq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MessageListenerConcurrently,
    MessageListenerOrderly,
    MessageQueue,
    Producer,
    PushConsumer,
    consume_concurrently_context,
)

#: The brokers' settings for every test here (the retry delays' levels belong here).
BROKER_SETTINGS: dict[str, object] = {
    "message_delay_level": " ".join(f"{10 * level}ms" for level in range(1, 19))}


def retry_groups(tmp_path, transport: str = "inproc"):
    return open_groups(tmp_path, transport, broker=BROKER_SETTINGS)


async def send(groups: Groups, *bodies: bytes) -> list[str]:
    """Send ``bodies`` to ``orders``; their offset message ids."""
    app = groups.cluster.node("app")
    async with Producer("pg", groups.namesrv).start(app.connect) as producer:
        return [(await producer.send(Message("orders", body, tags="t"))).offset_msg_id
                for body in bodies]


def consumer(groups: Groups, listener, **options) -> PushConsumer:
    made = PushConsumer("cg", groups.namesrv, instance_name="one", **{**FAST, **options})
    made.subscribe("orders")
    made.register_message_listener(listener)
    return made


class DeadLetters:
    """What group ``cg``'s dead-letter topic holds, read by a consumer of group ``dlq``."""

    def __init__(self, groups: Groups) -> None:
        self.messages: list[MessageExt] = []
        self.reader = PushConsumer("dlq", groups.namesrv, instance_name="dlq", **FAST)
        self.reader.subscribe("%DLQ%cg")

        async def keep(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            self.messages.extend(messages)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        self.reader.register_message_listener(MessageListenerConcurrently(keep))


async def test_a_message_failed_once_comes_back_under_its_topic(
        tmp_path, transport, autojump) -> None:
    async with retry_groups(tmp_path, transport) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        (first_id,) = await send(groups, b"paid")
        calls: list[MessageExt] = []

        async def fails_once(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            calls.extend(messages)
            if len(calls) == 1:
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        made = consumer(groups, MessageListenerConcurrently(fails_once))
        async with made.start(app.connect):
            await until(lambda: len(calls) >= 2, timeout=60)
            # The failed message went back to the broker: the queue moves past it.
            await until(lambda: made.offsets.read(MessageQueue("orders", "broker-a", 0)) == 1)
        first, again = calls[:2]
        assert (first.topic, first.reconsume_times, first.offset_msg_id) == (
            "orders", 0, first_id)
        assert (again.topic, again.body, again.reconsume_times, again.msg_id) == (
            "orders", b"paid", 1, first.msg_id)
        assert again.properties["RETRY_TOPIC"] == "orders"
        assert again.properties["ORIGIN_MESSAGE_ID"] == first_id
        assert again.tags == "t"
        assert again.commit_log_offset != first.commit_log_offset  # the retry topic's copy
        assert len(calls) == 2


async def test_a_message_failing_every_time_ends_in_the_dead_letter_queue(
        tmp_path, transport, autojump) -> None:
    async with retry_groups(tmp_path, transport) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        (first_id,) = await send(groups, b"poison")
        tries: list[int] = []

        async def always_fails(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            tries.extend(m.reconsume_times for m in messages)
            raise RuntimeError("cannot handle it")

        dead = DeadLetters(groups)
        made = consumer(groups, MessageListenerConcurrently(always_fails),
                        max_reconsume_times=2)
        async with made.start(app.connect), dead.reader.start(app.connect):
            await until(lambda: dead.messages, timeout=60)
        assert tries == [0, 1, 2]
        (letter,) = dead.messages
        assert (letter.topic, letter.body, letter.reconsume_times) == ("%DLQ%cg", b"poison", 3)
        assert letter.properties["ORIGIN_MESSAGE_ID"] == first_id
        assert letter.properties["RETRY_TOPIC"] == "orders"


async def test_the_default_maximum_is_16_retries(tmp_path, autojump_clock) -> None:
    async with retry_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        (first_id,) = await send(groups, b"poison")
        tries: list[int] = []

        async def always_fails(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            tries.extend(m.reconsume_times for m in messages)
            return ConsumeConcurrentlyStatus.RECONSUME_LATER

        dead = DeadLetters(groups)
        made = consumer(groups, MessageListenerConcurrently(always_fails))
        async with made.start(app.connect), dead.reader.start(app.connect):
            # Levels 3 to 18 (4.8 h in all) on a broker that delays: mock time runs ahead.
            await until(lambda: dead.messages, timeout=30_000)
        assert tries == list(range(17))
        (letter,) = dead.messages
        assert (letter.reconsume_times, letter.properties["ORIGIN_MESSAGE_ID"]) == (
            17, first_id)


async def test_a_listener_sends_a_message_to_the_dead_letter_queue_at_once(
        tmp_path, autojump_clock) -> None:
    async with retry_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        await send(groups, b"hopeless")
        tries: list[int] = []

        async def gives_up(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            tries.extend(m.reconsume_times for m in messages)
            consume_concurrently_context().delay_level_when_next_consume = -1
            return ConsumeConcurrentlyStatus.RECONSUME_LATER

        dead = DeadLetters(groups)
        made = consumer(groups, MessageListenerConcurrently(gives_up))
        async with made.start(app.connect), dead.reader.start(app.connect):
            await until(lambda: dead.messages)
        assert tries == [0]
        assert [m.body for m in dead.messages] == [b"hopeless"]


async def test_an_orderly_consumer_retries_in_place_then_sends_to_the_dead_letter_queue(
        tmp_path, autojump_clock) -> None:
    async with retry_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        await send(groups, b"poison", b"next")
        calls: list[tuple[bytes, int]] = []

        async def in_order(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
            calls.extend((m.body, m.reconsume_times) for m in messages)
            if messages[0].body == b"poison":
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS

        dead = DeadLetters(groups)
        made = consumer(groups, MessageListenerOrderly(in_order), max_reconsume_times=2,
                        suspend_current_queue_time=0.05)
        async with made.start(app.connect), dead.reader.start(app.connect):
            await until(lambda: dead.messages and (b"next", 0) in calls)
            await until(lambda: made.offsets.read(MessageQueue("orders", "broker-a", 0)) == 2)
        assert calls == [(b"poison", 0), (b"poison", 1), (b"poison", 2), (b"next", 0)]
        assert [m.body for m in dead.messages] == [b"poison"]
        assert dead.messages[0].properties["RETRY_TOPIC"] == "orders"


async def test_a_message_the_broker_does_not_take_back_is_retried_here(
        tmp_path, autojump_clock) -> None:
    async with retry_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        # A read-only retry topic: the broker refuses the send-back (NO_PERMISSION).
        admin = groups.cluster.node("admin")
        answer = await admin.rpc.invoke(groups.cluster.node("a").address, 17, {
            "topic": "%RETRY%cg", "readQueueNums": "1", "writeQueueNums": "1", "perm": "4"})
        assert answer.code == 0, answer.remark
        await send(groups, b"paid")
        calls: list[MessageExt] = []

        async def fails_once(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            calls.extend(messages)
            return (ConsumeConcurrentlyStatus.RECONSUME_LATER if len(calls) == 1
                    else ConsumeConcurrentlyStatus.CONSUME_SUCCESS)

        made = consumer(groups, MessageListenerConcurrently(fails_once),
                        reconsume_later_delay=0.05)
        async with made.start(app.connect):
            await until(lambda: len(calls) >= 2)
            await until(lambda: made.offsets.read(MessageQueue("orders", "broker-a", 0)) == 1)
        # Called again here, the same record, its count one higher.
        assert [(m.topic, m.commit_log_offset, m.reconsume_times) for m in calls] == [
            ("orders", calls[0].commit_log_offset, 0), ("orders", calls[0].commit_log_offset, 1)]


async def test_a_call_past_consume_timeout_is_sent_back(tmp_path, autojump_clock) -> None:
    async with retry_groups(tmp_path) as groups:
        await groups.create_topic("orders", queues=1)
        app = await groups.client()
        await send(groups, b"slow")
        calls: list[MessageExt] = []

        async def stuck_once(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            calls.extend(messages)
            if len(calls) == 1:
                await trio.sleep_forever()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        # consume_timeout is in minutes, as RocketMQ's: 0.5 s.
        made = consumer(groups, MessageListenerConcurrently(stuck_once),
                        consume_timeout=0.5 / 60)
        async with made.start(app.connect):
            await until(lambda: len(calls) >= 2, timeout=60)
        assert [(m.topic, m.reconsume_times) for m in calls] == [("orders", 0), ("orders", 1)]
