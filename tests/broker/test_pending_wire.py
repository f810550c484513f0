"""GET_PENDING_MESSAGES (triomq's 7001) over real TCP, with frames built by hand: an admin
request, refused unsigned where admin credentials are set, answered signed with the
delayed message a SEND_MESSAGE_V2 left waiting, which no pull reads."""

from __future__ import annotations

import json

import trio
from broker_nodes import Cluster
from test_delay_wire import send_fields
from test_pull_wire import PULL_MESSAGE, call
from test_send_wire import SEND_MESSAGE_V2

from triomq.protocol import acl

GET_PENDING_MESSAGES = 7001


async def connect(broker) -> trio.SocketStream:
    host, _, port = broker.node.address.removeprefix("tcp://").rpartition(":")
    return await trio.open_tcp_stream(host, int(port))
SUCCESS, NO_PERMISSION, TOPIC_NOT_EXIST = 0, 16, 17
SECURED = ('message_delay_level = "1h"\n'
           '\n[security]\nadmin_access_key = "ops"\nadmin_secret_key = "s3cret"\n')


async def test_the_pending_views_are_the_admins_and_show_what_waits(tmp_path) -> None:
    cluster = Cluster("tcp", tmp_path)
    async with cluster.broker("a", extra=SECURED) as a:
        stream = await connect(a)
        async with stream:
            unique = "C0A8000100002A9F00000000000000D1"
            header, _ = await call(stream, SEND_MESSAGE_V2, 1, send_fields(
                f"DELAY\x011\x02UNIQ_KEY\x01{unique}\x02"), b"later")
            assert header["code"] == SUCCESS, header.get("remark")

            header, _ = await call(stream, GET_PENDING_MESSAGES, 2, {"kind": "delayed"})
            assert header["code"] == NO_PERMISSION
            assert header["remark"].startswith("GET_PENDING_MESSAGES (7001) needs admin access")

            fields = acl.sign({"kind": "delayed", "maxNum": "5"}, b"", "ops", "s3cret")
            header, body = await call(stream, GET_PENDING_MESSAGES, 3, fields)
            assert header["code"] == SUCCESS, header.get("remark")
            answer = json.loads(body)
            assert answer["kind"] == "delayed" and answer["timer"]["count"] == 0
            (level,) = answer["levels"]
            assert (level["level"], level["deliveryOffset"], level["count"]) == (1, 0, 1)
            (message,) = level["messages"]
            assert (message["topic"], message["queueId"], message["msgId"]) == (
                "orders", 1, unique)
            assert message["offsetMsgId"] == header_msg_id(a, 0)
            assert message["deliverTimeMs"] == message["storeTimestamp"] + 3_600_000

            for opaque, kind in ((4, "half"), (5, "popped")):
                fields = acl.sign({"kind": kind}, b"", "ops", "s3cret")
                header, body = await call(stream, GET_PENDING_MESSAGES, opaque, fields)
                assert header["code"] == SUCCESS and json.loads(body)["count"] == 0

            # Not through a pull: the system topics are not in the topic table.
            header, _ = await call(stream, PULL_MESSAGE, 6, {
                "consumerGroup": "TOOLS_CONSUMER", "topic": "SCHEDULE_TOPIC_XXXX",
                "queueId": "0", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4",
                "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                "subVersion": "0"})
            assert header["code"] == TOPIC_NOT_EXIST


def header_msg_id(broker, physical_offset: int) -> str:
    """The offset message id of the record at ``physical_offset`` (RocketMQ's layout)."""
    (record,) = [r for r in broker.log.iter_records() if r.physical_offset == physical_offset]
    host, port = record.store_host
    ip = bytes(int(part) for part in host.split("."))
    return (ip + port.to_bytes(4, "big") + physical_offset.to_bytes(8, "big")).hex().upper()
