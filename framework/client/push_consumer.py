"""The push consumer: RocketMQ's ``DefaultMQPushConsumer`` on trio.

::

    async def handle(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for message in messages:
            print(message.topic, message.queue_offset, message.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("orders-consumer", namesrv_addr=["10.0.0.1:9876"])
    consumer.subscribe("orders", "paid || refunded")
    consumer.register_message_listener(MessageListenerConcurrently(handle))
    async with consumer.start(node.connect):
        await trio.sleep_forever()

Group membership, rebalancing, long-polling pulls and offsets are
``consumer_base``'s. Pulled messages go to the listener:

- **concurrently** (``MessageListenerConcurrently``): up to
  ``consume_thread_max`` (20) listener calls at once, each given up to
  ``consume_message_batch_max_size`` (1) messages. A queue's committed
  offset only moves past messages the listener answered
  ``CONSUME_SUCCESS`` for (``ProcessQueue``), so a consumer that stops or
  crashes delivers at least once. ``RECONSUME_LATER`` (or an exception)
  calls the listener again with the same messages after
  ``reconsume_later_delay`` (5 s), ``reconsume_times`` one higher, in this
  consumer, for as long as it holds the queue: triomq's brokers do not take
  CONSUMER_SEND_MSG_BACK yet, so there is no retry topic, no growing delay
  and no dead-letter queue; meanwhile the message holds its queue's offset
  back.
- **orderly** (``MessageListenerOrderly``): the consumer locks each queue
  on its broker before it takes it up, and runs one listener call at a
  time per queue, in offset order, committing after each
  ``SUCCESS``; ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` gives the same messages
  again after ``suspend_current_queue_time`` (1 s). A queue whose lock was
  lost pauses until it is locked again, so two consumers never consume one
  queue at once while their locks hold.

When the ``start`` block ends the consumer stops pulling, stores its
offsets, unlocks its queues and leaves the group; listener calls still
running are cancelled and their messages are delivered again later.

A broker passing on an admin's CONSUME_MESSAGE_DIRECTLY (``mqadmin
queryMsgById -g -d``) has the listener called once with the message it
carries, outside the queues and their offsets (``direct_consume``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from triomq.client.consumer_base import ConsumerBase, QueueState
from triomq.client.direct_consume import consume_directly
from triomq.client.errors import ClientError
from triomq.client.listener import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageListener,
    MessageListenerOrderly,
)
from triomq.client.message import MessageExt
from triomq.client.running_info import PROP_CONSUMEORDERLY, PROP_THREADPOOL_CORE_SIZE
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import Connect, RpcConnection

__all__ = ["PushConsumer"]

log = logging.getLogger("triomq.client")


def _again(messages: Sequence[MessageExt]) -> list[MessageExt]:
    return [attrs.evolve(m, reconsume_times=m.reconsume_times + 1) for m in messages]


class PushConsumer(ConsumerBase):
    """A member of consumer group ``group`` that calls a listener with its messages.

    ``options`` are ``ConsumerBase``'s (``consume_from_where``,
    ``pull_batch_size``, the intervals...).
    """

    def __init__(self, group: str, namesrv_addr: Sequence[str] = (), *,
                 consume_thread_max: int = 20, consume_message_batch_max_size: int = 1,
                 reconsume_later_delay: float = 5.0, suspend_current_queue_time: float = 1.0,
                 **options: Any) -> None:
        super().__init__(group, namesrv_addr, **options)
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.reconsume_later_delay = reconsume_later_delay
        self.suspend_current_queue_time = suspend_current_queue_time
        self._listener: MessageListener | None = None
        self._limiter = trio.CapacityLimiter(consume_thread_max)

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``*``: all)."""
        self._subscribe(topic, expression, time.time_ns() // 1_000_000)

    def register_message_listener(self, listener: MessageListener) -> None:
        self._listener = listener

    @asynccontextmanager
    async def start(self, connect: Connect) -> AsyncIterator[PushConsumer]:
        """Consume until the block ends; ``connect`` opens streams (e.g. ``node.connect``)."""
        if self._listener is None:
            raise ClientError("register a message listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before starting the consumer")
        self.orderly = isinstance(self._listener, MessageListenerOrderly)
        self._limiter = trio.CapacityLimiter(self.consume_thread_max)
        async with self._running(connect):
            yield self

    async def _on_consume_directly(self, request: RemotingCommand,
                                   peer: RpcConnection) -> RemotingCommand:
        assert self._listener is not None  # start() requires one
        return await consume_directly(self.group, self._listener, request)

    def _running_properties(self) -> dict[str, str]:
        return {**super()._running_properties(),
                "consumeThreadMin": str(self.consume_thread_max),
                "consumeThreadMax": str(self.consume_thread_max),
                "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
                PROP_CONSUMEORDERLY: "true" if self.orderly else "false",
                PROP_THREADPOOL_CORE_SIZE: str(self.consume_thread_max)}

    # -- concurrently --------------------------------------------------------------

    def _deliver(self, state: QueueState, messages: Sequence[MessageExt]) -> None:
        if self.orderly:
            return  # the queue's loop takes them from its process queue
        assert self._nursery is not None
        size = max(1, self.consume_message_batch_max_size)
        for at in range(0, len(messages), size):
            self._nursery.start_soon(self._consume_concurrently, state,
                                     list(messages[at:at + size]))

    async def _consume_concurrently(self, state: QueueState, messages: list[MessageExt]) -> None:
        assert self._listener is not None and not isinstance(self._listener,
                                                             MessageListenerOrderly)
        while True:
            async with self._limiter:
                if state.process.dropped:
                    return
                state.last_consume = trio.current_time()
                try:
                    status = await self._listener.consume(messages)
                except Exception:
                    log.exception("listener of %s raised: consumed again later", self.group)
                    status = ConsumeConcurrentlyStatus.RECONSUME_LATER
            if state.process.dropped:
                return  # the queue's new holder delivers them again
            if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
                self.offsets.consumed(state.pull, messages)
                return
            await trio.sleep(self.reconsume_later_delay)
            messages = _again(messages)

    # -- orderly ---------------------------------------------------------------------

    def _taken(self, state: QueueState, nursery: trio.Nursery) -> None:
        if self.orderly:
            nursery.start_soon(self._consume_orderly, state)

    async def _consume_orderly(self, state: QueueState) -> None:
        listener = self._listener
        assert isinstance(listener, MessageListenerOrderly)
        process = state.process
        while not process.dropped:
            if not process.waiting:
                await state.arrived.wait()
                state.arrived = trio.Event()
                continue
            if not state.lock_valid(trio.current_time()):
                await trio.sleep(0.1)  # the lock renewal takes it again, or the queue goes
                continue
            async with state.consume_lock:
                if process.dropped:
                    return
                messages = process.take(max(1, self.consume_message_batch_max_size))
                state.last_consume = trio.current_time()
                try:
                    status = await listener.consume(messages)
                except Exception:
                    log.exception("orderly listener of %s raised: suspended", self.group)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if status is ConsumeOrderlyStatus.SUCCESS:
                    offset = process.commit()
                    if offset is not None:
                        self.offsets.update(state.queue, offset)
                    continue
                process.put_back(_again(messages))
            await trio.sleep(self.suspend_current_queue_time)
