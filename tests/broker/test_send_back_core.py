"""CONSUMER_SEND_MSG_BACK's rules (``triomq.broker.secondary.core.send_back``), without an
event loop."""

from __future__ import annotations

import attrs
import pytest

from triomq.broker.consume.core.subscription_groups import SubscriptionGroupConfig
from triomq.broker.core.headers import HeaderError, offset_msg_id
from triomq.broker.secondary.core.send_back import (
    Refused,
    SendBackHeader,
    dlq_topic_config,
    group_refusal,
    no_record,
    parse_send_back_header,
    retry_topic_config,
    send_back,
    topic_refusal,
)
from triomq.protocol.message import MessageRecord
from triomq.protocol.route import TopicConfig

GROUP = SubscriptionGroupConfig("cg")
STORE = ("10.0.0.1", 10911)


def record(reconsume_times: int = 0, **properties: str) -> MessageRecord:
    return MessageRecord(topic="orders", body=b"paid", queue_id=3, flag=7, physical_offset=4096,
                         sys_flag=0, born_timestamp=1_700_000_000_000, born_host=("10.0.0.9", 5),
                         store_host=STORE, reconsume_times=reconsume_times,
                         properties={"TAGS": "t", "UNIQ_KEY": "U1", **properties})


def header(delay_level: int = 0, max_reconsume_times: int | None = None) -> SendBackHeader:
    return SendBackHeader(offset=4096, group="cg", delay_level=delay_level,
                          origin_msg_id="U1", origin_topic="orders",
                          max_reconsume_times=max_reconsume_times)


def back(rec: MessageRecord, head: SendBackHeader, *, version: int = 479,
         config: SubscriptionGroupConfig = GROUP):
    return send_back(head, rec, config, request_version=version, pick_queue=lambda n: n - 1)


def test_a_first_failure_goes_to_the_retry_topic_with_delay_3() -> None:
    plan = back(record(), header())
    message = plan.message
    assert not plan.dead
    assert (message.topic, message.queue_id, message.reconsume_times) == ("%RETRY%cg", 0, 1)
    assert (message.body, message.flag, message.born_timestamp, message.born_host) == (
        b"paid", 7, 1_700_000_000_000, ("10.0.0.9", 5))
    assert message.properties == {
        "TAGS": "t", "UNIQ_KEY": "U1", "RETRY_TOPIC": "orders", "WAIT": "false",
        "DELAY": "3", "ORIGIN_MESSAGE_ID": offset_msg_id(STORE, 4096)}


def test_a_retried_message_keeps_its_first_topic_and_id_and_delays_longer() -> None:
    again = record(2, RETRY_TOPIC="orders", ORIGIN_MESSAGE_ID="FIRST", DELAY="4")
    plan = back(attrs.evolve(again, topic="%RETRY%cg"), header())
    props = plan.message.properties
    assert (props["RETRY_TOPIC"], props["ORIGIN_MESSAGE_ID"], props["DELAY"]) == (
        "orders", "FIRST", "5")
    assert plan.message.reconsume_times == 3


def test_the_consumers_delay_level_wins_over_the_default() -> None:
    assert back(record(5), header(delay_level=2)).message.properties["DELAY"] == "2"


@pytest.mark.parametrize(("times", "head", "version", "dead"), [
    (15, header(), 479, False),           # the group's retryMaxTimes, 16
    (16, header(), 479, True),
    (2, header(max_reconsume_times=2), 479, True),      # the header's, from 3.4.9 on
    (2, header(max_reconsume_times=2), 120, False),     # an older client's: the group's
    (0, header(delay_level=-1), 479, True),             # a negative level: at once
])
def test_the_dead_letter_rule(times, head, version, dead) -> None:
    plan = back(record(times), head, version=version)
    assert plan.dead is dead
    if dead:
        assert (plan.message.topic, plan.message.queue_id) == ("%DLQ%cg", 0)
        assert plan.message.properties["DELAY"] == "0"
        assert plan.message.reconsume_times == times + 1


def test_the_topics_a_send_back_creates() -> None:
    config = SubscriptionGroupConfig("cg", retry_queue_nums=3)
    assert retry_topic_config(header(), config) == TopicConfig("%RETRY%cg", 3, 3, 6)
    unit = SendBackHeader(offset=0, group="cg", delay_level=0, unit_mode=True)
    assert retry_topic_config(unit, config).topic_sys_flag == 2
    assert dlq_topic_config(header()) == TopicConfig("%DLQ%cg", 1, 1, 6)


def test_refusals() -> None:
    assert group_refusal(header(), None) == Refused(26, "subscription group not exist, cg")
    assert group_refusal(header(), SubscriptionGroupConfig("cg", retry_queue_nums=0)) == (
        Refused(0))
    assert group_refusal(header(), GROUP) is None
    assert topic_refusal("%RETRY%cg", None) == Refused(1, "topic[%RETRY%cg] not exist")
    assert topic_refusal("%RETRY%cg", TopicConfig("%RETRY%cg", 1, 1, 4)) == Refused(
        16, "the topic[%RETRY%cg] sending message is forbidden")
    assert topic_refusal("%RETRY%cg", TopicConfig("%RETRY%cg", 1, 1, 6)) is None
    assert no_record(77) == Refused(1, "look message by offset failed, 77")


def test_the_header_as_a_java_client_writes_it() -> None:
    fields = {"offset": "4096", "group": "cg", "delayLevel": "0", "originMsgId": "U1",
              "originTopic": "orders", "unitMode": "false", "maxReconsumeTimes": "16"}
    parsed = parse_send_back_header(fields)
    assert parsed == SendBackHeader(4096, "cg", 0, "U1", "orders", False, 16)
    assert parsed.to_fields() == fields
    assert parse_send_back_header({"offset": "1", "group": "g", "delayLevel": "-1"}) == (
        SendBackHeader(1, "g", -1))


@pytest.mark.parametrize(("fields", "field"), [
    ({"group": "cg", "delayLevel": "0"}, "offset"),
    ({"offset": "x", "group": "cg", "delayLevel": "0"}, "offset"),
    ({"offset": "1", "delayLevel": "0"}, "group"),
    ({"offset": "1", "group": "cg"}, "delayLevel"),
    ({"offset": "1", "group": "cg", "delayLevel": "0", "unitMode": "maybe"}, "unitMode"),
    ({"offset": "1", "group": "cg", "delayLevel": "0", "maxReconsumeTimes": "9" * 12},
     "maxReconsumeTimes"),
])
def test_a_bad_header_names_its_field(fields, field) -> None:
    with pytest.raises(HeaderError) as error:
        parse_send_back_header(fields)
    assert error.value.field == field
