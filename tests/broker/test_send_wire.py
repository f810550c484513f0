"""SEND_MESSAGE_V2 and SEND_MESSAGE as clients other than RocketMQ's Java client send them,
over real TCP.

The frames are built byte by byte from RocketMQ's remoting layout, and the
pulled records decoded as RocketMQ's ``MessageDecoder`` reads them (the
helpers of ``test_pull_wire``), not with triomq's codecs.
"""

from __future__ import annotations

import json
import re
import struct

import trio
from broker_nodes import Cluster
from test_pull_wire import PULL_MESSAGE, call, decode_messages, receive_exactly

SEND_MESSAGE_V2 = 310


def properties(text: str) -> dict[str, str]:
    """A record's properties: ``name \\x01 value \\x02``, one after the other."""
    return dict(item.split("\x01", 1) for item in text.split("\x02") if item)


async def test_a_message_sent_without_a_unique_key_is_given_one(tmp_path) -> None:
    # ali-ons (Node.js) never sets UNIQ_KEY; RocketMQ 5's broker then makes one
    # (SendMessageProcessor, MessageClientIDSetter's layout: the broker's IPv4
    # address, its pid, a random number, the time in the month, a counter).
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            # As ali-ons sends it: numbers and booleans as JSON values.
            fields = {"a": "ali-producer", "b": "orders", "c": "TBW102", "d": 4, "e": 0,
                      "f": 0, "g": 1700000000000, "h": 0, "j": 0, "k": False,
                      "i": "TAGS\x01TagA\x02KEYS\x01order-1\x02"}
            for opaque in (1, 2):
                header, _ = await call(stream, SEND_MESSAGE_V2, opaque, fields, b"unnamed")
                assert header["code"] == 0, header.get("remark")
            named = {**fields, "i": "UNIQ_KEY\x01C0A8000100002A9F0000000000000001\x02"}
            header, _ = await call(stream, SEND_MESSAGE_V2, 3, named, b"named")
            assert header["code"] == 0, header.get("remark")

            header, body = await call(stream, PULL_MESSAGE, 4, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
            assert header["code"] == 0, header.get("remark")
            first, second, third = (properties(m["properties"]) for m in decode_messages(body))

    made = [first.pop("UNIQ_KEY"), second.pop("UNIQ_KEY")]
    assert all(re.fullmatch("7F000001[0-9A-F]{24}", key) for key in made)
    assert made[0] != made[1]
    # What the producer sent is kept, a key it made itself too, and the broker
    # adds its cluster's name (RocketMQ 5's CLUSTER property).
    cluster = {"CLUSTER": "DefaultCluster"}
    assert first == second == {"TAGS": "TagA", "KEYS": "order-1", **cluster}
    assert third == {"UNIQ_KEY": "C0A8000100002A9F0000000000000001", **cluster}


SEND_MESSAGE = 10


def go_frame(code: int, opaque: int, ext_fields: dict[str, str], body: bytes,
             oneway: bool = False) -> bytes:
    """A request as RocketMQ's Go client frames it: language GO, version 317, JSON."""
    header = json.dumps({"code": code, "language": "GO", "version": 317, "opaque": opaque,
                         "flag": 2 if oneway else 0, "remark": "",
                         "extFields": ext_fields}).encode()
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def go_send_header(queue_id: int, properties: str, batch: bool = False) -> dict[str, str]:
    """SendMessageRequestHeader as the Go client's Encode writes it: every field spelt out."""
    return {"producerGroup": "go-producer", "topic": "orders", "queueId": str(queue_id),
            "sysFlag": "0", "bornTimestamp": "1700000000123", "flag": "0",
            "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0",
            "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "batch": "true" if batch else "false", "properties": properties}


def batch_message(body: bytes, properties: bytes) -> bytes:
    """One message of a batch body, as MessageDecoder.encodeMessage lays it out."""
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(properties)
    return (struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body
            + struct.pack(">h", len(properties)) + properties)


async def test_send_message_with_its_fields_spelt_out_stores_single_and_batched_messages(
        tmp_path) -> None:
    # RocketMQ's Go client sends every message with SEND_MESSAGE (10) and the V1 header;
    # RocketMQ's broker reads it as the V2 one and its `batch` field picks the path.
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a") as a:
        host, _, port = a.node.address.removeprefix("tcp://").rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            unique = "C0A800010F2A0000000012ab0001c3d4"
            await stream.send_all(go_frame(SEND_MESSAGE, 1, go_send_header(
                2, f"TAGS\x01TagA\x02KEYS\x01k-1\x02UNIQ_KEY\x01{unique}\x02"), b"single"))
            (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
            rest = await receive_exactly(stream, length)
            (word,) = struct.unpack_from(">I", rest)
            answer = json.loads(rest[4:4 + (word & 0xFFFFFF)])
            assert (answer["code"], answer["opaque"], answer["flag"] & 1) == (0, 1, 1), answer
            assert (answer["extFields"]["queueId"], answer["extFields"]["queueOffset"]) \
                == ("2", "0")
            assert re.fullmatch("7F000001[0-9A-F]{24}", answer["extFields"]["msgId"])

            # One-way, as its SendOneWay: no answer, stored all the same (in any order with
            # the next request: each is handled in a task of its own).
            await stream.send_all(go_frame(SEND_MESSAGE, 2, go_send_header(2, ""), b"oneway",
                                           oneway=True))
            # A batch: the messages without UNIQ_KEY, as the Go client sends them.
            batch = (batch_message(b"first", b"TAGS\x01TagB\x02")
                     + batch_message(b"second", b"KEYS\x01k-2\x02"))
            header, _ = await call(stream, SEND_MESSAGE, 3, go_send_header(2, "", batch=True),
                                   batch)
            assert header["code"] == 0, header.get("remark")
            first = int(header["extFields"]["queueOffset"])
            assert len(header["extFields"]["msgId"].split(",")) == 2

            # A bad V1 header is refused naming the field, under its V1 name.
            bad = {k: v for k, v in go_send_header(2, "").items() if k != "topic"}
            header, _ = await call(stream, SEND_MESSAGE, 4, bad, b"lost")
            assert (header["code"], header["remark"]) \
                == (13, "header field 'topic': missing or empty")

            header, body = await call(stream, PULL_MESSAGE, 5, {
                "consumerGroup": "cg", "topic": "orders", "queueId": "2", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
            assert header["code"] == 0, header.get("remark")
            messages = decode_messages(body)

    assert [m["queueOffset"] for m in messages] == [0, 1, 2, 3]
    assert {m["bornTimestamp"] for m in messages} == {1700000000123}
    by_body = {m["body"]: m for m in messages}
    assert by_body.keys() == {b"single", b"oneway", b"first", b"second"}
    assert (by_body[b"single"]["queueOffset"], by_body[b"first"]["queueOffset"],
            by_body[b"second"]["queueOffset"]) == (0, first, first + 1)
    stored = {body: properties(m["properties"]) for body, m in by_body.items()}
    assert stored[b"single"] == {"TAGS": "TagA", "KEYS": "k-1", "UNIQ_KEY": unique,
                                 "CLUSTER": "DefaultCluster"}
    assert stored[b"first"] == {"TAGS": "TagB", "CLUSTER": "DefaultCluster"}
    assert stored[b"second"] == {"KEYS": "k-2", "CLUSTER": "DefaultCluster"}
    # A single message without UNIQ_KEY is given one, as by SEND_MESSAGE_V2.
    assert re.fullmatch("7F000001[0-9A-F]{24}", stored[b"oneway"].pop("UNIQ_KEY"))
