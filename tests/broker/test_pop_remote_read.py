"""How a reviving master reads another group's popped message: the pull it sends and what
each answer means."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.pop.core.remote_read import (
    Unread,
    answer,
    inner_consumer_group,
    pull_fields,
    replica_addresses,
)
from triomq.broker.pop.core.revive import ReadMessage
from triomq.protocol.message import MessageRecord, encode
from triomq.protocol.route import BrokerData, TopicRouteData

READ = ReadMessage("orders", 1, 5, "broker-a")
SUCCESS, PULL_NOT_FOUND, PULL_OFFSET_MOVED, SUBSCRIPTION_NOT_EXIST = 0, 19, 21, 24


def stored(offset: int, queue_id: int = 1) -> bytes:
    return encode(MessageRecord(topic="orders", body=b"m", queue_id=queue_id,
                                queue_offset=offset, properties={"UNIQ_KEY": "K"}))


def test_the_pull_asks_one_message_with_its_subscription_and_commits_nothing() -> None:
    fields = pull_fields(READ, inner_consumer_group("broker-b", 0))
    assert fields["consumerGroup"] == "InnerConsumerGroup_broker-b_0"
    assert (fields["topic"], fields["queueId"], fields["queueOffset"], fields["maxMsgNums"]) \
        == ("orders", "1", "5", "1")
    assert (int(fields["sysFlag"]), fields["subscription"], fields["commitOffset"]) \
        == (0x4, "*", "0")


def test_the_replicas_are_asked_by_broker_id() -> None:
    route = TopicRouteData(queue_datas=(), broker_datas=(
        BrokerData("c", "broker-b", {0: "b0:1"}),
        BrokerData("c", "broker-a", {2: "a2:1", 0: "a1:1"})))
    assert replica_addresses(route, "broker-a") == ["a1:1", "a2:1"]
    assert replica_addresses(route, "broker-z") == []


def test_each_answer_says_found_gone_or_ask_the_next() -> None:
    found = answer(READ, SUCCESS, {}, stored(5))
    assert isinstance(found, MessageRecord) and found.queue_offset == 5
    # The queue's minimum moved past the offset: deleted.
    assert answer(READ, PULL_OFFSET_MOVED, {"minOffset": "9"}, b"") is Unread.GONE
    assert answer(READ, SUCCESS, {}, stored(7)) is Unread.GONE
    # A lagging replica, a refusal, an offset past its end: another replica may have it.
    assert answer(READ, PULL_NOT_FOUND, {}, b"") is Unread.NOT_HERE
    assert answer(READ, PULL_OFFSET_MOVED, {"minOffset": "0"}, b"") is Unread.NOT_HERE
    assert answer(READ, PULL_OFFSET_MOVED, {}, b"") is Unread.NOT_HERE
    assert answer(READ, SUBSCRIPTION_NOT_EXIST, {}, b"") is Unread.NOT_HERE
    assert answer(READ, SUCCESS, {}, stored(5, queue_id=0)) is Unread.NOT_HERE


@given(st.binary(max_size=300), st.sampled_from([SUCCESS, PULL_OFFSET_MOVED, 1]),
       st.dictionaries(st.sampled_from(["minOffset", "maxOffset"]), st.text(max_size=8)))
def test_any_answer_is_read_without_raising(body: bytes, code: int, fields: dict) -> None:
    found = answer(READ, code, fields, body)
    assert isinstance(found, MessageRecord | Unread)
