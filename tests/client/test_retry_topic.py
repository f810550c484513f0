"""A consumer group's retry topic: created by a heartbeat on the master, routed by the name
servers (``mqadmin consumerProgress`` finds the group's brokers by it), kept across a
restart in ``config/topics.json``."""

from __future__ import annotations

import json

import trio
from client_cluster import open_groups

HEART_BEAT, GET_ROUTEINFO_BY_TOPIC, TOPIC_NOT_EXIST = 34, 105, 17


def heartbeat(group: str) -> bytes:
    return json.dumps({
        "clientID": "10.0.0.5@1", "producerDataSet": [],
        "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": "CLUSTERING", "subscriptionDataSet": [],
                             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET"}]}).encode()


async def test_a_heartbeat_creates_the_retry_topic_and_a_restart_keeps_it(
        tmp_path, autojump_clock) -> None:
    async with open_groups(tmp_path) as groups:
        admin = await groups.client("admin")
        (namesrv,) = groups.namesrv

        async def route() -> dict | None:
            answer = await admin.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": "%RETRY%cg"})
            if answer.code == TOPIC_NOT_EXIST:
                return None
            assert answer.code == 0, answer.remark
            return json.loads(answer.body)

        assert await route() is None
        answer = await admin.rpc.invoke(groups.cluster.node("a").address, HEART_BEAT, {},
                                        heartbeat("cg"))
        assert answer.code == 0, answer.remark
        await groups.wait_routed("%RETRY%cg", {"broker-a"})
        # retryQueueNums (RocketMQ's default 1) queues, read and write, no system flag.
        queue_data = [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 1,
                       "topicSysFlag": 0, "writeQueueNums": 1}]
        assert (await route())["queueDatas"] == queue_data

        # The broker stops: its route goes. It comes back with no consumer running, and
        # registers the retry topic again from its topics.json.
        await groups.cluster.kill("a")
        with trio.fail_after(20):
            while await route() is not None:
                await trio.sleep(0.05)
        saved = json.loads((tmp_path / "a" / "config" / "topics.json").read_bytes())
        assert saved["topicConfigTable"]["%RETRY%cg"]["perm"] == 6
        await groups.start_broker("a", "broker-a")
        await groups.wait_routed("%RETRY%cg", {"broker-a"})
        assert (await route())["queueDatas"] == queue_data
