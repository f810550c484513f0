"""RocketMQ's own Java client, run unchanged against a triomq cluster.

``DefaultMQProducer``, ``TransactionMQProducer``, ``DefaultMQPushConsumer`` and
``DefaultLitePullConsumer`` of RocketMQ 5.3.3 and 4.9.8, and 5.3.3's mqadmin, run as
JVMs against a name server, three controllers and a group of three replicas in
controller mode over TCP (``conftest.py``, ``scenario_clients.py``), and against a
static group whose slave acts for its absent master; what they print
is held against what was sent, and against what triomq's own client and the brokers
see.

Skipped, with the reason, without ``java`` or ``mvn`` on PATH or where Maven
could not fetch the jars; with both but the module not built (``make
rocketmq-java``, which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from triomq.controller.client import ControllerClient
from triomq.testing.cluster import BROKER_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat_cluster import (
    CompatCluster,
    failover,
    open_acting_group,
    open_compat_cluster,
    read_until,
)
from scenario_clients import (
    QUEUES,
    TOPIC,
    assert_stored_as_answered,
    consumer_offsets,
    java_client,
    offsets_become,
    unavailable_java,
    wait_routed,
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


def rows(out: str) -> list[list[str]]:
    """The first table mqadmin printed: the cells of each line after its ``#`` heading,
    to the first empty line."""
    lines = out.strip().splitlines()
    table = lines[1:lines.index("")] if "" in lines else lines[1:]
    return [line.split() for line in table]


def settings(out: str) -> dict[str, str]:
    """``name = value`` lines mqadmin printed (a config dump)."""
    lines = [line for line in out.splitlines() if "=" in line and "====" not in line]
    return {key.strip(): value.strip()
            for key, _, value in (line.partition("=") for line in lines)}


def fields(out: str) -> dict[str, str]:
    """``key: value`` or ``#key<tab>value`` lines mqadmin printed (the first of each key)."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        match = re.fullmatch(r"#?([\w ]+?)\s*[:\t]\s*(.*)", line.strip())
        if match:
            found.setdefault(match[1], match[2].strip())
    return found


