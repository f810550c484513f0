"""``triomq admin dead-letters`` and ``resend-dead-letter`` against a name server and a
broker over real TCP, with a push consumer that fails its message into the DLQ."""

from __future__ import annotations

import json

import pytest
from client_cluster import open_groups
from test_client_cli import call, namesrv
from test_client_push_consumer import FAST, until

from triomq.client import (
    ConsumeConcurrentlyStatus,
    Message,
    MessageExt,
    MessageListenerConcurrently,
    Producer,
    PushConsumer,
)
from triomq.client.core.message import MessageQueue
from triomq.plugins.client_cli.dead_letters import dead_letters, resend_dead_letter, resent_message
from triomq.plugins.client_cli.query import query_by_key
from triomq.plugins.client_cli.session import CommandError

TOPIC = "cli-topic"


async def test_a_dead_letter_is_listed_and_resent_to_its_first_topic(tmp_path) -> None:
    async with open_groups(tmp_path, "tcp") as groups:
        await groups.create_topic(TOPIC, queues=1)
        app = await groups.client("app")
        ns = namesrv(groups)
        code, out = await call(dead_letters, app, "admin", "dead-letters", "-n", ns, "-g", "cg")
        assert (code, out.strip()) == (1, "error: group cg has no dead letter")

        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            sent = await producer.send(Message(TOPIC, b"poison", tags="T", keys="k-9",
                                               properties={"owner": "me"}))

        async def fails(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER

        consumer = PushConsumer("cg", groups.namesrv, max_reconsume_times=0, **FAST)
        consumer.subscribe(TOPIC)
        consumer.register_message_listener(MessageListenerConcurrently(fails))
        async with consumer.start(app.connect):
            await until(lambda: consumer.offsets.read(MessageQueue(TOPIC, "broker-a", 0)) == 1,
                        timeout=30)

        code, out = await call(dead_letters, app, "admin", "dead-letters", "-n", ns, "-g", "cg",
                               "--json")
        (letter,) = json.loads(out)["messages"]
        assert code == 0
        assert (letter["topic"], letter["msgId"], letter["reconsumeTimes"]) == (
            "%DLQ%cg", sent.msg_id, 1)
        assert letter["properties"]["RETRY_TOPIC"] == TOPIC
        assert letter["properties"]["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
        code, out = await call(dead_letters, app, "admin", "dead-letters", "-n", ns, "-g", "cg")
        assert code == 0 and f"msgId={sent.msg_id} " in out and "topic=%DLQ%cg " in out

        code, out = await call(resend_dead_letter, app, "admin", "resend-dead-letter", "-n", ns,
                               "-g", "cg", "-i", sent.offset_msg_id, "--json")
        resent = json.loads(out)
        assert code == 0 and resent["topic"] == TOPIC and resent["sendStatus"] == "SEND_OK"
        code, out = await call(query_by_key, app, "admin", "query-msg-by-key", "-n", ns, "-t",
                               TOPIC, "-k", "k-9", "--json")
        found = {m["msgId"]: m for m in json.loads(out)["messages"]}
        assert set(found) == {sent.msg_id, resent["msgId"]}
        again = found[resent["msgId"]]
        assert (again["tags"], again["body"], again["properties"]["owner"]) == (
            "T", "cG9pc29u", "me")
        assert "RETRY_TOPIC" not in again["properties"]

        code, out = await call(resend_dead_letter, app, "admin", "resend-dead-letter", "-n", ns,
                               "-g", "cg", "-i", "NOSUCHID")
        assert (code, out.strip()) == (1, "error: group cg has no dead letter with id NOSUCHID")


def test_a_dead_letter_without_its_first_topic_is_not_resent() -> None:
    letter = MessageExt(topic="%DLQ%cg", body=b"x", queue_id=0, queue_offset=0,
                        commit_log_offset=0, msg_id="M", offset_msg_id="O", born_timestamp=0,
                        born_host=("127.0.0.1", 1), store_timestamp=0,
                        store_host=("127.0.0.1", 2))
    with pytest.raises(CommandError, match="names no first topic"):
        resent_message(letter)
