"""RocketMQ 5.3.3's mqadmin, run unchanged against a triomq cluster.

Its commands run one after another in one JVM (the Java client's ``mqadmin``
sub-command, ``scenario_clients.ScenarioClient.mqadmin``), or one at a time with
what it prints read as it prints it (``mqadmin-stream``) for those that run until
stopped; against the cluster of ``conftest.py``: a name server, three controllers
and a group of three replicas in controller mode over TCP, and, for the commands
about clients, RocketMQ's own Java producer and push consumer running beside it.
Each command's output is checked, and what it changed read back where triomq's
client can.

Skipped, with the reason, without ``java`` or ``mvn`` on PATH or where Maven could
not fetch the jars.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from triomq.controller.client import ControllerClient
from triomq.testing.cluster import BROKER_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acting_nodes import wait_for  # on the path compat_cluster set
from compat_cluster import CompatCluster, read_until
from scenario_clients import (
    QUEUES,
    TOPIC,
    consumer_offsets,
    java_client,
    offsets_become,
    unavailable_java,
    wait_routed,
)

pytestmark = pytest.mark.skipif(unavailable_java() is not None, reason=str(unavailable_java()))


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
        "haStatusMaster": ["haStatus", *n, "-b", master],
        "haStatusSlave": ["haStatus", *n, "-b", min(slaves)],
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

    # The master's two slaves, by their HA connections' socket addresses, both in sync;
    # a slave's master by its HA address.
    ha = fields(out["haStatusMaster"])
    assert (ha["MasterAddr"], ha["MasterCommitLogMaxOffset"], ha["SlaveNum"],
            ha["InSyncSlaveNum"]) == (master, status["commitLogMaxOffset"], "2", "2")
    slave_rows = re.findall(
        r"^(/127\.0\.0\.1:\d+)\s+(\d+)\s+(\d+)\s+\S+\s+(OK|Fall Behind)",
        out["haStatusMaster"], re.MULTILINE)
    assert [row[1:] for row in slave_rows] == [(status["commitLogMaxOffset"], "0", "OK")] * 2
    ha_slave = fields(out["haStatusSlave"])
    assert ha_slave["MasterAddr"] == cluster.cluster.broker(cluster.master).ha_address
    assert ha_slave["CommitLogMaxOffset"] == status["commitLogMaxOffset"]

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




async def test_mqadmin_commands_about_the_clients_running_and_the_stats(
        cluster: CompatCluster) -> None:
    """consumerConnection, producerConnection, consumerStatus, statsAll and queryMsgById
    -g -d, with RocketMQ's Java producer and push consumer running beside them."""
    java = java_client(cluster.cluster)
    n = ["-n", cluster.namesrv[0].removeprefix("tcp://")]
    broker = cluster.cluster.broker(cluster.master)
    async with java.running("push", group="java-live", mode="concurrent") as consumer, \
            java.running("send", group="java-live-producer", count=8, modes="sync",
                         stay="true") as producer:
        await producer.until(lambda: any("sent" in line for line in producer.lines))
        await consumer.receive(8)
        sent = [line for line in producer.lines if "sendStatus" in line]
        per_queue = Counter(line["queueId"] for line in sent)
        await offsets_become(cluster.app, cluster.master_address, "java-live",
                             {q: per_queue[q] for q in range(QUEUES)})
        # statsAll reads what the broker sampled: once every 10 s, as RocketMQ's.
        await cluster.cluster.wait_for(lambda: all(
            (view := broker.processor.stats.items.view(name, key)) is not None
            and view.minute.sum == 8
            for name, key in (("TOPIC_PUT_NUMS", TOPIC), ("GROUP_GET_NUMS",
                                                           f"{TOPIC}@java-live"))),
            timeout=30)
        commands = {
            "consumerConnection": ["consumerConnection", *n, "-g", "java-live"],
            "producerConnection": ["producerConnection", *n, "-g", "java-live-producer",
                                   "-t", TOPIC],
            "consumerStatus": ["consumerStatus", *n, "-g", "java-live"],
            "statsAll": ["statsAll", *n],
        }
        ran = await java.mqadmin(*commands.values())
        assert all(r["exit"] is None and not r["err"] for r in ran), ran
        out = {name: r["out"] for name, r in zip(commands, ran, strict=True)}

        # Each client once, by its id, address, language and version.
        ((consumer_id, consumer_addr, language, version),) = rows(out["consumerConnection"])
        assert (consumer_addr.rpartition(":")[0], language, version) \
            == ("127.0.0.1", "JAVA", "V5_3_3")
        subscriptions = rows(out["consumerConnection"].split("Below is subscription:", 1)[1])
        assert sorted(subscriptions) == sorted([[TOPIC, "*"], ["%RETRY%java-live", "*"]])
        assert (fields(out["consumerConnection"])["ConsumeType"],
                fields(out["consumerConnection"])["ConsumeFromWhere"]) \
            == ("CONSUME_PASSIVELY", "CONSUME_FROM_FIRST_OFFSET")
        # (No heading: a line a connection.)
        ((_, producer_id, _, language, version),) = [
            line.split() for line in out["producerConnection"].splitlines() if line.strip()]
        assert (language, version) == ("JAVA", "V5_3_3") and producer_id != consumer_id

        # The consumer answered the broker's question about what it runs: the file mqadmin
        # wrote names its subscriptions and each queue's offset as the group consumed it.
        ((_, client_id, version, path),) = rows(out["consumerStatus"])
        assert (client_id, version) == (consumer_id, "V5_3_3")
        assert "Same subscription in the same group of consumer" in out["consumerStatus"]
        assert "Rebalance OK" in out["consumerStatus"]
        running = (java.home / path).read_text()
        assert sorted(re.findall(r"Topic: (\S+) .*SubExpression: (\S+)", running)) \
            == sorted([(TOPIC, "*"), ("%RETRY%java-live", "*")])
        held = running.split("#Consumer Offset#", 1)[1].split("#Consumer MQ Detail#")[0]
        held_rows = sorted(tuple(row) for row in rows(held))
        assert [row for row in held_rows if row[0] == TOPIC] == [
            (TOPIC, BROKER_NAME, str(q), str(per_queue[q])) for q in range(QUEUES)]
        # The retry topic's one queue is listed once the client's rebalance has taken it
        # (its route comes with the client's next poll): nothing consumed there, -1 before
        # the first pull answered, 0 after.
        retry = [row for row in held_rows if row[0] != TOPIC]
        assert retry in ([], [("%RETRY%java-live", BROKER_NAME, "0", "-1")],
                         [("%RETRY%java-live", BROKER_NAME, "0", "0")]), retry

        # Eight in and eight out (the 24-hour column falls back on the last minute's sum,
        # as the broker samples its hour every 10 minutes), nothing left to consume. The
        # rates: the eight over the 10 s before the sample that took them all (0.80), or
        # over more if they came over two samples.
        stats = {row[0]: row[1:] for row in rows(out["statsAll"])}  # a group a topic here
        group, accumulation, in_tps, out_tps, *today = stats[TOPIC]
        assert (group, accumulation, today) == ("java-live", "0", ["8", "8"])
        assert 0 < float(in_tps) <= 0.8 and 0 < float(out_tps) <= 0.8
        assert stats["TBW102"] == ["0", "0.00", "0", "NO_CONSUMER"]

        # The broker hands the message to that consumer, whose listener takes it again.
        first = sent[0]
        (ran,) = await java.mqadmin(["queryMsgById", *n, "-t", TOPIC, "-i",
                                     first["offsetMsgId"], "-g", "java-live", "-d", consumer_id])
        assert ran["exit"] is None and not ran["err"], ran
        assert "ConsumeMessageDirectlyResult" in ran["out"] and "CR_SUCCESS" in ran["out"], ran
        await consumer.until(lambda: [m["msgId"] for m in consumer.messages].count(
            first["msgId"]) == 2)
    # ... and its offsets stay where the group's consumption left them.
    assert await consumer_offsets(cluster.app, cluster.master_address, "java-live") \
        == {q: per_queue[q] for q in range(QUEUES)}