async def test_mqadmin_commands_print_what_the_cluster_holds(cluster: CompatCluster) -> None:
    sent = await cluster.send(8)
    await read_until(cluster.app, cluster.namesrv, lambda got: len(got) >= 8, group="admin-group")
    namesrv = cluster.namesrv[0].removeprefix("tcp://")
    nodes = cluster.cluster
    master = cluster.master_address.removeprefix("tcp://")
    slaves = {nodes.node(n).address.removeprefix("tcp://") for n in nodes.broker_names
              if n != cluster.master}
    controllers = [a.removeprefix("tcp://") for a in nodes.controller_addresses.values()]
    n = ["-n", namesrv]
    commands = {
        "clusterList": ["clusterList", *n],
        "topicRoute": ["topicRoute", *n, "-t", TOPIC],
        "topicStatus": ["topicStatus", *n, "-t", TOPIC],
        "consumerProgress": ["consumerProgress", *n, "-g", "admin-group"],
        "consumerProgressAll": ["consumerProgress", *n],
        "getSyncStateSet": ["getSyncStateSet", "-a", controllers[0], "-b", BROKER_NAME],
        "getControllerMetaData": ["getControllerMetaData", "-a", controllers[1]],
        "getBrokerEpoch": ["getBrokerEpoch", *n, "-b", BROKER_NAME],
        "brokerStatus": ["brokerStatus", *n, "-b", master],
        "queryMsgById": ["queryMsgById", *n, "-t", TOPIC, "-i", sent[1].offset_msg_id],
        "queryMsgByKey": ["queryMsgByKey", *n, "-t", TOPIC, "-k", "m-2"],
        "updateTopic": ["updateTopic", *n, "-c", "DefaultCluster", "-t", "AdminTopic",
                        "-r", "2", "-w", "2"],
        "topicList": ["topicList", *n],
        "topicClusterList": ["topicClusterList", *n, "-t", TOPIC],
        "updateSubGroup": ["updateSubGroup", *n, "-c", "DefaultCluster", "-g", "admin-sub"],
        "getConsumerConfig": ["getConsumerConfig", *n, "-g", "admin-sub"],
        "sendMessage": ["sendMessage", *n, "-t", TOPIC, "-p", "from mqadmin"],
    }
    ran = await java_client(cluster.cluster).mqadmin(*commands.values())
    assert [r["command"] for r in ran] == list(commands.values())
    out = {name: r["out"] for name, r in zip(commands, ran, strict=True)}
    assert all(r["exit"] is None for r in ran), [r for r in ran if r["exit"] is not None]
    per_queue = Counter(r.message_queue.queue_id for r in sent)

    # The master as broker id 0, the slaves by their own ids, each with its address.
    replicas = {(row[0], row[1], row[3], row[4], row[-1]) for row in rows(out["clusterList"])}
    assert replicas == {("DefaultCluster", BROKER_NAME, master, "V5_3_3", "true")} | {
        ("DefaultCluster", BROKER_NAME, s, "V5_3_3", "false") for s in slaves}
    assert {row[2] for row in rows(out["clusterList"]) if row[3] == master} == {"0"}

    route = out["topicRoute"]  # fastjson, its map keys unquoted
    assert f'0:"{master}"' in route and f'"brokerName":"{BROKER_NAME}"' in route
    assert all(f'"{key}":{value}' in route
               for key, value in (("readQueueNums", 4), ("writeQueueNums", 4), ("perm", 6)))

    assert [row[:4] for row in rows(out["topicStatus"])] == [
        [BROKER_NAME, str(q), "0", str(per_queue[q])] for q in range(QUEUES)]

    # The group read everything: consumer offsets at the ends, no diff.
    assert [row[:6] for row in rows(out["consumerProgress"])] == [
        [TOPIC, BROKER_NAME, str(q), str(per_queue[q]), str(per_queue[q]), "0"]
        for q in range(QUEUES)]
    assert "Consume Diff Total: 0" in out["consumerProgress"]
    assert [row[0] for row in rows(out["consumerProgressAll"])] == ["admin-group"]

    sync = fields(out["getSyncStateSet"])
    assert (sync["brokerName"], sync["MasterAddr"], sync["SyncStateSetNums"]) \
        == (BROKER_NAME, master, "3")
    assert set(re.findall(r"brokerAddress='([^']+)'", out["getSyncStateSet"])) \
        == {master} | slaves

    meta = out["getControllerMetaData"]
    assert set(re.findall(r"#Peer:\s+\d+:(\S+)", meta)) == set(controllers)
    assert fields(meta)["ControllerLeaderAddress"] in controllers

    # Every replica at epoch 1 from offset 0, to the end of what the master stored.
    status = fields(out["brokerStatus"])
    assert (status["brokerName"], status["brokerRole"], status["msgPutTotalTodayNow"]) \
        == (BROKER_NAME, "MASTER", "8")
    assert set(re.findall(r"#brokerAddr\t(\S+)", out["getBrokerEpoch"])) == {master} | slaves
    assert re.findall(r"EpochEntry\{epoch=(\d+), startOffset=(\d+), endOffset=(\d+)\}",
                      out["getBrokerEpoch"]) == [("1", "0", status["commitLogMaxOffset"])] * 3

    found = fields(out["queryMsgById"])
    assert (found["Topic"], found["Tags"], found["Keys"], found["Queue ID"],
            found["Queue Offset"], found["Store Host"]) == (
        TOPIC, "[TagB]", "[m-1]", str(sent[1].message_queue.queue_id),
        str(sent[1].queue_offset), master)
    assert f"UNIQ_KEY={sent[1].msg_id}" in found["Properties"]
    assert rows(out["queryMsgByKey"]) == [
        [sent[2].msg_id, str(sent[2].message_queue.queue_id), str(sent[2].queue_offset)]]

    assert f"create topic to {master} success." in out["updateTopic"]
    (namesrv_address,) = nodes.namesrv_addresses.values()
    await wait_routed(cluster.app, master, namesrv_address, "AdminTopic", 2)
    assert {TOPIC, "TBW102", "SELF_TEST_TOPIC"} <= set(out["topicList"].split())
    assert out["topicClusterList"].split() == ["DefaultCluster"]

    assert f"create subscription group to {master} success." in out["updateSubGroup"]
    config = {k.strip(): v.strip() for k, v in (line.split("=", 1) for line in
              out["getConsumerConfig"].splitlines() if "=" in line and "====" not in line)}
    assert (config["groupName"], config["consumeEnable"]) == ("admin-sub", "true")

    ((broker, queue, status_, msg_id),) = rows(out["sendMessage"])
    assert (broker, status_) == (BROKER_NAME, "SEND_OK") and int(queue) in range(QUEUES)
    (stored_,) = [m for m in await cluster.read_all(9) if m.msg_id == msg_id]
    assert stored_.body == b"from mqadmin"


