"""mqadmin's questions about topics, clients and groups, over real TCP, answered by a real broker.

GET_TOPIC_STATS_INFO (``topicStatus``), GET_CONSUMER_CONNECTION_LIST
(``consumerConnection``), GET_PRODUCER_CONNECTION_LIST
(``producerConnection``), QUERY_TOPIC_CONSUME_BY_WHO (``queryMsgById``),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP / DELETE_SUBSCRIPTIONGROUP
(``updateSubGroup`` / ``deleteSubGroup``). The frames and the expected
bodies are written from RocketMQ's protocol here (``call`` and ``fastjson``
of ``test_consume_stats_wire``), not by triomq's encoders.
"""

from __future__ import annotations

import json

import trio
from broker_nodes import Cluster
from test_consume_stats_wire import call, fastjson, heartbeat
from test_runtime_info_wire import open_stream

from triomq.testing.direct_send import DirectProducer

UPDATE_CONSUMER_OFFSET, UPDATE_AND_CREATE_TOPIC, HEART_BEAT = 15, 17, 34
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 200, 201
GET_TOPIC_STATS_INFO, GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST = 202, 203, 204
DELETE_SUBSCRIPTIONGROUP, QUERY_TOPIC_CONSUME_BY_WHO = 207, 300
SUCCESS, SYSTEM_ERROR, TOPIC_NOT_EXIST, INVALID_PARAMETER = 0, 1, 17, 29
CONSUMER_NOT_ONLINE, NO_PERMISSION = 206, 16

#: A SubscriptionGroupConfig as RocketMQ 4.9.8's mqadmin updateSubGroup sends it.
SUB_GROUP_498 = {
    "groupName": "billing", "consumeEnable": True, "consumeFromMinEnable": False,
    "consumeBroadcastEnable": False, "retryQueueNums": 2, "retryMaxTimes": 3, "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}


def local_address(stream: trio.SocketStream) -> str:
    host, port = stream.socket.getsockname()[:2]
    return f"{host}:{port}"


async def test_topic_stats_per_queue_and_the_put_rate(tmp_path, mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
                "topic": "orders", "readQueueNums": "1", "writeQueueNums": "2", "perm": "6"})
            assert header["code"] == SUCCESS
            producer = DirectProducer(client.rpc, a.node.address)
            stored = [await producer.send("orders", b"m%d" % n, queue_id=n % 2)
                      for n in range(3)]
            assert [r.queue_offset for r in stored] == [0, 0, 1]
            header, body = await call(stream, GET_TOPIC_STATS_INFO, 2, {"topic": "orders"})
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            fields = dict(fastjson(body.decode()))
            assert set(fields) == {"offsetTable", "topicPutTps"}
            # Three puts in the last minute.
            assert fields["topicPutTps"] == 0.05
            table = {tuple(v for _, v in key): dict(value) for key, value in fields["offsetTable"]}
            last = {q: a.log.read_record(a.log.queue_entries("orders", q, a.log.queue_max_offset(
                "orders", q) - 1, 1)[0][1]).store_timestamp for q in (0, 1)}
            # Every queue of the larger count (2 write queues, 1 read queue).
            assert table == {
                ("broker-a", 0, "orders"): {"lastUpdateTimestamp": last[0], "maxOffset": 2,
                                            "minOffset": 0},
                ("broker-a", 1, "orders"): {"lastUpdateTimestamp": last[1], "maxOffset": 1,
                                            "minOffset": 0}}

            header, body = await call(stream, GET_TOPIC_STATS_INFO, 3, {"topic": "nope"})
            assert (header["code"], header["remark"], body) == (
                TOPIC_NOT_EXIST, "topic[nope] not exist", b"")
            header, _ = await call(stream, GET_TOPIC_STATS_INFO, 4, {})
            assert header["code"] == INVALID_PARAMETER
            assert header["remark"] == "GET_TOPIC_STATS_INFO: header field 'topic': missing"


