"""A broker of the acting-master simulation: a static replica pumping the brokers' own cores.

A ``StaticBroker`` is one member of a static (master/slave) group with
``enable_slave_acting_master``: id 0 is the master, ids 1 and 2 its slaves
(``clustersim_acting``'s group ``broker-a``; ``broker-b``'s master ``b0``
is where an acting slave escapes to). It pumps:

- the name-server registration (``clustersim_namesrv.SimRegistration``,
  the ``RegistrationFlow``), every member registering with
  ``enableActingMaster``;
- on a slave, ``GroupWatch`` (``broker.registration.core.member_group``):
  GET_BROKER_MEMBER_GROUP polls and NOTIFY_MIN_BROKER_ID_CHANGE decide
  when it acts for its absent master, and the acting term runs the delayed
  and timer messages' delivery (``clustersim_schedule.SimSchedule``, the
  schedule core; ``clustersim_timer.SimTimer``, the timer core) whose puts
  escape to another master through the seed's ``acting_escape_bridges``,
  tried in order (``escape_bridge.Fallback``): ``container``, every
  simulated broker in one process (``container_escape``'s choice of
  master, then that master's put), and ``remote``
  (``broker.core.remote_escape.RemoteEscape``: the topic's route from the
  name servers, then SEND_MESSAGE_V2 to the masters it names, answered by
  that master's put core): an acting slave never writes its own commit log;
- on the master, the schedule and timer cores in its term, through its own
  put, and on every start ``PreOnline``
  (``broker.registration.core.pre_online``): isolated (no registration)
  until it took its slaves' newer consumer offsets, delay offsets and timer
  checkpoint back by DataVersion;
- puts (SEND_MESSAGE_V2) with the broker's put core, answered once
  appended (ASYNC_MASTER: no replication wait), UPDATE_CONSUMER_OFFSET
  into the ``ConsumerOffsetTable``, and strict queue locks
  (``clustersim_acting_locks.BrokerLocks``).

Simplifications: replication is a copy of the master's bytes to each slave
while the link between them is whole (the HA state machines run in the
controller-mode simulation); a slave copies its master's tables (consumer
and delay offsets, timer checkpoint) every ``slave_synchronize_period``
while the master is online and it does not act, and a pre-online reads a
slave's tables at once over a whole link (no GET_ALL_CONSUMER_OFFSET round
trip); the tables step their DataVersion on every change (``version_step``
1, so a pre-online sees every move).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from triomq.broker.consume.core.consumer_offsets import ConsumerOffsetTable, parse_offset_header
from triomq.broker.core.container_escape import Candidate, container_master, no_master
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult, Fallback
from triomq.broker.core.remote_escape import Escaped, QueryRoute, RemoteEscape
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.registration.core.member_group import (
    GroupWatch,
    QueryMemberGroup,
    StartActing,
    StopActing,
)
from triomq.broker.registration.core.namesrv_registration import BrokerRegistrationInfo
from triomq.broker.registration.core.pre_online import (
    Adopt,
    AskMembers,
    AwaitSlaves,
    Fetch,
    GoOnline,
    PreOnline,
)
from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpointTable
from triomq.broker.send.core.put_checks import BrokerState, PutSettings, host_port
from triomq.broker.send.core.put_flow import (
    Append,
    PutFlow,
    PutReply,
    TopicCreated,
    WaitFlushed,
    WaitReplicated,
)
from triomq.ha.core.epoch import EpochCache
from triomq.ha.core.sync_replication import ReplicationStatus
from triomq.protocol.message import PROPERTY_UNIQ_KEY
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.route import BrokerMemberGroup, DataVersion, TopicConfig, TopicRouteData
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.testing.clustersim_acting_locks import BrokerLocks, LockRequest, LockResponse
from triomq.testing.clustersim_namesrv import (
    HA_PORT,
    NamesrvRequest,
    NamesrvResponse,
    SimRegistration,
    broker_of,
    route_address,
)
from triomq.testing.clustersim_net import TaskGen, Tasks, wait_for
from triomq.testing.clustersim_parts import (
    CLUSTER,
    TOPIC,
    TOPIC_QUEUES,
    WAITING_TOPICS,
    BrokerSettings,
    MemLog,
    PutRequest,
    PutResponse,
    Term,
)
from triomq.testing.clustersim_schedule import SimSchedule
from triomq.testing.clustersim_timer import SimTimer
from triomq.testing.clustersim_transactions import EndRequest, SimBrokerTransactions

if TYPE_CHECKING:
    from triomq.testing.clustersim_acting import ActingSimulation

#: The tables a returning master takes back, by PreOnline's kinds.
CONSUMER_OFFSETS, DELAY_OFFSETS, TIMER_CHECKPOINT = (
    "consumerOffset", "delayOffset", "timerCheckpoint")
#: Bytes a slave copies from its master per step.
COPY_BATCH = 4096
#: A returning master's longest isolation (``PreOnline``'s wait).
PRE_ONLINE_WAIT_MS = 3000
#: ms between a slave's GET_BROKER_MEMBER_GROUP polls (syncBrokerMemberGroupPeriod).
MEMBER_GROUP_SYNC_PERIOD = 300
#: How long an escaped put waits for the other master's answer.
ESCAPE_TIMEOUT_MS = 1000


@attrs.frozen
class OffsetCommit:
    """UPDATE_CONSUMER_OFFSET (its header fields), oneway."""

    fields: dict[str, str] = attrs.field(eq=False)


class OwnPuts:
    """What the schedule and timer pumps call to put a message (the escape bridge's
    place): the broker's ``put_own``."""

    def __init__(self, broker: StaticBroker) -> None:
        self.broker = broker
        self.settings = broker.put_settings

    def put_own(self, message: EscapedMessage, done: Callable[[EscapeResult], None]) -> None:
        self.broker.put_own(message, done)


