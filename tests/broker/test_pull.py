"""PULL_MESSAGE on a broker: found records, long polls, commits, refusals, slaves."""

from __future__ import annotations

import json

import trio
from broker_nodes import Cluster, caught_up, wait_until

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.protocol.message import decode
from triomq.testing.direct_send import DirectProducer

CREATE = {"topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
SUSPEND, SUBSCRIPTION, COMMIT = 0x2, 0x4, 0x1


def pull(offset: int, *, queue_id: int = 0, flags: int = SUBSCRIPTION, subscription: str = "*",
         timeout_ms: int = 15000, max_msg_nums: int = 32, group: str = "cg",
         topic: str = "orders", commit_offset: int = 0, **extra: str) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
            "queueOffset": str(offset), "maxMsgNums": str(max_msg_nums), "sysFlag": str(flags),
            "commitOffset": str(commit_offset), "suspendTimeoutMillis": str(timeout_ms),
            "subscription": subscription, "subVersion": "0", "expressionType": "TAG", **extra}


def records(body: bytes) -> list:
    found, pos = [], 0
    while pos < len(body):
        record, size = decode(body, pos)
        found.append(record)
        pos += size
    return found


async def test_found_records_filtered_by_tag_and_the_commit_flag(tmp_path, autojump_clock
                                                                 ) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        producer = DirectProducer(client.rpc, address)
        for i, tag in enumerate(["a", "b", "a", None, "c"]):
            await producer.send("orders", b"m%d" % i, tags=tag)
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(0))
        assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, "FOUND")
        assert answer.ext_fields == {"nextBeginOffset": "5", "minOffset": "0", "maxOffset": "5",
                                     "suggestWhichBrokerId": "0", "topicSysFlag": "0",
                                     "groupSysFlag": "0"}
        found = records(answer.body)
        assert [r.body for r in found] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        # The body is the commit log's bytes as stored.
        first = found[0].physical_offset
        assert answer.body == a.log.read(first, len(answer.body))
        answer = await call(address, RequestCode.PULL_MESSAGE,
                            pull(1, subscription="a || c", max_msg_nums=2))
        assert [r.queue_offset for r in records(answer.body)] == [2, 4]
        assert answer.ext_fields["nextBeginOffset"] == "5"
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(3, subscription="zzz"))
        assert (answer.code, answer.remark, answer.ext_fields["nextBeginOffset"]) == (
            ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", "5")
        # The commit flag stores the consumer's offset as it pulls.
        await call(address, RequestCode.PULL_MESSAGE,
                   pull(5, flags=SUBSCRIPTION | COMMIT, commit_offset=4, timeout_ms=0))
        assert a.offsets.table.query("cg", "orders", 0) == 4


async def test_a_long_poll_is_answered_when_a_message_arrives(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        answers = []

        async def long_poll() -> None:
            answers.append(await call(address, RequestCode.PULL_MESSAGE,
                                      pull(0, flags=SUBSCRIPTION | SUSPEND), timeout=60))

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await wait_until(lambda: len(a.pulls.holds) == 1)
            await trio.sleep(3)
            assert answers == []
            # Another queue's message wakes nobody.
            await DirectProducer(client.rpc, address).send("orders", b"other", queue_id=1)
            await trio.sleep(1)
            assert answers == [] and len(a.pulls.holds) == 1
            await DirectProducer(client.rpc, address).send("orders", b"hello", queue_id=0)
        assert trio.current_time() - start < 5
        assert answers[0].code == ResponseCode.SUCCESS
        assert [r.body for r in records(answers[0].body)] == [b"hello"]
        assert len(a.pulls.holds) == 0


async def test_a_long_poll_times_out_with_pull_not_found(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a:
        await times_out_then_goes_away(cluster, a)
        # The consumer's connection closed: its held pull went with it.
        await wait_until(lambda: len(a.pulls.holds) == 0)
    async with cluster.broker("b", extra="long_polling_enable = false") as b, \
            cluster.client() as client:
        await client.rpc.invoke(b.node.address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        start = trio.current_time()
        answer = await client.rpc.invoke(b.node.address, RequestCode.PULL_MESSAGE,
                                         pull(0, flags=SUBSCRIPTION | SUSPEND), timeout=60)
        assert answer.code == ResponseCode.PULL_NOT_FOUND
        assert 1 <= round(trio.current_time() - start, 6) < 2  # short_polling_time_mills


async def times_out_then_goes_away(cluster: Cluster, a) -> None:
    async with cluster.client() as client:
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        await DirectProducer(client.rpc, address).send("orders", b"x")
        start = trio.current_time()
        answer = await call(address, RequestCode.PULL_MESSAGE,
                            pull(1, flags=SUBSCRIPTION | SUSPEND, timeout_ms=7000), timeout=60)
        assert 7 <= round(trio.current_time() - start, 6) < 8  # clock floats, rounded
        assert (answer.code, answer.remark) == (ResponseCode.PULL_NOT_FOUND,
                                                "OFFSET_OVERFLOW_ONE")
        assert answer.ext_fields["nextBeginOffset"] == "1" and not answer.body
        # Without the suspend flag nothing waits.
        start = trio.current_time()
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(1))
        assert answer.code == ResponseCode.PULL_NOT_FOUND and trio.current_time() == start
        # A consumer that stops waiting leaves its pull held until it goes away.
        with trio.move_on_after(1):
            await call(address, RequestCode.PULL_MESSAGE, pull(1, flags=SUBSCRIPTION | SUSPEND))
        assert len(a.pulls.holds) == 1


async def test_bad_pulls_name_what_and_touch_nothing(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        producer = DirectProducer(client.rpc, address)
        for i in range(3):
            await producer.send("orders", b"%d" % i)
        end, table = a.log.max_offset, a.topics.table.encode()
        for fields, code, named in [
            (pull(0, topic="nope"), ResponseCode.TOPIC_NOT_EXIST, "nope"),
            (pull(0, queue_id=2), ResponseCode.INVALID_PARAMETER, "queueId[2]"),
            (pull(0, queue_id=-1), ResponseCode.INVALID_PARAMETER, "queueId[-1]"),
            (pull(0, subscription="||"), ResponseCode.SUBSCRIPTION_PARSE_FAILED, "'||'"),
            (pull(0, flags=0), ResponseCode.SUBSCRIPTION_NOT_EXIST, "cg"),
            ({**pull(0), "queueOffset": "x"}, ResponseCode.INVALID_PARAMETER, "queueOffset"),
            ({**pull(0), "maxMsgNums": ""}, ResponseCode.INVALID_PARAMETER, "maxMsgNums"),
            (pull(0, group=""), ResponseCode.INVALID_PARAMETER, "consumerGroup"),
        ]:
            answer = await call(address, RequestCode.PULL_MESSAGE, fields)
            assert (answer.code, named in (answer.remark or "")) == (code, True), answer.remark
        # Offsets out of range: moved, to the end or to the start.
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(9))
        assert (answer.code, answer.remark, answer.ext_fields["nextBeginOffset"]) == (
            ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", "3")
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(-5))
        assert (answer.code, answer.remark, answer.ext_fields["nextBeginOffset"]) == (
            ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", "0")
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(4, queue_id=1))
        assert (answer.code, answer.remark, answer.ext_fields["nextBeginOffset"]) == (
            ResponseCode.PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE", "0")
        # The connection still serves; nothing stored changed.
        assert (await call(address, RequestCode.PULL_MESSAGE, pull(0))).code == 0
        assert (a.log.max_offset, a.topics.table.encode()) == (end, table)
        assert a.offsets.table.offsets() == {}
    async with cluster.broker("b", extra="auto_create_subscription_group = false") as b, \
            cluster.client() as client:
        await client.rpc.invoke(b.node.address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        answer = await client.rpc.invoke(b.node.address, RequestCode.PULL_MESSAGE,
                                         pull(0, group="stranger"))
        assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "stranger" in answer.remark


async def test_a_slave_serves_pulls_and_its_long_polls_wake_on_replication(
        tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("m") as m, cluster.client() as client, \
            cluster.broker("s", broker_id=1, master=m.ha_address,
                           extra="slave_read_enable = true") as s, \
            cluster.broker("t", broker_id=2, master=m.ha_address) as t:
        call = client.rpc.invoke
        await call(m.node.address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        for slave in (s, t):
            slave.topics.table.adopt(m.topics.table.configs(), m.topics.table.data_version)
        await DirectProducer(client.rpc, m.node.address).send("orders", b"first")
        await caught_up(m, s, t)
        # Consumers read as far as the confirm offset, which a slave learns from its
        # master's next frame.
        await wait_until(lambda: all(x.replicas.confirm_offset == m.log.max_offset
                                     for x in (s, t)))
        # The group has no master known to these slaves (no name server, static mode):
        # they serve reads, slave_read_enable or not.
        for slave in (s, t):
            answer = await call(slave.node.address, RequestCode.PULL_MESSAGE, pull(0))
            assert [r.body for r in records(answer.body)] == [b"first"]
        answers = []

        async def long_poll() -> None:
            answers.append(await call(s.node.address, RequestCode.PULL_MESSAGE,
                                      pull(1, flags=SUBSCRIPTION | SUSPEND), timeout=60))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await wait_until(lambda: len(s.pulls.holds) == 1)
            await DirectProducer(client.rpc, m.node.address).send("orders", b"second")
        assert [r.body for r in records(answers[0].body)] == [b"second"]
        # A slave offset out of range moves nothing.
        answer = await call(s.node.address, RequestCode.PULL_MESSAGE, pull(9))
        assert (answer.code, answer.ext_fields["nextBeginOffset"]) == (
            ResponseCode.PULL_RETRY_IMMEDIATELY, "9")
        # With its master online, a slave without slave_read_enable refuses pulls, and
        # one with it sends what it has not found back to the master.
        s.master_rpc_address = t.master_rpc_address = lambda: m.node.address
        answer = await call(t.node.address, RequestCode.PULL_MESSAGE, pull(0))
        assert answer.code == ResponseCode.SYSTEM_BUSY and "slave_read_enable" in answer.remark
        answer = await call(s.node.address, RequestCode.PULL_MESSAGE,
                            pull(2, flags=SUBSCRIPTION | SUSPEND))
        assert (answer.code, answer.ext_fields["suggestWhichBrokerId"]) == (
            ResponseCode.PULL_RETRY_IMMEDIATELY, "0")
        answer = await call(s.node.address, RequestCode.PULL_MESSAGE, pull(0))
        assert answer.code == ResponseCode.SUCCESS


async def test_a_push_consumers_pull_filters_by_its_heartbeats_subscription(
        tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        producer = DirectProducer(client.rpc, address)
        for tag in ["a", "b", "a"]:
            await producer.send("orders", tag.encode(), tags=tag)
        heartbeat = {"clientID": "10.0.0.5@1", "consumerDataSet": [{
            "groupName": "cg", "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": "orders", "subString": "b", "tagsSet": ["b"],
                                     "codeSet": [98], "subVersion": 5, "expressionType": "TAG",
                                     "classFilterMode": False}]}]}
        beat = await call(address, RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
        assert beat.code == ResponseCode.SUCCESS, beat.remark
        # No subscription in the pull (a push consumer's): the registered one filters.
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(0, flags=0))
        assert [r.body for r in records(answer.body)] == [b"b"]
        answer = await call(address, RequestCode.PULL_MESSAGE, {**pull(0, flags=0),
                                                                "subVersion": "6"})
        assert answer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
