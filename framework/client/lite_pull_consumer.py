"""The lite pull consumer: RocketMQ's ``DefaultLitePullConsumer`` on trio.

::

    consumer = LitePullConsumer("reports", namesrv_addr=["10.0.0.1:9876"])
    consumer.subscribe("orders", "*")            # or: consumer.assign([queue, ...])
    async with consumer.start(node.connect):
        while True:
            for message in await consumer.poll(timeout=5.0):
                ...
            await consumer.commit_sync()         # or leave auto_commit on

Either **subscribe** (the group splits the topics' queues among its
members, as a push consumer's: ``consumer_base``) or **assign** queues
yourself (no group membership, no rebalancing). Each queue held is
long-polled in the background into a buffer, within flow control; ``poll``
returns the next pulled batch, or ``[]`` after ``timeout`` seconds.

Polled messages count as consumed: their queue's consumed offset moves
past them. With ``auto_commit`` (the default) the consumed offsets are
stored on the brokers every ``auto_commit_interval`` (5 s), when a queue
is let go and when the consumer stops; without it, only ``commit_sync``
stores them, and a restarted consumer starts again after the last commit.
``seek`` moves a held queue's next pull; ``pause``/``resume`` hold its
pulls back.
"""

from __future__ import annotations

import collections
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from triomq.client.consumer_base import ConsumerBase, QueueState
from triomq.client.core.allocate import subscribe_queues
from triomq.client.core.errors import ClientError, NoRouteError
from triomq.client.core.message import MessageExt, MessageQueue
from triomq.client.core.wire import ConsumeType
from triomq.protocol.heartbeat import SubscriptionData
from triomq.rpc import Connect

__all__ = ["LitePullConsumer"]


class LitePullConsumer(ConsumerBase):
    """Pulls for the application, which takes messages with ``poll``.

    ``options`` are ``ConsumerBase``'s (``consume_from_where``, intervals...).
    """

    consume_type = ConsumeType.CONSUME_ACTIVELY

    def __init__(self, group: str, namesrv_addr: Sequence[str] = (), *,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0,
                 pull_batch_size: int = 10, **options: Any) -> None:
        super().__init__(group, namesrv_addr, pull_batch_size=pull_batch_size,
                         persist_consumer_offset_interval=auto_commit_interval, **options)
        self.auto_commit = auto_commit
        # The pulls say what they want: an assigned queue has no heartbeat behind it.
        self.with_subscription = True
        self.commit_offset_on_pull = False
        self._assigned: set[MessageQueue] | None = None
        self._consumed: dict[MessageQueue, int] = {}
        self._paused: set[MessageQueue] = set()
        self._ready: collections.deque[tuple[QueueState, Sequence[MessageExt]]] = (
            collections.deque())
        self._arrived = trio.Event()

    # -- configuration -----------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Take part in the group's split of ``topic``, keeping messages matching ``expression``."""
        if self._assigned is not None:
            raise ClientError("subscribe and assign cannot be mixed")
        self._subscribe(topic, expression, time.time_ns() // 1_000_000)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Pull exactly ``queues`` (every message), outside any rebalancing."""
        if self.subscriptions:
            raise ClientError("subscribe and assign cannot be mixed")
        self._assigned = set(queues)
        self._rebalance_now.set()

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        self._paused |= set(queues)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self._paused -= set(queues)

    @asynccontextmanager
    async def start(self, connect: Connect) -> AsyncIterator[LitePullConsumer]:
        """Pull until the block ends; ``connect`` opens streams (e.g. ``node.connect``).

        Queues may be assigned (or topics subscribed) before or after.
        """
        async with self._running(connect):
            yield self

    # -- the application's side ----------------------------------------------------

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic`` (to ``assign`` some)."""
        route = await self.instance.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route to topic {topic!r}: no name server knows it")
        return subscribe_queues(topic, route)

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """The next pulled messages (of one queue), or ``[]`` after ``timeout`` seconds."""
        with trio.move_on_after(timeout):
            while True:
                while self._ready:
                    state, messages = self._ready.popleft()
                    if state.process.dropped or self.states.get(state.queue) is not state:
                        continue  # let go or sought meanwhile: pulled again as needed
                    state.last_consume = trio.current_time()
                    offset = state.process.remove(messages)
                    if offset is not None:
                        self._consumed[state.queue] = offset
                    return list(messages)
                self._arrived = trio.Event()
                await self._arrived.wait()
        return []

    async def commit_sync(self) -> None:
        """Store the consumed offset of every queue held on its broker now."""
        for queue, offset in list(self._consumed.items()):
            if queue in self.states:
                self.offsets.update(queue, offset)
        await self.offsets.persist_all(list(self.states))

    def committed(self, queue: MessageQueue) -> int | None:
        """The offset this consumer last stored or read for ``queue``."""
        return self.offsets.read(queue)

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Pull ``queue`` (held now) from ``offset`` on; what was pulled past it is dropped."""
        state = self.states.get(queue)
        if state is None:
            raise ClientError(f"{queue} is not held by this consumer")
        state.process.dropped = True
        state.scope.cancel()
        del self.states[queue]
        self._consumed[queue] = offset
        self._take(queue)
        self.states[queue].next_offset = offset

    # -- hooks of the base ------------------------------------------------------------

    def _topics(self) -> list[str]:
        if self._assigned is not None:
            return sorted({q.topic for q in self._assigned})
        return super()._topics()

    def _subscription(self, topic: str) -> SubscriptionData | None:
        if self._assigned is not None:
            return SubscriptionData.build(topic, "*", 0)
        return super()._subscription(topic)

    async def _rebalance_topics(self) -> None:
        if self._assigned is None:
            await super()._rebalance_topics()
            return
        for queue in [q for q in self.states if q not in self._assigned]:
            await self._release(queue)
        for topic in self._topics():
            if topic not in self.instance.routes:
                await self._update_routes()
        for queue in sorted(self._assigned - set(self.states)):
            self._take(queue)

    async def _release(self, queue: MessageQueue) -> None:
        if self.auto_commit and queue in self._consumed:
            self.offsets.update(queue, self._consumed[queue])
        self._consumed.pop(queue, None)
        await super()._release(queue)

    async def persist(self) -> None:
        if self.auto_commit:
            await self.commit_sync()

    def _paused_queue(self, state: QueueState) -> bool:
        return state.queue in self._paused

    def _deliver(self, state: QueueState, messages: Sequence[MessageExt]) -> None:
        self._ready.append((state, messages))
        self._arrived.set()

    def _skipped_to(self, state: QueueState, offset: int) -> None:
        # Not the offset store: without auto commit, only commit_sync stores offsets.
        if state.queue not in self._consumed or self._consumed[state.queue] < offset:
            self._consumed[state.queue] = offset
