"""Messages on the wire: properties, batch bodies, client ids, pulled bodies, group bodies."""

from __future__ import annotations

import json
import struct
import tracemalloc
import zlib

import pytest

from triomq.client.core.consume_from import ConsumeFromWhere, Lookup, start_offset
from triomq.client.core.message import (
    Message,
    MessageDecodeError,
    MessageQueue,
    decode_messages,
    encode_batch,
)
from triomq.client.core.wire import (
    lock_body,
    read_consumer_ids,
    read_locked,
)
from triomq.protocol.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from triomq.protocol.message import COMPRESSED, MessageRecord, encode, properties_from_bytes
from triomq.protocol.route import RouteDataError
from triomq.protocol.unique_id import UniqueIdGenerator


def test_fields_travel_as_rocketmq_properties() -> None:
    message = Message("t", b"b", tags="paid", keys="k1 k2", properties={"p": "v"},
                      delay_time_level=3, wait_store_msg_ok=False)
    assert message.keys == ("k1", "k2")
    assert message.wire_properties() == {"p": "v", "TAGS": "paid", "KEYS": "k1 k2",
                                         "DELAY": "3", "WAIT": "false"}
    assert Message("t", b"", keys=["a", "b"]).wire_properties() == {"KEYS": "a b"}
    with pytest.raises(ValueError):
        Message("t", b"", properties={"TAGS": "x"})


def test_batch_body_layout() -> None:
    body = encode_batch([Message("t", b"one", tags="a", flag=7), Message("t", b"")],
                        ["U1", "U2"])
    size, magic, crc, flag, length = struct.unpack_from(">iiiii", body)
    assert (magic, crc, flag, length) == (0, 0, 7, 3) and body[20:23] == b"one"
    props_len = struct.unpack_from(">H", body, 23)[0]
    assert properties_from_bytes(body[25:25 + props_len]) == {"TAGS": "a", "UNIQ_KEY": "U1"}
    assert size == 25 + props_len
    second = body[size:]
    assert struct.unpack_from(">i", second)[0] == len(second)


def test_unique_ids_are_rocketmqs_layout_and_distinct() -> None:
    gen = UniqueIdGenerator("10.0.0.1", 0x1234, 0xCAFEBABE)
    # 2025-03-02T00:00:01.5Z is 1 day 1.5 s after the month began.
    now = 1740873601500
    ids = [gen.next_id(now) for _ in range(3)]
    assert len(set(ids)) == 3
    assert ids[0] == "0A000001" "1234" "CAFEBABE" f"{86_401_500:08X}" "0000"
    assert ids[2].endswith("0002")
    assert len(UniqueIdGenerator("::1", 1, 1).next_id(now)) == 56


def test_pulled_bodies_inflate_compressed_and_reject_garbage() -> None:
    raw = encode(MessageRecord(topic="t", body=zlib.compress(b"hello"), sys_flag=COMPRESSED))
    assert decode_messages(raw)[0].body == b"hello"
    other = encode(MessageRecord(topic="t", body=b"x", sys_flag=COMPRESSED | 0x100))
    with pytest.raises(MessageDecodeError):
        decode_messages(other)
    with pytest.raises(MessageDecodeError):
        decode_messages(b"\x00" * 10)
    assert decode_messages(b"") == []


def test_a_compressed_bomb_is_refused_without_inflating_past_max_message_size() -> None:
    bomb = zlib.compress(bytes(200 * 1024 * 1024), 9)  # 200 MiB of zeros in about 204 KB
    raw = (encode(MessageRecord(topic="t", body=b"before", queue_offset=6))
           + encode(MessageRecord(topic="t", body=bomb, sys_flag=COMPRESSED, queue_offset=7)))
    tracemalloc.start()
    try:
        with pytest.raises(MessageDecodeError) as caught:
            decode_messages(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (
        f"message at {len(raw) - len(encode(MessageRecord(topic='t', body=bomb)))} (topic t, "
        "queue 0, offset 7): the compressed body inflates to more than its limit of 4194304 "
        "bytes; it was not inflated further")
    assert peak < 3 * 4 * 1024 * 1024  # zlib's output buffer, not the 200 MiB
    small = encode(MessageRecord(topic="t", body=zlib.compress(b"x" * 100), sys_flag=COMPRESSED))
    assert decode_messages(small, max_body_size=100)[0].body == b"x" * 100
    with pytest.raises(MessageDecodeError, match="limit of 99 bytes"):
        decode_messages(small, max_body_size=99)


def test_group_bodies() -> None:
    sub = SubscriptionData.build("t", "a || b", 42)
    body = json.loads(HeartbeatData("ip@1", ("pg",), (ConsumerData(
        "g", consume_from_where="CONSUME_FROM_FIRST_OFFSET", subscriptions=(sub,)),)).encode())
    assert body["clientID"] == "ip@1" and body["producerDataSet"] == [{"groupName": "pg"}]
    consumer = body["consumerDataSet"][0]
    assert consumer["messageModel"] == "CLUSTERING"
    assert consumer["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    assert consumer["subscriptionDataSet"][0]["tagsSet"] == ["a", "b"]
    assert consumer["subscriptionDataSet"][0]["subVersion"] == 42
    queues = [MessageQueue("t", "b", 1), MessageQueue("t", "a", 0)]
    lock = json.loads(lock_body("g", "ip@1", queues))
    assert lock["mqSet"][0] == {"brokerName": "a", "queueId": 0, "topic": "t"}
    answer = json.dumps({"lockOKMQSet": [q.to_json() for q in queues]}).encode()
    assert read_locked(answer) == set(queues)
    assert read_consumer_ids(b'{"consumerIdList":["b","a"]}') == ["a", "b"]
    with pytest.raises(RouteDataError):
        read_consumer_ids(b'{"consumerIdList":[1]}')
    with pytest.raises(RouteDataError):
        read_locked(b'{"lockOKMQSet":[{"topic":"t"}]}')


def test_where_a_new_group_starts() -> None:
    last, first, stamp = (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                          ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                          ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)
    for where in (last, first, stamp):
        assert start_offset(where, 17) == 17
        assert start_offset(where, 0) == 0
    assert start_offset(last, None) is Lookup.MAX_OFFSET
    assert start_offset(first, None) == 0
    assert start_offset(stamp, -1) is Lookup.BY_TIMESTAMP
