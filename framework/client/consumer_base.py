"""What a push and a lite pull consumer share: a group member that takes queues and pulls them.

``ConsumerBase`` is RocketMQ's ``MQClientInstance`` plus ``RebalanceImpl``
and the pull side of ``DefaultMQPushConsumerImpl``, as one trio driver of
the pure rules (``allocate``, ``pull``, ``queue_pull``, ``process_queue``,
``consume_from``):

- **membership**: HEART_BEAT to every broker (master and replicas) of the
  subscribed topics at start and every ``heartbeat_broker_interval``
  (30 s); UNREGISTER_CLIENT when it stops.
- **rebalancing**: at start, every ``rebalance_interval`` (20 s; every
  ``pull_delay_on_exception`` while a subscribed topic has no route yet) and
  at once when a broker sends NOTIFY_CONSUMER_IDS_CHANGED, each topic's readable
  queues are split among the group's client ids (GET_CONSUMER_LIST_BY_GROUP)
  with average allocation. A queue taken up starts at the group's stored
  offset, else where ``consume_from_where`` says; a queue let go stops
  pulling, and its offset is stored first.
- **pulling**: one task per queue long-polls PULL_MESSAGE, pausing while
  flow control holds it back and for ``pull_delay_on_exception`` (0.5 s;
  RocketMQ's 3 s would outlast a failover several times) after a failure
  (after a broker that does not answer, the routes are fetched again
  first); the next pull goes to the broker the last answer
  suggested. Pulls from the master carry the consumer's offset for the
  broker to store. An illegal offset (the messages are gone) drops the
  queue with its offset moved to the first one left; the next rebalance
  takes it up again.
- **offsets**: every ``persist_consumer_offset_interval`` (5 s) and when the
  consumer stops (``offset_store``).
- **queue locks** (orderly consumers): LOCK_BATCH_MQ for a queue before
  taking it up and every 20 s for all held; a lock not renewed for 30 s
  counts as lost; UNLOCK_BATCH_MQ when a queue is let go.
- **running info**: a broker passing on an admin's GET_CONSUMER_RUNNING_INFO
  (``mqadmin consumerStatus``) is answered with the consumer's settings,
  subscriptions and queues (``running_info``). The consumer's requests
  declare RocketMQ 5.3.3's version, as a 5.3.3 Java client's do: a broker
  passes the question only to clients of 3.1.8 or later. CONSUME_MESSAGE_DIRECTLY
  is a push consumer's (``direct_consume``); others refuse it.

Subclasses say what happens to pulled messages (``_deliver``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from triomq.client.core.allocate import (
    DropQueue,
    ForgetOffset,
    PersistOffset,
    Rebalance,
    rebalance,
    release_steps,
)
from triomq.client.core.codes import RequestCode as Req
from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import BrokerError, ClientError, NoRouteError
from triomq.client.core.message import MessageExt, MessageQueue
from triomq.client.core.process_queue import ProcessQueue
from triomq.client.core.pull import (
    BROKER_SUSPEND_MAX_MS,
    CONSUMER_TIMEOUT_WHEN_SUSPEND_MS,
    PullThresholds,
)
from triomq.client.core.pull_flow import (
    FetchRoutes,
    PullFlow,
    PullSettings,
    PullView,
    QueryMaxOffset,
    QueryStoredOffset,
    SendPull,
    Wait,
)
from triomq.client.core.queue_pull import Dispatch, OffsetMoved, QueuePull, SkipTo
from triomq.client.core.running_info import (
    ProcessQueueInfo,
    consumer_properties,
    group_not_here,
    process_queue_info,
    running_info_body,
)
from triomq.client.core.wire import (
    ConsumeType,
    lock_body,
    read_consumer_ids,
    read_locked,
)
from triomq.client.direct_consume import not_consumed_here
from triomq.client.instance import ClientInstance, default_instance_name, local_ip
from triomq.client.offset_store import OffsetStore
from triomq.protocol.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from triomq.protocol.remoting import ROCKETMQ_VERSION, RemotingCommand
from triomq.protocol.route import RouteDataError
from triomq.rpc import Connect, Handler, RpcConnection, RpcError, open_rpc_client

__all__ = ["ConsumerBase", "QueueState"]

log = logging.getLogger("triomq.client")

#: Seconds a queue lock lives on the broker without renewal (REBALANCE_LOCK_MAX_LIVE_TIME).
LOCK_MAX_LIVE = 30.0
#: Seconds between renewals of every lock held (REBALANCE_LOCK_INTERVAL).
LOCK_INTERVAL = 20.0
# Seconds a pull waits while flow control holds the queue back.
_FLOW_CONTROL_DELAY = 0.05
# Seconds the stop may spend storing offsets, unlocking and unregistering.
_STOP_TIMEOUT = 5.0
_FAILURES = (RpcError, BrokerError, NoRouteError, RouteDataError)


@attrs.define(eq=False)
class QueueState:
    """One queue this consumer holds: its messages, where it pulls next, its lock."""

    #: Its pulls: its messages, where the next pull starts (-1 until known), the
    #: suggested broker.
    flow: PullFlow
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    locked: bool = False
    lock_time: float = -math.inf
    #: Held while a message of the queue is consumed in order.
    consume_lock: trio.Lock = attrs.field(factory=trio.Lock)
    #: Set when messages arrive (an orderly consumer's loop waits on it).
    arrived: trio.Event = attrs.field(factory=trio.Event)
    #: Set when the queue's tasks have ended (after ``scope`` is cancelled).
    stopped: trio.Event = attrs.field(factory=trio.Event)
    #: When (trio's clock) the queue was taken up, last pulled and last consumed.
    taken_at: float = attrs.field(factory=trio.current_time)
    last_pull: float = attrs.field(factory=trio.current_time)
    last_consume: float = attrs.field(factory=trio.current_time)

    @property
    def pull(self) -> QueuePull:
        return self.flow.pull

    @property
    def queue(self) -> MessageQueue:
        return self.pull.queue

    @property
    def process(self) -> ProcessQueue:
        return self.pull.process

    @property
    def next_offset(self) -> int:
        return self.pull.next_offset

    @next_offset.setter
    def next_offset(self, offset: int) -> None:
        self.pull.next_offset = offset

    def lock_valid(self, now: float) -> bool:
        return self.locked and now - self.lock_time < LOCK_MAX_LIVE


class ConsumerBase:
    """A member of consumer group ``group``; see the module."""

    consume_type = ConsumeType.CONSUME_PASSIVELY

    def __init__(self, group: str, namesrv_addr: Sequence[str], *,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp_ms: int | None = None, pull_batch_size: int = 32,
                 pull_thresholds: PullThresholds | None = None,
                 heartbeat_broker_interval: float = 30.0, rebalance_interval: float = 20.0,
                 poll_name_server_interval: float = 30.0,
                 persist_consumer_offset_interval: float = 5.0,
                 pull_delay_on_exception: float = 0.5, broker_suspend_max_ms: int =
                 BROKER_SUSPEND_MAX_MS, instance_name: str | None = None,
                 client_ip: str | None = None, timeout: float = 3.0) -> None:
        self.group = group
        self.namesrv_addr = list(namesrv_addr)
        self.consume_from_where = consume_from_where
        #: CONSUME_FROM_TIMESTAMP's time, ms since the epoch (RocketMQ: half an hour ago).
        self.consume_timestamp_ms = consume_timestamp_ms
        self.pull_batch_size = pull_batch_size
        self.pull_thresholds = pull_thresholds or PullThresholds()
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self.rebalance_interval = rebalance_interval
        self.poll_name_server_interval = poll_name_server_interval
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.pull_delay_on_exception = pull_delay_on_exception
        self.broker_suspend_max_ms = broker_suspend_max_ms
        self.timeout = timeout
        self.client_ip = client_ip or local_ip()
        self.instance_name = instance_name or default_instance_name()
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self.subscriptions: dict[str, SubscriptionData] = {}
        #: The queues held now.
        self.states: dict[MessageQueue, QueueState] = {}
        self.orderly = False
        #: Whether pulls carry the subscription (else the broker uses the heartbeat's).
        self.with_subscription = False
        #: Whether pulls from a master carry the consumer's offset.
        self.commit_offset_on_pull = True
        self._instance: ClientInstance | None = None
        self._offsets: OffsetStore | None = None
        self._nursery: trio.Nursery | None = None
        self._rebalance_now = trio.Event()
        self._rebalancing = trio.Lock()
        #: Brokers that took this client's heartbeat: the others do not know it yet.
        self._heartbeated: set[str] = set()
        self._sub_version = 0
        #: When the consumer started, ms since the epoch (its running info says).
        self._started_ms = 0
        # Route fetches done by ``_refresh_routes``, and the lock that makes them one.
        self._route_fetches = 0
        self._fetching_routes = trio.Lock()

    # -- configuration -----------------------------------------------------------

    def _subscribe(self, topic: str, expression: str | None, now_ms: int) -> None:
        # Versions only grow, so a broker always prefers the newest subscription.
        self._sub_version = max(self._sub_version + 1, now_ms)
        self.subscriptions[topic] = SubscriptionData.build(topic, expression, self._sub_version)
        self._rebalance_now.set()

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientError("the consumer is not started (use `async with consumer.start(...)`)")
        return self._instance

    @property
    def offsets(self) -> OffsetStore:
        if self._offsets is None:
            raise ClientError("the consumer is not started (use `async with consumer.start(...)`)")
        return self._offsets

    @property
    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer holds now."""
        return set(self.states)

    # -- running -----------------------------------------------------------------

    @asynccontextmanager
    async def _running(self, connect: Connect) -> AsyncIterator[None]:
        if self._instance is not None:
            raise ClientError("the consumer is already started")
        handlers: dict[int, Handler] = {Req.NOTIFY_CONSUMER_IDS_CHANGED: self._on_ids_changed,
                                        Req.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
                                        Req.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly}
        self._started_ms = time.time_ns() // 1_000_000
        async with open_rpc_client(connect, handlers=handlers, version=ROCKETMQ_VERSION) as rpc:
            self._instance = ClientInstance(rpc, self.namesrv_addr, self.client_id,
                                            timeout=self.timeout)
            self._offsets = OffsetStore(self._instance, self.group)
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    work = trio.CancelScope()
                    nursery.start_soon(self._loops, work)
                    await self._update_routes()
                    await self._heartbeat()
                    await self.rebalance()
                    try:
                        yield
                    finally:
                        work.cancel()
                        with trio.move_on_after(_STOP_TIMEOUT, shield=True):
                            await self._stop()
                        # Consumptions still running are not committed: delivered again later.
                        nursery.cancel_scope.cancel()
            finally:
                self._nursery = None
                self._instance = self._offsets = None
                self.states.clear()

    async def _stop(self) -> None:
        states = list(self.states.values())
        for state in states:
            state.process.dropped = True
            state.scope.cancel()
        await self._stopped(states)
        await self.persist()
        if self.orderly:
            await self._unlock([s.queue for s in states])
        for address in self._broker_addresses():
            try:
                await self.instance.invoke(address, Req.UNREGISTER_CLIENT,
                                           {"clientID": self.client_id,
                                            "consumerGroup": self.group})
            except RpcError as exc:
                log.info("unregister from %s: %s", address, exc)

    async def _loops(self, work: trio.CancelScope) -> None:
        with work:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._every, self.heartbeat_broker_interval, self._heartbeat)
                nursery.start_soon(self._every, self.poll_name_server_interval,
                                   self._update_routes)
                nursery.start_soon(self._every, self.persist_consumer_offset_interval,
                                   self.persist)
                nursery.start_soon(self._rebalance_loop)
                if self.orderly:
                    nursery.start_soon(self._every, LOCK_INTERVAL, self._lock_all)

    @staticmethod
    async def _every(interval: float, action: Callable[[], Awaitable[None]]) -> None:
        while True:
            await trio.sleep(interval)
            await action()

    async def _rebalance_loop(self) -> None:
        while True:
            # A topic without a route yet (created a moment ago) is looked up again soon.
            unrouted = any(t not in self.instance.routes for t in self._topics())
            with trio.move_on_after(min(self.rebalance_interval, self.pull_delay_on_exception)
                                    if unrouted else self.rebalance_interval):
                await self._rebalance_now.wait()
            await self.rebalance()

    async def _on_ids_changed(self, request: RemotingCommand,
                              peer: RpcConnection) -> RemotingCommand | None:
        if request.ext_fields.get("consumerGroup") == self.group:
            self._rebalance_now.set()
        return None

    async def _on_running_info(self, request: RemotingCommand,
                               peer: RpcConnection) -> RemotingCommand:
        group = request.ext_fields.get("consumerGroup", "")
        if group != self.group:
            return RemotingCommand.response(Code.SYSTEM_ERROR, remark=group_not_here(group))
        return RemotingCommand.response(body=running_info_body(
            properties=self._running_properties(),
            subscriptions=[s for t in self._topics()
                           if (s := self._subscription(t)) is not None],
            queues={queue: self._queue_info(state) for queue, state in self.states.items()}))

    async def _on_consume_directly(self, request: RemotingCommand,
                                   peer: RpcConnection) -> RemotingCommand:
        # Only a push consumer consumes a message it is handed (PushConsumer's override).
        return not_consumed_here(request)

    def _running_properties(self) -> dict[str, str]:
        """The running info's properties; subclasses add theirs."""
        return consumer_properties(self, started_ms=self._started_ms)

    def _queue_info(self, state: QueueState) -> ProcessQueueInfo:
        return process_queue_info(
            state.process, commit_offset=self.offsets.read(state.queue), locked=state.locked,
            moments=(max(state.lock_time, state.taken_at), state.last_pull, state.last_consume),
            now=trio.current_time(), wall_ms=time.time_ns() // 1_000_000)

    def _topics(self) -> list[str]:
        """The topics whose routes and brokers this consumer needs."""
        return list(self.subscriptions)

    def _subscription(self, topic: str) -> SubscriptionData | None:
        """What a pull of ``topic`` asks for."""
        return self.subscriptions.get(topic)

    def _broker_addresses(self) -> list[str]:
        return [a for addrs in self.instance.broker_addresses(self._topics()).values()
                for a in addrs.values()]

    async def _update_routes(self) -> None:
        for topic in self._topics():
            try:
                await self.instance.update_route(topic)
            except _FAILURES as exc:
                log.warning("route of %s not fetched: %s", topic, exc)

    async def _heartbeat(self) -> None:
        body = HeartbeatData(self.client_id, (), (ConsumerData(
            self.group, self.consume_type.value,
            consume_from_where=self.consume_from_where.value,
            subscriptions=tuple(self.subscriptions.values())),)).encode()
        for address in self._broker_addresses():
            try:
                await self.instance.checked(address, Req.HEART_BEAT, {}, body)
            except (RpcError, BrokerError) as exc:
                self._heartbeated.discard(address)
                log.info("heartbeat to %s: %s", address, exc)
            else:
                self._heartbeated.add(address)

    async def persist(self) -> None:
        """Store the offsets of every queue held on their brokers now."""
        await self.offsets.persist_all(list(self.states))

    # -- rebalancing ---------------------------------------------------------------

    async def rebalance(self) -> None:
        """Split each subscribed topic's queues among the group now, and follow the split."""
        # One at a time: the start's, the loop's and a notified one would each take
        # a queue they all saw missing.
        async with self._rebalancing:
            self._rebalance_now = trio.Event()
            await self._rebalance_topics()

    async def _rebalance_topics(self) -> None:
        for topic in list(self.subscriptions):
            step = await self._allocate(topic)
            if step is None:
                continue
            for queue in step.release:
                await self._release(queue)
            take: Iterable[MessageQueue] = step.take
            if self.orderly and step.take:
                take = sorted(await self._lock(step.take))
            for queue in take:
                self._take(queue)

    async def _allocate(self, topic: str) -> Rebalance | None:
        """This client's step to its share of ``topic``; ``None`` when the group or route
        is unknown."""
        route = self.instance.routes.get(topic)
        if route is None:
            try:
                route = await self.instance.update_route(topic)
            except _FAILURES as exc:
                log.info("route of %s: %s", topic, exc)
            if route is None:
                return None
        # Any broker of the topic knows the group (every member heartbeats to all).
        groups = self.instance.broker_addresses([topic])
        addresses = [a for addrs in groups.values() for _, a in sorted(addrs.items())]
        if not self._heartbeated.issuperset(addresses):
            # A route found since the last heartbeat (a topic created after the start,
            # a new master): its brokers must know this client before it takes a share.
            await self._heartbeat()
        for address in addresses:
            try:
                answer = await self.instance.checked(address, Req.GET_CONSUMER_LIST_BY_GROUP,
                                                     {"consumerGroup": self.group})
                ids = read_consumer_ids(answer.body)
            except _FAILURES as exc:
                log.info("consumer list from %s: %s", address, exc)
                continue
            return rebalance(topic, route, self.client_id, ids, self.states)
        return None

    def _take(self, queue: MessageQueue) -> None:
        assert self._nursery is not None
        state = QueueState(PullFlow(queue, self._pull_settings(), self.offsets))
        if self.orderly:
            state.locked, state.lock_time = True, trio.current_time()
        self.states[queue] = state
        self._nursery.start_soon(self._run_queue, state)

    async def _run_queue(self, state: QueueState) -> None:
        try:
            with state.scope:
                async with trio.open_nursery() as nursery:
                    self._taken(state, nursery)
                    await self._pull_queue(state)
        finally:
            state.stopped.set()

    @staticmethod
    async def _stopped(states: Iterable[QueueState]) -> None:
        """Wait until the cancelled queues' tasks have ended: a pull cancelled in the
        middle of writing its request closes the connection it shares with the offset
        commits, which must go after it, on a connection of their own."""
        for state in states:
            await state.stopped.wait()

    def _taken(self, state: QueueState, nursery: trio.Nursery) -> None:
        """A subclass's hook: a queue was taken up; its tasks go in ``nursery``."""

    async def _release(self, queue: MessageQueue) -> None:
        for step in release_steps(queue, orderly=self.orderly):
            if isinstance(step, DropQueue):
                await self._drop(queue)
            elif isinstance(step, PersistOffset):
                try:
                    await self.offsets.persist(queue)
                except _FAILURES as exc:
                    log.warning("offset of %s not stored on release: %s", queue, exc)
            elif isinstance(step, ForgetOffset):
                self.offsets.remove(queue)
            else:
                await self._unlock([queue])

    async def _drop(self, queue: MessageQueue) -> None:
        state = self.states.pop(queue)
        state.process.dropped = True
        state.arrived.set()
        if self.orderly:
            # The message being consumed finishes and commits first (RocketMQ waits 1 s).
            with trio.move_on_after(1.0):
                async with state.consume_lock:
                    pass
        state.scope.cancel()
        with trio.move_on_after(1.0):
            await self._stopped([state])

    # -- queue locks -----------------------------------------------------------------

    async def _lock(self, queues: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Lock ``queues`` on their masters; the ones locked."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for queue in queues:
            by_broker.setdefault(queue.broker_name, []).append(queue)
        locked: set[MessageQueue] = set()
        for broker, group in by_broker.items():
            address = self.instance.master_address(broker)
            if address is None:
                continue
            try:
                answer = await self.instance.checked(
                    address, Req.LOCK_BATCH_MQ, {"bname": broker},
                    lock_body(self.group, self.client_id, group))
                locked |= read_locked(answer.body)
            except _FAILURES as exc:
                log.info("lock on %s: %s", address, exc)
        return locked

    async def _lock_all(self) -> None:
        states = list(self.states.values())
        locked = await self._lock(s.queue for s in states)
        now = trio.current_time()
        for state in states:
            state.locked = state.queue in locked
            if state.locked:
                state.lock_time = now

    async def _unlock(self, queues: Sequence[MessageQueue]) -> None:
        for broker in {q.broker_name for q in queues}:
            address = self.instance.master_address(broker)
            if address is None:
                continue
            mine = [q for q in queues if q.broker_name == broker]
            try:
                await self.instance.invoke(address, Req.UNLOCK_BATCH_MQ, {"bname": broker},
                                           lock_body(self.group, self.client_id, mine))
            except RpcError as exc:
                log.info("unlock on %s: %s", address, exc)

    # -- pulling ---------------------------------------------------------------------

    def _pull_settings(self) -> PullSettings:
        return PullSettings(
            self.group, self.consume_from_where, self.consume_timestamp_ms or 0,
            self.pull_batch_size, self.pull_thresholds, self.orderly, self.with_subscription,
            self.commit_offset_on_pull, self.broker_suspend_max_ms,
            max(CONSUMER_TIMEOUT_WHEN_SUSPEND_MS, 2 * self.broker_suspend_max_ms) / 1000,
            self.pull_delay_on_exception, _FLOW_CONTROL_DELAY)

    def _addresses(self, queue: MessageQueue) -> dict[int, str]:
        return self.instance.brokers.get(queue.broker_name, {})

    async def _pull_queue(self, state: QueueState) -> None:
        """Pump the queue's ``PullFlow`` until the queue is let go."""
        flow, queue = state.flow, state.queue
        while not state.process.dropped:
            now = trio.current_time()
            action = flow.poll(now, PullView(
                self._addresses(queue), self._subscription(queue.topic),
                paused=self._paused_queue(state), locked=state.lock_valid(now)))
            if isinstance(action, Wait):
                await trio.sleep_until(action.until)
            elif isinstance(action, SendPull):
                await self._pull(state, action)
            elif isinstance(action, FetchRoutes):
                await self._refresh_routes()
                flow.routes_fetched(self._addresses(queue), trio.current_time())
            else:
                try:
                    if isinstance(action, QueryStoredOffset):
                        stored = await self.offsets.fetch(
                            queue, zero_if_not_found=action.zero_if_not_found)
                        flow.stored(stored, trio.current_time())
                    elif isinstance(action, QueryMaxOffset):
                        flow.looked_up(await self.offsets.max_offset(queue),
                                       trio.current_time())
                    else:
                        flow.looked_up(await self.offsets.search_offset(
                            queue, action.timestamp_ms), trio.current_time())
                except _FAILURES as exc:
                    log.warning("start offset of %s: %s", queue, exc)
                    flow.failed(trio.current_time())

    async def _pull(self, state: QueueState, pull: SendPull) -> None:
        flow, queue = state.flow, state.queue
        state.last_pull = trio.current_time()
        try:
            answer = await self.instance.invoke(pull.address, Req.PULL_MESSAGE, pull.fields,
                                                timeout=pull.timeout)
        except RpcError as exc:
            log.info("pull of %s from %s: %s", queue, pull.address, exc)
            flow.unanswered(self._addresses(queue), trio.current_time())
            return
        before = state.next_offset
        step = flow.answered(answer.code, answer.remark, answer.ext_fields, answer.body,
                             self._addresses(queue), trio.current_time())
        if flow.last_error is not None:
            log.info("pull of %s from %s: %s", queue, pull.address, flow.last_error)
        if isinstance(step, OffsetMoved):
            # The broker's remark tells why: OFFSET_RESET after an admin's reset.
            log.warning("the broker moved %s from offset %d to %d (%s)", queue,
                        before, step.offset, answer.remark)
            state.arrived.set()
            self.offsets.update(queue, step.offset)
            try:
                await self.offsets.persist(queue)
            except _FAILURES as exc:
                log.warning("moved offset of %s not stored: %s", queue, exc)
            if self.states.get(queue) is state:
                del self.states[queue]
        elif isinstance(step, Dispatch):
            state.arrived.set()
            self._deliver(state, step.messages)
        elif isinstance(step, SkipTo):
            self._skipped_to(state, step.offset)

    async def _refresh_routes(self) -> None:
        """``_update_routes`` once for all the queues that ask while one is under way
        (a failover makes every queue of the group ask)."""
        asked = self._route_fetches
        async with self._fetching_routes:
            if self._route_fetches == asked:
                await self._update_routes()
                self._route_fetches += 1

    def _skipped_to(self, state: QueueState, offset: int) -> None:
        """Nothing is held and the queue has nothing for us before ``offset``."""
        self.offsets.update(state.queue, offset, increase_only=True)

    def _paused_queue(self, state: QueueState) -> bool:
        """A subclass's hook: whether the queue's pulls wait (a lite consumer's pause)."""
        return False

    def _deliver(self, state: QueueState, messages: Sequence[MessageExt]) -> None:
        """A subclass's hook: pulled ``messages`` are held in ``state.process``."""
        raise NotImplementedError
