"""mqadmin 5.3.3's resetOffsetByTime / skipAccumulatedMessage (222), brokerConsumeStats
(317) and queryMsgById -g -d (309), over real TCP, answered by a real broker.

The frames are written from RocketMQ's protocol here (headers as
``MQClientAPIImpl`` fills them), and the expected bodies are fastjson's bytes
as RocketMQ 5.3.3's broker writes them, not triomq's encoders' output.
"""

from __future__ import annotations

import re

from broker_nodes import Cluster
from test_admin_calls_wire import CLIENT_ID, frame, open_consumer, read_frame, request
from test_consume_stats_wire import call
from test_runtime_info_wire import open_stream

from triomq.testing.direct_send import DirectProducer

PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET = 11, 14, 15
UPDATE_AND_CREATE_TOPIC, VIEW_MESSAGE_BY_ID = 17, 33
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, INVOKE_BROKER_TO_RESET_OFFSET = 200, 222
CONSUME_MESSAGE_DIRECTLY, GET_BROKER_CONSUME_STATS = 309, 317
SUCCESS, SYSTEM_ERROR, NO_PERMISSION, TOPIC_NOT_EXIST, PULL_OFFSET_MOVED = 0, 1, 16, 17, 21
SUBSCRIPTION_GROUP_NOT_EXIST, INVALID_PARAMETER = 26, 29


def reset_header(timestamp: int, *, group: str = "cg", topic: str = "orders") -> dict:
    """As ``MQClientAPIImpl.invokeBrokerToResetOffset`` sends it (queueId -1, offset -1)."""
    return {"group": group, "topic": topic, "timestamp": str(timestamp), "isForce": "true",
            "queueId": "-1", "offset": "-1"}


def consume_stats_list(body: bytes) -> tuple[bytes, list[bytes], int, int]:
    """A ConsumeStatsList's address, its groups' entries that hold stats or are ``cg``,
    and its totals; the other groups' entries must be empty."""
    found = re.fullmatch(rb'\{"brokerAddr":"([^"]*)","consumeStatsList":\[(.*)\],'
                         rb'"totalDiff":(-?\d+),"totalInflightDiff":(-?\d+)\}', body)
    assert found is not None, body
    entries = re.findall(rb'\{"[^"]*":\[.*?\]\}(?=,\{"|$)', found[2])
    assert b",".join(entries) == found[2]
    kept = [e for e in entries if not e.endswith(b":[]}") or e.startswith(b'{"cg"')]
    return found[1], kept, int(found[3]), int(found[4])


def queue(queue_id: int) -> bytes:
    return b'{"brokerName":"broker-a","queueId":%d,"topic":"orders"}' % queue_id


async def produce(a, client) -> None:
    """Five messages in queue 0 and two in queue 1 of ``orders`` (two read queues)."""
    stream = await open_stream(a.node.address)
    async with stream:
        header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
            "topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
        assert header["code"] == SUCCESS
        header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 2, {},
                               b'{"groupName":"cg"}')
        assert header["code"] == SUCCESS
    producer = DirectProducer(client.rpc, a.node.address)
    for n in range(7):
        await producer.send("orders", b"m%d" % n, queue_id=0 if n < 5 else 1)