class StaticTerm(Term):
    """A static replica's role: everything stored is readable (no confirm offset)."""

    def __init__(self, role: str, master: str, log: MemLog, broker_id: int) -> None:
        super().__init__(role, 0, master, EpochCache(), broker_id)
        self._log = log

    def confirmed(self, max_offset: int) -> int:
        return self._log.max_offset


class StaticBroker:
    """One replica of a static group; its log and tables survive crashes."""

    def __init__(self, name: str, group: str, broker_id: int, sim: ActingSimulation,
                 settings: BrokerSettings) -> None:
        self.name = name
        self.group = group
        self.broker_id = broker_id
        self.sim = sim
        self.settings = settings
        self.log = MemLog()
        self.rate = sim.rng.choice([0.95, 1.0, 1.0, 1.05])
        self.offset = sim.rng.randint(0, 10_000)
        self.topics = TopicTable.with_system_topics(CLUSTER, group, auto_create=True,
                                                    now=self.now_ms())
        self.topics.update(TopicConfig(TOPIC, TOPIC_QUEUES, TOPIC_QUEUES), self.now_ms())
        #: ``consumerOffset.json`` and ``delayOffset.json`` (kept across crashes).
        self.offsets = ConsumerOffsetTable(version_step=1)
        self.schedule = SimSchedule(self)
        self.schedule.offsets = DelayOffsetTable(version_step=1)
        self.put_settings = PutSettings(
            broker_name=group, cluster_name=CLUSTER, max_message_size=4 * 1024 * 1024,
            min_in_sync_replicas=1, auto_create_topic_enable=True,
            auto_create_topic_limit=1024, default_topic_queue_nums=8,
            sync_flush_timeout=settings.put_timeout, flush_policy="group",
            store_host=host_port(name), segment_size=self.log.segment_size)
        self.unique_ids = UniqueIdGenerator("127.0.0.1", 2, sum(name.encode()))
        self.puts = OwnPuts(self)
        #: ``timerCheckpoint.json`` inside (kept across crashes).
        self.timer = SimTimer(self)
        #: The term it serves as a master online or as an acting slave (None: neither).
        self.serving_term: object | None = None
        #: END_TRANSACTION and the check, when the simulation runs transactions.
        self.transactions = (SimBrokerTransactions(
            self, serving=lambda: self.serving_term, offsets=lambda: self.offsets,
            acting=lambda: self.acting, broker_name=group) if sim.tx is not None else None)
        self.up = False
        self.start()

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0

    @property
    def master_name(self) -> str:
        return self.group[-1:] + "0"  # broker-a's master is a0

    # -- life --------------------------------------------------------------------

    def start(self) -> None:
        """Boot: a master isolated until its pre-online ends, a slave watching its group."""
        sim = self.sim
        self.up = True
        sim.network.down.discard(self.name)
        self.serving_term = None
        self.tasks = Tasks()
        self.term = StaticTerm("master" if self.is_master else "slave",
                               self.name if self.is_master else self.master_name, self.log,
                               self.broker_id)
        self.registration = SimRegistration(self, sim.namesrv_names)
        #: Escaped puts in flight: request id -> the master's answer (None until it came).
        self.escapes: dict[int, RemotingCommand | None] = {}
        #: Name-server queries in flight: request id -> the answer (None until it came).
        self.namesrv_answers: dict[int, RemotingCommand | None] = {}
        self.acting = False
        self.acting_tasks: list[int] = []
        self.online = False
        self.locks = BrokerLocks(self)
        self.next_sync = self.now_ms()
        self.watch: GroupWatch | None = None
        if not self.is_master:
            self.watch = GroupWatch(sim.namesrv_names, broker_id=self.broker_id,
                                    sync_period=MEMBER_GROUP_SYNC_PERIOD)
            self._watch_actions(self.watch.start(self.now_ms()))
            self._watch_actions(self.watch.role_changed(is_slave=True, broker_id=self.broker_id,
                                                         now=self.now_ms()))
            self._go_online()
        elif self.group == sim.static_group:
            self.tasks.spawn(self._pre_online())
        else:
            self._go_online()

    def crash(self) -> None:
        """Die: the log and the tables remain."""
        self.up = False
        self.acting = False
        self.serving_term = None
        self.tasks.clear()
        self.sim.network.down.add(self.name)
        self.sim.network.break_streams()

    def now_ms(self) -> int:
        """This host's (skewed) clock."""
        return int(self.sim.now * self.rate) + self.offset

    def _send(self, dst: str, payload: object) -> None:
        self.sim.network.send(self.name, dst, payload, self.sim.now)

    def _go_online(self) -> None:
        """Register with the name servers (a master after its pre-online)."""
        self.online = True
        self.registration.flow.identify(BrokerRegistrationInfo(
            CLUSTER, self.group, self.broker_id, route_address(self.name),
            f"{self.name}:{HA_PORT}", self.settings.broker_not_active_timeout,
            enable_acting_master=True), self.now_ms())
        if self.is_master:
            self.serving_term = object()
            self.term.tasks = [*self.schedule.start(self.term), *self.timer.start(self.term)]

    # -- driving -------------------------------------------------------------------

    def step(self) -> None:
        if not self.up:
            return
        self.registration.poll()
        if self.watch is not None:
            self._watch_actions(self.watch.poll(self.now_ms()))
            self._copy_from_master()
        self.tasks.run()
        self.schedule.step()
        self.timer.step()
        if self.transactions is not None:
            self.transactions.step()
        self.tasks.run()

    def receive(self, src: str, payload: object) -> None:
        if not self.up:
            return
        if isinstance(payload, NamesrvResponse):
            if payload.id in self.namesrv_answers:
                self.namesrv_answers[payload.id] = payload.command
            else:
                self.registration.answers[payload.id] = payload.command
        elif isinstance(payload, NamesrvRequest):  # NOTIFY_MIN_BROKER_ID_CHANGE
            if self.watch is not None:
                min_id = int(payload.command.ext_fields["minBrokerId"])
                self._watch_actions(self.watch.min_broker_id_changed(min_id, self.now_ms()))
        elif isinstance(payload, PutRequest):
            self._client_put(src, payload)
        elif isinstance(payload, EndRequest):
            if self.transactions is not None:
                self.transactions.receive_end(payload)
        elif isinstance(payload, PutResponse):
            if payload.id in self.escapes:
                self.escapes[payload.id] = payload.command
        elif isinstance(payload, LockRequest):
            self.locks.receive(src, payload)
        elif isinstance(payload, LockResponse):
            self.locks.answers[payload.id] = payload.mqs
        elif isinstance(payload, OffsetCommit):
            header = parse_offset_header(payload.fields, commit=True)
            assert header.commit_offset is not None
            self.offsets.commit(header.consumer_group, header.topic, header.queue_id,
                                header.commit_offset, self.now_ms())
        self.tasks.run()

    # -- the group's members (GET_BROKER_MEMBER_GROUP) ---------------------------------

    def _ask_namesrv(self, namesrv: str, command: RemotingCommand) -> TaskGen:
        """One request to ``namesrv`` on a connection of its own: the answer, None
        without one."""
        network = self.sim.network
        stream = network.connect(self.name, namesrv)
        if stream is None:
            return None
        rid = self.sim.next_request_id()
        self.namesrv_answers[rid] = None
        network.send(self.name, namesrv, NamesrvRequest(rid, stream.id, command), self.sim.now)
        until = self.now_ms() + self.settings.namesrv_request_timeout
        yield from wait_for(lambda: self.namesrv_answers.get(rid) is not None
                            or self.now_ms() >= until)
        network.close(stream)
        return self.namesrv_answers.pop(rid, None)

    def _ask_members(self, namesrv: str) -> TaskGen:
        """One GET_BROKER_MEMBER_GROUP: the alive members by id, None without an answer."""
        answer = yield from self._ask_namesrv(namesrv, RemotingCommand.request(
            RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": CLUSTER,
                                                  "brokerName": self.group}))
        if answer is None:
            return None
        if answer.code != 0:
            return {}
        addrs = BrokerMemberGroup.decode(answer.body or b"").broker_addrs
        return {i: broker_of(a) for i, a in addrs.items()}

    def _ask_route(self, topic: str) -> TaskGen:
        """``topic``'s route from the first name server that gives one (None: none did),
        as ``namesrv_client.query_route`` asks."""
        for namesrv in self.sim.namesrv_names:
            answer = yield from self._ask_namesrv(namesrv, RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
            if answer is not None and answer.code == 0:
                return TopicRouteData.decode(answer.body or b"")
        return None

    def _watch_actions(self, actions: list[object]) -> None:
        for action in actions:
            if isinstance(action, QueryMemberGroup):
                self.tasks.spawn(self._query(action.namesrv))
            elif isinstance(action, StartActing):
                self._start_acting()
            elif isinstance(action, StopActing):
                self._stop_acting()

    def _query(self, namesrv: str) -> TaskGen:
        members = yield from self._ask_members(namesrv)
        if self.watch is not None:
            self._watch_actions(self.watch.member_group(namesrv, members, self.now_ms()))

    def _start_acting(self) -> None:
        """The acting term: the delayed and timer messages' delivery, its puts escaping."""
        self.acting = True
        self.serving_term = object()
        self.acting_tasks = [*self.schedule.start(self.term), *self.timer.start(self.term)]
        self.sim.on_acting(self, True)

    def _stop_acting(self) -> None:
        for handle in self.acting_tasks:
            self.tasks.cancel(handle)
        self.acting_tasks = []
        self.acting = False
        self.serving_term = None
        self.sim.on_acting(self, False)

    # -- replication (a slave's) --------------------------------------------------------

    def linked(self, other: StaticBroker) -> bool:
        network = self.sim.network
        return (self.up and other.up and not network.cut(self.name, other.name)
                and not network.cut(other.name, self.name))

    def _copy_from_master(self) -> None:
        master = self.sim.brokers[self.master_name]
        if not self.linked(master):
            return
        end = self.log.max_offset
        if master.log.data[:end] != self.log.data:
            self.sim.violation(f"{self.name}'s log is not a prefix of its master's")
        data = bytes(master.log.data[end:end + COPY_BATCH])
        if data:
            self.append(end, data, replicated=True)
        if master.online and not self.acting and self.now_ms() >= self.next_sync:
            self.next_sync = self.now_ms() + self.settings.slave_synchronize_period
            self.offsets.adopt_master(ConsumerOffsetTable.decode(master.offsets.encode(),
                                                                 version_step=1))
            self.schedule.offsets.adopt_master(DelayOffsetTable.decode(
                master.schedule.offsets.encode(), version_step=1))
            self.timer.table.adopt_master(TimerCheckpointTable.decode(
                master.timer.table.encode()))

    def append(self, offset: int, data: bytes, *, replicated: bool = False) -> None:
        """Write the commit log: a slave only what it copies from its master."""
        if not replicated and not self.is_master:
            self.sim.on_slave_append(self)
        self.log.append_raw(offset, data)

    # -- pre-online (a returning master's) ------------------------------------------------

    def tables(self) -> dict[str, DataVersion]:
        return {CONSUMER_OFFSETS: self.offsets.data_version,
                DELAY_OFFSETS: self.schedule.offsets.data_version,
                TIMER_CHECKPOINT: self.timer.table.data_version}

    def transferring(self) -> frozenset[int]:
        """The broker ids of the slaves replicating from this master now (their links
        whole)."""
        return frozenset(b.broker_id for b in self.sim.group_members(self.group)
                         if not b.is_master and b.linked(self))

    def _pre_online(self) -> TaskGen:
        flow = PreOnline(own=self.name, versions=self.tables(), wait_ms=PRE_ONLINE_WAIT_MS)
        actions = list(flow.start(self.now_ms()))
        fetched: list[str] = []
        while actions:
            action = actions.pop(0)
            if isinstance(action, AskMembers):
                yield from wait_for(lambda at=action.at_ms: self.now_ms() >= at)
                members = None
                for namesrv in self.sim.namesrv_names:
                    members = yield from self._ask_members(namesrv)
                    if members is not None:
                        break
                actions.extend(flow.members(members, self.now_ms()))
            elif isinstance(action, AwaitSlaves):
                while not (ready := flow.transferring(self.transferring(), self.now_ms())):
                    wake = self.now_ms() + 100
                    yield from wait_for(lambda at=wake: self.now_ms() >= at)
                actions.extend(ready)
            elif isinstance(action, Fetch):
                slave = self.sim.brokers[action.address]
                versions = slave.tables() if self.linked(slave) else None
                if versions is not None:
                    fetched.append(action.address)
                actions.extend(flow.fetched(action.address, versions, self.now_ms()))
            elif isinstance(action, Adopt):
                slave = self.sim.brokers[action.address]
                if action.kind == CONSUMER_OFFSETS:
                    self.offsets = ConsumerOffsetTable.decode(slave.offsets.encode(),
                                                              version_step=1)
                elif action.kind == DELAY_OFFSETS:
                    self.schedule.offsets = DelayOffsetTable.decode(
                        slave.schedule.offsets.encode(), version_step=1)
                else:
                    self.timer.table = TimerCheckpointTable.decode(slave.timer.table.encode())
            elif isinstance(action, GoOnline):
                self.sim.on_pre_online(self, fetched, action.why)
                self._go_online()

    # -- puts ------------------------------------------------------------------------------

    def _state(self) -> BrokerState:
        return BrokerState(broker_id=self.broker_id, role=self.term.role,
                           is_master=self.is_master, in_sync_replicas=1, acting=self.acting)

    def _client_put(self, src: str, put: PutRequest) -> None:
        flow = PutFlow(self.put_settings, now=self.now_ms() / 1000)
        action = flow.start(put.command, src, self._state(), self.topics,
                            store_ms=self.now_ms(), new_id=self.unique_ids.next_id)
        self._pump(flow, action, lambda response: self._send(src, PutResponse(put.id,
                                                                               response)))

    def put_own(self, message: EscapedMessage, done: Callable[[EscapeResult], None]) -> None:
        """A message the broker writes itself: on its own log as master, escaped to
        another group's master while acting."""
        if self.acting and self.sim.escape_while_acting:
            term = self.serving_term

            def escaped(result: EscapeResult) -> None:
                if result.stored:
                    self.sim.on_escaped(self, term, message)
                done(result)
            order = Fallback(self.sim.escape_bridges)
            self._escape_through(order, order.first(), message, escaped)
            return
        flow = PutFlow(self.put_settings, now=self.now_ms() / 1000)
        action = flow.start_own(message, self._state(), store_ms=self.now_ms(),
                                new_id=self.unique_ids.next_id)
        self._pump(flow, action, lambda response: done(EscapeResult.of_response(response)))

    def _escape_through(self, order: Fallback, step: int | EscapeResult, message: EscapedMessage,
                        done: Callable[[EscapeResult], None]) -> None:
        """The acting escape bridges, tried in ``order`` (``FallbackEscapeBridge``'s)."""
        if isinstance(step, EscapeResult):
            done(step)
            return

        def tried(result: EscapeResult) -> None:
            self._escape_through(order, order.tried(result), message, done)
        if order.names[step] == "container":
            self._container_put(message, tried)
        else:
            self.tasks.spawn(self._escape(message, tried))

    def _container_put(self, message: EscapedMessage,
                       done: Callable[[EscapeResult], None]) -> None:
        """The ``container`` bridge: every simulated broker runs in one process, so the put
        is a call of the chosen master's own put."""
        others = {b.name: b for b in self.sim.brokers.values() if b is not self and b.up}
        chosen = container_master(
            [Candidate(name, CLUSTER, b.group, b.is_master,
                       b.topics.get(message.topic) is not None) for name, b in others.items()],
            cluster=CLUSTER, own_group=self.group)
        if chosen is None:
            done(no_master(CLUSTER))
        else:
            others[chosen].put_own(message, done)

    def _escape(self, message: EscapedMessage, done: Callable[[EscapeResult], None]) -> TaskGen:
        """The ``remote`` bridge's flow, its route queries and sends over the network."""
        flow = RemoteEscape(message, enabled=True, own_group=self.group, cluster=CLUSTER,
                            producer_group=f"InnerProducerGroup_{self.group}_{self.broker_id}",
                            unique_id=self.unique_ids.next_id(self.now_ms()))
        step = flow.start()
        while not isinstance(step, Escaped):
            if isinstance(step, QueryRoute):
                route = yield from self._ask_route(step.topic)
                step = flow.routed(route, self.now_ms())
                continue
            rid = self.sim.next_request_id()
            self.escapes[rid] = None
            self._send(broker_of(step.target.address), PutRequest(rid, RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, dict(step.fields), message.body)))
            until = self.now_ms() + ESCAPE_TIMEOUT_MS
            yield from wait_for(lambda r=rid, u=until: self.escapes.get(r) is not None
                                or self.now_ms() >= u)
            answer = self.escapes.pop(rid, None)
            step = (flow.failed("no answer", self.now_ms()) if answer is None
                    else flow.answered(EscapeResult.of_response(answer), self.now_ms()))
        done(step.result)

    def _pump(self, flow: PutFlow, action: object,
              reply: Callable[[RemotingCommand], None]) -> None:
        records = ()
        while not isinstance(action, PutReply):
            if isinstance(action, TopicCreated):
                action = flow.resume()
            elif isinstance(action, Append):
                start = self.log.max_offset
                placed, data = self.log.pack(action.records)
                self.append(start, data)
                records = action.records
                action = flow.appended(placed, self.now_ms() / 1000)
            elif isinstance(action, WaitFlushed):
                action = flow.flushed(self.log.max_offset, self.now_ms() / 1000)
            elif isinstance(action, WaitReplicated):  # ASYNC_MASTER: no wait
                action = flow.replicated(ReplicationStatus.PUT_OK)
            else:
                raise AssertionError(f"unexpected put action {action!r}")
        if action.response.code == 0:
            for record in records:
                if record.topic not in WAITING_TOPICS:
                    self.sim.on_delivered(self, record.properties[PROPERTY_UNIQ_KEY])
        reply(action.response)
