"""Consumers in the cluster simulation: a push consumer group pumping the client's pure cores.

``SimConsumer`` is one member of the group ``CONSUMER_GROUP`` subscribed to
every message of ``TOPIC``, doing what ``triomq.client``'s ``ConsumerBase``
and ``PushConsumer`` do, with their rules:

- **routes**: GET_ROUTEINFO_BY_TOPIC to the name servers in turn (a
  datagram on a connection, as the brokers' registration), every
  ``route_interval`` and after a failed request;
- **rebalancing**: every ``rebalance_interval`` the client's own
  ``allocate.rebalance`` splits the topic's readable queues among the group;
  a queue let go has its offset stored first; a queue taken up starts at
  the group's stored offset (its ``PullFlow``);
- **pulling**: each queue held runs the client's own ``PullFlow``
  (``triomq.client.core.pull_flow``): its start offset (QUERY_CONSUMER_OFFSET,
  then CONSUME_FROM_FIRST_OFFSET), one long poll at a time to the replica
  it picks, carrying the consumed offset to the master, the answer applied
  (deliver, correct the offset, or drop the queue whose offset moved), a
  refusal's delay, and after a lost answer or a master's refusal the route
  fetches until the group's addresses change;
- **consuming**: a listener consumes each delivered message after a delay
  of its own (so they finish out of order), and the offset moves only as
  the ``ProcessQueue`` allows (``ConsumedOffsets.consumed``);
- **offsets**: every ``persist_interval`` UPDATE_CONSUMER_OFFSET of each
  queue held, to the master (else any replica).

Simplifications: the group's members are the consumers that run now (the
simulation tells them, where RocketMQ's ask a broker, which learns them by
heartbeat); a crash loses everything (messages being consumed are not
consumed). Timings are the client's, scaled down (see ``ConsumerTiming``).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import attrs

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.client.core.allocate import (
    DropQueue,
    ForgetOffset,
    PersistOffset,
    rebalance,
    release_steps,
)
from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.message import MessageDecodeError, MessageExt, MessageQueue
from triomq.client.core.pull import PullError, read_pull_response
from triomq.client.core.pull_flow import (
    FetchRoutes,
    PullFlow,
    PullSettings,
    PullView,
    QueryStoredOffset,
    SendPull,
    Wait,
)
from triomq.client.core.queue_pull import (
    ConsumedOffsets,
    Dispatch,
    OffsetMoved,
    QueuePull,
    SkipTo,
    subscribe_broker,
)
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import RouteDataError, TopicRouteData
from triomq.testing.clustersim_namesrv import NamesrvRequest, NamesrvResponse, broker_of
from triomq.testing.clustersim_net import Stream
from triomq.testing.clustersim_parts import GROUP, TOPIC
from triomq.testing.clustersim_pulls import ConsumerRequest, ConsumerResponse

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation

CONSUMER_GROUP = "sim-consumers"
SUBSCRIPTION = SubscriptionData.build(TOPIC, "*", 1)


def consumer_name(index: int) -> str:
    """The network name of consumer ``index`` (from 1)."""
    return f"r{index}"


@attrs.frozen
class ConsumerTiming:
    """A consumer's timing (ms; RocketMQ's client defaults in parentheses)."""

    route_interval: int = 1000  # pollNameServerInterval (30 s)
    rebalance_interval: int = 500  # rebalance (20 s)
    persist_interval: int = 1000  # persistConsumerOffsetInterval (5 s)
    suspend_ms: int = 1000  # brokerSuspendMaxTimeMillis (15 s)
    pull_timeout: int = 2500  # consumerTimeoutMillisWhenSuspend (30 s)
    request_timeout: int = 1000
    pull_delay_on_exception: int = 300  # (3 s)
    flow_control_delay: int = 50
    pull_batch_size: int = 32
    #: The longest a listener takes with one message.
    max_consume_ms: int = 60


@attrs.define(eq=False)
class HeldQueue:
    """One queue this consumer holds, and what the invariants need of its pull stream."""

    flow: PullFlow
    #: The request in flight for it (one at a time).
    waiting: int | None = None
    #: The offset this holding started at, and the queue offsets consumed (or skipped)
    #: since: a committed offset must not pass the first one not among them.
    start: int = -1
    done: set[int] = attrs.field(factory=set)
    low: int = -1
    #: The highest queue offset delivered in this stream (they only grow).
    delivered: int = -1

    @property
    def pull(self) -> QueuePull:
        return self.flow.pull

    def first_not_done(self) -> int:
        while self.low in self.done:
            self.done.discard(self.low)
            self.low += 1
        return self.low


class SimConsumer:
    """One member of the consumer group; nothing survives a crash."""

    def __init__(self, name: str, sim: Simulation, settings: ConsumerTiming,
                 rng: random.Random) -> None:
        self.name = name
        self.sim = sim
        self.settings = settings
        self.rng = rng
        self.pull_settings = PullSettings(
            CONSUMER_GROUP, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            pull_batch_size=settings.pull_batch_size, with_subscription=True,
            suspend_ms=settings.suspend_ms, pull_timeout=settings.pull_timeout,
            pull_delay_on_exception=settings.pull_delay_on_exception,
            flow_control_delay=settings.flow_control_delay, per_second=1000)
        self.up = False
        self.start()

    def start(self) -> None:
        """Boot: no route, no queues, no offsets."""
        self.sim.network.down.discard(self.name)
        self.up = True
        self.addresses: dict[int, str] = {}
        self.route: TopicRouteData | None = None
        self.connections: dict[str, Stream] = {}
        self.next_namesrv = 0
        self.queues: dict[MessageQueue, HeldQueue] = {}
        self.offsets = ConsumedOffsets()
        self.route_asked_at = -1
        #: Request id -> (what, the queue's holding, deadline, the pull's offset, to whom).
        self.pending: dict[int, tuple[str, HeldQueue | None, int, int, str]] = {}
        #: (due, order, holding, message) being consumed.
        self.consuming: list[tuple[int, int, HeldQueue, MessageExt]] = []
        self._order = 0
        now = self.sim.now
        self.next_route = now
        self.next_rebalance = now
        self.next_persist = now + self.settings.persist_interval

    def crash(self) -> None:
        """Die: every queue, offset in memory and message being consumed is lost."""
        self.up = False
        self.sim.network.down.add(self.name)
        self.sim.network.break_streams()
        self.queues = {}
        self.pending = {}
        self.consuming = []

    def _send(self, dst: str, payload: object) -> None:
        self.sim.network.send(self.name, dst, payload, self.sim.now)

    def _request(self, dst: str, what: str, code: int, fields: dict[str, str],
                 held: HeldQueue | None, timeout: int, offset: int = -1) -> int:
        rid = self.sim.next_request_id()
        self.pending[rid] = (what, held, self.sim.now + timeout, offset, dst)
        self._send(dst, ConsumerRequest(rid, code, fields))
        return rid

    # -- driving -------------------------------------------------------------------

    def step(self) -> None:
        """Routes, rebalancing, timeouts, consumptions, pulls, offsets."""
        if not self.up:
            return
        now = self.sim.now
        if now >= self.next_route:
            self._ask_route()
        if now >= self.next_rebalance and self.route is not None:
            self.next_rebalance = now + self.settings.rebalance_interval
            self._rebalance()
        down = self.sim.network.down
        for rid, (what, held, deadline, _, dst) in list(self.pending.items()):
            # No answer in time: the broker is cut off. One that crashed resets the
            # connection: its requests fail at once, as a killed process's do over TCP.
            if now >= deadline or dst in down:
                del self.pending[rid]
                if held is not None and held.waiting == rid:
                    held.waiting = None
                    if what == "pull":
                        held.flow.unanswered(self.addresses, now)
                    else:
                        held.flow.failed(now)
                        self.next_route = min(self.next_route, now)
        self._consume(now)
        for held in list(self.queues.values()):
            if held.waiting is None:
                self._pump(held, now)
        if now >= self.next_persist:
            self.next_persist = now + self.settings.persist_interval
            for held in self.queues.values():
                self._persist(held)

    def receive(self, src: str, payload: object) -> None:
        """An answer arrived."""
        if not self.up:
            return
        if isinstance(payload, NamesrvResponse):
            self._route_answered(payload)
        elif isinstance(payload, ConsumerResponse) and payload.id in self.pending:
            what, held, _, offset, _ = self.pending.pop(payload.id)
            if held is None or held.waiting != payload.id:
                return
            held.waiting = None
            if what == "query":
                self._query_answered(held, payload)
            elif what == "pull":
                self._pull_answered(src, held, offset, payload)

    # -- routes and the group's split ------------------------------------------------

    def _ask_route(self) -> None:
        self.route_asked_at = self.sim.now
        self.next_route = self.sim.now + self.settings.route_interval
        names = self.sim.namesrv_names
        namesrv = names[self.next_namesrv % len(names)]
        self.next_namesrv += 1
        stream = self.connections.get(namesrv)
        if stream is None or stream.closed:
            stream = self.sim.network.connect(self.name, namesrv)
            if stream is None:
                return
            self.connections[namesrv] = stream
        command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": TOPIC})
        self._send(namesrv, NamesrvRequest(self.sim.next_request_id(), stream.id, command))

    def _route_answered(self, response: NamesrvResponse) -> None:
        if response.command.code != ResponseCode.SUCCESS:
            return
        try:
            route = TopicRouteData.decode(response.command.body)
        except RouteDataError:
            return
        self.route = route
        self.addresses = next(({i: broker_of(a) for i, a in b.broker_addrs.items()}
                               for b in route.broker_datas if b.broker_name == GROUP), {})

    def _rebalance(self) -> None:
        assert self.route is not None
        step = rebalance(TOPIC, self.route, self.name, self.sim.group.members(), self.queues)
        for queue in step.release:
            held = self.queues[queue]
            for release in release_steps(queue, orderly=False):
                if isinstance(release, DropQueue):
                    del self.queues[queue]
                    held.pull.process.dropped = True
                elif isinstance(release, PersistOffset):
                    self._persist(held)
                elif isinstance(release, ForgetOffset):
                    self.offsets.remove(queue)
        for queue in step.take:
            self.queues[queue] = HeldQueue(PullFlow(queue, self.pull_settings, self.offsets))

    # -- one queue ----------------------------------------------------------------------

    def _pump(self, held: HeldQueue, now: int) -> None:
        """Do what the queue's ``PullFlow`` says now."""
        flow = held.flow
        action = flow.poll(now, PullView(self.addresses, SUBSCRIPTION))
        if isinstance(action, Wait):
            return
        if isinstance(action, FetchRoutes):
            if self.route_asked_at != now:
                self._ask_route()
            flow.routes_fetched(self.addresses, now)
            return
        fields = {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC,
                  "queueId": str(flow.queue.queue_id)}
        if isinstance(action, QueryStoredOffset):
            address = subscribe_broker(self.addresses)
            if address is None:
                flow.failed(now)
                return
            held.waiting = self._request(address, "query", RequestCode.QUERY_CONSUMER_OFFSET,
                                         fields, held, self.settings.request_timeout)
            return
        if not isinstance(action, SendPull):
            raise AssertionError(f"{action}: the simulation's consumers start from the "
                                 "first offset and look nothing up")
        if action.commit_offset is not None:
            self.sim.group.committing(self, held, action.commit_offset)
        held.waiting = self._request(action.address, "pull", RequestCode.PULL_MESSAGE,
                                     action.fields, held, int(action.timeout),
                                     flow.pull.next_offset)

    def _query_answered(self, held: HeldQueue, response: ConsumerResponse) -> None:
        if response.code == ResponseCode.SUCCESS:
            stored: int | None = int(response.fields.get("offset", "-1"))
        elif response.code == ResponseCode.QUERY_NOT_FOUND:
            stored = None
        else:
            held.flow.failed(self.sim.now)
            return
        held.flow.stored(stored, self.sim.now)
        held.start = held.low = held.pull.next_offset

    def _pull_answered(self, src: str, held: HeldQueue, offset: int,
                       response: ConsumerResponse) -> None:
        pull = held.pull
        try:  # what the invariants check of the answer, read apart from the flow
            result = read_pull_response(response.code, response.remark, response.fields,
                                        response.body, pull.queue, SUBSCRIPTION)
        except (PullError, MessageDecodeError):
            pass
        else:
            self.sim.group.pulled(self, held, src, offset, result.messages)
        before = pull.next_offset
        step = held.flow.answered(response.code, response.remark, response.fields,
                                  response.body, self.addresses, self.sim.now)
        if isinstance(step, Dispatch):
            for message in step.messages:
                self._order += 1
                due = self.sim.now + self.rng.randint(0, self.settings.max_consume_ms)
                self.consuming.append((due, self._order, held, message))
        elif isinstance(step, SkipTo):
            held.done.update(range(before, step.offset))
            self.offsets.update(pull.queue, step.offset, increase_only=True)
        elif isinstance(step, OffsetMoved):
            self.offsets.update(pull.queue, step.offset)
            self._persist(held)
            if self.queues.get(pull.queue) is held:
                del self.queues[pull.queue]

    def _consume(self, now: int) -> None:
        due = sorted(c for c in self.consuming if c[0] <= now)
        if not due:
            return
        self.consuming = [c for c in self.consuming if c[0] > now]
        for _, _, held, message in due:
            if held.pull.process.dropped:
                continue  # the queue's new holder delivers it again
            self.sim.group.consumed(self, message)
            held.done.add(message.queue_offset)
            self.offsets.consumed(held.pull, [message])

    def _persist(self, held: HeldQueue) -> None:
        """UPDATE_CONSUMER_OFFSET of the queue's offset in memory (no answer awaited)."""
        queue = held.pull.queue
        offset = self.offsets.read(queue)
        address = subscribe_broker(self.addresses)
        if offset is None or address is None:
            return
        self.sim.group.committing(self, held, offset)
        self._request(address, "update", RequestCode.UPDATE_CONSUMER_OFFSET,
                      {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC,
                       "queueId": str(queue.queue_id), "commitOffset": str(offset)},
                      None, self.settings.request_timeout)
