"""PULL_MESSAGE and the offset requests as a RocketMQ client sends them, over real TCP.

The frames are built here byte by byte from RocketMQ's remoting layout
(``length:4 | serializeType:1 headerLength:3 | JSON header | body``), not
with triomq's codec; the answers' headers are read the same way and the
pulled body is decoded as RocketMQ's ``MessageDecoder`` reads records.
"""

from __future__ import annotations

import json
import struct
import zlib

import trio
from broker_nodes import Cluster

from triomq.testing.direct_send import DirectProducer

PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET = 11, 14, 15
GET_ALL_CONSUMER_OFFSET, UPDATE_AND_CREATE_TOPIC = 43, 17
LITE_PULL_MESSAGE = 361
MAGIC_V1 = 0xDAA320A7


def frame(code: int, opaque: int, ext_fields: dict, body: bytes = b"") -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 435, "opaque": opaque,
                         "flag": 0, "extFields": ext_fields}).encode()
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


async def call(stream: trio.SocketStream, code: int, opaque: int, ext_fields: dict,
               body: bytes = b"") -> tuple[dict, bytes]:
    """Send one request; the answer's JSON header and its body."""
    await stream.send_all(frame(code, opaque, ext_fields, body))
    (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
    rest = await receive_exactly(stream, length)
    (word,) = struct.unpack_from(">I", rest)
    assert word >> 24 == 0  # a JSON header, as the request's
    header_length = word & 0xFFFFFF
    header = json.loads(rest[4:4 + header_length])
    assert header["opaque"] == opaque and header["flag"] & 1  # the answer to this request
    return header, rest[4 + header_length:]


def decode_messages(body: bytes) -> list[dict]:
    """Records as RocketMQ's MessageDecoder.decodes reads them (IPv4 hosts)."""
    messages, pos = [], 0
    while pos < len(body):
        total, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag = \
            struct.unpack_from(">iIiiiqqi", body, pos)
        at = pos + 4 * 5 + 8 * 2 + 4
        born_timestamp, = struct.unpack_from(">q", body, at)
        at += 8 + 8  # bornTimestamp, bornHost (4 + 4)
        store_timestamp, = struct.unpack_from(">q", body, at)
        at += 8 + 8 + 4 + 8  # storeTimestamp, storeHost, reconsumeTimes, preparedTxOffset
        body_length, = struct.unpack_from(">i", body, at)
        payload = body[at + 4:at + 4 + body_length]
        at += 4 + body_length
        topic_length = body[at]
        topic = body[at + 1:at + 1 + topic_length].decode()
        at += 1 + topic_length
        properties_length, = struct.unpack_from(">h", body, at)
        properties = body[at + 2:at + 2 + properties_length].decode()
        at += 2 + properties_length
        assert at - pos == total and magic == MAGIC_V1
        assert body_crc == zlib.crc32(payload) & 0x7FFFFFFF
        messages.append({"totalSize": total, "queueId": queue_id, "queueOffset": queue_offset,
                         "physicalOffset": physical_offset, "topic": topic, "body": payload,
                         "properties": properties, "storeTimestamp": store_timestamp,
                         "bornTimestamp": born_timestamp, "sysFlag": sys_flag, "flag": flag})
        pos += total
    return messages


async def test_a_rocketmq_client_pulls_and_commits_over_tcp(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        producer = DirectProducer(client.rpc, a.node.address)
        for i in range(3):
            await producer.send("orders", b"payload-%d" % i, tags="tagA" if i != 1 else "tagB")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            # As the Java client sends it: every value a string...
            fields = {"consumerGroup": "cg", "topic": "orders", "queueId": "0",
                      "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "5",
                      "commitOffset": "0", "suspendTimeoutMillis": "20000",
                      "subscription": "tagA", "subVersion": "1700000000000",
                      "expressionType": "TAG", "maxMsgBytes": "1048576"}
            header, body = await call(stream, PULL_MESSAGE, 7, fields)
            assert (header["code"], header["remark"]) == (0, "FOUND")
            ext = header["extFields"]
            assert (ext["nextBeginOffset"], ext["minOffset"], ext["maxOffset"],
                    ext["suggestWhichBrokerId"]) == ("3", "0", "3", "0")
            messages = decode_messages(body)
            assert [m["body"] for m in messages] == [b"payload-0", b"payload-2"]
            assert [m["queueOffset"] for m in messages] == [0, 2]
            assert {m["topic"] for m in messages} == {"orders"}
            assert all("TAGS\x01tagA\x02" in m["properties"] for m in messages)
            assert body == b"".join(a.log.read(m["physicalOffset"], m["totalSize"])
                                    for m in messages)
            # ...or, from other clients, JSON numbers: read as their text.
            header, body = await call(stream, PULL_MESSAGE, 8, {
                **fields, "queueOffset": 3, "queueId": 0, "sysFlag": 4, "maxMsgNums": 32})
            assert (header["code"], header["remark"], body) == (19, "OFFSET_OVERFLOW_ONE", b"")
            assert header["extFields"]["nextBeginOffset"] == "3"
            header, _ = await call(stream, PULL_MESSAGE, 9, {**fields, "queueOffset": "99"})
            assert (header["code"], header["extFields"]["nextBeginOffset"]) == (21, "3")
            header, _ = await call(stream, PULL_MESSAGE, 10, {**fields, "topic": "nope"})
            assert header["code"] == 17 and "nope" in header["remark"]
            # Offsets: update, query, the whole table.
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 11, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "commitOffset": "3"})
            assert header["code"] == 0
            header, _ = await call(stream, QUERY_CONSUMER_OFFSET, 12, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0"})
            assert (header["code"], header["extFields"]["offset"]) == (0, "3")
            header, _ = await call(stream, QUERY_CONSUMER_OFFSET, 13, {
                "consumerGroup": "other", "topic": "orders", "queueId": "1",
                "setZeroIfNotFound": "false"})
            assert header["code"] == 22
            header, body = await call(stream, GET_ALL_CONSUMER_OFFSET, 14, {})
            assert json.loads(body)["offsetTable"] == {"orders@cg": {"0": 3}}


def lite_pull_fields(offset: int) -> dict:
    """RocketMQ 5's DefaultLitePullConsumer: suspend, subscription and the lite flag (0x10)."""
    return {"consumerGroup": "lite", "topic": "orders", "queueId": "0",
            "queueOffset": str(offset), "maxMsgNums": "10", "sysFlag": str(0x2 | 0x4 | 0x10),
            "commitOffset": "0", "suspendTimeoutMillis": "20000", "subscription": "*",
            "subVersion": "0", "expressionType": "TAG", "maxMsgBytes": "2147483647",
            "bname": "broker-a"}


async def test_a_lite_pull_consumer_pulls_with_its_own_request_code(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        producer = DirectProducer(client.rpc, a.node.address)
        for i in range(2):
            await producer.send("orders", b"lite-%d" % i)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            header, body = await call(stream, LITE_PULL_MESSAGE, 1, lite_pull_fields(0))
            assert (header["code"], header["extFields"]["nextBeginOffset"]) == (0, "2")
            assert [m["body"] for m in decode_messages(body)] == [b"lite-0", b"lite-1"]
            # Past the end, without a message to wait for: as a pull would be answered.
            fields = {**lite_pull_fields(5), "sysFlag": str(0x4 | 0x10)}
            header, _ = await call(stream, LITE_PULL_MESSAGE, 2, fields)
            assert (header["code"], header["extFields"]["nextBeginOffset"]) == (21, "2")


async def test_lite_pulls_are_refused_when_the_broker_disables_them(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    extra = "lite_pull_message_enable = false"
    async with cluster.broker("a", extra=extra) as a, cluster.client() as client:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        await DirectProducer(client.rpc, a.node.address).send("orders", b"kept")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            header, body = await call(stream, LITE_PULL_MESSAGE, 1, lite_pull_fields(0))
            assert header["code"] == 16 and "lite_pull_message_enable" in header["remark"]
            assert body == b""
            # A plain pull on the same connection is still served.
            header, body = await call(stream, PULL_MESSAGE, 2,
                                      {**lite_pull_fields(0), "sysFlag": "4"})
            assert header["code"] == 0
            assert [m["body"] for m in decode_messages(body)] == [b"kept"]
