"""GET_TOPIC_STATS_INFO's rules and body, on a commit log in memory (``topic_stats``)."""

from __future__ import annotations

from test_consume_stats_core import T0, QueueLog

from triomq.broker.admin.core.topic_stats import TopicOffset, TopicStatsTable, topic_stats
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import TopicConfig


def test_every_queue_of_the_larger_count_with_its_range_and_last_store_time() -> None:
    log = QueueLog()
    for n in range(3):
        log.put("orders", 0, T0 + n)
    log.put("orders", 2, T0 + 10)
    config = TopicConfig("orders", 2, 3, 6)  # 2 read queues, 3 write queues
    stats = topic_stats(config, broker_name="broker-a", store=log,
                        confirm_offset=log.max_offset, put_tps=0.25)
    assert stats == TopicStatsTable({
        MessageQueue("orders", "broker-a", 0): TopicOffset(0, 3, T0 + 2),
        MessageQueue("orders", "broker-a", 1): TopicOffset(0, 0, 0),
        MessageQueue("orders", "broker-a", 2): TopicOffset(0, 1, T0 + 10),
    }, topic_put_tps=0.25)


def test_the_end_is_the_confirmed_one_and_a_record_gone_has_no_time() -> None:
    log = QueueLog()
    for n in range(3):
        log.put("orders", 0, T0 + n)
    first_two = log.queues[("orders", 0)][2][1]  # where the third record starts
    stats = topic_stats(TopicConfig("orders", 1, 1, 6), broker_name="b", store=log,
                        confirm_offset=first_two, put_tps=0.0)
    assert stats.offset_table[MessageQueue("orders", "b", 0)] == TopicOffset(0, 2, T0 + 1)
    # Retention took the queue's records (RocketMQ's pickupStoreTimestamp: -1).
    log.first[("orders", 0)] = 3
    log.min_offset = log.max_offset
    stats = topic_stats(TopicConfig("orders", 1, 1, 6), broker_name="b", store=log,
                        confirm_offset=log.max_offset, put_tps=0.0)
    assert stats.offset_table[MessageQueue("orders", "b", 0)] == TopicOffset(3, 3, -1)


def test_the_body_is_fastjsons_object_keyed_map() -> None:
    table = TopicStatsTable({MessageQueue("t", "broker-a", 1): TopicOffset(2, 10, T0),
                             MessageQueue("t", "broker-a", 0): TopicOffset(0, 0, 0)}, 1.5)
    assert table.encode() == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"t"}:'
        b'{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},'
        b'{"brokerName":"broker-a","queueId":1,"topic":"t"}:'
        b'{"lastUpdateTimestamp":1700000000000,"maxOffset":10,"minOffset":2}},'
        b'"topicPutTps":1.5}')
    assert TopicStatsTable().encode() == b'{"offsetTable":{},"topicPutTps":0.0}'
