"""CONSUMER_SEND_MSG_BACK (36) as RocketMQ's consumer sends it, over real TCP.

The requests are written from RocketMQ's protocol here (the header as
``MQClientAPIImpl.consumerSendMessageBack`` fills it); the copies are read
back with hand-built PULL_MESSAGE requests.
"""

from __future__ import annotations

import trio
from broker_nodes import Cluster
from test_pull_wire import PULL_MESSAGE, UPDATE_AND_CREATE_TOPIC, call
from test_runtime_info_wire import open_stream

from triomq.broker.core.headers import offset_msg_id
from triomq.protocol.message import decode
from triomq.testing.direct_send import DirectProducer

CONSUMER_SEND_MSG_BACK, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 36, 200
SUCCESS, SYSTEM_ERROR, SUBSCRIPTION_GROUP_NOT_EXIST, INVALID_PARAMETER = 0, 1, 26, 29
#: The brokers' settings for retries: every delay level short, so that a retry is
#: delivered from SCHEDULE_TOPIC_XXXX within a test's time.
LEVELS = " ".join(f"{10 * level}ms" for level in range(1, 19))
RETRY_EXTRA = f'message_delay_level = "{LEVELS}"'


def send_back_header(offset: int, *, delay_level: int = 0, max_times: int = 16,
                     group: str = "cg") -> dict:
    return {"offset": str(offset), "group": group, "delayLevel": str(delay_level),
            "originMsgId": "X", "originTopic": "orders", "unitMode": "false",
            "maxReconsumeTimes": str(max_times)}


def pull_fields(topic: str, offset: int = 0) -> dict:
    return {"consumerGroup": "cg", "topic": topic, "queueId": "0", "queueOffset": str(offset),
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
            "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}


async def pulled(stream: trio.SocketStream, topic: str, offset: int = 0):
    """The record at ``offset`` of ``topic``'s queue 0, once it is there (a delayed copy
    comes later)."""
    opaque = 1000
    with trio.fail_after(20):
        while True:
            opaque += 1
            header, body = await call(stream, PULL_MESSAGE, opaque, pull_fields(topic, offset))
            if header["code"] == SUCCESS:
                return decode(body, verify_crc=True)[0]
            await trio.sleep(0.05)


async def setup(stream: trio.SocketStream, a, client) -> int:
    """Topic ``orders``, group ``cg``, one message; its commit-log offset."""
    header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
        "topic": "orders", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
    assert header["code"] == SUCCESS
    header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 2, {},
                           b'{"groupName":"cg","retryMaxTimes":16}')
    assert header["code"] == SUCCESS
    sent = await DirectProducer(client.rpc, a.node.address).send("orders", b"paid", tags="t")
    return sent.physical_offset


