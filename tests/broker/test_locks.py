"""Queue locks: granted, refused to another client, expiring, renewed, unlocked."""

from __future__ import annotations

import json

import trio
from broker_nodes import Cluster

from triomq.broker.consume.core.lock_table import LockTable, MessageQueue
from triomq.broker.core.codes import RequestCode, ResponseCode

Q0 = MessageQueue("orders", "broker-a", 0)
Q1 = MessageQueue("orders", "broker-a", 1)


def test_the_lock_table_follows_rocketmqs_rules() -> None:
    table = LockTable(max_live_time=60_000)
    assert table.try_lock_batch("cg", [Q0, Q1, Q0], "c1", now=0) == [Q0, Q1]
    assert table.try_lock_batch("cg", [Q0, Q1], "c2", now=1000) == []  # held by c1
    assert table.try_lock_batch("other", [Q0], "c2", now=1000) == [Q0]  # per group
    assert table.try_lock_batch("cg", [Q0], "c1", now=50_000) == [Q0]  # renewed
    assert table.holder("cg", Q1, now=60_000) == "c1"  # 60 s exactly: still live
    assert table.holder("cg", Q1, now=60_001) is None
    assert table.try_lock_batch("cg", [Q0, Q1], "c2", now=60_001) == [Q1]  # Q0 was renewed
    table.unlock_batch("cg", [Q0, Q1], "c2")  # only its own: Q1
    assert (table.holder("cg", Q0, 60_001), table.holder("cg", Q1, 60_001)) == ("c1", None)
    assert table.expire(now=200_000) == 2 and len(table) == 0


def lock_body(client_id: str, *queue_ids: int, group: str = "cg") -> bytes:
    return json.dumps({
        "consumerGroup": group, "clientId": client_id, "onlyThisBroker": False,
        "mqSet": [{"topic": "orders", "brokerName": "broker-a", "queueId": q}
                  for q in queue_ids]}).encode()


async def test_locks_over_rpc(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        async def lock(client_id: str, *queue_ids: int) -> list[int]:
            answer = await client.rpc.invoke(a.node.address, RequestCode.LOCK_BATCH_MQ, {},
                                             lock_body(client_id, *queue_ids))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            held = json.loads(answer.body)["lockOKMQSet"]
            assert all(set(mq) == {"topic", "brokerName", "queueId"} for mq in held)
            return [mq["queueId"] for mq in held]

        async def unlock(client_id: str, *queue_ids: int) -> None:
            answer = await client.rpc.invoke(a.node.address, RequestCode.UNLOCK_BATCH_MQ, {},
                                             lock_body(client_id, *queue_ids))
            assert (answer.code, answer.body) == (ResponseCode.SUCCESS, b"")

        assert await lock("c1", 0, 1) == [0, 1]
        assert await lock("c2", 0, 1, 2) == [2]
        await unlock("c2", 0)  # not c2's: stays c1's
        assert await lock("c2", 0) == []
        await unlock("c1", 0)
        assert await lock("c2", 0) == [0]
        # c1 stops renewing queue 1: 60 s later it is free.
        await trio.sleep(30)
        assert await lock("c2", 1) == []
        await trio.sleep(31)
        assert await lock("c2", 1) == [1]
        await trio.sleep(200)  # nobody renews: the table forgets them
        assert len(a.locks.table) == 0


async def test_bad_lock_bodies_name_the_field(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    good = json.loads(lock_body("c1", 0))
    cases = [
        (b"", "body: missing"),
        ({**good, "consumerGroup": None}, "'consumerGroup': missing"),
        ({**good, "consumerGroup": "a b"}, "'consumerGroup': The specified group"),
        ({**good, "clientId": 7}, "'clientId': expected a string"),
        ({**good, "onlyThisBroker": "yes"}, "'onlyThisBroker': expected a boolean"),
        ({**good, "mqSet": {}}, "'mqSet': expected an array"),
        ({**good, "mqSet": [5]}, "'mqSet[0]': expected an object"),
        ({**good, "mqSet": [{"topic": "t", "brokerName": "b", "queueId": -1}]},
         "'mqSet[0].queueId': expected a queue id"),
        ({**good, "mqSet": [{"topic": "t", "queueId": 1}]}, "'mqSet[0].brokerName': missing"),
        ({**good, "mqSet": [{"topic": "t t", "brokerName": "b", "queueId": 1}]},
         "'mqSet[0].topic'"),
    ]
    async with cluster.broker("a") as a, cluster.client() as client:
        for code, name in ((RequestCode.LOCK_BATCH_MQ, "LOCK_BATCH_MQ"),
                           (RequestCode.UNLOCK_BATCH_MQ, "UNLOCK_BATCH_MQ")):
            for body, fragment in cases:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                answer = await client.rpc.invoke(a.node.address, code, {}, raw)
                assert answer.code == ResponseCode.INVALID_PARAMETER, answer.remark
                assert answer.remark.startswith(f"{name}: body") and fragment in answer.remark, (
                    fragment, answer.remark)
        answer = await client.rpc.invoke(a.node.address, RequestCode.LOCK_BATCH_MQ, {},
                                         lock_body("c1", 0))
        assert json.loads(answer.body)["lockOKMQSet"] == good["mqSet"]
