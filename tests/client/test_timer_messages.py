"""Timer messages through ``triomq.client``, over inproc and TCP under trio's
``MockClock``: a producer's ``deliver_time_ms`` send reaches a consumer of its topic
once, from the timer wheel's ``rmq_sys_wheel_timer``, no earlier than its time and
within one tick after it (by the broker's clock); a time in the past is refused."""

from __future__ import annotations

import pytest
import trio
from client_cluster import open_groups

from triomq.broker.service import broker_of
from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import BrokerError
from triomq.client.core.message import Message, MessageExt, SendStatus
from triomq.client.lite_pull_consumer import LitePullConsumer
from triomq.client.producer import Producer

FAST = {"rebalance_interval": 0.5, "pull_delay_on_exception": 0.1,
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET}
#: A fine wheel: the test waits a few slots, not seconds.
WHEEL = {"timer_precision_ms": 100}


async def test_timer_sends_are_consumed_once_at_or_after_their_time(tmp_path, transport,
                                                                   autojump) -> None:
    async with open_groups(tmp_path, transport, broker=WHEEL) as groups:
        await groups.create_topic("orders", queues=2)
        app = await groups.client()
        broker = broker_of(groups.cluster.node("a"))
        # The broker's clock: a client's (here the process's, under the mock clock) is
        # comparable with it.
        now = broker.clock()
        times = {b"now": now - 50, b"t1": now + 400, b"t2": now + 930, b"t3": now + 1300}
        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            results = {body: await producer.send(Message("orders", body, tags="t",
                                                         deliver_time_ms=at))
                       for body, at in times.items()}
            # Further in the past than the precision: refused, naming the property.
            with pytest.raises(BrokerError, match="TIMER_DELIVER_MS") as refused:
                await producer.send(Message("orders", b"past", deliver_time_ms=now - 5000))
            assert refused.value.code == 13  # MESSAGE_ILLEGAL
        assert all(r.send_status is SendStatus.SEND_OK for r in results.values())
        waiting = {r.body: r for r in broker.log.iter_records()
                   if r.topic == "rmq_sys_wheel_timer"}
        # A time already (just) past is no timer: stored at once in its topic.
        assert set(waiting) == {b"t1", b"t2", b"t3"}

        consumer = LitePullConsumer("timed", groups.namesrv, **FAST)
        consumer.subscribe("orders")
        got: list[MessageExt] = []
        async with consumer.start(app.connect):
            with trio.fail_after(30):
                while len(got) < len(times):
                    got += await consumer.poll(timeout=0.5)
            got += await consumer.poll(timeout=1.0)
        assert sorted(m.body for m in got) == sorted(times)
        for message in got:
            assert message.topic == "orders" and message.tags == "t"
            assert message.msg_id == results[message.body].msg_id
            assert message.properties["TIMER_DELIVER_MS"] == str(times[message.body])
            assert "REAL_TOPIC" not in message.properties
            if message.body in waiting:
                at = times[message.body]
                assert at <= message.store_timestamp <= at + WHEEL["timer_precision_ms"]
                assert "TIMER_OUT_MS" in message.properties


def test_a_delivery_time_is_sent_as_timer_deliver_ms() -> None:
    assert Message("t", b"x", deliver_time_ms=1_700_000_000_000).wire_properties() == {
        "TIMER_DELIVER_MS": "1700000000000"}
    assert "TIMER_DELIVER_MS" not in Message("t", b"x").wire_properties()
    with pytest.raises(ValueError, match="TIMER_DELIVER_MS"):
        Message("t", b"x", properties={"TIMER_DELIVER_MS": "1"})