async def test_a_failed_message_goes_to_the_retry_topic_then_the_dlq(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a", extra=RETRY_EXTRA) as a, cluster.client() as client:
        stream = await open_stream(a.node.address)
        async with stream:
            offset = await setup(stream, a, client)
            header, body = await call(stream, CONSUMER_SEND_MSG_BACK, 3,
                                      send_back_header(offset))
            assert (header["code"], header.get("remark"), body) == (SUCCESS, None, b"")
            assert a.topics.table.get("%RETRY%cg").perm == 6
            retried = await pulled(stream, "%RETRY%cg")
            first_id = offset_msg_id(a.processor.store_host, offset)
            props = retried.properties
            assert (retried.body, retried.reconsume_times, props["RETRY_TOPIC"],
                    props["ORIGIN_MESSAGE_ID"], props["TAGS"]) == (
                b"paid", 1, "orders", first_id, "t")
            # It waited out delay level 3 in SCHEDULE_TOPIC_XXXX, then came to the retry topic.
            assert (props["REAL_TOPIC"], "DELAY" in props) == ("%RETRY%cg", False)

            # Its retry fails too, with the consumer's maximum of 1: a dead letter.
            header, _ = await call(stream, CONSUMER_SEND_MSG_BACK, 4,
                                   send_back_header(retried.physical_offset, max_times=1))
            assert (header["code"], header.get("remark")) == (SUCCESS, None)
            dlq = a.topics.table.get("%DLQ%cg")
            assert (dlq.read_queue_nums, dlq.write_queue_nums) == (1, 1)
            dead = await pulled(stream, "%DLQ%cg")
            assert (dead.body, dead.reconsume_times, dead.properties["RETRY_TOPIC"],
                    dead.properties["ORIGIN_MESSAGE_ID"], dead.properties["DELAY"]) == (
                b"paid", 2, "orders", first_id, "0")


async def test_bad_send_backs_store_nothing(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    extra = RETRY_EXTRA + "\nauto_create_subscription_group = false"
    async with cluster.broker("a", extra=extra) as a, cluster.client() as client:
        stream = await open_stream(a.node.address)
        async with stream:
            offset = await setup(stream, a, client)
            end = a.log.max_offset
            for opaque, fields, answer in (
                    (3, send_back_header(offset, group="nobody"),
                     (SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group not exist, nobody")),
                    (4, send_back_header(offset + 1),
                     (SYSTEM_ERROR, f"look message by offset failed, {offset + 1}")),
                    (5, send_back_header(end + 4096),
                     (SYSTEM_ERROR, f"look message by offset failed, {end + 4096}")),
                    (6, {"group": "cg", "delayLevel": "0"},
                     (INVALID_PARAMETER, "CONSUMER_SEND_MSG_BACK: header field 'offset': "
                                         "missing")),
                    (7, {**send_back_header(offset), "delayLevel": "soon"},
                     (INVALID_PARAMETER, "CONSUMER_SEND_MSG_BACK: header field "
                                         "'delayLevel': expected an integer, got 'soon'"))):
                header, _ = await call(stream, CONSUMER_SEND_MSG_BACK, opaque, fields)
                assert (header["code"], header.get("remark")) == answer
            assert a.log.max_offset == end
            assert "%DLQ%cg" not in a.topics.table
            # The broker keeps serving.
            header, _ = await call(stream, CONSUMER_SEND_MSG_BACK, 8, send_back_header(offset))
            assert header["code"] == SUCCESS


async def test_a_retry_topic_that_cannot_be_created_stores_nothing(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a", extra=RETRY_EXTRA) as a, cluster.client() as client:
        stream = await open_stream(a.node.address)
        async with stream:
            offset = await setup(stream, a, client)
            # More retry queues than a topic may have: no retry topic.
            header, _ = await call(stream, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 3, {},
                                   b'{"groupName":"big","retryQueueNums":5000}')
            assert header["code"] == SUCCESS
            end = a.log.max_offset
            header, _ = await call(stream, CONSUMER_SEND_MSG_BACK, 6,
                                   send_back_header(offset, group="big"))
            assert (header["code"], header["remark"]) == (SYSTEM_ERROR,
                                                          "topic[%RETRY%big] not exist")
            # A read-only retry topic refuses the copy.
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 4, {
                "topic": "%RETRY%cg", "readQueueNums": "1", "writeQueueNums": "1",
                "perm": "4"})
            header, _ = await call(stream, CONSUMER_SEND_MSG_BACK, 5, send_back_header(offset))
            assert (header["code"], header["remark"]) == (
                16, "the topic[%RETRY%cg] sending message is forbidden")
            assert a.log.max_offset == end


async def test_a_slave_refuses_as_rocketmq_does(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("m", extra=RETRY_EXTRA) as m, \
            cluster.broker("s", broker_id=1, master=m.ha_address, extra=RETRY_EXTRA) as s, \
            cluster.client() as client:
        stream = await open_stream(m.node.address)
        async with stream:
            offset = await setup(stream, m, client)
        # The slave holds all the master wrote first: what it stores later can only be
        # the send-back's.
        with trio.fail_after(20):
            while s.log.max_offset < m.log.max_offset:
                await trio.sleep(0.01)
        stream = await open_stream(s.node.address)
        async with stream:
            end = s.log.max_offset
            header, _ = await call(stream, CONSUMER_SEND_MSG_BACK, 1, send_back_header(offset))
            assert (header["code"], header["remark"]) == (
                SYSTEM_ERROR, f"no master available along with {s.processor.store_host[0]}")
            assert s.log.max_offset == end
