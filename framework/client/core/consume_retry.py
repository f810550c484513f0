"""What a push consumer does with a message its listener failed. Pure.

RocketMQ's rules (``DefaultMQPushConsumerImpl``, ``ConsumeMessageConcurrentlyService``,
``ConsumeMessageOrderlyService``), clustering mode:

- the consumer also subscribes to its group's retry topic ``%RETRY%<group>``
  (``*``), where its brokers put the messages it sends back;
- a message pulled from there is shown to the listener under its first
  topic (the ``RETRY_TOPIC`` property: ``resetRetryAndNamespace``);
- a concurrent consumer sends a message its listener answered
  ``RECONSUME_LATER`` for back to the broker it came from
  (CONSUMER_SEND_MSG_BACK: the record's commit-log offset, the group, the
  listener's ``delay_level_when_next_consume``, ``max_reconsume_times``);
  the broker puts it into the retry topic, or the dead-letter topic
  ``%DLQ%<group>`` once it was retried ``max_reconsume_times`` times;
- an orderly consumer retries in place, and sends a message that reached
  ``max_reconsume_times`` back with delay level -1: straight to the
  dead-letter topic.

``max_reconsume_times`` -1 is 16 for a concurrent consumer and no limit
(2^31 - 1) for an orderly one, as RocketMQ's ``getMaxReconsumeTimes``.
"""

from __future__ import annotations

import attrs

from triomq.client.core.message import MessageExt
from triomq.protocol.retry import (
    MAX_RECONSUME_TIMES_DEFAULT,
    PROPERTY_RETRY_TOPIC,
    retry_topic,
)

__all__ = [
    "DELAY_LEVEL_DLQ",
    "ORDERLY_MAX_RECONSUME_TIMES",
    "max_reconsume_times",
    "reset_retry_topic",
    "send_back_fields",
]

#: What a send-back's ``delayLevel`` says to put the message into the dead-letter queue.
DELAY_LEVEL_DLQ = -1
#: An orderly consumer's maximum when none is set (Java's Integer.MAX_VALUE).
ORDERLY_MAX_RECONSUME_TIMES = 2**31 - 1


def max_reconsume_times(configured: int, *, orderly: bool) -> int:
    """The retries before the dead-letter queue a consumer configured with ``configured``
    (-1: the default) allows."""
    if configured != -1:
        return configured
    return ORDERLY_MAX_RECONSUME_TIMES if orderly else MAX_RECONSUME_TIMES_DEFAULT


def reset_retry_topic(message: MessageExt, group: str) -> MessageExt:
    """``message`` under its first topic when it was pulled from ``group``'s retry topic."""
    first = message.properties.get(PROPERTY_RETRY_TOPIC)
    if first and message.topic == retry_topic(group):
        return attrs.evolve(message, topic=first)
    return message


def send_back_fields(message: MessageExt, group: str, *, delay_level: int,
                     max_reconsume_times: int) -> dict[str, str]:
    """CONSUMER_SEND_MSG_BACK's header for ``message`` (as the listener saw it), as
    ``MQClientAPIImpl.consumerSendMessageBack`` fills it."""
    return {"offset": str(message.commit_log_offset), "group": group,
            "delayLevel": str(delay_level), "originMsgId": message.msg_id,
            "originTopic": message.topic, "unitMode": "false",
            "maxReconsumeTimes": str(max_reconsume_times)}
