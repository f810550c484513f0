"""Delayed messages through ``triomq.client``, over inproc and TCP under trio's
``MockClock``: a producer's ``delay_time_level`` send reaches a consumer of its topic
once, without ``DELAY``, no earlier than its level and within one scan interval after it
(by the broker's clock, its store times')."""

from __future__ import annotations

import trio
from client_cluster import open_groups

from triomq.broker.secondary.core.schedule import SCAN_INTERVAL_MS
from triomq.broker.service import broker_of
from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.message import Message, MessageExt, SendStatus
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.client.producer import Producer
from triomq.protocol.delay_levels import SCHEDULE_TOPIC

LEVELS = {"message_delay_level": "300ms 700ms 1s"}
FAST = {"rebalance_interval": 0.5, "pull_delay_on_exception": 0.1,
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET}


async def test_delayed_sends_are_consumed_once_after_their_levels(tmp_path, transport,
                                                                  autojump) -> None:
    async with open_groups(tmp_path, transport, broker=LEVELS) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        levels = {b"now": 0, b"l1": 1, b"l2": 2, b"l3": 3, b"l9": 9}
        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            results = {body: await producer.send(Message("orders", body, tags="t",
                                                         delay_time_level=level))
                       for body, level in levels.items()}
        assert all(r.send_status is SendStatus.SEND_OK for r in results.values())
        log = broker_of(groups.cluster.node("a")).log
        # Each delayed one waits in its level's queue (a level past the last: the last).
        waiting = {r.body: r for r in log.iter_records() if r.topic == SCHEDULE_TOPIC}
        assert {body: r.queue_id for body, r in waiting.items()} == {
            b"l1": 0, b"l2": 1, b"l3": 2, b"l9": 2}

        consumer = LitePullConsumer("delayed", groups.namesrv, **FAST)
        consumer.subscribe("orders")
        got: list[MessageExt] = []
        async with consumer.start(app.connect):
            with trio.fail_after(30):
                while len(got) < len(levels):
                    got += await consumer.poll(timeout=0.5)
            # Nothing more comes: each was delivered once.
            got += await consumer.poll(timeout=1.0)
        assert sorted(m.body for m in got) == sorted(levels)
        delays = [300, 700, 1000]
        for message in got:
            assert "DELAY" not in message.properties
            assert message.topic == "orders" and message.tags == "t"
            assert message.msg_id == results[message.body].msg_id
            if message.body in waiting:
                level = min(levels[message.body], 3)
                due = waiting[message.body].store_timestamp + delays[level - 1]
                assert due <= message.store_timestamp <= due + SCAN_INTERVAL_MS
