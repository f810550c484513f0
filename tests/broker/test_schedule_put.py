"""Where a delayed put is stored, through the put flow without an event loop:
``SCHEDULE_TOPIC_XXXX``, queue level - 1, with REAL_TOPIC and REAL_QID; the refusals."""

from __future__ import annotations

import struct

import pytest

from tests.broker.test_put_flow import MASTER, SETTINGS, new_id, request, start
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.send.core.put_flow import Append, PutFlow, PutReply
from triomq.protocol.message import TRANSACTION_COMMIT, TRANSACTION_PREPARED, properties_to_bytes


def props(**values: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in values.items())


def stored(action: object) -> tuple[str, int, dict[str, str]]:
    assert isinstance(action, Append), action
    (record,) = action.records
    return record.topic, record.queue_id, dict(record.properties)


def refused(action: object) -> tuple[int, str]:
    assert isinstance(action, PutReply), action
    return action.response.code, action.response.remark or ""


def test_a_delayed_send_waits_in_the_schedule_topic_queue_of_its_level() -> None:
    flow, action = start(request(i=props(DELAY="3", TAGS="a"), e="2"))
    topic, queue_id, properties = stored(action)
    assert (topic, queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
    assert properties["REAL_TOPIC"] == "orders"
    assert properties["REAL_QID"] == "2"
    assert properties["DELAY"] == "3"
    assert properties["TAGS"] == "a"
    # The answer names the queue the producer sent to, as RocketMQ's does.
    assert flow.queue_id == 2


def test_a_level_past_the_highest_is_the_highest() -> None:
    _, action = start(request(i=props(DELAY="99")))
    topic, queue_id, properties = stored(action)
    assert (topic, queue_id, properties["DELAY"]) == ("SCHEDULE_TOPIC_XXXX", 17, "18")


@pytest.mark.parametrize("level", ["0", "-2"])
def test_a_level_of_zero_or_below_is_no_delay(level: str) -> None:
    _, action = start(request(i=props(DELAY=level)))
    topic, queue_id, properties = stored(action)
    assert (topic, queue_id) == ("orders", 1)
    assert "REAL_TOPIC" not in properties


@pytest.mark.parametrize("flag, topic", [(TRANSACTION_PREPARED, "orders"),
                                         (TRANSACTION_COMMIT, "SCHEDULE_TOPIC_XXXX")])
def test_only_a_plain_or_committed_message_is_delayed(flag: int, topic: str) -> None:
    _, action = start(request(i=props(DELAY="1"), f=str(flag)))
    assert stored(action)[0] == topic


@pytest.mark.parametrize("delay", ["soon", "1.5", "", "99999999999"])
def test_a_delay_that_is_not_an_integer_is_refused(delay: str) -> None:
    code, remark = refused(start(request(i=props(DELAY=delay)))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL
    assert "DELAY" in remark and "integer" in remark


def test_a_delay_level_wins_over_timer_properties_which_go() -> None:
    _, action = start(request(i=props(DELAY="1", TIMER_DELAY_SEC="9")))
    topic, _, properties = stored(action)
    assert topic == "SCHEDULE_TOPIC_XXXX" and "TIMER_DELAY_SEC" not in properties


def _batch(*properties: dict[str, str]) -> bytes:
    out = b""
    for p in properties:
        raw = properties_to_bytes(p)
        total = 20 + 5 + 2 + len(raw)
        out += struct.pack(">iiiii", total, 0, 0, 0, 5) + b"hello" + struct.pack(">h", len(raw))
        out += raw
    return out


@pytest.mark.parametrize("header, inner", [
    ({"i": props(DELAY="2")}, {}), ({}, {"DELAY": "2"}), ({}, {"DELAY": "x"}),
])
def test_a_delayed_batch_is_refused(header: dict[str, str], inner: dict[str, str]) -> None:
    body = _batch({"UNIQ_KEY": "a"}, {"UNIQ_KEY": "b", **inner})
    _, action = start(request(body, code=RequestCode.SEND_BATCH_MESSAGE, **header))
    assert refused(action)[0] == ResponseCode.MESSAGE_ILLEGAL


def test_the_brokers_own_delayed_message_is_delayed_too() -> None:
    flow = PutFlow(SETTINGS, now=1.0)
    action = flow.start_own(EscapedMessage("orders", 3, b"x", {"DELAY": "1"}), MASTER,
                            store_ms=5, new_id=new_id)
    topic, queue_id, properties = stored(action)
    assert (topic, queue_id, properties["REAL_QID"]) == ("SCHEDULE_TOPIC_XXXX", 0, "3")
