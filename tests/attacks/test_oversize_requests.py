"""A broker process against requests built to cost it work: refused before the work.

The attack: a SEND_MESSAGE_V2 whose header holds 650,000 extFields, 13.5 MB
(under the 16 MiB frame cap). Parsing it used to take the broker's one event
loop for most of a second, long enough for its controllers to elect another
master. Now the header's length field is enough to refuse it: the broker
closes the connection before the header arrives, so it parses nothing, and
every other connection is served as before.
"""

from __future__ import annotations

import json
import struct

import trio
from processes import broker_sections, closed_by_peer, node_process

from triomq.broker.core.headers import SendHeader, encode_send_header
from triomq.config import NodeConfig
from triomq.rpc import RpcConnection, RpcConnectionError
from triomq.runtime import open_node
from triomq.testing.direct_send import DirectProducer

SEND_MESSAGE_V2 = 310
SYSTEM_ERROR = 1
MIB = 1024 * 1024


def attack_header(fields: int) -> bytes:
    ext = {**encode_send_header(SendHeader(topic="t")),
           **{f"key-{i:07d}": "vvvv" for i in range(fields)}}
    return json.dumps({"code": SEND_MESSAGE_V2, "language": "JAVA", "version": 479,
                       "opaque": 1, "flag": 0, "extFields": ext},
                      separators=(",", ":")).encode()


async def test_a_13_mb_header_is_refused_from_its_length_and_the_broker_keeps_serving(
        tmp_path) -> None:
    header = attack_header(650_000)
    assert 13_000_000 < len(header) < 16 * MIB
    async with (node_process("broker", "b", tmp_path, broker_sections(tmp_path)) as broker,
                open_node(NodeConfig(name="client")) as client):
        producer = DirectProducer(client.rpc, broker.address)
        await producer.send("t", b"before")
        memory_before = broker.peak_rss()

        # Only the prefix and the header's first 64 KiB are sent: the broker closes
        # the connection without waiting for the rest (the test would hang if it did).
        stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
        await stream.send_all(struct.pack(">iI", 4 + len(header), len(header))
                              + header[:64 * 1024])
        with trio.fail_after(30):
            assert await closed_by_peer(stream)
        await stream.aclose()

        # The whole frame, sent as a client would: refused the same way, nothing parsed.
        attacker = RpcConnection(await trio.open_tcp_stream("127.0.0.1", broker.port))
        fields = json.loads(header)["extFields"]
        async with trio.open_nursery() as nursery:
            await nursery.start(attacker.run)
            try:
                await attacker.invoke(SEND_MESSAGE_V2, fields, b"x", timeout=30)
            except RpcConnectionError:
                pass
            else:
                raise AssertionError("the broker answered a 13.5 MB header")
            nursery.cancel_scope.cancel()

        # The node keeps serving, the message before is still there, memory stayed flat.
        result = await producer.send("t", b"after")
        assert result.queue_offset == 1
        assert broker.peak_rss() - memory_before < 32 * MIB
        broker.check_running()
    log = broker.log.read_text()
    assert "exceeds the maximum header size 262144" in log


async def test_a_header_with_too_many_ext_fields_is_answered_and_the_connection_goes_on(
        tmp_path) -> None:
    header = attack_header(5_000)
    assert len(header) < 256 * 1024  # within the header size: the count refuses it
    fields = json.loads(header)["extFields"]
    async with (node_process("broker", "b", tmp_path, broker_sections(tmp_path)) as broker,
                open_node(NodeConfig(name="client")) as client):
        answer = await client.rpc.invoke(broker.address, SEND_MESSAGE_V2, fields, b"x")
        assert answer.code == SYSTEM_ERROR
        assert answer.remark == (f"request code {SEND_MESSAGE_V2} refused: the header holds "
                                 f"{len(fields)} extFields; the maximum is 1024")
        # The same connection serves the next request; nothing was stored before it.
        result = await DirectProducer(client.rpc, broker.address).send("t", b"fine")
        assert result.queue_offset == 0