async def test_more_mqadmin_commands_print_and_change_what_the_cluster_holds(
        cluster: CompatCluster) -> None:
    sent = await cluster.send(6)
    await read_until(cluster.app, cluster.namesrv, lambda got: len(got) >= 6, group="admin-group")
    namesrv = cluster.namesrv[0].removeprefix("tcp://")
    master = cluster.master_address.removeprefix("tcp://")
    controllers = [a.removeprefix("tcp://")
                   for a in cluster.cluster.controller_addresses.values()]
    n = ["-n", namesrv]
    third = sent[3]
    queue, offset = third.message_queue.queue_id, third.queue_offset
    commands = {
        "clusterListMore": ["clusterList", *n, "-m"],
        "getBrokerConfig": ["getBrokerConfig", *n, "-b", master],
        "topicListClusters": ["topicList", *n, "-c"],
        "allocateMQ": ["allocateMQ", *n, "-t", TOPIC, "-i", "a,b"],
        "getNamesrvConfig": ["getNamesrvConfig", *n],
        "updateKvConfig": ["updateKvConfig", *n, "-s", "admin-ns", "-k", "k1", "-v", "v1"],
        "deleteKvConfig": ["deleteKvConfig", *n, "-s", "admin-ns", "-k", "k1"],
        "queryMsgByUniqueKey": ["queryMsgByUniqueKey", *n, "-t", TOPIC, "-i", third.msg_id],
        "queryMsgByOffset": ["queryMsgByOffset", *n, "-t", TOPIC, "-b", BROKER_NAME,
                             "-i", str(queue), "-o", str(offset)],
        "brokerConsumeStats": ["brokerConsumeStats", *n, "-b", master],
        "cloneGroupOffset": ["cloneGroupOffset", *n, "-s", "admin-group", "-d", "clone-group",
                             "-t", TOPIC],
        "getControllerConfig": ["getControllerConfig", "-a", controllers[0]],
        "wipeWritePerm": ["wipeWritePerm", *n, "-b", BROKER_NAME],
        "addWritePerm": ["addWritePerm", *n, "-b", BROKER_NAME],
    }
    ran = await java_client(cluster.cluster).mqadmin(*commands.values())
    assert [r["command"] for r in ran] == list(commands.values())
    assert all(r["exit"] is None for r in ran), [r for r in ran if r["exit"] is not None]
    out = {name: r["out"] for name, r in zip(commands, ran, strict=True)}
    per_queue = Counter(r.message_queue.queue_id for r in sent)

    # Today's totals: the master took the 6 sends and served them once; slaves nothing.
    totals = sorted(tuple(row[2:]) for row in rows(out["clusterListMore"]))
    assert totals == [("0", "0", "0", "0"), ("0", "0", "0", "0"), ("0", "0", "6", "6")]
    config = settings(out["getBrokerConfig"])
    assert (config["brokerName"], config["brokerClusterName"], config["enableControllerMode"],
            config["allAckInSyncStateSet"]) == (BROKER_NAME, "DefaultCluster", "true", "true")
    listed = {tuple(row) for row in rows(out["topicListClusters"]) if len(row) > 1}
    assert ("DefaultCluster", TOPIC, "admin-group") in listed
    allocated = json.loads(out["allocateMQ"])["result"]
    assert sorted(q["queueId"] for part in allocated.values() for q in part) == list(
        range(QUEUES)) and sorted(allocated) == ["a", "b"]
    assert settings(out["getNamesrvConfig"])["listenPort"] == namesrv.rpartition(":")[2]
    assert "create or update kv config to namespace success." in out["updateKvConfig"]
    assert "delete kv config from namespace success." in out["deleteKvConfig"]

    # The same message found by its unique key and by its queue and offset.
    for name in ("queryMsgByUniqueKey", "queryMsgByOffset"):
        found = fields(out[name])
        assert (found["Topic"], found["Keys"], found["Queue ID"], found["Queue Offset"],
                found["Store Host"]) == (TOPIC, "[m-3]", str(queue), str(offset), master)
        assert f"UNIQ_KEY={third.msg_id}" in found["Properties"]

    # The group read everything: each queue's broker and consumer offsets equal.
    assert sorted((row[3], row[4], row[5], row[6]) for row in rows(out["brokerConsumeStats"])
                  if row[1] == "admin-group") == [
        (str(q), str(per_queue[q]), str(per_queue[q]), "0") for q in range(QUEUES)]
    assert "clone group offset success." in out["cloneGroupOffset"]
    assert await consumer_offsets(cluster.app, cluster.master_address, "clone-group") \
        == {q: per_queue[q] for q in range(QUEUES)}
    controller = settings(out["getControllerConfig"])
    assert (controller["enableElectUncleanMaster"], controller["notifyBrokerRoleChanged"]) \
        == ("false", "true")
    assert f"wipe write perm of broker[{BROKER_NAME}] in name server[{namesrv}] OK" \
        in out["wipeWritePerm"]
    assert f"add write perm of broker[{BROKER_NAME}] in name server[{namesrv}] OK" \
        in out["addWritePerm"]
    await wait_routed(cluster.app, cluster.master_address, cluster.namesrv[0], TOPIC, QUEUES)


