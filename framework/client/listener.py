"""What a push consumer's application provides: a listener, and what it answers. Pure.

A listener is an ``async`` function given a list of messages (one by
default: ``consume_message_batch_max_size``), wrapped to say how the
consumer runs it:

- ``MessageListenerConcurrently``: many messages at once, across queues and
  within one; answers ``CONSUME_SUCCESS`` or ``RECONSUME_LATER`` (an
  exception counts as ``RECONSUME_LATER``).
- ``MessageListenerOrderly``: one message at a time per queue, in queue
  order, while the consumer holds the queue's lock on its broker; answers
  ``SUCCESS`` or ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (the same messages
  again after ``suspend_current_queue_time``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

import attrs

from triomq.client.message import MessageExt

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "MessageListener",
    "MessageListenerConcurrently",
    "MessageListenerOrderly",
]


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@attrs.frozen
class MessageListenerConcurrently:
    consume: Callable[[list[MessageExt]], Awaitable[ConsumeConcurrentlyStatus]]


@attrs.frozen
class MessageListenerOrderly:
    consume: Callable[[list[MessageExt]], Awaitable[ConsumeOrderlyStatus]]


MessageListener = MessageListenerConcurrently | MessageListenerOrderly
