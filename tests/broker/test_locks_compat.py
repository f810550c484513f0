"""HEART_BEAT, GET_CONSUMER_LIST_BY_GROUP and LOCK_BATCH_MQ frames built by hand from
RocketMQ's wire format (not triomq's codec), sent over real TCP as a Java client does."""

from __future__ import annotations

import json
import struct

import trio
from broker_nodes import Cluster

from triomq.broker.consume.core.lock_table import MessageQueue

JAVA_HEARTBEAT = (
    b'{"clientID":"192.168.1.5@12345#1700000000000","consumerDataSet":[{"consumeFromWhere":'
    b'"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cg",'
    b'"messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],'
    b'"expressionType":"TAG","subString":"*","subVersion":1700000000001,"tagsSet":[],'
    b'"topic":"orders"},{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
    b'"subString":"*","subVersion":1700000000002,"tagsSet":[],"topic":"%RETRY%cg"}],'
    b'"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":'
    b'"CLIENT_INNER_PRODUCER"}],"withoutSub":false}')
JAVA_LOCK = (
    b'{"clientId":"192.168.1.5@12345#1700000000000","consumerGroup":"cg","mqSet":['
    b'{"brokerName":"broker-a","queueId":0,"topic":"orders"},'
    b'{"brokerName":"broker-a","queueId":1,"topic":"orders"}],"onlyThisBroker":false}')


def frame(code: int, opaque: int, body: bytes, ext_fields: dict | None = None) -> bytes:
    """length:4 | serialize type 0 (JSON) << 24 | header length:4 | header | body."""
    header = {"code": code, "language": "JAVA", "version": 453, "opaque": opaque, "flag": 0}
    if ext_fields is not None:
        header["extFields"] = ext_fields
    raw = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


async def read_frame(stream: trio.SocketStream, buffer: bytearray) -> tuple[dict, bytes]:
    while len(buffer) < 4 or len(buffer) < 4 + struct.unpack_from(">i", buffer)[0]:
        data = await stream.receive_some(65536)
        assert data, "the broker closed the connection"
        buffer += data
    length, word = struct.unpack_from(">ii", buffer)
    assert word >> 24 == 0  # answered in JSON, as asked
    header_length = word & 0xFFFFFF
    header = json.loads(bytes(buffer[8:8 + header_length]))
    body = bytes(buffer[8 + header_length:4 + length])
    del buffer[:4 + length]
    return header, body


async def test_java_frames_over_tcp(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        host, port = a.node.address.removeprefix("tcp://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        buffer = bytearray()
        async with stream:
            await stream.send_all(frame(34, 1, JAVA_HEARTBEAT))
            header, body = await read_frame(stream, buffer)
            assert (header["code"], header["opaque"], header["flag"] & 1) == (0, 1, 1)
            # The group changed: the broker pushes NOTIFY_CONSUMER_IDS_CHANGED, oneway.
            header, body = await read_frame(stream, buffer)
            assert (header["code"], header["flag"], header["extFields"]) == (
                40, 2, {"consumerGroup": "cg"})
            await stream.send_all(frame(38, 2, b"", {"consumerGroup": "cg"}))
            header, body = await read_frame(stream, buffer)
            assert header["code"] == 0 and json.loads(body) == {
                "consumerIdList": ["192.168.1.5@12345#1700000000000"]}
            await stream.send_all(frame(41, 3, JAVA_LOCK))
            header, body = await read_frame(stream, buffer)
            assert header["code"] == 0
            assert sorted(mq["queueId"] for mq in json.loads(body)["lockOKMQSet"]) == [0, 1]
            # A bad body is answered on the same connection, which serves on.
            await stream.send_all(frame(41, 4, b"{"))
            header, body = await read_frame(stream, buffer)
            assert (header["code"], header["opaque"]) == (29, 4)
            assert header["remark"] == "LOCK_BATCH_MQ: body: not valid JSON"
            await stream.send_all(frame(42, 5, JAVA_LOCK))
            header, body = await read_frame(stream, buffer)
            assert (header["code"], header["opaque"]) == (0, 5)
        now = int(trio.current_time() * 1000)
        assert a.locks.table.holder("cg", MessageQueue("orders", "broker-a", 0), now) is None
        assert a.clients.subscription("cg", "%RETRY%cg").sub_version == 1700000000002
