"""Publish info from routes, round-robin queue selection avoiding a failed group, retry rules."""

from __future__ import annotations

import pytest

from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.message import MessageQueue, SendStatus
from triomq.client.core.publish import (
    QueueSelector,
    publish_info,
    refreshes_route,
    retriable,
    send_status,
)
from triomq.protocol.route import BrokerData, QueueData, TopicRouteData


def route(*groups: tuple[str, int, int, bool]) -> TopicRouteData:
    """Groups as (name, write queues, perm, has a master)."""
    return TopicRouteData(
        tuple(QueueData(name, 4, queues, perm) for name, queues, perm, _ in groups),
        tuple(BrokerData("c", name, {0: f"{name}:1", 1: f"{name}:2"} if master
                         else {1: f"{name}:2"}) for name, _, _, master in groups))


def test_writable_queues_of_groups_with_a_master_in_name_order() -> None:
    info = publish_info("t", route(("b", 2, 6, True), ("a", 1, 6, True), ("c", 3, 4, True),
                                   ("d", 2, 6, False)))
    assert info.message_queues == (MessageQueue("t", "a", 0), MessageQueue("t", "b", 0),
                                   MessageQueue("t", "b", 1))
    assert info.masters == {"a": "a:1", "b": "b:1", "c": "c:1"}
    assert info.ok
    assert not publish_info("t", route(("d", 2, 6, False))).ok


def test_the_default_topic_stands_in_with_at_most_queue_nums_per_group() -> None:
    info = publish_info("new", route(("a", 8, 6, True), ("b", 2, 6, True)), queue_nums=4)
    assert [(q.topic, q.broker_name, q.queue_id) for q in info.message_queues] == [
        ("new", "a", 0), ("new", "a", 1), ("new", "a", 2), ("new", "a", 3),
        ("new", "b", 0), ("new", "b", 1)]


def test_round_robin_from_the_start_index_and_around() -> None:
    info = publish_info("t", route(("a", 2, 6, True), ("b", 2, 6, True)))
    selector = QueueSelector(start=3)
    picked = [selector.select(info) for _ in range(5)]
    assert [(q.broker_name, q.queue_id) for q in picked] == [
        ("b", 1), ("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_a_retry_avoids_the_group_that_failed_if_another_has_queues() -> None:
    info = publish_info("t", route(("a", 2, 6, True), ("b", 2, 6, True)))
    selector = QueueSelector()
    for _ in range(10):
        assert selector.select(info, last_broker="a").broker_name == "b"
    only_a = publish_info("t", route(("a", 2, 6, True)))
    assert selector.select(only_a, last_broker="a").broker_name == "a"


def test_no_queue_to_select_is_an_error() -> None:
    with pytest.raises(ValueError):
        QueueSelector().select(publish_info("t", route()))


def test_retriable_codes_are_rocketmqs_and_no_answer() -> None:
    for code in (Code.TOPIC_NOT_EXIST, Code.SERVICE_NOT_AVAILABLE, Code.SYSTEM_ERROR,
                 Code.SYSTEM_BUSY, Code.NO_PERMISSION, Code.NO_BUYER_ID,
                 Code.NOT_IN_CURRENT_UNIT, None):
        assert retriable(code)
    for code in (Code.MESSAGE_ILLEGAL, Code.SUCCESS, Code.FLUSH_SLAVE_TIMEOUT, 29):
        assert not retriable(code)


def test_a_stale_route_or_no_answer_refreshes_the_route() -> None:
    assert refreshes_route(None)
    assert refreshes_route(Code.SERVICE_NOT_AVAILABLE)
    assert refreshes_route(Code.TOPIC_NOT_EXIST)
    assert not refreshes_route(Code.SYSTEM_BUSY)
    assert not refreshes_route(Code.MESSAGE_ILLEGAL)


def test_stored_answers_are_statuses() -> None:
    assert send_status(0) is SendStatus.SEND_OK
    assert send_status(10) is SendStatus.FLUSH_DISK_TIMEOUT
    assert send_status(12) is SendStatus.FLUSH_SLAVE_TIMEOUT
    assert send_status(11) is SendStatus.SLAVE_NOT_AVAILABLE
    assert send_status(14) is None
