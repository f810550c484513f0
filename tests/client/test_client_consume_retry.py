"""A push consumer's retry rules (``triomq.client.core.consume_retry``, the listener's context),
without an event loop."""

from __future__ import annotations

import pytest

from triomq.client.core.consume_retry import (
    max_reconsume_times,
    reset_retry_topic,
    send_back_fields,
)
from triomq.client.core.listener import (
    ConsumeConcurrentlyContext,
    consume_concurrently_context,
    listener_context,
)
from triomq.client.core.message import MessageExt, MessageQueue


def message(topic: str, **properties: str) -> MessageExt:
    return MessageExt(topic=topic, body=b"b", queue_id=0, queue_offset=4,
                      commit_log_offset=8192, msg_id="UNIQ", offset_msg_id="OFF",
                      born_timestamp=1, born_host=("10.0.0.1", 1), store_timestamp=2,
                      store_host=("10.0.0.2", 10911), reconsume_times=1,
                      broker_name="broker-a", properties=properties)


def test_a_retried_message_is_shown_under_its_first_topic() -> None:
    retried = message("%RETRY%cg", RETRY_TOPIC="orders")
    assert reset_retry_topic(retried, "cg").topic == "orders"
    assert reset_retry_topic(retried, "other").topic == "%RETRY%cg"
    assert reset_retry_topic(message("orders"), "cg").topic == "orders"
    assert reset_retry_topic(message("%RETRY%cg"), "cg").topic == "%RETRY%cg"


def test_the_send_back_header() -> None:
    fields = send_back_fields(message("orders"), "cg", delay_level=0, max_reconsume_times=16)
    assert fields == {"offset": "8192", "group": "cg", "delayLevel": "0",
                      "originMsgId": "UNIQ", "originTopic": "orders", "unitMode": "false",
                      "maxReconsumeTimes": "16"}


@pytest.mark.parametrize(("configured", "orderly", "limit"), [
    (-1, False, 16), (-1, True, 2**31 - 1), (3, False, 3), (3, True, 3)])
def test_max_reconsume_times(configured, orderly, limit) -> None:
    assert max_reconsume_times(configured, orderly=orderly) == limit


def test_a_listener_reads_its_calls_context() -> None:
    context = ConsumeConcurrentlyContext(MessageQueue("orders", "broker-a", 0))
    with listener_context(context):
        consume_concurrently_context().delay_level_when_next_consume = 5
    assert context.delay_level_when_next_consume == 5
    with pytest.raises(LookupError):
        consume_concurrently_context()
