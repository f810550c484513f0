"""GET_CONSUME_STATS (208), pure: RocketMQ's ``AdminBrokerProcessor.getConsumeStats`` rules.

``mqadmin consumerProgress`` asks every master of a group's retry topic for
the group's ``ConsumeStats`` (header ``consumerGroup``, optional ``topic``):

- the topics: the one in the header, else every topic the group stored
  offsets for (``ConsumerOffsetTable.topics_of``) that the broker holds;
  then, when the group's online consumers subscribe to anything, only those
  they subscribe to (``topics_to_collect``). A header topic the broker does
  not hold adds nothing: mqadmin asks every master of the retry topic's
  route about one topic, and a master without it must not fail the whole
  question (RocketMQ 5 answers SUCCESS with an empty table too);
- each read queue of each topic one ``OffsetWrapper`` (``offset_wrapper``):
  ``brokerOffset`` the queue's end as consumers see it (up to the confirm
  offset, as PULL_MESSAGE and GET_MAX_OFFSET bound it), ``consumerOffset``
  the committed offset (0 without one), ``pullOffset`` the same, and
  ``lastTimestamp`` the store time of the message at ``consumerOffset - 1``
  (0 when there is none);
- ``consumeTps``: messages FOUND pulls returned to the group on those topics
  over the last minute, divided by 60 (``MinuteCounts`` keyed by
  ``stats_key(topic, group)``, fed by the pull handler with the time passed
  in), summed over the topics.

GET_BROKER_CONSUME_STATS (317), ``mqadmin brokerConsumeStats -b ADDR``: every
subscription group's ``ConsumeStats`` on this broker, one per topic it
stored offsets for (``broker_consume_stats``), as RocketMQ's
``fetchAllConsumeStatsInBroker`` counts them: a topic the broker does not
hold, or (header ``isOrder`` true) one that is not ordered, or one the
group's online consumers do not subscribe to while they subscribe to
others, is left out; each topic's write queues (RocketMQ's choice here,
where GET_CONSUME_STATS takes the read queues); ``pullOffset`` 0, as
RocketMQ leaves it. ``consume_stats_list`` writes the ``ConsumeStatsList``
body with ``totalDiff`` (broker minus consumer offsets) and
``totalInflightDiff`` (pull minus consumer offsets, so minus the consumer
offsets, as RocketMQ's sums come out).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from triomq.broker.admin.core.minute_counts import MinuteCounts, stats_key
from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable
from triomq.broker.consume.core.pull_lookup import QueueStore, confirmed_queue_max
from triomq.broker.core.headers import HeaderError
from triomq.protocol.consume_stats import ConsumeStats, OffsetWrapper
from triomq.protocol.message import STORE_TIMESTAMP_SPAN, store_timestamp_at
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import TopicConfig, dumps

__all__ = [
    "GroupStats",
    "StatsRequest",
    "StatsStore",
    "broker_consume_stats",
    "consume_stats",
    "consume_stats_list",
    "offset_wrapper",
    "parse_stats_header",
    "store_timestamp",
    "topics_to_collect",
]


class StatsStore(QueueStore, Protocol):
    """What the table reads of a commit log: its queues, and a record's first bytes."""

    def read(self, offset: int, size: int) -> bytes: ...


@attrs.frozen
class StatsRequest:
    """GET_CONSUME_STATS's header: the group, and one topic or ``""`` for all."""

    consumer_group: str
    topic: str = ""


def parse_stats_header(fields: Mapping[str, str]) -> StatsRequest:
    """``GetConsumeStatsRequestHeader``; ``HeaderError`` if the group is missing."""
    group = fields.get("consumerGroup")
    if not group:
        raise HeaderError("consumerGroup", "missing or empty")
    topic = fields.get("topic") or ""
    # Java's isBlank: white space alone names no topic.
    return StatsRequest(group, topic if topic.strip() else "")


def topics_to_collect(request: StatsRequest, *, offset_topics: Iterable[str],
                      held: Mapping[str, TopicConfig], subscribed: Collection[str]
                      ) -> list[TopicConfig]:
    """The topics to answer for, in name order (see the module). ``subscribed``: the
    topics the group's online consumers subscribe to (empty when none is online)."""
    if request.topic:
        names = [request.topic] if request.topic in held else []
    else:
        names = sorted(t for t in offset_topics if t in held)
    return [held[t] for t in names if not subscribed or t in subscribed]