async def test_a_reset_moves_the_offsets_and_the_next_pull(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        await produce(a, client)
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 1, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "commitOffset": "1"})
            assert header["code"] == SUCCESS

            # skipAccumulatedMessage: timestamp -1, every queue to its end.
            header, body = await call(stream, INVOKE_BROKER_TO_RESET_OFFSET, 2,
                                      reset_header(-1))
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            assert body == b'{"offsetTable":{' + queue(0) + b":5," + queue(1) + b":2}}"

            # Until the group's next pull of the queue, its commits are not taken...
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 3, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "commitOffset": "2"})
            assert (header["code"], header["remark"]) == (
                SUCCESS, "Offset has been previously reset")
            header, _ = await call(stream, QUERY_CONSUMER_OFFSET, 4, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0"})
            assert (header["code"], header["extFields"]["offset"]) == (SUCCESS, "5")
            # ...and that pull is told where to go on.
            pull = {"consumerGroup": "cg", "topic": "orders", "queueId": "0",
                    "queueOffset": "1", "maxMsgNums": "32", "sysFlag": "5",
                    "commitOffset": "1", "suspendTimeoutMillis": "0", "subscription": "*",
                    "subVersion": "1"}
            header, body = await call(stream, PULL_MESSAGE, 5, pull)
            assert (header["code"], header["remark"], body) == (
                PULL_OFFSET_MOVED, "OFFSET_RESET", b"")
            fields = header["extFields"]
            assert (fields["nextBeginOffset"], fields["minOffset"], fields["maxOffset"]) == (
                "5", "0", "5")
            # Then the pull reads, and commits count, as before.
            header, _ = await call(stream, PULL_MESSAGE, 6, pull)
            assert (header["code"], header["remark"]) == (SUCCESS, "FOUND")
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 7, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "commitOffset": "3"})
            assert (header["code"], header.get("remark")) == (SUCCESS, None)

            # resetOffsetByTime to before the first message: every queue's start.
            header, body = await call(stream, INVOKE_BROKER_TO_RESET_OFFSET, 8,
                                      reset_header(0))
            assert body == b'{"offsetTable":{' + queue(0) + b":0," + queue(1) + b":0}}"
            # One queue to an offset of its own (resetOffsetByTime -q -o).
            header, body = await call(stream, INVOKE_BROKER_TO_RESET_OFFSET, 9, {
                **reset_header(0), "queueId": "1", "offset": "1"})
            assert body == b'{"offsetTable":{' + queue(1) + b":1}}"


async def test_a_reset_refused(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        await produce(a, client)
        stream = await open_stream(a.node.address)
        async with stream:
            for opaque, fields, answer in (
                    (1, reset_header(-1, topic="nope"),
                     (TOPIC_NOT_EXIST, "Topic nope does not exist")),
                    (2, reset_header(-1, group="nobody"),
                     (SUBSCRIPTION_GROUP_NOT_EXIST, "Group nobody does not exist")),
                    (3, {**reset_header(0), "queueId": "0", "offset": "9"},
                     (SYSTEM_ERROR, "Target offset 9 not in consume queue range [0-5]")),
                    (4, {"topic": "orders", "timestamp": "-1"},
                     (INVALID_PARAMETER, "INVOKE_BROKER_TO_RESET_OFFSET: header field "
                                         "'group': missing or empty")),
                    (5, {**reset_header(0), "timestamp": "now"},
                     (INVALID_PARAMETER, "INVOKE_BROKER_TO_RESET_OFFSET: header field "
                                         "'timestamp': expected an integer, got 'now'"))):
                header, body = await call(stream, INVOKE_BROKER_TO_RESET_OFFSET, opaque, fields)
                assert (header["code"], header["remark"], body) == (*answer, b"")


async def test_the_brokers_consume_stats(tmp_path, mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        await produce(a, client)
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 1, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "1", "commitOffset": "2"})
            assert header["code"] == SUCCESS
            # The last message the group consumed in queue 1 is the seventh produced.
            offset = 0
            for _ in range(6):
                header, stored = await call(stream, VIEW_MESSAGE_BY_ID, 3,
                                            {"offset": str(offset)})
                offset += int.from_bytes(stored[:4], "big")
            header, stored = await call(stream, VIEW_MESSAGE_BY_ID, 4, {"offset": str(offset)})
            last = int.from_bytes(stored[56:64], "big")  # storeTimestamp (IPv4 born host)

            header, body = await call(stream, GET_BROKER_CONSUME_STATS, 5, {"isOrder": "false"})
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            address = a.node.address.removeprefix("tcp://").encode()
            cg = (b'{"cg":[{"consumeTps":0.0,"offsetTable":{' + queue(0)
                  + b':{"brokerOffset":5,"consumerOffset":0,"lastTimestamp":0,"pullOffset":0},'
                  + queue(1) + b':{"brokerOffset":2,"consumerOffset":2,"lastTimestamp":%d,'
                  b'"pullOffset":0}}}]}' % last)
            # Every group the broker has a config for is listed, its system groups too
            # (RocketMQ's own, with no offsets: no stats), by name.
            assert consume_stats_list(body) == (address, [cg], 5, -2)
            # Only ordered topics: orders is not one.
            header, body = await call(stream, GET_BROKER_CONSUME_STATS, 6, {"isOrder": "true"})
            assert consume_stats_list(body) == (address, [b'{"cg":[]}'], 0, 0)
            header, _ = await call(stream, GET_BROKER_CONSUME_STATS, 7, {"isOrder": "yes"})
            assert (header["code"], header["remark"]) == (
                INVALID_PARAMETER, "GET_BROKER_CONSUME_STATS: header field 'isOrder': "
                                   "expected 'true' or 'false', got 'yes'")