async def test_connections_of_a_consumer_and_a_producer_group(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        stream = await open_stream(a.node.address)
        async with stream:
            beat = json.loads(heartbeat("cg", ["orders"]))
            beat["producerDataSet"] = [{"groupName": "pg"}]
            header, _ = await call(stream, HEART_BEAT, 1, {}, json.dumps(beat).encode())
            assert header["code"] == SUCCESS
            # The client's id, its address, and the language and version of its header.
            connection = {"clientAddr": local_address(stream), "clientId": "10.0.0.5@4242",
                          "language": "JAVA", "version": 435}
            header, body = await call(stream, GET_CONSUMER_CONNECTION_LIST, 2,
                                      {"consumerGroup": "cg"})
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            assert json.loads(body) == {
                "connectionSet": [connection], "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "subscriptionTable": {"orders": {
                    "classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                    "subString": "*", "subVersion": 1, "tagsSet": [], "topic": "orders"}}}
            header, body = await call(stream, GET_PRODUCER_CONNECTION_LIST, 3,
                                      {"producerGroup": "pg"})
            assert header["code"] == SUCCESS
            assert json.loads(body) == {"connectionSet": [connection]}

            # Groups nobody runs, as RocketMQ answers them; a header without the group.
            for opaque, code, fields, answer in (
                    (4, GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "nobody"},
                     (CONSUMER_NOT_ONLINE, "the consumer group[nobody] not online")),
                    (5, GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "nobody"},
                     (SYSTEM_ERROR, "the producer group[nobody] not exist")),
                    (6, GET_CONSUMER_CONNECTION_LIST, {"producerGroup": "pg"},
                     (INVALID_PARAMETER, "GET_CONSUMER_CONNECTION_LIST: header field "
                                         "'consumerGroup': missing")),
                    (7, GET_PRODUCER_CONNECTION_LIST, {"producerGroup": ""},
                     (INVALID_PARAMETER, "GET_PRODUCER_CONNECTION_LIST: header field "
                                         "'producerGroup': missing"))):
                header, body = await call(stream, code, opaque, fields)
                assert (header["code"], header["remark"]) == answer and body == b""


async def test_who_consumes_a_topic_online_or_by_offsets(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
                "topic": "orders", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
            header, _ = await call(stream, HEART_BEAT, 2, {}, heartbeat("online", ["orders"]))
            # "gone" committed an offset once and runs no consumer now.
            header, _ = await call(stream, HEART_BEAT, 3, {}, heartbeat("gone", ["orders"]))
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 4, {
                "consumerGroup": "gone", "topic": "orders", "queueId": "0", "commitOffset": "0"})
            assert header["code"] == SUCCESS
            header, _ = await call(stream, HEART_BEAT, 5, {}, heartbeat("online", ["orders"]))
            header, body = await call(stream, QUERY_TOPIC_CONSUME_BY_WHO, 6, {"topic": "orders"})
            assert (header["code"], json.loads(body)) == (
                SUCCESS, {"groupList": ["gone", "online"]})
            header, body = await call(stream, QUERY_TOPIC_CONSUME_BY_WHO, 7, {"topic": "nope"})
            assert (header["code"], body) == (SUCCESS, b'{"groupList":[]}')
            header, _ = await call(stream, QUERY_TOPIC_CONSUME_BY_WHO, 8, {})
            assert (header["code"], header["remark"]) == (
                INVALID_PARAMETER, "QUERY_TOPIC_CONSUME_BY_WHO: header field 'topic': missing")


async def groups_held(stream: trio.SocketStream, opaque: int) -> dict:
    header, body = await call(stream, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, opaque, {})
    assert header["code"] == SUCCESS
    return json.loads(body)["subscriptionGroupTable"]


