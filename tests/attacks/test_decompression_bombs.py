"""Decompression bombs against a broker and a name server, each a process of its own.

A 204 KB zlib body of 200 MiB of zeros sent as a compressed message is
refused at send time: the broker inflates it chunk by chunk, keeping none
of it, and stops at ``max_message_size`` (RocketMQ's producers check that
size before they compress, so no message of theirs is refused). An
anonymous REGISTER_BROKER whose compressed body inflates to 300 MiB is
refused by the name server at 16 MiB. Both nodes keep serving, memory flat.
(A consumer handed such a body refuses it the same way: ``decode_messages``,
tests/client/test_client_message.py.)
"""

from __future__ import annotations

import zlib

from processes import broker_sections, node_process

from triomq.broker.core.headers import SendHeader, encode_send_header
from triomq.config import NodeConfig
from triomq.protocol.message import COMPRESSED
from triomq.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicRouteData,
    encode_register_broker_body,
)
from triomq.runtime import open_node
from triomq.testing.direct_send import DirectProducer

MIB = 1024 * 1024
SEND_MESSAGE_V2 = 310
GET_MAX_OFFSET = 30
REGISTER_BROKER = 103
GET_ROUTEINFO_BY_TOPIC = 105
SUCCESS, SYSTEM_ERROR, MESSAGE_ILLEGAL = 0, 1, 13


def zeros_compressed(size: int) -> bytes:
    """zlib of ``size`` zero bytes, made a MiB at a time (the test holds no bomb inflated)."""
    deflater = zlib.compressobj(9)
    chunk = bytes(MIB)
    out = b"".join(deflater.compress(chunk) for _ in range(size // MIB))
    return out + deflater.flush()


async def test_a_compressed_bomb_is_refused_at_send_time(tmp_path) -> None:
    bomb = zeros_compressed(200 * MIB)
    assert len(bomb) < 210_000
    async with (node_process("broker", "b", tmp_path, broker_sections(tmp_path)) as broker,
                open_node(NodeConfig(name="client")) as client):
        producer = DirectProducer(client.rpc, broker.address)
        await producer.send("t", b"before")
        memory_before = broker.peak_rss()
        fields = encode_send_header(SendHeader(topic="t", sys_flag=COMPRESSED))
        answer = await client.rpc.invoke(broker.address, SEND_MESSAGE_V2, fields, bomb)
        assert answer.code == MESSAGE_ILLEGAL
        assert answer.remark == ("the compressed message body inflates to more than its "
                                 "limit of 4194304 bytes; it was not inflated further "
                                 "(max_message_size)")
        # Nothing was stored; the broker goes on, having held no more than a chunk of it.
        offset = await client.rpc.invoke(broker.address, GET_MAX_OFFSET,
                                         {"topic": "t", "queueId": "0"})
        assert offset.ext_fields["offset"] == "1"
        assert (await producer.send("t", b"after")).queue_offset == 1
        # A compressed body within the limit is stored as it came.
        small = zlib.compress(b"x" * MIB)
        answer = await client.rpc.invoke(broker.address, SEND_MESSAGE_V2, fields, small)
        assert answer.code == SUCCESS, answer.remark
        assert broker.peak_rss() - memory_before < 32 * MIB


async def test_an_anonymous_register_broker_bomb_is_refused_before_it_is_inflated(
        tmp_path) -> None:
    bomb = zeros_compressed(300 * MIB)
    fields = {"clusterName": "DefaultCluster", "brokerName": "evil", "brokerId": "0",
              "brokerAddr": "10.9.9.9:10911", "haServerAddr": "", "compressed": "true",
              "bodyCrc32": str(zlib.crc32(bomb) & 0x7FFFFFFF)}
    async with (node_process("nameserver", "ns", tmp_path) as namesrv,
                open_node(NodeConfig(name="client")) as client):
        memory_before = namesrv.peak_rss()
        answer = await client.rpc.invoke(namesrv.address, REGISTER_BROKER, fields, bomb)
        assert answer.code == SYSTEM_ERROR
        assert answer.remark == ("RegisterBrokerBody (compressed) inflates to more than its "
                                 "limit of 16777216 bytes; it was not inflated further")
        # 16 MiB (with zlib's buffer growth) at most, not 300 MiB.
        assert namesrv.peak_rss() - memory_before < 64 * MIB

        # The name server keeps serving: a real registration routes its topic.
        body = encode_register_broker_body(
            RegisterBrokerBody(DataVersion(1, 1, 0), {"t": TopicConfig("t", 4, 4)}),
            compressed=True)
        answer = await client.rpc.invoke(namesrv.address, REGISTER_BROKER, {
            **fields, "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
            "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}, body)
        assert answer.code == SUCCESS, answer.remark
        route = await client.rpc.invoke(namesrv.address, GET_ROUTEINFO_BY_TOPIC, {"topic": "t"})
        assert route.code == SUCCESS
        assert [b.broker_name for b in TopicRouteData.decode(route.body).broker_datas] == [
            "broker-a"]
