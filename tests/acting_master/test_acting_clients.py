"""``triomq.client`` through an acting master's route rewrite: with broker-a's master gone,
the producer sends to broker-b only (broker-a's queues are read-only), the push consumer
reads broker-a's messages from the acting slave (routed as id 0) and commits its offsets
there; with the master back (through pre-online) it goes on from those offsets, nothing
consumed twice or skipped. Over the in-process transport and TCP."""

from __future__ import annotations

from collections import Counter

import pytest
import trio
from acting_nodes import create_topic, open_static_groups, route, wait_for

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.listener import ConsumeConcurrentlyStatus, MessageListenerConcurrently
from triomq.client.core.message import Message, MessageExt
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer

FAST = {"rebalance_interval": 0.2, "persist_consumer_offset_interval": 0.1,
        "pull_delay_on_exception": 0.1,
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET}


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_producer_and_push_consumer_follow_the_acting_route(tmp_path, transport):
    async with open_static_groups(tmp_path, ("a0", "a1", "b0"), transport=transport,
                                  consumer_offset_update_version_step=1) as (cluster, groups):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        for name in ("a0", "b0"):
            await create_topic(client, cluster.node(name).address, "orders")

        async def both_routed() -> bool:
            return len((await route(client, namesrv, "orders"))["brokerDatas"]) == 2
        await wait_for(both_routed)
        slave = cluster.broker("a1")
        app = cluster.node("client")
        sent: Counter[bytes] = Counter()
        on_a = 0  # of the messages sent before the kill
        async with Producer("pg", [namesrv]).start(app.connect) as producer:
            for n in range(20):
                result = await producer.send(Message("orders", b"before-%d" % n))
                sent[b"before-%d" % n] += 1
                on_a += result.message_queue.broker_name == "broker-a"
            assert on_a
            # The slave holds what its master confirmed and the topic's config (copied
            # every slave_synchronize_period: an offset commit for a topic it does not know
            # is TOPIC_NOT_EXIST, as on RocketMQ's).
            await cluster.wait_for(lambda: slave.replicas.confirm_offset
                                   == cluster.broker("a0").log.max_offset
                                   and "orders" in slave.topics.table)
            await cluster.kill("a0")
            await cluster.wait_for(lambda: slave.acting, timeout=20)

            async def rewritten() -> bool:
                data = await route(client, namesrv, "orders")
                perms = {q["brokerName"]: q["perm"] for q in data["queueDatas"]}
                addrs = {b["brokerName"]: b["brokerAddrs"] for b in data["brokerDatas"]}
                return perms.get("broker-a") == 4 and addrs["broker-a"].get("0") == (
                    groups.location("a1"))
            await wait_for(rewritten)
            # Sends skip the read-only group.
            for n in range(20):
                result = await producer.send(Message("orders", b"during-%d" % n))
                assert result.message_queue.broker_name == "broker-b"
                sent[b"during-%d" % n] += 1

        seen: Counter[bytes] = Counter()

        async def consume(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            seen.update(m.body for m in messages)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer("cg", [namesrv], instance_name="c1", **FAST)
        consumer.subscribe("orders", "*")
        consumer.register_message_listener(MessageListenerConcurrently(consume))
        async with consumer.start(app.connect):
            with trio.fail_after(30):
                while seen != sent:
                    await trio.sleep(0.05)
            # Its offsets of broker-a's queues are on the acting slave.
            await cluster.wait_for(lambda: sum(
                slave.offsets.table.query("cg", "orders", q) or 0 for q in range(2)) == on_a,
                timeout=20)

            await groups.start("a0")
            master = cluster.broker("a0")
            await cluster.wait_for(lambda: not slave.acting and not master.isolated, timeout=30)
            async with Producer("pg", [namesrv]).start(app.connect) as producer:
                for n in range(10):
                    await producer.send(Message("orders", b"after-%d" % n))
                    sent[b"after-%d" % n] += 1
            with trio.fail_after(30):
                while seen != sent:
                    await trio.sleep(0.05)
            # Nothing consumed twice: the master took the acting slave's offsets back.
            assert max(seen.values()) == 1

