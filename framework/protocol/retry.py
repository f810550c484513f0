"""Retry and dead-letter vocabulary a broker and its consumers share. Pure.

A message a consumer group failed to consume goes back to the group's
retry topic ``%RETRY%<group>`` (consumed again later) and, once the group
has retried it its maximum times, to its dead-letter topic ``%DLQ%<group>``.
The copy carries RocketMQ's properties naming where it came from.
"""

from __future__ import annotations

from triomq.protocol.topic_rules import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "DLQ_NUMS_PER_GROUP",
    "MAX_RECONSUME_TIMES_DEFAULT",
    "PROPERTY_CONSUME_START_TIME",
    "PROPERTY_MAX_RECONSUME_TIMES",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_RECONSUME_TIME",
    "PROPERTY_RETRY_TOPIC",
    "dlq_topic",
    "retry_topic",
]

#: The topic a message was first sent to (set on its first copy to a retry topic).
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
#: The first failed record's offset message id, kept through every retry.
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
#: The reconsume count a client's own send to the retry topic declares.
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
#: The group's maximum, as a client's own send to the retry topic declares it.
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
#: When (ms since the epoch) the consumer started consuming the message.
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"

#: Queues of a dead-letter topic (RocketMQ's ``DLQ_NUMS_PER_GROUP``).
DLQ_NUMS_PER_GROUP = 1
#: Retries before the dead-letter queue: a concurrent consumer's and a group's default.
MAX_RECONSUME_TIMES_DEFAULT = 16


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group
