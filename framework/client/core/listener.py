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

A concurrent listener reads its call's ``ConsumeConcurrentlyContext`` with
``consume_concurrently_context()`` (RocketMQ passes it as an argument): its
``delay_level_when_next_consume`` is the delay level the failed messages
go back with (0: the broker's, ``3 + reconsume_times``; -1: straight to the
dead-letter queue).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import attrs

from triomq.client.core.message import MessageExt, MessageQueue

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "MessageListener",
    "MessageListenerConcurrently",
    "MessageListenerOrderly",
    "consume_concurrently_context",
    "listener_context",
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


@attrs.define
class ConsumeConcurrentlyContext:
    """One concurrent listener call's context (RocketMQ's ``ConsumeConcurrentlyContext``)."""

    message_queue: MessageQueue
    #: The delay level failed messages go back with (0: the broker's; -1: the DLQ).
    delay_level_when_next_consume: int = 0


_context: ContextVar[ConsumeConcurrentlyContext] = ContextVar("consume_concurrently_context")


def consume_concurrently_context() -> ConsumeConcurrentlyContext:
    """The context of the concurrent listener call running now (``LookupError`` outside one)."""
    return _context.get()


@contextmanager
def listener_context(context: ConsumeConcurrentlyContext) -> Iterator[None]:
    """Run a listener call with ``context`` as its ``consume_concurrently_context()``."""
    token = _context.set(context)
    try:
        yield
    finally:
        _context.reset(token)