async def test_mqadmin_commands_that_change_topics_groups_offsets_and_configs(
        cluster: CompatCluster) -> None:
    sent = await cluster.send(6)
    await read_until(cluster.app, cluster.namesrv, lambda got: len(got) >= 6, group="admin-group")
    namesrv = cluster.namesrv[0].removeprefix("tcp://")
    master = cluster.master_address.removeprefix("tcp://")
    controllers = [a.removeprefix("tcp://")
                   for a in cluster.cluster.controller_addresses.values()]
    n = ["-n", namesrv]
    commands = {
        "updateTopicOrder": ["updateTopic", *n, "-c", "DefaultCluster", "-t", "OrderTopic",
                             "-r", "2", "-w", "2", "-o", "true"],
        "updateOrderConf": ["updateOrderConf", *n, "-t", "OrderTopic", "-v",
                            f"{BROKER_NAME}:2", "-m", "put"],
        "deleteTopic": ["deleteTopic", *n, "-c", "DefaultCluster", "-t", "OrderTopic"],
        "updateNamesrvConfig": ["updateNamesrvConfig", *n, "-k", "scanNotActiveBrokerInterval",
                                "-v", "2000"],
        "updateSubGroup": ["updateSubGroup", *n, "-c", "DefaultCluster", "-g", "doomed"],
        "deleteSubGroup": ["deleteSubGroup", *n, "-c", "DefaultCluster", "-g", "doomed"],
        "resetOffsetByTime": ["resetOffsetByTime", *n, "-g", "admin-group", "-t", TOPIC,
                              "-s", "0"],
        "skipAccumulatedMessage": ["skipAccumulatedMessage", *n, "-g", "admin-group",
                                   "-t", TOPIC],
        "consumeMessage": ["consumeMessage", *n, "-t", TOPIC, "-b", BROKER_NAME, "-i", "0",
                           "-o", "0", "-c", "1"],
        "printMsg": ["printMsg", *n, "-t", TOPIC],
        "checkMsgSendRT": ["checkMsgSendRT", *n, "-t", TOPIC, "-a", "3", "-s", "64"],
        "updateControllerConfig": ["updateControllerConfig", "-a", controllers[0],
                                   "-k", "requestTimeout", "-v", "4000"],
    }
    ran = await java_client(cluster.cluster).mqadmin(*commands.values())
    assert all(r["exit"] is None for r in ran), [r for r in ran if r["exit"] is not None]
    out = {name: r["out"] for name, r in zip(commands, ran, strict=True)}
    per_queue = Counter(r.message_queue.queue_id for r in sent)

    assert f"create topic to {master} success." in out["updateTopicOrder"]
    assert "order=true" in out["updateTopicOrder"]
    assert (f"update orderConf success. topic=[OrderTopic], orderConf=[{BROKER_NAME}:2]"
            in out["updateOrderConf"])
    assert "delete topic [OrderTopic] from cluster [DefaultCluster] success." \
        in out["deleteTopic"]
    assert "delete topic [OrderTopic] from NameServer success." in out["deleteTopic"]
    assert f"update name server config success![{namesrv}]" in out["updateNamesrvConfig"]
    assert (f"delete subscription group [doomed] from broker [{master}] in cluster "
            "[DefaultCluster] success." in out["deleteSubGroup"])

    # Reset to the start, then skipped to the end: the group's offsets as it read them.
    reset = rows(out["resetOffsetByTime"].split("\n", 1)[1])
    assert sorted((row[0], row[1], row[2]) for row in reset) == [
        (BROKER_NAME, str(q), "0") for q in range(QUEUES)]
    assert sorted((row[1], row[2]) for row in rows(out["skipAccumulatedMessage"])) == [
        (str(q), str(per_queue[q])) for q in range(QUEUES)]
    assert await consumer_offsets(cluster.app, cluster.master_address, "admin-group") \
        == {q: per_queue[q] for q in range(QUEUES)}

    (first,) = [r for r in sent if (r.message_queue.queue_id, r.queue_offset) == (0, 0)]
    assert "Consume ok" in out["consumeMessage"]
    assert f"MSGID: {first.msg_id} " in out["consumeMessage"]
    assert sorted(re.findall(r"MSGID: (\w+) ", out["printMsg"])) \
        == sorted(r.msg_id for r in sent)
    assert [row[2] for row in rows(out["checkMsgSendRT"]) if row[0] == BROKER_NAME] \
        == ["true"] * 3
    assert "Avg RT:" in out["checkMsgSendRT"]

    assert f"update controller config success![{controllers[0]}]" \
        in out["updateControllerConfig"]
    first_controller = cluster.cluster.controller_addresses[cluster.cluster.controller_names[0]]
    client = ControllerClient(cluster.app.rpc, [first_controller])
    config = await client.get_controller_config(first_controller)
    assert config["requestTimeout"] == "4000"


