"""RocketMQ's own Java client, run unchanged against a triomq cluster.

``DefaultMQProducer``, ``DefaultMQPushConsumer`` and ``DefaultLitePullConsumer``
of RocketMQ 5.3.3 (and, for the sends and the push consumer, 4.9.8) run as
JVMs against a name server, three controllers and a group of three replicas in
controller mode over TCP (see ``java_client.py``); what they print is held
against what was sent, and against what triomq's own client and the brokers
see.

Skipped, with the reason, without ``java`` or ``mvn`` on PATH or where Maven
could not fetch the jars; with both but the module not built (``make
rocketmq-java``, which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from triomq.client import ConsumeFromWhere, LitePullConsumer, Message, MessageExt, Producer
from triomq.runtime import Node
from triomq.testing.cluster import BROKER_NAME, Cluster, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from java_client import (
    QUEUES,
    TOPIC,
    WAIT,
    JavaClient,
    consumer_offsets,
    create_topic,
    require_build,
    unavailable,
)

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

UNIQ_ID = re.compile("[0-9A-F]{32}|[0-9A-F]{56}")
OFFSET_ID = re.compile("7F000001[0-9A-F]{24}")
ALL_QUEUES = {(BROKER_NAME, n) for n in range(QUEUES)}


class JavaCluster:
    """The cluster, its master's address and a triomq client node beside the Java client."""

    def __init__(self, cluster: Cluster, master: str, app: Node) -> None:
        self.cluster = cluster
        self.master = master
        self.app = app

    @property
    def master_address(self) -> str:
        return self.cluster.node(self.master).address

    @property
    def namesrv(self) -> list[str]:
        return list(self.cluster.namesrv_addresses.values())

    def java(self, profile: str = "rocketmq-5") -> JavaClient:
        require_build(profile)
        return JavaClient(self.cluster, profile)

    async def send(self, count: int, *, prefix: str = "m") -> list[Any]:
        """``count`` messages sent by triomq's producer, tags TagA/TagB/TagC in turn."""
        async with Producer("triomq-producer", self.namesrv).start(self.app.connect) as producer:
            return [await producer.send(Message(
                TOPIC, f"{prefix} {i}".encode(), tags=f"Tag{'ABC'[i % 3]}", keys=f"{prefix}-{i}",
                properties={"scenario": prefix, "seq": str(i)})) for i in range(count)]

    async def read_all(self, count: int) -> list[MessageExt]:
        """The topic from its first offset through triomq's lite pull consumer."""
        reader = LitePullConsumer("triomq-reader", self.namesrv,
                                  consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        reader.subscribe(TOPIC, "*")
        got: list[MessageExt] = []
        async with reader.start(self.app.connect):
            with trio.fail_after(WAIT):
                while len(got) < count:
                    got += await reader.poll(timeout=1)
        return got


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[JavaCluster]:
    async with open_cluster(tmp_path, transport="tcp", namesrvs=1,
                            broker={"all_ack_in_sync_state_set": True}) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master(timeout=60)
        app = await cluster.start("app")
        (namesrv,) = cluster.namesrv_addresses.values()
        await create_topic(app, cluster.node(master).address, namesrv)
        yield JavaCluster(cluster, master, app)


def stored(message: MessageExt) -> tuple[Any, ...]:
    """What triomq's consumer read of a message, as the Java scenarios print it."""
    return (message.msg_id, message.body.decode(), message.tags, " ".join(message.keys),
            message.queue_id, message.queue_offset,
            {k: message.properties[k] for k in ("scenario", "seq", "orderKey")
             if k in message.properties})


def printed(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["msgId"], line["body"], line["tags"], line["keys"], line["queueId"],
            line["queueOffset"], line["properties"])


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_every_kind_of_send_is_stored_as_sent(cluster: JavaCluster, profile: str) -> None:
    count = 6
    lines = await cluster.java(profile).run("send", group="java-producer", count=count,
                                            modes="sync,async,oneway,batch,ordered")
    results = {(line["mode"], line["i"]): line for line in lines}
    assert set(results) == {(mode, i) for mode in ("sync", "async", "oneway", "ordered")
                            for i in range(count)} | {("batch", 0)}
    master = cluster.master_address.removeprefix("tcp://")
    answered = [line for line in lines if "sendStatus" in line]
    assert all(line["sendStatus"] == "SEND_OK" and line["brokerName"] == BROKER_NAME
               and line["storeHost"] == master for line in answered)
    (batch,) = (line for line in lines if line["mode"] == "batch")
    assert len(batch["msgIds"]) == len(batch["offsetMsgIds"]) == count
    # The client's own ids (their length is that of its host's address) and the broker's.
    assert all(UNIQ_ID.fullmatch(i) for line in answered
               for i in line.get("msgIds", [line["msgId"]]))
    assert all(OFFSET_ID.fullmatch(i) for line in answered
               for i in line.get("offsetMsgIds", [line["offsetMsgId"]]))

    got = {m.properties["scenario"] + " " + m.properties["seq"]: m
           for m in await cluster.read_all(5 * count)}
    assert len(got) == 5 * count
    for (mode, i), line in results.items():
        for n in range(count) if mode == "batch" else [i]:
            message = got[f"{mode} {n}"]
            assert (message.body.decode(), message.tags, message.keys) \
                == (f"{mode} {n}", f"Tag{'ABC'[n % 3]}", (f"key-{mode}-{n}",))
            if mode == "batch":  # one queue, one offset after another, ids in order
                assert (message.queue_id, message.queue_offset, message.msg_id,
                        message.offset_msg_id) == (line["queueId"], line["queueOffset"] + n,
                                                   line["msgIds"][n], line["offsetMsgIds"][n])
            elif mode != "oneway":
                assert (message.queue_id, message.queue_offset, message.msg_id,
                        message.offset_msg_id) == (line["queueId"], line["queueOffset"],
                                                   line["msgId"], line["offsetMsgId"])
    # Ordered: each order key's messages in one queue, in the order sent.
    for key in (0, 1):
        mine = sorted((m for m in got.values() if m.properties.get("orderKey") == str(key)),
                      key=lambda m: m.queue_offset)
        assert len({m.queue_id for m in mine}) == 1
        assert [int(m.properties["seq"]) for m in mine] == list(range(key, count, 2))


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_a_push_consumer_gets_every_message_once_and_stores_its_offsets(
        cluster: JavaCluster, profile: str) -> None:
    sent = await cluster.send(12)
    async with cluster.java(profile).running("push", group="java-push",
                                             mode="concurrent") as consumer:
        await consumer.receive(12)
    got = consumer.messages
    assert sorted(map(printed, got)) == sorted(
        (r.msg_id, f"m {i}", f"Tag{'ABC'[i % 3]}", f"m-{i}", r.message_queue.queue_id,
         r.queue_offset, {"scenario": "m", "seq": str(i)}) for i, r in enumerate(sent))
    master = cluster.master_address.removeprefix("tcp://")
    assert all(m["storeHost"].endswith(master) and m["reconsumeTimes"] == 0
               and 0 < m["bornTimestamp"] <= m["storeTimestamp"] for m in got)
    assert {r.offset_msg_id for r in sent} == {m["offsetMsgId"] for m in got}
    # It stored its offsets on the master as it shut down.
    ends = Counter(r.message_queue.queue_id for r in sent)
    assert await consumer_offsets(cluster.app, cluster.master_address, "java-push") \
        == {q: ends[q] for q in range(QUEUES)}


async def test_an_orderly_consumer_locks_its_queues_and_keeps_queue_order(
        cluster: JavaCluster) -> None:
    java = cluster.java()
    sent = await java.run("send", group="java-producer", count=18, modes="ordered")
    async with java.running("push", group="java-orderly", mode="orderly",
                            expression="TagA || TagB") as consumer:
        await consumer.receive(12)
        await consumer.until(lambda: len(consumer.queues) == QUEUES
                             and all(consumer.queues.values()))
    wanted = [s for s in sent if s["i"] % 3 != 2]
    assert sorted((m["msgId"], m["queueId"], m["queueOffset"]) for m in consumer.messages) \
        == sorted((s["msgId"], s["queueId"], s["queueOffset"]) for s in wanted)
    by_queue: dict[int, list[int]] = defaultdict(list)
    for m in consumer.messages:
        by_queue[m["queueId"]].append(m["queueOffset"])
    assert all(offsets == sorted(offsets) for offsets in by_queue.values())


async def test_two_consumer_processes_share_the_queues(cluster: JavaCluster) -> None:
    java = cluster.java()
    async with java.running("push", group="java-shared", mode="concurrent") as first:
        await first.until(lambda: set(first.queues) == ALL_QUEUES)
        async with java.running("push", group="java-shared", mode="concurrent") as second:
            await second.until(lambda: len(second.queues) == QUEUES // 2)
            await first.until(lambda: set(first.queues) == ALL_QUEUES - set(second.queues))
            sent = await cluster.send(40)
            mine = {c: [r for r in sent if (BROKER_NAME, r.message_queue.queue_id) in c.queues]
                    for c in (first, second)}
            for consumer, expected in mine.items():
                await consumer.receive(len(expected))
    assert mine[first] and mine[second]
    for consumer, expected in mine.items():
        assert sorted(m["msgId"] for m in consumer.messages) == sorted(r.msg_id for r in expected)


async def test_the_lite_pull_consumer_subscribes_and_is_assigned(cluster: JavaCluster) -> None:
    java = cluster.java()
    sent = await cluster.send(12)
    lines = await java.run("lite-subscribe", group="java-lite", count=12)
    got = [line for line in lines if "queueOffset" in line]
    assert sorted(m["msgId"] for m in got) == sorted(r.msg_id for r in sent)
    ends = Counter(r.message_queue.queue_id for r in sent)
    assert lines[-1] == {"committed": {str(q): ends[q] for q in range(QUEUES)}}
    assert await consumer_offsets(cluster.app, cluster.master_address, "java-lite") \
        == {q: ends[q] for q in range(QUEUES)}

    # The committed offsets hold for the group's next run: it gets only what is new.
    more = await cluster.send(4, prefix="later")
    lines = await java.run("lite-subscribe", group="java-lite", count=4)
    assert sorted(m["msgId"] for m in lines if "queueOffset" in m) \
        == sorted(r.msg_id for r in more)

    # Assigned every queue and sought to their beginnings, another group reads all.
    lines = await java.run("lite-assign", group="java-assigned", count=16)
    got = [line for line in lines if "queueOffset" in line]
    assert sorted(m["msgId"] for m in got) == sorted(r.msg_id for r in sent + more)
    for line in (line for line in lines if "offsetForTimestamp" in line):
        # The first offset stored at or after the time asked for.
        at = {m["queueOffset"]: m["storeTimestamp"] for m in got if m["queueId"] == line["queueId"]}
        found = line["offsetForTimestamp"]
        assert at[found] == line["timestamp"]
        assert all(t < line["timestamp"] for o, t in at.items() if o < found)
    ends = Counter(r.message_queue.queue_id for r in sent + more)
    assert lines[-1] == {"committed": {str(q): ends[q] for q in range(QUEUES)}}
