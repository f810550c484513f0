"""Consumer offsets on a broker: the requests, consumerOffset.json, restarts, a slave's copy."""

from __future__ import annotations

import json

from broker_nodes import Cluster, wait_until

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.testing.direct_send import DirectProducer

CREATE = {"topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}


def commit(offset: int, queue_id: int = 0, group: str = "cg", topic: str = "orders"
           ) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
            "commitOffset": str(offset)}


def query(queue_id: int = 0, group: str = "cg", **extra: str) -> dict[str, str]:
    return {"consumerGroup": group, "topic": "orders", "queueId": str(queue_id), **extra}


async def test_offsets_are_committed_queried_and_kept_across_a_restart(tmp_path,
                                                                        autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        call = client.rpc.invoke
        address = a.node.address
        assert (await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)).code == 0
        # Nothing stored, and no message at offset 0: not found.
        answer = await call(address, RequestCode.QUERY_CONSUMER_OFFSET, query())
        assert answer.code == ResponseCode.QUERY_NOT_FOUND and "cg" in answer.remark
        # A new group on a queue whose first message is at offset 0 starts there...
        await DirectProducer(client.rpc, address).send("orders", b"x", queue_id=1)
        answer = await call(address, RequestCode.QUERY_CONSUMER_OFFSET, query(1))
        assert (answer.code, answer.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
        # ...unless it asks not to be set to zero.
        answer = await call(address, RequestCode.QUERY_CONSUMER_OFFSET,
                            query(1, setZeroIfNotFound="false"))
        assert answer.code == ResponseCode.QUERY_NOT_FOUND
        for offset, queue_id in [(5, 0), (7, 1), (6, 0)]:
            answer = await call(address, RequestCode.UPDATE_CONSUMER_OFFSET,
                                commit(offset, queue_id))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        answer = await call(address, RequestCode.QUERY_CONSUMER_OFFSET, query())
        assert (answer.code, answer.ext_fields["offset"]) == (ResponseCode.SUCCESS, "6")
        everything = json.loads((await call(address, RequestCode.GET_ALL_CONSUMER_OFFSET)).body)
        assert everything["offsetTable"] == {"orders@cg": {"0": 6, "1": 7}}
    # Written on the way out, in RocketMQ's shape.
    written = json.loads((tmp_path / "a" / "config" / "consumerOffset.json").read_bytes())
    assert written == {"offsetTable": {"orders@cg": {"0": 6, "1": 7}},
                       "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 0}}
    async with cluster.broker("a") as a, cluster.client() as client:
        answer = await client.rpc.invoke(a.node.address, RequestCode.QUERY_CONSUMER_OFFSET,
                                         query(1))
        assert (answer.code, answer.ext_fields["offset"]) == (ResponseCode.SUCCESS, "7")


async def test_offsets_are_written_periodically_with_a_backup(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    path = tmp_path / "a" / "config" / "consumerOffset.json"
    async with cluster.broker("a") as a, cluster.client() as client:
        await client.rpc.invoke(a.node.address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        await client.rpc.invoke(a.node.address, RequestCode.UPDATE_CONSUMER_OFFSET, commit(3))
        await wait_until(path.exists)  # within flush_consumer_offset_interval (5 s)
        await client.rpc.invoke(a.node.address, RequestCode.UPDATE_CONSUMER_OFFSET, commit(4))
        await wait_until(lambda: b'"0":4' in path.read_bytes())
        assert b'"0":3' in path.with_name("consumerOffset.json.bak").read_bytes()


async def test_bad_offset_requests_name_what_and_store_nothing(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        address = a.node.address
        await client.rpc.invoke(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        for code, fields, named in [
            (ResponseCode.TOPIC_NOT_EXIST, commit(1, topic="nope"), "nope"),
            (ResponseCode.INVALID_PARAMETER, commit(1, queue_id=2), "queueId[2]"),
            (ResponseCode.INVALID_PARAMETER, commit(1, queue_id=-1), "queueId[-1]"),
            (ResponseCode.INVALID_PARAMETER, {**commit(1), "queueId": "x"}, "queueId"),
            (ResponseCode.INVALID_PARAMETER, {**commit(1), "commitOffset": ""}, "commitOffset"),
            (ResponseCode.INVALID_PARAMETER, {"topic": "orders"}, "consumerGroup"),
        ]:
            answer = await client.rpc.invoke(address, RequestCode.UPDATE_CONSUMER_OFFSET, fields)
            assert (answer.code, named in (answer.remark or "")) == (code, True), answer.remark
        answer = await client.rpc.invoke(address, RequestCode.QUERY_CONSUMER_OFFSET,
                                         {"topic": "orders", "consumerGroup": "cg"})
        assert answer.code == ResponseCode.INVALID_PARAMETER and "queueId" in answer.remark
        assert a.offsets.table.offsets() == {}  # the same connection still answers:
        assert (await client.rpc.invoke(address, RequestCode.UPDATE_CONSUMER_OFFSET,
                                        commit(1))).code == ResponseCode.SUCCESS
    async with cluster.broker("b", extra="auto_create_subscription_group = false") as b, \
            cluster.client() as client:
        await client.rpc.invoke(b.node.address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        answer = await client.rpc.invoke(b.node.address, RequestCode.UPDATE_CONSUMER_OFFSET,
                                         commit(1, group="stranger"))
        assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "stranger" in answer.remark and b.offsets.table.offsets() == {}


async def test_a_slave_copies_offsets_takes_commits_and_keeps_them_as_master(
        tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("m") as m, cluster.client() as client, \
            cluster.broker("s", broker_id=1, master=m.ha_address) as s:
        s.master_rpc_address = lambda: m.node.address
        await client.rpc.invoke(m.node.address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        await client.rpc.invoke(m.node.address, RequestCode.UPDATE_CONSUMER_OFFSET, commit(8))
        await wait_until(lambda: s.offsets.table.query("cg", "orders", 0) == 8, timeout=60)
        assert s.offsets.table.data_version == m.offsets.table.data_version
        # A slave stores a commit sent to it (its own group here; the master's copy would
        # bring the master's offset back for a group both hold).
        # The topic as the slave's copy of its master's topics would bring it.
        s.topics.table.adopt(m.topics.table.configs(), m.topics.table.data_version)
        answer = await client.rpc.invoke(s.node.address, RequestCode.UPDATE_CONSUMER_OFFSET,
                                         commit(3, group="reader"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert s.offsets.table.query("reader", "orders", 0) == 3
        # Elected master, it answers from what it copied.
        await s.replicas.change_to_master(2, s.broker_id)
        answer = await client.rpc.invoke(s.node.address, RequestCode.QUERY_CONSUMER_OFFSET,
                                         query())
        assert (answer.code, answer.ext_fields["offset"]) == (ResponseCode.SUCCESS, "8")
    written = json.loads((tmp_path / "s" / "config" / "consumerOffset.json").read_bytes())
    assert written["offsetTable"] == {"orders@cg": {"0": 8}, "orders@reader": {"0": 3}}
