"""mqadmin 5.3.3's requests on one topic and one consumer, over real TCP, answered by real brokers.

GET_TOPIC_CONFIG (``topicStatus``, ``consumerProgress``), topic and
subscription-group changes on a slave (``deleteSubGroup -c`` sends the
retry and dead-letter topics' deletes to every replica), and
GET_CONSUMER_RUNNING_INFO (``consumerStatus``), which the broker passes on
to the consumer's own connection. The frames and the expected bodies are
written from RocketMQ's protocol here (fastjson's bytes as RocketMQ 5.3.3's
broker writes them), not by triomq's encoders.
"""

from __future__ import annotations

import json
import struct

import trio
from broker_nodes import Cluster, wait_until
from test_consume_stats_wire import call, heartbeat
from test_pull_wire import receive_exactly
from test_runtime_info_wire import open_stream

from triomq.broker.consume import clients

UPDATE_AND_CREATE_TOPIC, HEART_BEAT, NOTIFY_CONSUMER_IDS_CHANGED = 17, 34, 40
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP = 200, 207
DELETE_TOPIC_IN_BROKER, GET_CONSUMER_RUNNING_INFO, GET_TOPIC_CONFIG = 215, 307, 351
SUCCESS, SYSTEM_ERROR, TOPIC_NOT_EXIST = 0, 1, 17
INVALID_PARAMETER, CONSUME_MSG_TIMEOUT = 29, 207

CLIENT_ID = "10.0.0.5@4242"
#: A ConsumerRunningInfo as RocketMQ 5.3.3's push consumer answers it (fastjson; trimmed).
RUNNING_INFO = (
    b'{"mqPopTable":{},"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"orders"}:'
    b'{"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,'
    b'"commitOffset":3,"droped":false,"lastConsumeTimestamp":1700000000000,'
    b'"lastLockTimestamp":1700000000000,"lastPullTimestamp":1700000000000,"locked":true,'
    b'"transactionMsgCount":0,"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,'
    b'"tryUnlockTimes":0}},"properties":{"PROP_CLIENT_VERSION":"V5_3_3",'
    b'"PROP_CONSUMEORDERLY":"false","PROP_CONSUMER_START_TIMESTAMP":"1700000000000",'
    b'"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY","PROP_NAMESERVER_ADDR":"127.0.0.1:9876;",'
    b'"PROP_THREADPOOL_CORE_SIZE":"20","consumerGroup":"cg"},"statusTable":{"orders":'
    b'{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,"consumeOKTPS":0.05,"consumeRT":3.0,'
    b'"pullRT":10.0,"pullTPS":0.05}},"subscriptionSet":[{"classFilterMode":false,"codeSet":[],'
    b'"expressionType":"TAG","subString":"*","subVersion":1700000000000,"tagsSet":[],'
    b'"topic":"orders"}],"userConsumerInfo":{}}')


def frame(header: dict, body: bytes = b"") -> bytes:
    """``length | headerLength | JSON header | body``."""
    data = json.dumps(header).encode()
    return struct.pack(">iI", 4 + len(data) + len(body), len(data)) + data + body


