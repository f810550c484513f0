"""GET_CONSUME_STATS as ``mqadmin`` sends it, over real TCP, answered by a real broker.

The requests are built byte by byte from RocketMQ's remoting layout (as in
``test_pull_wire``), and the answer's body, fastjson's ``ConsumeStats`` with
``MessageQueue`` objects as map keys (not JSON), is read by a small parser
written here, not by triomq's decoder.

The clock is trio's ``MockClock`` standing still (sockets do not need it to
move): the rate counted over the last minute is exact, and the minute passes
when the test says so.
"""

from __future__ import annotations

import json
import re
import struct

import trio
from broker_nodes import Cluster
from test_pull_wire import decode_messages, receive_exactly

from triomq.testing.direct_send import DirectProducer

GET_CONSUME_STATS, HEART_BEAT, PULL_MESSAGE = 208, 34, 11
UPDATE_CONSUMER_OFFSET, UPDATE_AND_CREATE_TOPIC, NOTIFY_CONSUMER_IDS_CHANGED = 15, 17, 40


async def call(stream: trio.SocketStream, code: int, opaque: int, ext_fields: dict,
               body: bytes = b"") -> tuple[dict, bytes]:
    """One request (``length | headerLength | JSON header | body``); the answer's header
    and body. The broker's own requests on the way (a consumer group's change, after a
    heartbeat: NOTIFY_CONSUMER_IDS_CHANGED, oneway) are passed over."""
    header = json.dumps({"code": code, "language": "JAVA", "version": 435, "opaque": opaque,
                         "flag": 0, "extFields": ext_fields}).encode()
    await stream.send_all(struct.pack(">iI", 4 + len(header) + len(body), len(header))
                          + header + body)
    while True:
        (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
        rest = await receive_exactly(stream, length)
        header_length = struct.unpack_from(">I", rest)[0] & 0xFFFFFF
        answer = json.loads(rest[4:4 + header_length])
        if answer["flag"] & 1:
            assert answer["opaque"] == opaque
            return answer, rest[4 + header_length:]
        assert (answer["code"], answer["flag"]) == (NOTIFY_CONSUMER_IDS_CHANGED, 2)


_TOKEN = re.compile(r'\s*(?:([{}\[\]:,])|("(?:[^"\\]|\\.)*")|([^\s{}\[\]:,]+))')


def fastjson(text: str):
    """fastjson's output read whole: objects become lists of (key, value) pairs, so a
    key may be an object too."""
    tokens = [m.group(1) or m.group(2) or m.group(3) for m in _TOKEN.finditer(text)]
    assert "".join(tokens) == re.sub(r"\s", "", text)
    pos = 0

    def value():
        nonlocal pos
        token = tokens[pos]
        pos += 1
        if token not in ("{", "["):
            return json.loads(token)
        items, closer = [], "}" if token == "{" else "]"
        while tokens[pos] != closer:
            item = value()
            if token == "{":
                assert tokens[pos] == ":"
                pos += 1
                item = (item, value())
            items.append(item)
            if tokens[pos] == ",":
                pos += 1
        pos += 1
        return items

    result = value()
    assert pos == len(tokens)
    return result


def consume_stats(body: bytes) -> tuple[float, dict]:
    """``consumeTps`` and the table as ``{(topic, brokerName, queueId): {field: value}}``."""
    fields = dict(fastjson(body.decode()))
    assert set(fields) == {"consumeTps", "offsetTable"}
    table = {}
    for key, value in fields["offsetTable"]:
        key = dict(key)
        table[key["topic"], key["brokerName"], key["queueId"]] = dict(value)
    return fields["consumeTps"], table


def heartbeat(group: str, topics: list[str]) -> bytes:
    return json.dumps({
        "clientID": "10.0.0.5@4242", "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [{"topic": t, "subString": "*", "tagsSet": [], "codeSet": [],
                                     "subVersion": 1, "expressionType": "TAG",
                                     "classFilterMode": False} for t in topics]}]}).encode()


