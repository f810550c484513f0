"""GET_TOPIC_STATS_INFO (202), pure: RocketMQ's ``AdminBrokerProcessor.getTopicStatsInfo`` rules.

``mqadmin topicStatus -t T`` asks each master of the topic's route for its
``TopicStatsTable`` (header ``topic``): a topic the broker does not hold is
TOPIC_NOT_EXIST, ``topic[T] not exist``; else, for each of the topic's
queues (the larger of its read and write queue counts), a ``TopicOffset``:

- ``minOffset`` and ``maxOffset``, the queue's first and next offsets (the
  end as consumers see it: up to the confirm offset, as PULL_MESSAGE and
  GET_MAX_OFFSET bound it);
- ``lastUpdateTimestamp``, the store time of the queue's last message (0 for
  an empty queue, -1 when its record is no longer held);

and ``topicPutTps``, the messages put to the topic a second over the last
minute. The body is fastjson's, with ``MessageQueue`` objects as the map's
keys (``triomq.protocol.consume_stats.queue_map``)::

    {"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"t"}:
     {"lastUpdateTimestamp":1700000000000,"maxOffset":10,"minOffset":0}},"topicPutTps":0.0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from triomq.broker.admin.core.consume_stats import StatsStore, store_timestamp
from triomq.broker.consume.core.pull_lookup import confirmed_queue_max
from triomq.protocol.consume_stats import queue_map
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import TopicConfig, dumps

__all__ = ["TopicOffset", "TopicStatsTable", "topic_stats"]


@attrs.frozen
class TopicOffset:
    """One queue's first and next offsets, and when its last message was stored."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"lastUpdateTimestamp": self.last_update_timestamp,
                "maxOffset": self.max_offset, "minOffset": self.min_offset}


@attrs.frozen
class TopicStatsTable:
    """A topic's queues on one broker, and its put rate."""

    offset_table: Mapping[MessageQueue, TopicOffset] = attrs.field(
        factory=dict, converter=dict)
    topic_put_tps: float = 0.0

    def encode(self) -> bytes:
        """The body as fastjson writes it (see the module)."""
        return (b'{"offsetTable":'
                + queue_map({q: o.to_json() for q, o in self.offset_table.items()})
                + b',"topicPutTps":' + dumps(float(self.topic_put_tps)) + b"}")


def topic_stats(config: TopicConfig, *, broker_name: str, store: StatsStore,
                confirm_offset: int, put_tps: float) -> TopicStatsTable:
    """The topic's ``TopicStatsTable`` on this broker (see the module)."""
    topic = config.topic_name
    table = {}
    for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
        low = max(0, store.queue_min_offset(topic, queue_id))
        high = max(0, confirmed_queue_max(store, topic, queue_id, confirm_offset))
        stamp = (store_timestamp(store, topic, queue_id, high - 1) or -1) if high > 0 else 0
        table[MessageQueue(topic, broker_name, queue_id)] = TopicOffset(low, high, stamp)
    return TopicStatsTable(table, put_tps)