async def test_mqadmin_elect_master_hands_the_group_to_the_replica_named(
        cluster: CompatCluster) -> None:
    sent = await cluster.send(4)
    addresses = list(cluster.cluster.controller_addresses.values())
    client = ControllerClient(cluster.app.rpc, addresses)
    (group,) = await client.get_sync_state_data([BROKER_NAME])
    chosen = min((r for r in group.in_sync_replicas if r.broker_id != group.master_broker_id),
                 key=lambda r: r.broker_id)
    (ran,) = await java_client(cluster.cluster).mqadmin(
        ["electMaster", "-a", addresses[0].removeprefix("tcp://"), "-c", "DefaultCluster",
         "-bn", BROKER_NAME, "-b", str(chosen.broker_id)])
    assert ran["exit"] is None, ran
    answer = fields(ran["out"])
    assert (answer["ClusterName"], answer["BrokerName"], answer["BrokerMasterAddr"],
            answer["MasterEpoch"]) == ("DefaultCluster", BROKER_NAME, chosen.address,
                                       str(group.master_epoch + 1))
    # Its replicas, each with its address (triomq's answer carries the member group).
    assert set(re.findall(r"#Broker\t(\d+)\t(\S+)", ran["out"])) == {
        (str(r.broker_id), r.address) for r in group.in_sync_replicas}
    # The named replica takes the role and the sends; nothing acknowledged is lost.
    new_master = "tcp://" + chosen.address
    await wait_routed(cluster.app, new_master, cluster.namesrv[0], TOPIC, QUEUES)
    sent += await cluster.send(4, prefix="after")
    # An offset message id is the store host's IPv4 address, port and offset, in hex.
    port = int(chosen.address.rpartition(":")[2])
    assert [int(r.offset_msg_id[8:16], 16) for r in sent[4:]] == [port] * 4
    got = await cluster.read_all(8, group="after-election")
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


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
