"""A broker's topics: administration requests, send-time checks, topics.json across restarts."""

from __future__ import annotations

import json

from broker_nodes import Cluster

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.testing.direct_send import DirectProducer, SendError

CREATE = {"topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}


async def test_topics_are_administered_checked_on_send_and_kept(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        address = a.node.address
        answer = await client.rpc.invoke(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        for fields, code, fragment in [
            ({**CREATE, "topic": "bad topic"}, ResponseCode.INVALID_PARAMETER, "illegal"),
            ({**CREATE, "topic": "TBW102"}, ResponseCode.INVALID_PARAMETER, "system topic"),
            ({**CREATE, "writeQueueNums": "5000"}, ResponseCode.INVALID_PARAMETER, "1..1024"),
            ({**CREATE, "perm": "x"}, ResponseCode.INVALID_PARAMETER, "'perm'"),
        ]:
            refused = await client.rpc.invoke(address, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                              fields)
            assert (refused.code, fragment in (refused.remark or "")) == (code, True)
        table = json.loads((await client.rpc.invoke(
            address, RequestCode.GET_ALL_TOPIC_CONFIG)).body)
        assert table["topicConfigTable"]["orders"]["writeQueueNums"] == 2
        producer = DirectProducer(client.rpc, address)
        assert (await producer.send("orders", b"x", queue_id=1)).queue_id == 1
        for topic, queue_id, code in [("orders", 2, ResponseCode.MESSAGE_ILLEGAL),
                                      ("no such", 0, ResponseCode.INVALID_PARAMETER),
                                      ("SCHEDULE_TOPIC_XXXX", 0, ResponseCode.NO_PERMISSION)]:
            try:
                await producer.send(topic, b"x", queue_id=queue_id)
            except SendError as exc:
                assert exc.code == code
            else:
                raise AssertionError(f"a send to {topic} queue {queue_id} was taken")
        # Auto-creation (on by default): a new topic from TBW102, 8 queues.
        assert (await producer.send("fresh", b"x", queue_id=7)).queue_id == 7
        deleted = await client.rpc.invoke(address, RequestCode.DELETE_TOPIC_IN_BROKER,
                                          {"topic": "fresh"})
        assert deleted.code == ResponseCode.SUCCESS
    async with cluster.broker("a") as a:
        assert a.topics.table.get("orders").write_queue_nums == 2
        assert a.topics.table.get("fresh") is None
    assert (tmp_path / "a" / "config" / "topics.json.bak").exists()


async def test_without_auto_creation_an_unknown_topic_does_not_exist(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="auto_create_topic_enable = false") as a, \
            cluster.client() as client:
        try:
            await DirectProducer(client.rpc, a.node.address).send("fresh", b"x")
        except SendError as exc:
            assert exc.code == ResponseCode.TOPIC_NOT_EXIST
            assert "apply first" in str(exc)
        else:
            raise AssertionError("an unknown topic was created")