async def test_mqadmin_cluster_rt_sends_to_each_group_until_stopped(
        cluster: CompatCluster) -> None:
    java = java_client(cluster.cluster)
    n = ["-n", cluster.namesrv[0].removeprefix("tcp://")]
    async with java.mqadmin_streaming(["clusterRT", *n, "-a", "3", "-s", "16", "-i", "1"]) as rt:
        await rt.until(lambda: len(rt.printed) >= 3)
    heading, *rounds = rt.printed[:3]
    assert heading.split() == ["#Cluster", "Name", "#Broker", "Name", "#RT", "#successCount",
                               "#failCount"]
    for line in rounds:  # each round: three sends, all answered
        cluster_name, broker_name, rt_ms, succeeded, failed = line.split()
        assert (cluster_name, broker_name, succeeded, failed) \
            == ("DefaultCluster", BROKER_NAME, "3", "0")
        assert float(rt_ms) >= 0
    # It sends to the topic named after the group, which every broker has.
    stored = [r for r in cluster.cluster.broker(cluster.master).log.iter_records()
              if r.topic == BROKER_NAME]
    assert len(stored) >= 6 and {r.body for r in stored} == {b"a" * 16}


async def test_mqadmin_clean_broker_metadata_forgets_a_dead_replica_only(
        cluster: CompatCluster) -> None:
    addresses = list(cluster.cluster.controller_addresses.values())
    controllers = ControllerClient(cluster.app.rpc, addresses)
    (group,) = await controllers.get_sync_state_data([BROKER_NAME])
    dead, alive = sorted((r for r in group.in_sync_replicas
                          if r.broker_id != group.master_broker_id), key=lambda r: r.broker_id)
    (dead_name,) = [name for name in cluster.cluster.broker_names
                    if cluster.cluster.node(name).address == "tcp://" + dead.address]
    await cluster.cluster.kill(dead_name)

    async def replicas() -> set[int]:
        (now,) = await controllers.get_sync_state_data([BROKER_NAME])
        return {r.broker_id for r in (*now.in_sync_replicas, *now.not_in_sync_replicas)}

    # Out of the SyncStateSet (2 s without catching up), long silent to the controllers.
    async def shrunk() -> bool:
        (now,) = await controllers.get_sync_state_data([BROKER_NAME])
        return dead.broker_id not in {r.broker_id for r in now.in_sync_replicas}
    await wait_for(shrunk)
    clean = ["cleanBrokerMetadata", "-a", addresses[0].removeprefix("tcp://"),
             "-bn", BROKER_NAME, "-c", "DefaultCluster", "-b"]
    refused, cleaned = await java_client(cluster.cluster).mqadmin(
        [*clean, str(alive.broker_id)], [*clean, str(dead.broker_id)])
    # A living replica is kept (unless -l); the dead one is forgotten.
    assert "command failed" in refused["err"] + refused["out"], refused
    assert cleaned["exit"] is None and not cleaned["err"], cleaned
    assert f"clear broker {BROKER_NAME} metadata from controller success!" in cleaned["out"]
    assert await replicas() == {group.master_broker_id, alive.broker_id}
    # The group goes on: sends are acknowledged by the two left.
    sent = await cluster.send(3)
    got = await cluster.read_all(3)
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


