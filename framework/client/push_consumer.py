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
  ``CONSUME_SUCCESS`` for or that went back to the broker
  (``ProcessQueue``), so a consumer that stops or crashes delivers at
  least once. ``RECONSUME_LATER`` (or an exception, or a call running past
  ``consume_timeout`` minutes, 15) sends each message back to the broker it
  came from (CONSUMER_SEND_MSG_BACK, with the call's
  ``consume_concurrently_context().delay_level_when_next_consume``): the
  broker puts it into the group's retry topic ``%RETRY%<group>``, to be
  delivered again with ``reconsume_times`` one higher (later, by its delay
  level, where the broker delays messages), or, after
  ``max_reconsume_times`` (16) retries, into the dead-letter topic
  ``%DLQ%<group>``. The consumer subscribes to its retry topic itself, and
  shows a retried message under its first topic (``consume_retry``). A
  message the broker did not take back is called again in this consumer
  after ``reconsume_later_delay`` (5 s), ``reconsume_times`` one higher,
  holding its queue's offset back meanwhile.
- **orderly** (``MessageListenerOrderly``): the consumer locks each queue
  on its broker before it takes it up, and runs one listener call at a
  time per queue, in offset order, committing after each
  ``SUCCESS``; ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or an exception) gives the
  same messages again after ``suspend_current_queue_time`` (1 s), with
  ``reconsume_times`` one higher; once that reaches ``max_reconsume_times``
  (no limit by default) they go back to the broker for the dead-letter
  topic and the queue moves on. A queue whose lock was
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
from triomq.client.core.codes import RequestCode as Req
from triomq.client.core.consume_retry import (
    DELAY_LEVEL_DLQ,
    max_reconsume_times,
    reset_retry_topic,
    send_back_fields,
)
from triomq.client.core.errors import BrokerError, ClientError
from triomq.client.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageListener,
    MessageListenerOrderly,
    listener_context,
)
from triomq.client.core.message import MessageExt
from triomq.client.core.running_info import PROP_CONSUMEORDERLY, PROP_THREADPOOL_CORE_SIZE
from triomq.client.direct_consume import consume_directly
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.retry import retry_topic
from triomq.rpc import Connect, RpcConnection, RpcError

__all__ = ["PushConsumer"]

log = logging.getLogger("triomq.client")

#: Seconds a send-back may take (RocketMQ's 5 s).
SEND_BACK_TIMEOUT = 5.0


def _again(messages: Sequence[MessageExt]) -> list[MessageExt]:
    return [attrs.evolve(m, reconsume_times=m.reconsume_times + 1) for m in messages]


class PushConsumer(ConsumerBase):
    """A member of consumer group ``group`` that calls a listener with its messages.

    ``options`` are ``ConsumerBase``'s (``consume_from_where``,
    ``pull_batch_size``, the intervals...). ``max_reconsume_times`` -1 is
    16 for a concurrent listener and no limit for an orderly one;
    ``consume_timeout`` is in minutes, as RocketMQ's.
    """

    def __init__(self, group: str, namesrv_addr: Sequence[str] = (), *,
                 consume_thread_max: int = 20, consume_message_batch_max_size: int = 1,
                 reconsume_later_delay: float = 5.0, suspend_current_queue_time: float = 1.0,
                 max_reconsume_times: int = -1, consume_timeout: float = 15.0,
                 **options: Any) -> None:
        super().__init__(group, namesrv_addr, **options)
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.reconsume_later_delay = reconsume_later_delay
        self.suspend_current_queue_time = suspend_current_queue_time
        self.max_reconsume_times = max_reconsume_times
        self.consume_timeout = consume_timeout
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
        if retry_topic(self.group) not in self.subscriptions:
            # Clustering mode: the group's failed messages come back through it.
            self._subscribe(retry_topic(self.group), "*", time.time_ns() // 1_000_000)
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
        listener = self._listener
        assert listener is not None and not isinstance(listener, MessageListenerOrderly)
        while True:
            context = ConsumeConcurrentlyContext(state.queue)
            shown = [reset_retry_topic(m, self.group) for m in messages]
            async with self._limiter:
                if state.process.dropped:
                    return
                state.last_consume = trio.current_time()
                status = ConsumeConcurrentlyStatus.RECONSUME_LATER
                try:
                    with listener_context(context), \
                            trio.move_on_after(self.consume_timeout * 60) as timer:
                        status = await listener.consume(shown)
                    if timer.cancelled_caught:
                        log.warning("listener of %s ran past consume_timeout (%s min): "
                                    "consumed again later", self.group, self.consume_timeout)
                except Exception:
                    log.exception("listener of %s raised: consumed again later", self.group)
            if state.process.dropped:
                return  # the queue's new holder delivers them again
            if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
                self.offsets.consumed(state.pull, messages)
                return
            kept = [original for original, message in zip(messages, shown, strict=True)
                    if not await self._send_back(message,
                                                 context.delay_level_when_next_consume)]
            if len(kept) < len(messages):
                self.offsets.consumed(state.pull, [m for m in messages if m not in kept])
            if not kept:
                return
            await trio.sleep(self.reconsume_later_delay)
            messages = _again(kept)

    async def _send_back(self, message: MessageExt, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to ``message``'s broker; whether the broker took it."""
        address = self.instance.master_address(message.broker_name)
        if address is None:
            log.info("message %s not sent back: no master of %s routed", message.msg_id,
                     message.broker_name)
            return False
        fields = send_back_fields(message, self.group, delay_level=delay_level,
                                  max_reconsume_times=max_reconsume_times(
                                      self.max_reconsume_times, orderly=self.orderly))
        try:
            await self.instance.checked(address, Req.CONSUMER_SEND_MSG_BACK, fields,
                                        timeout=SEND_BACK_TIMEOUT)
        except (RpcError, BrokerError) as exc:
            log.info("message %s not sent back to %s: %s", message.msg_id, address, exc)
            return False
        return True

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
                shown = [reset_retry_topic(m, self.group) for m in messages]
                state.last_consume = trio.current_time()
                try:
                    status = await listener.consume(shown)
                except Exception:
                    log.exception("orderly listener of %s raised: suspended", self.group)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if status is ConsumeOrderlyStatus.SUCCESS or await self._dead_letters(shown):
                    offset = process.commit()
                    if offset is not None:
                        self.offsets.update(state.queue, offset)
                    continue
                process.put_back(_again(messages))
            await trio.sleep(self.suspend_current_queue_time)

    async def _dead_letters(self, messages: list[MessageExt]) -> bool:
        """Whether ``messages`` were all retried ``max_reconsume_times`` and went back to
        the broker for the dead-letter queue (RocketMQ's ``checkReconsumeTimes``)."""
        limit = max_reconsume_times(self.max_reconsume_times, orderly=True)
        if any(m.reconsume_times < limit for m in messages):
            return False
        for message in messages:
            if not await self._send_back(message, DELAY_LEVEL_DLQ):
                return False
        return True