def store_timestamp(store: StatsStore, topic: str, queue_id: int, queue_offset: int) -> int:
    """The storeTimestamp of the queue's message at ``queue_offset``; 0 when the queue
    no longer (or never) held it."""
    if not (store.queue_min_offset(topic, queue_id) <= queue_offset
            < store.queue_max_offset(topic, queue_id)):
        return 0
    entries = store.queue_entries(topic, queue_id, queue_offset, 1)
    if not entries or entries[0][1] < store.min_offset:
        return 0
    head = store.read(entries[0][1], STORE_TIMESTAMP_SPAN)
    return store_timestamp_at(head) if len(head) == STORE_TIMESTAMP_SPAN else 0


def offset_wrapper(store: StatsStore, topic: str, queue_id: int, *, committed: int | None,
                   confirm_offset: int) -> OffsetWrapper:
    """One queue's figures for a group that committed ``committed`` (None: nothing)."""
    consumer_offset = max(0, committed) if committed is not None else 0
    return OffsetWrapper(
        broker_offset=confirmed_queue_max(store, topic, queue_id, confirm_offset),
        consumer_offset=consumer_offset,
        # RocketMQ 5 reports max(committed, its pull-offset table), a table only POP
        # consumers fill; triomq has none, so this is what RocketMQ reports for pulls.
        pull_offset=consumer_offset,
        last_timestamp=(store_timestamp(store, topic, queue_id, consumer_offset - 1)
                        if consumer_offset > 0 else 0))


def consume_stats(group: str, topics: Sequence[TopicConfig], *, broker_name: str,
                  store: StatsStore, offsets: ConsumerOffsetTable, confirm_offset: int,
                  got: MinuteCounts, now: float) -> ConsumeStats:
    """The group's ``ConsumeStats`` on this broker for ``topics``, at time ``now``."""
    table = {}
    for config in topics:
        topic = config.topic_name
        for queue_id in range(config.read_queue_nums):
            table[MessageQueue(topic, broker_name, queue_id)] = offset_wrapper(
                store, topic, queue_id, committed=offsets.query(group, topic, queue_id),
                confirm_offset=confirm_offset)
    return ConsumeStats(table, sum(got.tps(stats_key(c.topic_name, group), now)
                                   for c in topics))


#: One group's stats, a ``ConsumeStats`` per topic: ``(group, [stats, ...])``.
GroupStats = tuple[str, list[ConsumeStats]]


def broker_consume_stats(groups: Iterable[str], *, held: Mapping[str, TopicConfig],
                         subscribed: Callable[[str], Collection[str]], order_only: bool,
                         broker_name: str, store: StatsStore, offsets: ConsumerOffsetTable,
                         confirm_offset: int, got: MinuteCounts, now: float
                         ) -> list[GroupStats]:
    """Every group's stats on this broker (see the module); ``subscribed(group)``: the
    topics its online consumers subscribe to (empty when none is online)."""
    answer = []
    for group in sorted(groups):
        online = subscribed(group)
        per_topic = []
        for topic in sorted(offsets.topics_of(group)):
            config = held.get(topic)
            if config is None or (order_only and not config.order) \
                    or (online and topic not in online):
                continue
            table = {}
            for queue_id in range(config.write_queue_nums):
                committed = offsets.query(group, topic, queue_id)
                consumer_offset = max(0, committed) if committed is not None else 0
                table[MessageQueue(topic, broker_name, queue_id)] = OffsetWrapper(
                    broker_offset=confirmed_queue_max(store, topic, queue_id, confirm_offset),
                    consumer_offset=consumer_offset, pull_offset=0,
                    last_timestamp=(store_timestamp(store, topic, queue_id, consumer_offset - 1)
                                    if consumer_offset > 0 else 0))
            per_topic.append(ConsumeStats(table, got.tps(stats_key(topic, group), now)))
        answer.append((group, per_topic))
    return answer


def consume_stats_list(broker_addr: str, stats: Sequence[GroupStats]) -> bytes:
    """``ConsumeStatsList`` as fastjson writes it: a one-entry map per group."""
    every = [s for _, per_topic in stats for s in per_topic]
    total_diff = sum(s.total_diff() for s in every)
    inflight = sum(w.pull_offset - w.consumer_offset
                   for s in every for w in s.offset_table.values())
    groups = b",".join(b"{" + dumps(group) + b":[" + b",".join(s.encode() for s in per_topic)
                       + b"]}" for group, per_topic in stats)
    return (b'{"brokerAddr":' + dumps(broker_addr) + b',"consumeStatsList":[' + groups
            + b'],"totalDiff":' + dumps(total_diff) + b',"totalInflightDiff":'
            + dumps(inflight) + b"}")
