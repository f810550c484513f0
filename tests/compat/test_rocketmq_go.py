"""RocketMQ's Go client (``github.com/apache/rocketmq-client-go/v2``), run unchanged
against a triomq cluster.

A second family of client: it writes its requests with code of its own (its
headers, its batch encoding, its heartbeat), not the Java client's. Its producer
and push consumer run as ``rocketmq_go/bin/rocketmqgo`` against the cluster of
``compat_cluster.py``; what they print is held against what was sent and what
triomq's own client sees.

Skipped, with the reason, without ``go`` on PATH or where the Go module proxy
could not be reached; with go but the program not built (``make rocketmq-go``,
which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from triomq.testing.cluster import BROKER_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat_cluster import CompatCluster, failover, open_acting_group, open_compat_cluster
from scenario_clients import (
    QUEUES,
    TOPIC,
    assert_stored_as_answered,
    go_client,
    offsets_become,
    unavailable_go,
)

pytestmark = pytest.mark.skipif(unavailable_go() is not None, reason=str(unavailable_go()))

#: How far a client's wall clock and a broker's clock (its run's EpochClock: the wall
#: clock at its start moved on by the monotonic clock) may differ on one host.
CLOCK_SKEW_MS = 10

# The Go client writes the time and counter of its message ids in lower case.
UNIQ_ID = re.compile("[0-9A-F]{20}[0-9a-f]{12}")
OFFSET_ID = re.compile("7F000001[0-9A-F]{24}")


async def test_every_kind_of_send_is_stored_as_sent(cluster: CompatCluster) -> None:
    count = 6
    lines = await go_client(cluster.cluster).run("send", group="go-producer", count=count,
                                                 modes="sync,async,oneway,batch")
    results = {(line["mode"], line["i"]): line for line in lines}
    assert set(results) == {(mode, i) for mode in ("sync", "async", "oneway")
                            for i in range(count)} | {("batch", 0)}
    master = cluster.master_address.removeprefix("tcp://")
    answered = [line for line in lines if "sendStatus" in line]
    assert all(line["sendStatus"] == "SEND_OK" and line["brokerName"] == BROKER_NAME
               and line["storeHost"] == master for line in answered)
    # The Go client names no message of a batch (it sets no UNIQ_KEY in them), so its
    # answer has no msgId: the broker's offset ids name them.
    (batch,) = (line for line in lines if line["mode"] == "batch")
    assert batch["msgId"] == "" and len(batch["offsetMsgIds"]) == count
    assert all(UNIQ_ID.fullmatch(line["msgId"]) for line in answered if line is not batch)
    assert all(OFFSET_ID.fullmatch(i) for line in answered
               for i in line.get("offsetMsgIds", [line["offsetMsgId"]]))

    got = {m.properties["scenario"] + " " + m.properties["seq"]: m
           for m in await cluster.read_all(4 * count)}
    assert len(got) == 4 * count
    assert_stored_as_answered(got, results, count, batch_ids="offsetMsgIds")


async def test_a_push_consumer_gets_every_message_once_and_stores_its_offsets(
        cluster: CompatCluster) -> None:
    sent = await cluster.send(12)
    async with go_client(cluster.cluster).running("push", group="go-push") as consumer:
        await consumer.receive(12)
        # The Go client stores its offsets 10 s after it starts, then every 5 s, with one-way
        # requests; as it shuts down too, but then it closes its connections at once and
        # the broker may not have read them all.
        ends = Counter(r.message_queue.queue_id for r in sent)
        await offsets_become(cluster.app, cluster.master_address, "go-push",
                             {q: ends[q] for q in range(QUEUES)})
    got = consumer.messages
    assert sorted((m["msgId"], m["body"], m["tags"], m["keys"], m["queueId"], m["queueOffset"],
                   m["properties"]) for m in got) == sorted(
        (r.msg_id, f"m {i}", f"Tag{'ABC'[i % 3]}", f"m-{i}", r.message_queue.queue_id,
         r.queue_offset, {"scenario": "m", "seq": str(i)}) for i, r in enumerate(sent))
    master = cluster.master_address.removeprefix("tcp://")
    assert all(m["storeHost"] == master and m["reconsumeTimes"] == 0
               and 0 < m["bornTimestamp"] <= m["storeTimestamp"] + CLOCK_SKEW_MS for m in got)
    assert {r.offset_msg_id for r in sent} == {m["offsetMsgId"] for m in got}


async def test_a_push_consumer_reads_and_stores_its_offsets_through_an_acting_slave(
        tmp_path: Path) -> None:
    """Its master gone, broker-a is routed to its acting slave as id 0: the Go client's
    push consumer pulls every message there and stores its offsets there."""
    async with open_acting_group(tmp_path, go_client) as group:
        go = group.client
        sent = await go.run("send", group="go-producer", count=12, modes="sync")
        await group.stop_master()
        async with go.running("push", group="go-acting") as consumer:
            await consumer.receive(12)
            ends = Counter(line["queueId"] for line in sent)
            await offsets_become(group.admin, group.cluster.node("a1").address, "go-acting",
                                 {q: ends[q] for q in range(QUEUES)})
        assert sorted(m["msgId"] for m in consumer.messages) == sorted(
            line["msgId"] for line in sent)


async def test_the_producer_follows_the_new_master_after_a_sigkill_losing_nothing_acknowledged(
        tmp_path: Path, refused_requests: None) -> None:
    # The Go client learns the new master at its next route poll: every 30 s, fixed.
    await failover(tmp_path, go_client)


async def test_a_transaction_producer_commits_rolls_back_and_answers_checks(
        tmp_path, refused_requests: None) -> None:
    # Checks every 500 ms of half messages a second old.
    async with open_compat_cluster(tmp_path, transaction_check_interval=500,
                                   transaction_time_out=1000) as cluster:
        lines = await go_client(cluster.cluster).run("transaction", group="go-tx", count=9)
        sent = {line["i"]: line for line in lines if "state" in line}
        assert [sent[i]["state"] for i in range(9)] == \
            ["COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"] * 3
        assert all(line["sendStatus"] == "SEND_OK" for line in sent.values())
        checks = [line for line in lines if "checked" in line]
        assert {line["checked"] for line in checks} == {"2", "5", "8"}
        assert all(line["topic"] == TOPIC for line in checks)
        got = await cluster.read_all(6)
        assert {m.msg_id for m in got} == {sent[i]["msgId"] for i in (0, 2, 3, 5, 6, 8)}
        log = cluster.cluster.broker(cluster.master).log
        assert sorted(int(r.properties["seq"]) for r in log.iter_records()
                      if r.topic == TOPIC) == [0, 2, 3, 5, 6, 8]
