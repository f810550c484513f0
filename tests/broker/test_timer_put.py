"""Where a timer put is stored, through the put flow without an event loop:
``rmq_sys_wheel_timer`` queue 0 with REAL_TOPIC, REAL_QID and TIMER_OUT_MS (the time
rounded down to the precision, as RocketMQ's HookUtils); the refusals."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.broker.test_put_flow import MASTER, SETTINGS, new_id, request, start
from tests.broker.test_schedule_put import _batch, props, refused, stored
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.secondary.core.schedule_put import TimerSettings
from triomq.broker.send.core.put_flow import PutFlow, PutReply

#: ``start``'s store time (the broker's clock).
NOW = 1_700_000_000_500


@pytest.mark.parametrize("name, value, deliver", [
    ("TIMER_DELIVER_MS", str(NOW + 4200), NOW + 4200),
    ("TIMER_DELAY_SEC", "7", NOW + 7000),
    ("TIMER_DELAY_MS", "2500", NOW + 2500),
])
def test_a_timer_message_waits_in_the_wheel_topic_until_its_slot(
        name: str, value: str, deliver: int) -> None:
    flow, action = start(request(i=props(**{name: value, "TAGS": "a"}), e="2"))
    topic, queue_id, properties = stored(action)
    assert (topic, queue_id) == ("rmq_sys_wheel_timer", 0)
    assert (properties["REAL_TOPIC"], properties["REAL_QID"]) == ("orders", "2")
    out = int(properties["TIMER_OUT_MS"])
    assert out % 1000 == 0 and out < deliver <= out + 1000
    assert properties[name] == value and properties["TAGS"] == "a"
    assert flow.queue_id == 2


def test_a_time_on_the_precision_is_the_slot_before() -> None:
    deliver = 1_700_000_010_000
    _, action = start(request(i=props(TIMER_DELIVER_MS=str(deliver))))
    assert stored(action)[2]["TIMER_OUT_MS"] == str(deliver - 1000)
    fine = attrs.evolve(SETTINGS, timer=TimerSettings(precision_ms=100))
    _, action = start(request(i=props(TIMER_DELIVER_MS=str(deliver + 50))), settings=fine)
    assert stored(action)[2]["TIMER_OUT_MS"] == str(deliver)


def test_the_delay_in_seconds_wins_then_the_delay_in_ms() -> None:
    _, action = start(request(i=props(TIMER_DELIVER_MS="1", TIMER_DELAY_MS="3000",
                                      TIMER_DELAY_SEC="9")))
    assert stored(action)[2]["TIMER_OUT_MS"] == str((NOW + 9000) // 1000 * 1000)
    _, action = start(request(i=props(TIMER_DELIVER_MS="1", TIMER_DELAY_MS="3000")))
    assert stored(action)[2]["TIMER_OUT_MS"] == str((NOW + 3000) // 1000 * 1000)


@pytest.mark.parametrize("name, value", [("TIMER_DELIVER_MS", str(NOW)),
                                         ("TIMER_DELIVER_MS", str(NOW - 1000)),
                                         ("TIMER_DELAY_SEC", "0"), ("TIMER_DELAY_MS", "0")])
def test_a_time_now_or_within_the_precision_past_is_stored_as_it_came(
        name: str, value: str) -> None:
    _, action = start(request(i=props(**{name: value})))
    topic, queue_id, properties = stored(action)
    assert (topic, queue_id) == ("orders", 1)
    assert "TIMER_OUT_MS" not in properties and properties[name] == value


@pytest.mark.parametrize("name, value, why", [
    ("TIMER_DELIVER_MS", str(NOW - 1001), "1001 ms before the broker's time"),
    ("TIMER_DELIVER_MS", "5000", "timer_precision_ms (1000)"),
    ("TIMER_DELAY_SEC", "-1", "must not be negative, got -1"),
    ("TIMER_DELAY_MS", "-5", "must not be negative, got -5"),
])
def test_a_time_in_the_past_is_refused_naming_the_property(name: str, value: str,
                                                           why: str) -> None:
    code, remark = refused(start(request(i=props(**{name: value})))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL
    assert remark.startswith(f"timer message illegal: property {name}") and why in remark


def test_the_brokers_own_put_of_a_time_past_is_due_at_once() -> None:
    # A transaction committed after its timer time: delivered, not refused.
    flow = PutFlow(SETTINGS, now=1.0)
    message = EscapedMessage("orders", 3, b"x", {"TIMER_DELIVER_MS": "5000"})
    topic, queue_id, _ = stored(flow.start_own(message, MASTER, store_ms=NOW, new_id=new_id))
    assert (topic, queue_id) == ("orders", 3)


@pytest.mark.parametrize("name, value", [("TIMER_DELIVER_MS", "soon"),
                                         ("TIMER_DELAY_SEC", "1.5"), ("TIMER_DELAY_MS", ""),
                                         ("TIMER_DELIVER_MS", "99999999999999999999")])
def test_a_timer_property_that_is_not_an_integer_is_refused(name: str, value: str) -> None:
    code, remark = refused(start(request(i=props(**{name: value})))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL
    assert remark.startswith("timer message illegal") and name in remark


def test_a_time_past_the_max_delay_is_refused_naming_the_limit() -> None:
    code, remark = refused(start(request(i=props(TIMER_DELAY_SEC=str(3 * 86400 + 1))))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL
    assert "TIMER_DELAY_SEC" in remark and "259200000 ms" in remark
    assert "timer_max_delay_sec" in remark
    # At the limit is accepted.
    _, action = start(request(i=props(TIMER_DELAY_SEC=str(3 * 86400))))
    assert stored(action)[0] == "rmq_sys_wheel_timer"


def test_a_timer_deletion_is_refused() -> None:
    code, remark = refused(start(request(i=props(
        TIMER_DELAY_SEC="5", TIMER_DEL_UNIQKEY="x")))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DEL_UNIQKEY" in remark


@pytest.mark.parametrize("name", ["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"])
def test_with_the_wheel_off_a_timer_message_is_refused_as_rocketmq(name: str) -> None:
    off = attrs.evolve(SETTINGS, timer=TimerSettings(enable=False))
    code, remark = refused(start(request(i=props(**{name: "5000"})), settings=off)[1])
    assert code == ResponseCode.SYSTEM_ERROR
    assert remark == "accurate timer message is not enabled, timerWheelEnable is false"


def test_a_timer_delivery_is_not_routed_again() -> None:
    # What the wheel puts back carries TIMER_OUT_MS (and its TIMER_DELAY_SEC).
    flow = PutFlow(SETTINGS, now=1.0)
    message = EscapedMessage("orders", 3, b"x", {"TIMER_DELAY_SEC": "9",
                                                 "TIMER_OUT_MS": "1700000000000"})
    topic, queue_id, _ = stored(flow.start_own(message, MASTER, store_ms=5, new_id=new_id))
    assert (topic, queue_id) == ("orders", 3)


def test_a_timer_batch_is_refused() -> None:
    body = _batch({"UNIQ_KEY": "a"}, {"UNIQ_KEY": "b", "TIMER_DELAY_SEC": "5"})
    code, remark = refused(start(request(body, code=RequestCode.SEND_BATCH_MESSAGE))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELAY_SEC" in remark


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"]),
       st.one_of(st.integers(-2**70, 2**70).map(str),
                 st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                blacklist_characters="\x01\x02"),
                         max_size=30)))
def test_any_timer_property_is_stored_by_the_rules_or_refused_by_name(name: str,
                                                                      value: str) -> None:
    _, action = start(request(i=props(**{name: value})))
    if isinstance(action, PutReply):
        code, remark = refused(action)
        assert code == ResponseCode.MESSAGE_ILLEGAL and name in remark
        return
    topic, _, properties = stored(action)
    if topic == "rmq_sys_wheel_timer":
        out = int(properties["TIMER_OUT_MS"])
        assert out + 1000 > NOW and out <= NOW + 3 * 86400 * 1000
    else:
        assert topic == "orders" and "TIMER_OUT_MS" not in properties