async def read_frame(stream: trio.SocketStream) -> tuple[dict, bytes]:
    """The next frame that is not the broker's NOTIFY_CONSUMER_IDS_CHANGED (oneway)."""
    while True:
        (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
        rest = await receive_exactly(stream, length)
        header_length = struct.unpack_from(">I", rest)[0] & 0xFFFFFF
        header = json.loads(rest[4:4 + header_length])
        if (header["code"], header["flag"]) != (NOTIFY_CONSUMER_IDS_CHANGED, 2):
            return header, rest[4 + header_length:]


def request(code: int, opaque: int, fields: dict, *, version: int = 479) -> bytes:
    return frame({"code": code, "language": "JAVA", "version": version, "opaque": opaque,
                  "flag": 0, "extFields": fields})


def create_topic(topic: str) -> dict:
    return {"topic": topic, "readQueueNums": "2", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "true"}


async def test_one_topics_config_as_fastjson_writes_it(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        stream = await open_stream(a.node.address)
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, create_topic("orders"))
            assert header["code"] == SUCCESS
            # As MQClientAPIImpl.getTopicConfig sends it: lo=true, and the broker's name.
            header, body = await call(stream, GET_TOPIC_CONFIG, 2,
                                      {"topic": "orders", "lo": "true", "bname": "broker-a"})
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            assert body == (
                b'{"attributes":{},"order":true,"perm":6,"readQueueNums":2,'
                b'"topicFilterType":"SINGLE_TAG","topicName":"orders","topicSysFlag":0,'
                b'"writeQueueNums":4}')
            header, body = await call(stream, GET_TOPIC_CONFIG, 3, {"topic": "nope"})
            assert (header["code"], header["remark"], body) == (
                TOPIC_NOT_EXIST, "No topic in this broker. topic: nope", b"")
            for opaque, fields, fragment in (
                    (4, {"lo": "true"}, "'topic': missing"),
                    (5, {"topic": "orders", "lo": "yes"},
                     "'lo': expected 'true' or 'false', got 'yes'")):
                header, body = await call(stream, GET_TOPIC_CONFIG, opaque, fields)
                assert (header["code"], header["remark"]) == (
                    INVALID_PARAMETER, f"GET_TOPIC_CONFIG: header field {fragment}")


async def test_a_slave_takes_deletes_and_group_changes_until_it_copies_its_master(
        tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    period = "slave_synchronize_period = 50"
    async with cluster.broker("m", extra=period) as m, \
            cluster.broker("s", broker_id=1, master=m.ha_address, extra=period) as s:
        copying = True
        s.master_rpc_address = lambda: m.node.address if copying else None
        master, slave = await open_stream(m.node.address), await open_stream(s.node.address)
        async with master, slave:
            for opaque, topic in ((1, "orders"), (2, "%RETRY%billing")):
                header, _ = await call(master, UPDATE_AND_CREATE_TOPIC, opaque,
                                       create_topic(topic))
                assert header["code"] == SUCCESS
            header, _ = await call(master, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 3, {},
                                   b'{"groupName":"billing"}')
            assert header["code"] == SUCCESS
            await wait_until(lambda: "orders" in s.topics.table
                             and s.clients.groups.get("billing") is not None)
            copying = False
            await trio.sleep(0.2)  # a copy under way when it stopped is over

            # Taken on the slave, as RocketMQ's broker takes them.
            for opaque, code, fields, body in (
                    (4, DELETE_TOPIC_IN_BROKER, {"topic": "orders"}, b""),
                    (5, DELETE_SUBSCRIPTIONGROUP, {"groupName": "billing",
                                                   "cleanOffset": "true"}, b""),
                    (6, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                     b'{"groupName":"slave-only"}')):
                header, _ = await call(slave, code, opaque, fields, body)
                assert (header["code"], header.get("remark")) == (SUCCESS, None)
            assert "orders" not in s.topics.table
            assert s.clients.groups.get("billing") is None
            assert s.clients.groups.get("slave-only") is not None
            # So is a topic's creation (RocketMQ's updateAndCreateTopic checks no role).
            header, _ = await call(slave, UPDATE_AND_CREATE_TOPIC, 7, create_topic("fresh"))
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            assert "fresh" in s.topics.table

            # The next copy puts the master's tables back.
            copying = True
            await wait_until(lambda: "orders" in s.topics.table
                             and "fresh" not in s.topics.table
                             and s.clients.groups.get("billing") is not None
                             and s.clients.groups.get("slave-only") is None)

            # mqadmin deleteSubGroup -c: the group on the master, then the retry
            # topic on every replica, slave included; the copies keep it deleted.
            header, _ = await call(master, DELETE_SUBSCRIPTIONGROUP, 8,
                                   {"groupName": "billing", "cleanOffset": "false"})
            assert header["code"] == SUCCESS
            for stream in (slave, master):
                header, _ = await call(stream, DELETE_TOPIC_IN_BROKER, 9,
                                       {"topic": "%RETRY%billing"})
                assert (header["code"], header.get("remark")) == (SUCCESS, None)
            await wait_until(lambda: s.topics.table == m.topics.table
                             and s.clients.groups == m.clients.groups)
            assert "%RETRY%billing" not in s.topics.table
            assert s.clients.groups.get("billing") is None


async def open_consumer(address: str, *, version: int = 479) -> trio.SocketStream:
    """A connection that heartbeats as ``CLIENT_ID`` in group ``cg``."""
    stream = await open_stream(address)
    await stream.send_all(frame({"code": HEART_BEAT, "language": "JAVA", "version": version,
                                 "opaque": 1, "flag": 0, "extFields": {}},
                                heartbeat("cg", ["orders"])))
    header, _ = await read_frame(stream)
    assert (header["code"], header["flag"]) == (SUCCESS, 1)
    return stream


async def test_the_consumers_running_info_is_asked_of_the_consumer(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        consumer = await open_consumer(a.node.address)
        admin = await open_stream(a.node.address)
        async with consumer, admin:
            fields = {"consumerGroup": "cg", "clientId": CLIENT_ID, "jstackEnable": "false"}
            for opaque, code, remark, body in (
                    # The Java client leaves the remark its response was created with.
                    (11, SUCCESS, "not set any response code", RUNNING_INFO),
                    (12, SYSTEM_ERROR, "The Consumer Group <cg> not exist in this consumer",
                     b"")):
                await admin.send_all(request(GET_CONSUMER_RUNNING_INFO, opaque, fields))
                # The consumer gets the request as the admin tool sent it...
                asked, asked_body = await read_frame(consumer)
                assert (asked["code"], asked["flag"], asked["extFields"], asked_body) == (
                    GET_CONSUMER_RUNNING_INFO, 0, fields, b"")
                answer = {"code": code, "language": "JAVA", "version": 479,
                          "opaque": asked["opaque"], "flag": 1}
                if remark is not None:
                    answer["remark"] = remark
                await consumer.send_all(frame(answer, body))
                # ...and the admin tool its answer, whole.
                header, relayed = await read_frame(admin)
                assert (header["code"], header.get("remark"), header["opaque"],
                        header["flag"] & 1, relayed) == (code, remark, opaque, 1, body)


async def test_a_consumer_the_broker_cannot_ask(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(clients, "CALL_TIMEOUT", 0.2)
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        consumer = await open_consumer(a.node.address)
        old = await open_consumer(a.node.address, version=61)  # V3_1_7, before 3.1.8
        admin = await open_stream(a.node.address)
        async with consumer, old, admin:
            for opaque, fields, answer in (
                    (1, {"consumerGroup": "cg", "clientId": "nobody"},
                     (SYSTEM_ERROR, "The Consumer <cg> <nobody> not online")),
                    (2, {"consumerGroup": "other", "clientId": CLIENT_ID},
                     (SYSTEM_ERROR, f"The Consumer <other> <{CLIENT_ID}> not online")),
                    (3, {"clientId": CLIENT_ID},
                     (INVALID_PARAMETER, "GET_CONSUMER_RUNNING_INFO: header field "
                                         "'consumerGroup': missing")),
                    (4, {"consumerGroup": "cg"},
                     (INVALID_PARAMETER, "GET_CONSUMER_RUNNING_INFO: header field "
                                         "'clientId': missing"))):
                header, body = await call(admin, GET_CONSUMER_RUNNING_INFO, opaque, fields)
                assert (header["code"], header["remark"], body) == (*answer, b"")

            # The consumer does not answer in time.
            fields = {"consumerGroup": "cg", "clientId": CLIENT_ID}
            header, _ = await call(admin, GET_CONSUMER_RUNNING_INFO, 5, fields)
            assert header["code"] == CONSUME_MSG_TIMEOUT
            assert header["remark"].startswith(f"consumer <cg> <{CLIENT_ID}> Timeout: ")
            asked, _ = await read_frame(consumer)
            assert asked["code"] == GET_CONSUMER_RUNNING_INFO

            # Both connections heartbeat as CLIENT_ID: the old client is the one left.
            await consumer.aclose()
            await wait_until(lambda: a.clients.table.consumer_ids("cg") == [CLIENT_ID])
            header, _ = await call(admin, GET_CONSUMER_RUNNING_INFO, 6, fields)
            assert (header["code"], header["remark"]) == (
                SYSTEM_ERROR, f"The Consumer <{CLIENT_ID}> Version <61> too low to finish, "
                              f"please upgrade it to V3_1_8_SNAPSHOT")


async def test_a_consumer_gone_before_it_answers(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        consumer = await open_consumer(a.node.address)
        admin = await open_stream(a.node.address)
        async with admin:
            await admin.send_all(request(GET_CONSUMER_RUNNING_INFO, 1, {
                "consumerGroup": "cg", "clientId": CLIENT_ID}))
            asked, _ = await read_frame(consumer)
            assert asked["code"] == GET_CONSUMER_RUNNING_INFO
            await consumer.aclose()
            header, body = await read_frame(admin)
            assert (header["code"], header["opaque"], body) == (SYSTEM_ERROR, 1, b"")
            assert header["remark"].startswith(f"invoke consumer <cg> <{CLIENT_ID}> Exception: ")