async def test_an_admin_creates_updates_and_deletes_a_subscription_group(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 1, {},
                                   json.dumps(SUB_GROUP_498).encode())
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            held = (await groups_held(stream, 2))["billing"]
            # What 4.9.8 sends, and RocketMQ 5's defaults for what it does not.
            assert held == {**SUB_GROUP_498, "consumeMessageOrderly": False,
                            "groupSysFlag": 0, "consumeTimeoutMinute": 15,
                            "groupRetryPolicy": {"type": "CUSTOMIZED"}, "attributes": {}}
            header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 3, {},
                                   json.dumps({**SUB_GROUP_498, "consumeEnable": False}).encode())
            assert header["code"] == SUCCESS
            assert (await groups_held(stream, 4))["billing"]["consumeEnable"] is False

            # Its offsets go with it when the admin asks (RocketMQ 4's removeOffset).
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 12, {
                "topic": "orders", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
            header, _ = await call(stream, HEART_BEAT, 5, {}, heartbeat("billing", ["orders"]))
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 6, {
                "consumerGroup": "billing", "topic": "orders", "queueId": "0",
                "commitOffset": "0"})
            assert header["code"] == SUCCESS
            header, _ = await call(stream, DELETE_SUBSCRIPTIONGROUP, 7,
                                   {"groupName": "billing", "removeOffset": "true"})
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            assert "billing" not in await groups_held(stream, 8)
            header, body = await call(stream, QUERY_TOPIC_CONSUME_BY_WHO, 9, {"topic": "orders"})
            assert json.loads(body) == {"groupList": ["billing"]}  # online, no offsets now
            assert a.offsets is not None and a.offsets.table.groups_of("orders") == set()
            # A group that is not there: deleted all the same, as RocketMQ answers.
            header, _ = await call(stream, DELETE_SUBSCRIPTIONGROUP, 10,
                                   {"groupName": "never", "cleanOffset": "true"})
            assert header["code"] == SUCCESS
            header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 11, {},
                                   json.dumps({**SUB_GROUP_498, "groupName": "kept"}).encode())
            assert header["code"] == SUCCESS
    # RocketMQ's file holds what the admin left.
    written = json.loads((tmp_path / "a" / "config" / "subscriptionGroup.json").read_bytes())
    assert "kept" in written["subscriptionGroupTable"]
    assert "billing" not in written["subscriptionGroupTable"]


async def test_bad_subscription_group_requests_name_the_field(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        stream = await open_stream(a.node.address)
        async with stream:
            for opaque, body, fragment in (
                    (1, b"", "body: missing"),
                    (2, b"{not json", "body: not valid JSON"),
                    (3, json.dumps({**SUB_GROUP_498, "groupName": None}).encode(),
                     "body.groupName: expected a name"),
                    (4, json.dumps({**SUB_GROUP_498, "retryMaxTimes": "3"}).encode(),
                     "body.retryMaxTimes: expected int"),
                    (5, json.dumps({**SUB_GROUP_498, "groupName": "a b"}).encode(),
                     "The specified group: 'a b', contains illegal characters"),
                    (6, json.dumps({**SUB_GROUP_498, "attributes": {"+k": "v"}}).encode(),
                     "attributes: unsupported key: '+k'")):
                header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, opaque, {},
                                       body)
                assert header["code"] == INVALID_PARAMETER, (body, header)
                assert header["remark"].startswith("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ")
                assert fragment in header["remark"], (fragment, header["remark"])
            for opaque, fields, fragment in (
                    (7, {}, "header field 'groupName': missing"),
                    (8, {"groupName": "billing", "cleanOffset": "yes"},
                     "header field 'cleanOffset': expected 'true' or 'false', got 'yes'")):
                header, _ = await call(stream, DELETE_SUBSCRIPTIONGROUP, opaque, fields)
                assert (header["code"], header["remark"]) == (
                    INVALID_PARAMETER, f"DELETE_SUBSCRIPTIONGROUP: {fragment}")
            assert "billing" not in await groups_held(stream, 9)


async def test_subscription_group_changes_need_the_admin(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    secured = '\n[security]\nadmin_access_key = "ops"\nadmin_secret_key = "s3cret"\n'
    async with cluster.broker("a", extra=secured) as a:
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 1, {},
                                   json.dumps(SUB_GROUP_498).encode())
            assert header["code"] == NO_PERMISSION
            header, _ = await call(stream, DELETE_SUBSCRIPTIONGROUP, 2, {"groupName": "x"})
            assert header["code"] == NO_PERMISSION
            # Questions stay open to anyone.
            header, _ = await call(stream, QUERY_TOPIC_CONSUME_BY_WHO, 3, {"topic": "t"})
            assert header["code"] == SUCCESS
