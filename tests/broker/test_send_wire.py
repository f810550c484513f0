"""SEND_MESSAGE_V2 as clients other than RocketMQ's Java client send it, over real TCP.

The frames are built byte by byte from RocketMQ's remoting layout, and the
pulled records decoded as RocketMQ's ``MessageDecoder`` reads them (the
helpers of ``test_pull_wire``), not with triomq's codecs.
"""

from __future__ import annotations

import re

import trio
from broker_nodes import Cluster
from test_pull_wire import PULL_MESSAGE, call, decode_messages

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
