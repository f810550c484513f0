"""A broker's REGISTER_BROKER declares the RocketMQ release it speaks for.

RocketMQ's name server reads the body of a REGISTER_BROKER whose header
``version`` is below ``V3_0_11`` as a bare TopicConfigSerializeWrapper (a
pre-3.0.11 broker's), not as the RegisterBrokerBody it is; with version 0 it
failed every registration of triomq's brokers with a NullPointerException. Here
a listener standing in for a name server reads the first frame a broker sends
it, byte by byte per RocketMQ's remoting frame: length, header length (JSON
serialization, type 0), the JSON header.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import trio

from tests.broker.broker_nodes import Cluster
from triomq.testing.cluster import free_tcp_port

REGISTER_BROKER = 103
#: The ordinal of RocketMQ's MQVersion.Version.V5_3_3.
V5_3_3 = 479


async def test_a_broker_registers_declaring_rocketmq_5_3_3(tmp_path: Path) -> None:
    port = free_tcp_port()
    (listener,) = await trio.open_tcp_listeners(port, host="127.0.0.1")
    cluster = Cluster("tcp", tmp_path)
    async with listener, cluster.broker(
            "b0", extra=f'namesrv_addr = ["tcp://127.0.0.1:{port}"]'):
        with trio.fail_after(30):
            stream = await listener.accept()
            data = b""
            while len(data) < 8 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
                chunk = await stream.receive_some()
                assert chunk, "the broker closed the connection"
                data += chunk
        await stream.aclose()
    (length, word) = struct.unpack_from(">iI", data)
    assert length == len(data) - 4 and word >> 24 == 0  # one frame, a JSON header
    header = json.loads(data[8:8 + (word & 0xFFFFFF)])
    assert (header["code"], header["version"]) == (REGISTER_BROKER, V5_3_3)
    assert header["extFields"]["brokerName"] == "broker-a"