async def test_a_message_consumed_directly_by_the_consumer(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        await produce(a, client)
        consumer = await open_consumer(a.node.address)
        admin = await open_stream(a.node.address)
        async with consumer, admin:
            header, stored = await call(admin, VIEW_MESSAGE_BY_ID, 1, {"offset": "0"})
            assert header["code"] == SUCCESS
            # The offset message id: store host 127.0.0.1, its port, commit-log offset 0.
            port = int(a.node.address.rpartition(":")[2])
            msg_id = f"7F000001{port:08X}{0:016X}"
            fields = {"consumerGroup": "cg", "clientId": CLIENT_ID, "msgId": msg_id,
                      "topic": "orders"}
            await admin.send_all(request(CONSUME_MESSAGE_DIRECTLY, 2, fields))
            # The consumer gets the stored message, and the broker's name and sysFlags.
            asked, body = await read_frame(consumer)
            assert (asked["code"], asked["extFields"], body) == (
                CONSUME_MESSAGE_DIRECTLY, {**fields, "brokerName": "broker-a",
                                           "topicSysFlag": "0", "groupSysFlag": "0"}, stored)
            # A ConsumeMessageDirectlyResult as RocketMQ 5.3.3's push consumer writes it
            # (a success has no remark: fastjson leaves the null out).
            result = (b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,'
                      b'"spentTimeMills":2}')
            await consumer.send_all(frame({"code": SUCCESS, "language": "JAVA", "version": 479,
                                           "opaque": asked["opaque"], "flag": 1}, result))
            header, relayed = await read_frame(admin)
            assert (header["code"], header["opaque"], relayed) == (SUCCESS, 2, result)

            for opaque, msg_fields, answer in (
                    (3, {"msgId": f"7F000001{port:08X}{1 << 40:016X}"},
                     (SYSTEM_ERROR, f"can not find message by the offset, {1 << 40}")),
                    (4, {"msgId": "zz"},
                     (INVALID_PARAMETER, "CONSUME_MESSAGE_DIRECTLY: header field 'msgId': "
                                         "not hex: 'zz'")),
                    (5, {"msgId": ""},
                     (INVALID_PARAMETER, "CONSUME_MESSAGE_DIRECTLY: header field 'msgId': "
                                         "missing")),
                    (6, {"clientId": "nobody"},
                     (SYSTEM_ERROR, "The Consumer <cg> <nobody> not online"))):
                header, body = await call(admin, CONSUME_MESSAGE_DIRECTLY, opaque,
                                          {**fields, **msg_fields})
                assert (header["code"], header["remark"], body) == (*answer, b"")



async def test_resets_and_direct_consumption_need_the_admin(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    secured = '\n[security]\nadmin_access_key = "ops"\nadmin_secret_key = "s3cret"\n'
    async with cluster.broker("a", extra=secured) as a:
        stream = await open_stream(a.node.address)
        async with stream:
            for opaque, code, fields in (
                    (1, INVOKE_BROKER_TO_RESET_OFFSET, reset_header(-1)),
                    (2, CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "cg", "clientId": CLIENT_ID,
                                                   "msgId": "7F000001" + "0" * 24})):
                header, _ = await call(stream, code, opaque, fields)
                assert header["code"] == NO_PERMISSION
                assert "needs admin access" in header["remark"]
            # The broker's stats stay open to anyone.
            header, _ = await call(stream, GET_BROKER_CONSUME_STATS, 3, {"isOrder": "false"})
            assert header["code"] == SUCCESS
