"""Group names a broker process refuses, as RocketMQ's TopicValidator.validateGroup does.

``../x``, a name holding a NUL and one of 300 characters used to be taken by
UPDATE_CONSUMER_OFFSET and written to ``config/consumerOffset.json``. Every
request that names a group in its header now has it checked first.
"""

from __future__ import annotations

import json

from processes import broker_sections, node_process

from triomq.broker.core.headers import SendHeader, encode_send_header
from triomq.config import NodeConfig
from triomq.runtime import open_node
from triomq.testing.direct_send import DirectProducer

SUCCESS, INVALID_PARAMETER = 0, 29
PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET = 11, 14, 15
GET_CONSUMER_CONNECTION_LIST, GET_CONSUME_STATS, SEND_MESSAGE_V2 = 203, 208, 310

BAD_GROUPS = {
    "../x": "The specified group: '../x', contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$",
    "a\0b": "The specified group: 'a\\x00b', contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$",
    "g" * 300: f"The specified group: {'g' * 40!r}..., is longer than group max length: 120",
}


def commit(group: str, offset: int) -> dict[str, str]:
    return {"consumerGroup": group, "topic": "t", "queueId": "0", "commitOffset": str(offset)}


async def test_bad_group_names_are_refused_and_never_written(tmp_path) -> None:
    async with (node_process("broker", "b", tmp_path, broker_sections(tmp_path)) as broker,
                open_node(NodeConfig(name="client")) as client):
        await DirectProducer(client.rpc, broker.address).send("t", b"m")

        async def ask(code: int, fields: dict[str, str]):
            return await client.rpc.invoke(broker.address, code, fields)

        for group, remark in BAD_GROUPS.items():
            for code, fields in [
                (UPDATE_CONSUMER_OFFSET, commit(group, 1)),
                (QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": "t",
                                         "queueId": "0"}),
                (PULL_MESSAGE, {"consumerGroup": group, "topic": "t", "queueId": "0",
                                "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0",
                                "commitOffset": "0", "suspendTimeoutMillis": "0",
                                "subVersion": "0"}),
                (GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}),
                (GET_CONSUME_STATS, {"consumerGroup": group}),
            ]:
                answer = await ask(code, fields)
                assert (answer.code, answer.remark) == (
                    INVALID_PARAMETER, f"header field 'consumerGroup': {remark}"), code
            send = await ask(SEND_MESSAGE_V2,
                             encode_send_header(SendHeader(topic="t", producer_group=group)))
            assert (send.code, send.remark) == (INVALID_PARAMETER, f"producerGroup: {remark}")
        answer = await ask(UPDATE_CONSUMER_OFFSET, commit("good_group-1", 1))
        assert answer.code == SUCCESS, answer.remark
        broker.check_running()
        assert await broker.stop() == 0  # a graceful stop writes the offsets

    offsets = json.loads((tmp_path / "store" / "config" / "consumerOffset.json").read_text())
    assert list(offsets["offsetTable"]) == ["t@good_group-1"]
