"""RocketMQ's own Java client, run unchanged against a triomq cluster.

``DefaultMQProducer``, ``TransactionMQProducer``, ``DefaultMQPushConsumer`` and
``DefaultLitePullConsumer`` of RocketMQ 5.3.3 and 4.9.8 run as JVMs against a name
server, three controllers and a group of three replicas in controller mode over TCP
(``conftest.py``, ``scenario_clients.py``), and against a static group whose slave
acts for its absent master; what they print is held against what was sent, and
against what triomq's own client and the brokers see. Its mqadmin is ``test_rocketmq_mqadmin.py``'s.

Skipped, with the reason, without ``java`` or ``mvn`` on PATH or where Maven
could not fetch the jars; with both but the module not built (``make
rocketmq-java``, which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from triomq.testing.cluster import BROKER_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat_cluster import (
    CompatCluster,
    failover,
    open_acting_group,
    open_compat_cluster,
)
from scenario_clients import (
    QUEUES,
    TOPIC,
    assert_stored_as_answered,
    java_client,
    offsets_become,
    unavailable_java,
)

pytestmark = pytest.mark.skipif(unavailable_java() is not None, reason=str(unavailable_java()))

#: How far a client's wall clock and a broker's clock (its run's EpochClock: the wall
#: clock at its start moved on by the monotonic clock) may differ on one host.
CLOCK_SKEW_MS = 10

UNIQ_ID = re.compile("[0-9A-F]{32}|[0-9A-F]{56}")
OFFSET_ID = re.compile("7F000001[0-9A-F]{24}")
ALL_QUEUES = {(BROKER_NAME, n) for n in range(QUEUES)}


def printed(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["msgId"], line["body"], line["tags"], line["keys"], line["queueId"],
            line["queueOffset"], line["properties"])


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_every_kind_of_send_is_stored_as_sent(cluster: CompatCluster, profile: str) -> None:
    count = 6
    java = java_client(cluster.cluster, profile)
    lines = await java.run("send", group="java-producer", count=count,
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
    assert_stored_as_answered(got, results, count, batch_ids="msgIds")
    # Ordered: each order key's messages in one queue, in the order sent.
    for key in (0, 1):
        mine = sorted((m for m in got.values() if m.properties.get("orderKey") == str(key)),
                      key=lambda m: m.queue_offset)
        assert len({m.queue_id for m in mine}) == 1
        assert [int(m.properties["seq"]) for m in mine] == list(range(key, count, 2))


async def test_a_timer_message_sent_with_set_deliver_time_ms_comes_at_its_time(
        cluster: CompatCluster) -> None:
    count = 3
    java = java_client(cluster.cluster)
    lines = await java.run("send", group="java-timer", count=count, modes="timer",
                           **{"delay-ms": 1500})
    assert [line["sendStatus"] for line in lines] == ["SEND_OK"] * count
    got = {m.properties["seq"]: m for m in await cluster.read_all(count)}
    assert len(got) == count
    for line in lines:
        message = got[str(line["i"])]
        # Delivered from the timer wheel, no earlier than asked, as the same message.
        assert message.properties["TIMER_DELIVER_MS"] == str(line["deliverTimeMs"])
        assert message.store_timestamp >= line["deliverTimeMs"]
        assert message.msg_id == line["msgId"] and message.queue_id == line["queueId"]
        assert message.body.decode() == f"timer {line['i']}"


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_a_push_consumer_gets_every_message_once_and_stores_its_offsets(
        cluster: CompatCluster, profile: str) -> None:
    sent = await cluster.send(12)
    ends = Counter(r.message_queue.queue_id for r in sent)
    java = java_client(cluster.cluster, profile)
    async with java.running("push", group="java-push", mode="concurrent") as consumer:
        await consumer.receive(12)
        # Stored on the master every 500 ms (with one-way requests, as the client does).
        await offsets_become(cluster.app, cluster.master_address, "java-push",
                             {q: ends[q] for q in range(QUEUES)})
    got = consumer.messages
    assert sorted(map(printed, got)) == sorted(
        (r.msg_id, f"m {i}", f"Tag{'ABC'[i % 3]}", f"m-{i}", r.message_queue.queue_id,
         r.queue_offset, {"scenario": "m", "seq": str(i)}) for i, r in enumerate(sent))
    master = cluster.master_address.removeprefix("tcp://")
    assert all(m["storeHost"].endswith(master) and m["reconsumeTimes"] == 0
               and 0 < m["bornTimestamp"] <= m["storeTimestamp"] + CLOCK_SKEW_MS for m in got)
    assert {r.offset_msg_id for r in sent} == {m["offsetMsgId"] for m in got}


async def test_a_message_answered_reconsume_later_comes_back_from_the_retry_topic(
        cluster: CompatCluster) -> None:
    sent = await cluster.send(3, prefix="r")
    java = java_client(cluster.cluster)
    async with java.running("push", group="java-retry", mode="concurrent",
                            fail_once="true") as consumer:
        # Each message twice: failed first, then from %RETRY%java-retry, whatever its delay.
        await consumer.until(lambda: len(consumer.messages) >= 6)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for line in consumer.messages:
        by_id.setdefault(line["msgId"], []).append(line)
    assert set(by_id) == {r.msg_id for r in sent}
    for result in sent:
        first, again = by_id[result.msg_id][:2]
        assert (first["reconsumeTimes"], first["retryTopic"]) == (0, None)
        # The client shows the retried copy under its first topic, as sent.
        assert (again["topic"], again["reconsumeTimes"], again["retryTopic"],
                again["originMessageId"], again["body"]) == (
            TOPIC, 1, TOPIC, result.offset_msg_id, first["body"])
        assert again["offsetMsgId"] != result.offset_msg_id


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_an_orderly_consumer_locks_its_queues_and_keeps_queue_order(
        cluster: CompatCluster, profile: str) -> None:
    java = java_client(cluster.cluster, profile)
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


async def test_two_consumer_processes_share_the_queues(cluster: CompatCluster) -> None:
    java = java_client(cluster.cluster)
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


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_the_lite_pull_consumer_subscribes_and_is_assigned(cluster: CompatCluster,
                                                                 profile: str) -> None:
    java = java_client(cluster.cluster, profile)
    sent = await cluster.send(12)
    lines = await java.run("lite-subscribe", group="java-lite", count=12)
    got = [line for line in lines if "queueOffset" in line]
    assert sorted(m["msgId"] for m in got) == sorted(r.msg_id for r in sent)
    ends = Counter(r.message_queue.queue_id for r in sent)
    assert lines[-1] == {"committed": {str(q): ends[q] for q in range(QUEUES)}}
    await offsets_become(cluster.app, cluster.master_address, "java-lite",
                         {q: ends[q] for q in range(QUEUES)})

    # The committed offsets hold for the group's next run: it gets only what is new.
    more = await cluster.send(4, prefix="later")
    lines = await java.run("lite-subscribe", group="java-lite", count=4)
    assert sorted(m["msgId"] for m in lines if "queueOffset" in m) \
        == sorted(r.msg_id for r in more)

    # Assigned every queue and sought to their beginnings, another group reads all.
    lines = await java.run("lite-assign", group="java-assigned", count=16)
    got = [line for line in lines if "queueOffset" in line]
    # A pull under way when the queues are sought may answer before the seek, and its
    # messages come again after it (at least once): every one is read, some maybe twice.
    assert sorted({m["msgId"] for m in got}) == sorted(r.msg_id for r in sent + more)
    for line in (line for line in lines if "offsetForTimestamp" in line):
        # The first offset stored at or after the time asked for.
        at = {m["queueOffset"]: m["storeTimestamp"] for m in got if m["queueId"] == line["queueId"]}
        found = line["offsetForTimestamp"]
        assert at[found] == line["timestamp"]
        assert all(t < line["timestamp"] for o, t in at.items() if o < found)
    ends = Counter(r.message_queue.queue_id for r in sent + more)
    assert lines[-1] == {"committed": {str(q): ends[q] for q in range(QUEUES)}}


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_the_producer_follows_the_new_master_after_a_sigkill_losing_nothing_acknowledged(
        tmp_path: Path, profile: str, refused_requests: None) -> None:
    # The client polls the name server for routes every 500 ms (30 s by default).
    await failover(tmp_path, partial(java_client, profile=profile), poll_ms=500,
                   send_timeout_ms=3000)


@pytest.mark.parametrize("profile", ["rocketmq-5", "rocketmq-4"])
async def test_a_transaction_producer_commits_rolls_back_and_answers_checks(
        tmp_path, refused_requests: None, profile: str) -> None:
    # Checks every 500 ms of half messages a second old.
    async with open_compat_cluster(tmp_path, transaction_check_interval=500,
                                   transaction_time_out=1000) as cluster:
        java = java_client(cluster.cluster, profile)
        lines = await java.run("transaction", group="java-tx", count=9)
        sent = {line["i"]: line for line in lines if "state" in line}
        assert [sent[i]["state"] for i in range(9)] == \
            ["COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"] * 3
        assert all(line["sendStatus"] == "SEND_OK" for line in sent.values())
        checks = [line for line in lines if "checked" in line]
        # Only the unknown ones are checked, in their real topic.
        assert {line["checked"] for line in checks} == {"2", "5", "8"}
        assert all(line["topic"] == TOPIC for line in checks)
        assert checks[0]["checkTimes"] == "1"
        got = await cluster.read_all(6)
        assert sorted(int(m.properties["seq"]) for m in got) == [0, 2, 3, 5, 6, 8]
        assert {m.msg_id for m in got} == {sent[i]["msgId"] for i in (0, 2, 3, 5, 6, 8)}
        assert not any("TRAN_MSG" in m.properties for m in got)
        # The rolled-back ones stay out of the topic, and each committed one is in once.
        log = cluster.cluster.broker(cluster.master).log
        assert sorted(int(r.properties["seq"]) for r in log.iter_records()
                      if r.topic == TOPIC) == [0, 2, 3, 5, 6, 8]


async def test_an_orderly_consumer_locks_and_reads_through_an_acting_slave(tmp_path) -> None:
    """Its master gone, broker-a is routed to its acting slave as id 0: RocketMQ's orderly
    push consumer, which locks its queues and stores its offsets on id 0 only, locks them
    on the acting slave, consumes every message in queue order and stores its offsets
    there."""
    async with open_acting_group(tmp_path, java_client) as group:
        java, slave = group.client, group.cluster.broker("a1")
        sent = await java.run("send", group="java-producer", count=12, modes="ordered")
        await group.stop_master()

        async with java.running("push", group="java-acting", mode="orderly",
                                expression="*") as consumer:
            await consumer.receive(12)
            await consumer.until(lambda: len(consumer.queues) == QUEUES
                                 and all(consumer.queues.values()))
        assert sorted(m["msgId"] for m in consumer.messages) == sorted(s["msgId"] for s in sent)
        by_queue: dict[int, list[int]] = defaultdict(list)
        for m in consumer.messages:
            by_queue[m["queueId"]].append(m["queueOffset"])
        assert all(offsets == sorted(offsets) for offsets in by_queue.values())
        per_queue = Counter(s["queueId"] for s in sent)
        await group.cluster.wait_for(lambda: all(
            slave.offsets.table.query("java-acting", TOPIC, n) == per_queue[n]
            for n in per_queue), timeout=30)