async def test_rocketmq_4_mqadmin_broker_and_name_server_commands(
        cluster: CompatCluster) -> None:
    """RocketMQ 4.9.8's mqadmin: its broker, topic, group, message and name-server
    commands print what the cluster holds, as 5.3.3's do (4.9 has no controller)."""
    sent = await cluster.send(8)
    await read_until(cluster.app, cluster.namesrv, lambda got: len(got) >= 8, group="admin-group")
    namesrv = cluster.namesrv[0].removeprefix("tcp://")
    n = ["-n", namesrv]
    nodes = cluster.cluster
    master = cluster.master_address.removeprefix("tcp://")
    replicas = {nodes.node(name).address.removeprefix("tcp://") for name in nodes.broker_names}
    commands = {
        "clusterList": ["clusterList", *n],
        "clusterListMore": ["clusterList", *n, "-m"],
        "topicRoute": ["topicRoute", *n, "-t", TOPIC],
        "topicStatus": ["topicStatus", *n, "-t", TOPIC],
        "topicList": ["topicList", *n],
        "topicClusterList": ["topicClusterList", *n, "-t", TOPIC],
        "brokerStatus": ["brokerStatus", *n, "-b", master],
        "getBrokerConfig": ["getBrokerConfig", *n, "-b", master],
        "consumerProgress": ["consumerProgress", *n, "-g", "admin-group"],
        "brokerConsumeStats": ["brokerConsumeStats", *n, "-b", master],
        "queryMsgById": ["queryMsgById", *n, "-i", sent[1].offset_msg_id],
        "queryMsgByKey": ["queryMsgByKey", *n, "-t", TOPIC, "-k", "m-2"],
        "sendMessage": ["sendMessage", *n, "-t", TOPIC, "-p", "from mqadmin 4"],
        "updateTopic": ["updateTopic", *n, "-c", "DefaultCluster", "-t", "Topic4", "-r", "2",
                        "-w", "2"],
        "updateSubGroup": ["updateSubGroup", *n, "-c", "DefaultCluster", "-g", "group-4"],
        "getNamesrvConfig": ["getNamesrvConfig", *n],
        "updateKvConfig": ["updateKvConfig", *n, "-s", "ns-4", "-k", "k", "-v", "v"],
        "wipeWritePerm": ["wipeWritePerm", *n, "-b", BROKER_NAME],
        "addWritePerm": ["addWritePerm", *n, "-b", BROKER_NAME],
    }
    ran = await java_client(cluster.cluster, "rocketmq-4").mqadmin(*commands.values())
    assert all(r["exit"] is None and not r["err"] for r in ran), ran
    out = {name: r["out"] for name, r in zip(commands, ran, strict=True)}
    per_queue = Counter(r.message_queue.queue_id for r in sent)

    # Every replica by its address, the master as id 0; the master took today's 8.
    listed = rows(out["clusterList"])
    assert {(row[0], row[1], row[3], row[4]) for row in listed} \
        == {("DefaultCluster", BROKER_NAME, address, "V5_3_3") for address in replicas}
    assert [row[2] for row in listed if row[3] == master] == ["0"]
    assert sorted(tuple(row[2:]) for row in rows(out["clusterListMore"])) \
        == [("0", "0", "0", "0"), ("0", "0", "0", "0"), ("0", "0", "8", "8")]
    assert f'0:"{master}"' in out["topicRoute"]
    assert [row[:4] for row in rows(out["topicStatus"])] == [
        [BROKER_NAME, str(q), "0", str(per_queue[q])] for q in range(QUEUES)]
    assert {TOPIC, "TBW102"} <= set(out["topicList"].split())
    assert out["topicClusterList"].split() == ["DefaultCluster"]
    status = fields(out["brokerStatus"])
    assert (status["brokerName"], status["brokerRole"], status["msgPutTotalTodayNow"]) \
        == (BROKER_NAME, "MASTER", "8")
    assert settings(out["getBrokerConfig"])["brokerName"] == BROKER_NAME
    assert [row[:6] for row in rows(out["consumerProgress"])] == [
        [TOPIC, BROKER_NAME, str(q), str(per_queue[q]), str(per_queue[q]), "0"]
        for q in range(QUEUES)]
    assert sorted((row[3], row[4], row[5]) for row in rows(out["brokerConsumeStats"])
                  if row[1] == "admin-group") == [
        (str(q), str(per_queue[q]), str(per_queue[q])) for q in range(QUEUES)]

    found = fields(out["queryMsgById"])
    assert (found["Topic"], found["Keys"], found["Queue ID"], found["Queue Offset"]) == (
        TOPIC, "[m-1]", str(sent[1].message_queue.queue_id), str(sent[1].queue_offset))
    assert rows(out["queryMsgByKey"]) == [
        [sent[2].msg_id, str(sent[2].message_queue.queue_id), str(sent[2].queue_offset)]]
    ((broker, _, status_, msg_id),) = rows(out["sendMessage"])
    assert (broker, status_) == (BROKER_NAME, "SEND_OK")
    (stored,) = [m for m in await cluster.read_all(9) if m.msg_id == msg_id]
    assert stored.body == b"from mqadmin 4"

    assert f"create topic to {master} success." in out["updateTopic"]
    assert f"create subscription group to {master} success." in out["updateSubGroup"]
    assert settings(out["getNamesrvConfig"])["listenPort"] == namesrv.rpartition(":")[2]
    assert "create or update kv config to namespace success." in out["updateKvConfig"]
    assert f"wipe write perm of broker[{BROKER_NAME}] in name server[{namesrv}] OK" \
        in out["wipeWritePerm"]
    assert f"add write perm of broker[{BROKER_NAME}] in name server[{namesrv}] OK" \
        in out["addWritePerm"]
