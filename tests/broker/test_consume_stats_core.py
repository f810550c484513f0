"""GET_CONSUME_STATS's rules, pure: the topics, each queue's figures, consumeTps, the body."""

from __future__ import annotations

import pytest

from triomq.broker.admin.core.consume_stats import (
    StatsRequest,
    consume_stats,
    offset_wrapper,
    parse_stats_header,
    topics_to_collect,
)
from triomq.broker.admin.core.minute_counts import MinuteCounts
from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable
from triomq.broker.core.headers import HeaderError
from triomq.protocol.consume_stats import ConsumeStats, OffsetWrapper
from triomq.protocol.message import MessageRecord, encode
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import RouteDataError, TopicConfig

T0 = 1_700_000_000_000


class QueueLog:
    """A commit log in memory: records back to back, a consume queue per (topic, queue)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.min_offset = 0
        self.queues: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        self.first: dict[tuple[str, int], int] = {}

    @property
    def max_offset(self) -> int:
        return len(self.data)

    def put(self, topic: str, queue_id: int, stored_at: int,
            born_host: tuple[str, int] = ("10.0.0.1", 9)) -> None:
        entries = self.queues.setdefault((topic, queue_id), [])
        record = encode(MessageRecord(topic=topic, body=b"x", queue_id=queue_id,
                                      queue_offset=len(entries), born_host=born_host,
                                      store_timestamp=stored_at))
        entries.append((len(entries), len(self.data), len(record), 0))
        self.data += record

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return self.first.get((topic, queue_id), 0)

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), []))

    def queue_entries(self, topic, queue_id, start, max_count):
        return self.queues.get((topic, queue_id), [])[start:start + max_count]

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.data[offset:offset + size])


def orders(queues: int = 2) -> TopicConfig:
    return TopicConfig("orders", queues, queues, 6)


# -- the header and the topics -------------------------------------------------------------


def test_the_header_needs_a_group_and_a_blank_topic_is_none() -> None:
    assert parse_stats_header({"consumerGroup": "cg", "topic": "orders"}) == \
        StatsRequest("cg", "orders")
    assert parse_stats_header({"consumerGroup": "cg", "topic": "  "}) == StatsRequest("cg")
    assert parse_stats_header({"consumerGroup": "cg"}) == StatsRequest("cg")
    with pytest.raises(HeaderError, match="consumerGroup"):
        parse_stats_header({"topic": "orders"})


def test_without_a_topic_the_groups_offset_topics_the_broker_holds() -> None:
    held = {"orders": orders(), "audit": TopicConfig("audit", 1, 1, 6)}
    collect = lambda subscribed: [c.topic_name for c in topics_to_collect(  # noqa: E731
        StatsRequest("cg"), offset_topics={"orders", "audit", "gone"}, held=held,
        subscribed=subscribed)]
    # "gone" is skipped: the broker no longer holds it.
    assert collect(()) == ["audit", "orders"]
    # Online consumers that subscribe: only their topics.
    assert collect({"orders", "elsewhere"}) == ["orders"]


def test_a_header_topic_must_be_held_and_subscribed_when_consumers_subscribe() -> None:
    held = {"orders": orders()}

    def collect(topic: str, subscribed=()) -> list[str]:
        return [c.topic_name for c in topics_to_collect(
            StatsRequest("cg", topic), offset_topics=(), held=held, subscribed=subscribed)]

    assert collect("orders") == ["orders"]  # no offsets needed when it is named
    assert collect("orders", {"audit"}) == []
    # Not held (nor a legal name): nothing, as RocketMQ 5 answers.
    assert collect("nope") == [] and collect("bad topic!") == []


# -- each queue's figures ---------------------------------------------------------------------


def test_a_queues_offsets_and_the_store_time_of_the_last_consumed_message() -> None:
    log = QueueLog()
    for n in range(5):
        log.put("orders", 0, T0 + n, born_host=("::1", 9) if n == 2 else ("10.0.0.1", 9))
    # Committed 3: the last consumed message is queue offset 2 (an IPv6 born host).
    assert offset_wrapper(log, "orders", 0, committed=3, confirm_offset=log.max_offset) == \
        OffsetWrapper(broker_offset=5, consumer_offset=3, pull_offset=3, last_timestamp=T0 + 2)
    assert offset_wrapper(log, "orders", 0, committed=1, confirm_offset=log.max_offset) \
        .last_timestamp == T0
    # Nothing committed (or a negative offset): 0, and no last message.
    for committed in (None, 0, -1):
        assert offset_wrapper(log, "orders", 0, committed=committed,
                              confirm_offset=log.max_offset) == OffsetWrapper(5, 0, 0, 0)
    # The broker offset is what consumers can read: up to the confirm offset.
    third_end = log.queues[("orders", 0)][2][1] + log.queues[("orders", 0)][2][2]
    assert offset_wrapper(log, "orders", 0, committed=3,
                          confirm_offset=third_end).broker_offset == 3
    # A committed offset past the queue's end, or a message no longer held: no time.
    assert offset_wrapper(log, "orders", 0, committed=9,
                          confirm_offset=log.max_offset).last_timestamp == 0
    log.first[("orders", 0)] = 3
    assert offset_wrapper(log, "orders", 0, committed=3,
                          confirm_offset=log.max_offset).last_timestamp == 0


def test_the_table_has_every_read_queue_and_the_groups_rate() -> None:
    log = QueueLog()
    for n in range(3):
        log.put("orders", 1, T0 + n)
    offsets = ConsumerOffsetTable()
    offsets.commit("cg", "orders", 1, 2, T0)
    offsets.commit("other", "orders", 0, 1, T0)
    got = MinuteCounts()
    got.add("orders@cg", 6, now=100.0)
    got.add("audit@cg", 60, now=100.0)  # not a topic answered for
    got.add("orders@other", 60, now=100.0)
    stats = consume_stats("cg", [orders(3)], broker_name="broker-a", store=log,
                          offsets=offsets, confirm_offset=log.max_offset, got=got, now=101.0)
    assert stats == ConsumeStats({
        MessageQueue("orders", "broker-a", 0): OffsetWrapper(0, 0, 0, 0),
        MessageQueue("orders", "broker-a", 1): OffsetWrapper(3, 2, 2, T0 + 1),
        MessageQueue("orders", "broker-a", 2): OffsetWrapper(0, 0, 0, 0),
    }, consume_tps=0.1)
    assert stats.total_diff() == 1
    # No topic: an empty table.
    assert consume_stats("cg", [], broker_name="broker-a", store=log, offsets=offsets,
                         confirm_offset=log.max_offset, got=got, now=101.0) == ConsumeStats()


# -- consumeTps -------------------------------------------------------------------------------


def test_the_rate_counts_the_last_minute_only() -> None:
    got = MinuteCounts()
    got.add("orders@cg", 30, now=10.2)
    got.add("orders@cg", 12, now=10.9)  # the same second's bucket
    got.add("orders@cg", 18, now=40.0)
    got.add("orders@cg", 0, now=41.0)  # an empty pull counts nothing
    assert got.tps("orders@cg", now=41.0) == 1.0
    assert got.count("audit@cg", now=41.0) == got.count("orders@cg2", now=41.0) == 0
    # A message counts for 60 s after the second it was got in.
    assert got.count("orders@cg", now=69.99) == 60
    assert got.count("orders@cg", now=70.0) == 18
    assert got.count("orders@cg", now=99.99) == 18
    assert got.tps("orders@cg", now=100.0) == 0.0


def test_pairs_that_stopped_pulling_are_forgotten() -> None:
    got = MinuteCounts()
    got.add("orders@old", 5, now=0.0)
    got.add("orders@cg", 5, now=30.0)
    assert set(got._buckets) == {"orders@old", "orders@cg"}
    got.add("orders@cg", 5, now=61.0)  # a minute after the last sweep
    assert set(got._buckets) == {"orders@cg"}
    assert got.count("orders@cg", now=61.0) == 10


# -- the body ---------------------------------------------------------------------------------


def test_the_body_is_fastjsons_object_keyed_map() -> None:
    stats = ConsumeStats({MessageQueue("t", "broker-a", 0): OffsetWrapper(10, 4, 4, T0)},
                         consume_tps=0.0)
    body = (b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,'
            b'"topic":"t"}:{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":'
            b'1700000000000,"pullOffset":4}}}')
    assert stats.encode() == body
    assert ConsumeStats.decode(body) == stats
    assert ConsumeStats().encode() == b'{"consumeTps":0.0,"offsetTable":{}}'
    # As a Java broker may space it, fields in any order, an older one without pullOffset.
    spaced = (b' {"offsetTable" : { {"topic":"t","queueId":1,"brokerName":"b"} : '
              b'{"consumerOffset":1,"brokerOffset":2} },\n"consumeTps": 2 } ')
    assert ConsumeStats.decode(spaced) == ConsumeStats(
        {MessageQueue("t", "b", 1): OffsetWrapper(2, 1, 0, 0)}, 2.0)


def test_merging_brokers_answers_sums_their_rates() -> None:
    a = ConsumeStats({MessageQueue("t", "a", 0): OffsetWrapper(5, 1, 1)}, 0.5)
    b = ConsumeStats({MessageQueue("t", "b", 0): OffsetWrapper(7, 7, 7)}, 0.25)
    merged = a.merge(b)
    assert merged.consume_tps == 0.75 and merged.total_diff() == 4
    assert set(merged.offset_table) == set(a.offset_table) | set(b.offset_table)


@pytest.mark.parametrize("body", [
    b"", b"[]", b'{"consumeTps":"fast"}', b'{"consumeTps":1}x',
    b'{"offsetTable":{"t@0":{"brokerOffset":1,"consumerOffset":0}}}',
    b'{"offsetTable":{{"topic":"t","brokerName":"b"}:{"brokerOffset":1,"consumerOffset":0}}}',
    b'{"offsetTable":{{"topic":"t","brokerName":"b","queueId":0}:{"brokerOffset":true,'
    b'"consumerOffset":0}}}',
    b'{"offsetTable":{{"topic":"t","brokerName":"b","queueId":0} {}}}',
    b"[" * 100 + b"]" * 100, b"\xff",
])
def test_a_bad_body_is_named(body: bytes) -> None:
    with pytest.raises(RouteDataError, match="ConsumeStats"):
        ConsumeStats.decode(body)