async def test_consume_stats_after_a_produce_and_a_partial_consume(tmp_path, mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            header, _ = await call(stream, UPDATE_AND_CREATE_TOPIC, 1, {
                "topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"})
            assert header["code"] == 0, header
            producer = DirectProducer(client.rpc, a.node.address)
            for n in range(7):
                await producer.send("orders", b"m%d" % n, queue_id=0 if n < 5 else 1)
            header, _ = await call(stream, HEART_BEAT, 2, {}, heartbeat("cg", ["orders"]))
            assert header["code"] == 0, header
            # The group reads three messages of queue 0 and commits its offset.
            header, body = await call(stream, PULL_MESSAGE, 3, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "3", "sysFlag": "0", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "1"})
            assert (header["code"], header["remark"]) == (0, "FOUND")
            pulled = decode_messages(body)
            assert [m["queueOffset"] for m in pulled] == [0, 1, 2]
            header, _ = await call(stream, UPDATE_CONSUMER_OFFSET, 4, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "commitOffset": "3"})
            assert header["code"] == 0

            expected = {
                ("orders", "broker-a", 0): {"brokerOffset": 5, "consumerOffset": 3,
                                            "pullOffset": 3,
                                            "lastTimestamp": pulled[2]["storeTimestamp"]},
                ("orders", "broker-a", 1): {"brokerOffset": 2, "consumerOffset": 0,
                                            "pullOffset": 0, "lastTimestamp": 0}}
            # The topics the group committed offsets for, or the one named.
            for opaque, fields in ((5, {"consumerGroup": "cg"}),
                                   (6, {"consumerGroup": "cg", "topic": "orders"})):
                header, body = await call(stream, GET_CONSUME_STATS, opaque, fields)
                assert (header["code"], header.get("remark")) == (0, None)
                assert consume_stats(body) == (3 / 60, expected)

            # A topic the group's online consumers do not subscribe to: no queue. A
            # group nobody runs: each queue of a named topic, nothing without one.
            header, body = await call(stream, GET_CONSUME_STATS, 7, {
                "consumerGroup": "cg", "topic": "%RETRY%cg"})
            assert (header["code"], body) == (0, b'{"consumeTps":0.0,"offsetTable":{}}')
            header, body = await call(stream, GET_CONSUME_STATS, 8, {
                "consumerGroup": "nobody", "topic": "orders"})
            assert consume_stats(body) == (0.0, {
                ("orders", "broker-a", q): {"brokerOffset": end, "consumerOffset": 0,
                                            "pullOffset": 0, "lastTimestamp": 0}
                for q, end in ((0, 5), (1, 2))})
            header, body = await call(stream, GET_CONSUME_STATS, 9, {"consumerGroup": "nobody"})
            assert (header["code"], body) == (0, b'{"consumeTps":0.0,"offsetTable":{}}')

            # A minute later the pulls no longer count.
            mock_clock.jump(60)
            header, body = await call(stream, GET_CONSUME_STATS, 10, {"consumerGroup": "cg"})
            assert consume_stats(body) == (0.0, expected)


async def test_a_bad_request_is_answered_and_the_connection_stays_open(tmp_path,
                                                                       mock_clock) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            for opaque, topic in enumerate(("nope", "bad topic!", "x" * 128), 1):
                header, body = await call(stream, GET_CONSUME_STATS, opaque,
                                          {"consumerGroup": "cg", "topic": topic})
                # As RocketMQ 5: a topic this broker lacks adds nothing to the table.
                assert header["code"] == 0 and consume_stats(body) == (0.0, {})
            header, _ = await call(stream, GET_CONSUME_STATS, 4, {"topic": "orders"})
            assert header["code"] == 29 and "consumerGroup" in header["remark"]
            # Still served on the same connection.
            header, body = await call(stream, GET_CONSUME_STATS, 5, {
                "consumerGroup": "cg", "topic": "SELF_TEST_TOPIC"})
            assert header["code"] == 0
            assert consume_stats(body) == (0.0, {
                ("SELF_TEST_TOPIC", "broker-a", 0): {"brokerOffset": 0, "consumerOffset": 0,
                                                     "pullOffset": 0, "lastTimestamp": 0}})
