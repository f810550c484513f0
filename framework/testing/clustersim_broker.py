"""A simulated broker replica in controller mode: a pump of the real flows over virtual time.

The controller-mode flow is ``triomq.broker.replication.core.controller_flow`` and the
controller calls follow the leader with ``triomq.controller.core.leader_calls``,
as ``framework/broker/replication/controller_mode.py`` pumps them over trio; the
name-server registration is ``clustersim_namesrv.SimRegistration``, the
pulls and consumer offsets ``clustersim_pulls.SimConsumeSide``, the puts
the broker's put core (``clustersim_puts.SimPuts``), END_TRANSACTION and
the check ``clustersim_transactions.SimBrokerTransactions``, the delayed
messages' delivery the schedule core (``clustersim_schedule.SimSchedule``),
the timer messages' the timer core (``clustersim_timer.SimTimer``). The HA
terms run the real HA state machines (``MasterConnection`` /
``SlaveConnection`` per HA stream, ``SyncStateTracker`` and
``SyncReplication`` on the master) over the simulation's streams.

Simplifications: the HA address is the broker's name (no
EXCHANGE_BROKER_HA_INFO round trip); the commit log (``MemLog``) flushes
synchronously (SYNC_FLUSH) and a crash can only tear the write in progress,
so "acknowledged" means durable on every replica that acked; the election
priority is 0 for every replica; the topics (kept across crashes, as
``topics.json``) never change, so a slave does not copy its master's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triomq.broker.core.identity import BrokerIdentity
from triomq.broker.core.role import BrokerRole
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.replication.core import controller_flow as flow
from triomq.controller import ResponseCode
from triomq.controller.core.leader_calls import GiveUp, LeaderCalls, Pause
from triomq.controller.core.requests import BrokerHeartbeat
from triomq.controller.core.service_core import Notify
from triomq.controller.core.wire import encode_epoch_cache, replica_epoch_cache
from triomq.ha.core.errors import EpochError, HAProtocolError
from triomq.ha.core.master import MasterConnection, MasterLog, SendToSlave, SlaveAcked, SlaveJoined
from triomq.ha.core.master_term import MasterTerm
from triomq.ha.core.reconnect import Reconnect
from triomq.ha.core.role_change import RoleChange, ToMaster, ToSlave
from triomq.ha.core.slave import (
    RecordEpoch,
    SendToMaster,
    SlaveConnection,
    SlaveLog,
    Truncate,
    WriteAt,
)
from triomq.protocol.ha import HAFrameError
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import TopicConfig
from triomq.testing.clustersim_controller import Request, Response, controller_name
from triomq.testing.clustersim_namesrv import (
    EpochCacheRequest,
    EpochCacheResponse,
    NamesrvResponse,
    SimRegistration,
)
from triomq.testing.clustersim_net import TaskGen, Tasks, wait_for
from triomq.testing.clustersim_parts import (
    CLUSTER,
    GROUP,
    TOPIC,
    TOPIC_QUEUES,
    BrokerSettings,
    EpochFile,
    MemLog,
    PutRequest,
    Term,
    change_role,
)
from triomq.testing.clustersim_pulls import ConsumerRequest, ConsumerResponse, SimConsumeSide
from triomq.testing.clustersim_puts import SimPuts
from triomq.testing.clustersim_schedule import SimSchedule
from triomq.testing.clustersim_timer import SimTimer
from triomq.testing.clustersim_transactions import EndRequest, SimBrokerTransactions

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation

Code = ResponseCode
_HA_ERRORS = (HAProtocolError, HAFrameError, EpochError)


class SimBroker:
    """One broker replica: its log, epoch file and identity survive crashes."""

    def __init__(self, name: str, sim: Simulation, settings: BrokerSettings) -> None:
        self.name = name
        self.sim = sim
        self.settings = settings
        self.log = MemLog()
        self.epoch_file = EpochFile()
        self.identity: BrokerIdentity | None = None
        self.rate = sim.rng.choice([0.95, 1.0, 1.0, 1.05])
        self.offset = sim.rng.randint(0, 10_000)
        self.topics = TopicTable.with_system_topics(CLUSTER, GROUP, auto_create=True,
                                                    now=self.now_ms())
        self.topics.update(TopicConfig(TOPIC, TOPIC_QUEUES, TOPIC_QUEUES), self.now_ms())
        self.consume = SimConsumeSide(self)
        self.puts = SimPuts(self)
        #: END_TRANSACTION and the check, when the simulation runs transactions.
        self.transactions = (SimBrokerTransactions(
            self, serving=lambda: self.term if self.term.master_term is not None else None,
            offsets=lambda: self.consume.table) if sim.tx is not None else None)
        self.schedule = SimSchedule(self)
        self.timer = SimTimer(self)
        self.up = False
        self.start()

    # -- life --------------------------------------------------------------------

    def start(self) -> None:
        """Boot: the controller-mode flow registers with the controllers, then follows them."""
        self.up = True
        self.sim.network.down.discard(self.name)
        self.tasks = Tasks()
        self.term = Term.none()
        self.responses: dict[int, Response] = {}
        self.outcomes: dict[int, flow.ProposalOutcome] = {}
        self.accepted: set[int] = set()
        self.max_epoch_seen = -1
        self.registration = SimRegistration(self, self.sim.namesrv_names)
        self.consume.start()
        settings = self.settings
        controllers = tuple(controller_name(i) for i in sorted(self.sim.controller_ids))
        self.calls = LeaderCalls(controllers, timeout=settings.client_timeout,
                                 attempt_timeout=settings.attempt_timeout,
                                 retry_interval=settings.client_retry_interval)
        self.flow = flow.ControllerModeFlow(flow.FlowSettings(
            cluster_name=CLUSTER, broker_name=GROUP, address=self.name, controllers=controllers,
            broker_heartbeat_interval=settings.broker_heartbeat_interval,
            sync_controller_metadata_period=settings.sync_controller_metadata_period))
        self.flow.start(self.now_ms(), self.identity, self.epoch_file.cache.last_epoch or 0,
                        f"{self.name};{self.sim.now}")
        self._drain()

    def crash(self, torn: bytes = b"") -> None:
        """Die: only the log (plus ``torn``, a partial write) and the files remain."""
        self.log.data += torn
        self.up = False
        self.tasks.clear()
        self.term = Term.none()
        self.sim.network.down.add(self.name)
        self.sim.network.break_streams()

    @property
    def broker_id(self) -> int:
        return self.identity.broker_id if self.identity is not None else -1

    def now_ms(self) -> int:
        """This host's (skewed) clock."""
        return int(self.sim.now * self.rate) + self.offset

    def _send(self, dst: str, payload: object) -> None:
        self.sim.network.send(self.name, dst, payload, self.sim.now)

    def _sleep(self, ms: float) -> TaskGen:
        wake = self.now_ms() + ms
        yield from wait_for(lambda: self.now_ms() >= wake)

    # -- driving -------------------------------------------------------------------

    def step(self) -> None:
        """One simulation step: the flow's timers, tasks, then the HA term's connections."""
        if not self.up:
            return
        self.flow.tick(self.now_ms())
        self._drain()
        self.registration.poll()
        self.tasks.run()
        self.schedule.step()
        self.timer.step()
        term = self.term
        if term.master_term is not None:
            self._master_step(term, term.master_term)
        elif term.role == "slave":
            self._slave_step(term)
        self._refuse_streams()
        self.consume.step()
        if self.transactions is not None:
            self.transactions.step()

    def receive(self, src: str, payload: object) -> None:
        """A datagram arrived."""
        if not self.up:
            return
        if isinstance(payload, Response):
            self.responses[payload.id] = payload
        elif isinstance(payload, Notify):
            self.flow.notified(self.now_ms(), payload.info)
            self._drain()
        elif isinstance(payload, PutRequest):
            self.puts.receive(src, payload)
        elif isinstance(payload, NamesrvResponse):
            self.registration.answers[payload.id] = payload.command
        elif isinstance(payload, EpochCacheRequest):
            self._answer_epoch_cache(src, payload)
        elif isinstance(payload, ConsumerRequest):
            self.consume.receive(src, payload)
        elif isinstance(payload, ConsumerResponse):
            self.consume.answered(payload)
        elif isinstance(payload, EndRequest) and self.transactions is not None:
            self.transactions.receive_end(payload)
        self.tasks.run()

    def _answer_epoch_cache(self, src: str, request: EpochCacheRequest) -> None:
        """GET_BROKER_EPOCH_CACHE, as ``ControllerMode`` answers it."""
        cache = replica_epoch_cache(CLUSTER, GROUP, self.broker_id,
                                    is_master=self.term.master_term is not None,
                                    epochs=self.epoch_file.load(),
                                    max_offset=self.log.max_offset)
        self.sim.network.send(self.name, src, EpochCacheResponse(
            request.id, RemotingCommand.response(body=encode_epoch_cache(cache))), self.sim.now)

    # -- the controller-mode flow's pump -------------------------------------------------

    def _drain(self) -> None:
        """Carry out what the flow asks for (tasks for the controller calls)."""
        mode = self.flow
        while outputs := mode.outputs():
            for out in outputs:
                if isinstance(out, flow.Call):
                    self.tasks.spawn(self._call(out))
                elif isinstance(out, flow.SendHeartbeat):
                    term = self.term
                    epoch = (term.epochs.last_epoch if term.role != "none"
                             else out.recorded_epoch)
                    self._send(out.controller, Request(self.sim.next_request_id(), BrokerHeartbeat(
                        CLUSTER, GROUP, out.broker_id, self.name, epoch=epoch or 0,
                        max_offset=self.log.max_offset,
                        confirm_offset=max(term.confirmed(self.log.max_offset), 0))))
                    mode.heartbeat_sent(self.now_ms(), out.controller)
                elif isinstance(out, flow.SaveIdentity):
                    self.identity = out.identity
                    mode.identity_saved(self.now_ms())
                elif isinstance(out, (flow.TakeMaster, flow.TakeSlave)):
                    self._take_role(out)
                elif isinstance(out, flow.LearnSyncStateSet):
                    term = self.term
                    if term.master_term is not None:
                        term.master_term.committed(out.sync_state_set)
                        self.update_puts(term)
                elif isinstance(out, flow.ProposalOutcome):
                    self.outcomes[out.token] = out

    def _take_role(self, out: flow.TakeMaster | flow.TakeSlave) -> None:
        error = ""
        try:
            if isinstance(out, flow.TakeMaster):
                self.change_to_master(out.epoch, out.broker_id, out.sync_state_set)
            else:  # the HA address is the broker's name
                self.change_to_slave(out.master_address, out.epoch, out.broker_id)
        except EpochError as exc:
            error = str(exc)
        self.flow.followed(self.now_ms(), BrokerRole(self.term.role), self.term.epoch, error)

    def _call(self, call: flow.Call) -> TaskGen:
        """Make one of the flow's calls, following the leader as ``ControllerClient`` does."""
        attempts = self.calls.start(self.now_ms())
        while True:
            step = attempts.next_step(self.now_ms())
            if isinstance(step, GiveUp):
                self.flow.answered(self.now_ms(), call.id, None, step.last_error)
                break
            if isinstance(step, Pause):
                yield from self._sleep(step.duration)
                continue
            rid = self.sim.next_request_id()
            self._send(step.address, Request(rid, call.request))
            until = self.now_ms() + step.timeout
            yield from wait_for(lambda r=rid, u=until: r in self.responses
                                or self.now_ms() >= u)
            response = self.responses.pop(rid, None)
            if response is None:
                attempts.failed(step.address, "no answer")
            elif response.code == Code.CONTROLLER_NOT_LEADER:
                attempts.not_leader(step.address, response.leader)
            else:
                attempts.answered(step.address)
                answer = flow.ControllerAnswer(response.code, response.remark, response.payload)
                self.flow.answered(self.now_ms(), call.id, answer)
                break
        self._drain()

    # -- role changes (ReplicasManager) ---------------------------------------------------

    def change_to_master(self, epoch: int, broker_id: int, sync_state_set: frozenset[int]
                         ) -> None:
        """Serve as master of ``epoch`` (``EpochError`` if older than the recorded one)."""
        start = change_role(RoleChange(ToMaster(epoch, broker_id, sync_state_set),
                                       confirmed=self.term.confirmed(self.log.max_offset)),
                            self.log, self.epoch_file, self._end_term)
        epochs = start.epochs
        assert epochs.last is not None
        term = Term("master", epoch, self.name, epochs, broker_id)
        term.master_term = MasterTerm(
            broker_id=broker_id, sync_state_set=sync_state_set,
            epoch_start_offset=epochs.last.start_offset, confirm_offset=start.confirm_offset,
            now_ms=self.now_ms(), config=self.settings.master)
        self.term = term
        term.tasks = [self.tasks.spawn(self._check_loop(term.master_term)),
                      self.tasks.spawn(self._report_loop(term, term.master_term)),
                      *self.schedule.start(term), *self.timer.start(term)]
        self._took_role(term)

    def change_to_slave(self, master: str, epoch: int, broker_id: int) -> None:
        """Follow ``master`` (of ``epoch``) as broker ``broker_id``."""
        start = change_role(RoleChange(ToSlave(master, epoch, broker_id), confirmed=-1),
                            self.log, self.epoch_file, self._end_term)
        term = Term("slave", epoch, master, start.epochs, broker_id)
        term.reconnect = Reconnect(self.settings.reconnect_min, self.settings.reconnect_max)
        self.term = term
        self._took_role(term)

    def _took_role(self, term: Term) -> None:
        if term.epoch < self.max_epoch_seen:
            self.sim.violation(f"broker {self.name} went back from epoch "
                               f"{self.max_epoch_seen} to {term.epoch}")
        self.max_epoch_seen = term.epoch
        self.registration.role_taken(term, self.topics)
        self.consume.role_changed()
        self.sim.on_role(self, term)

    def _end_term(self) -> None:
        term, self.term = self.term, Term.none()
        for handle in term.tasks:
            self.tasks.cancel(handle)
        for stream, _ in term.conns.values():
            self.sim.network.close(stream)
        if term.stream is not None:
            self.sim.network.close(term.stream)
        if term.master_term is not None:
            self.puts.abandon(term, term.master_term.end())  # no longer master

    # -- the master (HAMaster) --------------------------------------------------------------

    def _view(self, term: Term, master: MasterTerm) -> MasterLog:
        max_offset = self.log.max_offset
        return MasterLog(max_offset, self.log.min_offset, term.epochs,
                         master.confirm_offset(max_offset))

    def _check_loop(self, master: MasterTerm) -> TaskGen:
        while (next_check := master.check(self.now_ms(), self.log.max_offset)) is not None:
            yield from wait_for(lambda at=next_check: self.now_ms() >= at)

    def _report_loop(self, term: Term, master: MasterTerm) -> TaskGen:
        while True:
            proposal = master.next_proposal()
            if proposal is None:
                yield from wait_for(lambda: master.has_proposals)
                continue
            token = self.flow.propose(self.now_ms(), proposal, term.epoch)
            self._drain()
            yield from wait_for(lambda t=token: t in self.outcomes)
            outcome = self.outcomes.pop(token)
            if outcome.fenced:
                self.puts.answer(term, master.fence())
                return
            master.answered(outcome.sync_state_set)
            self.update_puts(term)

    def update_puts(self, term: Term) -> None:
        """Answer the puts of ``term`` the acks now cover or whose time is up."""
        master = term.master_term
        if master is None or self.term is not term:
            return
        self.puts.answer(term, master.completed(self.log.max_offset)
                         + master.expired(self.now_ms()))

    def _refuse_streams(self) -> None:
        term = self.term
        for stream in list(self.sim.network.streams.values()):
            if stream.server != self.name or stream.id in self.accepted:
                continue
            self.accepted.add(stream.id)
            if term.master_term is not None:
                term.conns[stream.id] = (stream, MasterConnection(
                    now_ms=self.now_ms(),
                    transfer_batch_size=self.settings.master.ha_transfer_batch_size,
                    heartbeat_interval_ms=self.settings.master.ha_send_heartbeat_interval))
            else:
                self.sim.network.close(stream)

    def _master_step(self, term: Term, master: MasterTerm) -> None:
        now = self.now_ms()
        for stream_id, (stream, conn) in list(term.conns.items()):
            try:
                if stream.closed:
                    raise HAProtocolError("stream closed", conn.peer)
                data = stream.receive(self.name, self.sim.now)
                outs = conn.receive_data(data, self._view(term, master), now) if data else []
                for out in outs:
                    if isinstance(out, SendToSlave):
                        stream.send(self.name, out.data, self.sim.now, self.sim.network.delay())
                    elif isinstance(out, SlaveJoined):
                        master.slave_joined(out.handshake.broker_id,
                                            is_async_learner=out.handshake.is_async_learner,
                                            now_ms=now)
                    elif isinstance(out, SlaveAcked):
                        master.slave_acked(out.broker_id, out.ack_offset,
                                           out.last_caught_up_time_ms, self.log.max_offset)
                for _ in range(8):
                    plan = conn.poll_transfer(self._view(term, master), now)
                    if plan is None:
                        break
                    body = self.log.read(plan.offset, plan.max_size) if plan.max_size else b""
                    stream.send(self.name, conn.build_transfer(plan, body, now), self.sim.now,
                                self.sim.network.delay())
            except _HA_ERRORS:
                self.sim.network.close(stream)
                del term.conns[stream_id]
                if conn.slave is not None:
                    master.slave_left(conn.slave.broker_id)
        self.update_puts(term)

    # -- the slave (HASlave) ------------------------------------------------------------------

    def _slave_step(self, term: Term) -> None:
        now = self.now_ms()
        settings = self.settings
        assert term.reconnect is not None
        if term.stream is not None and term.stream.closed:
            handshook = term.conn is not None and term.conn.max_offset >= 0
            term.stream, term.conn = None, None
            term.retry_at = now + term.reconnect.delay_after(handshook=handshook)
        if term.stream is None:
            if now < term.retry_at:
                return
            stream = self.sim.network.connect(self.name, term.master)
            if stream is None:
                term.retry_at = now + term.reconnect.delay_after(handshook=False)
                return
            term.stream = stream
            term.conn = SlaveConnection(broker_id=term.broker_id, now_ms=now,
                                        ack_interval_ms=settings.master.ha_send_heartbeat_interval)
            stream.send(self.name, term.conn.start(), self.sim.now, self.sim.network.delay())
            return
        stream, conn = term.stream, term.conn
        assert conn is not None
        data = stream.receive(self.name, self.sim.now)
        try:
            actions = conn.receive_data(data, SlaveLog(self.log.max_offset, 0, term.epochs),
                                        now) if data else []
        except _HA_ERRORS:
            self.sim.network.close(stream)
            return
        for action in actions:
            if isinstance(action, Truncate):
                self.log.truncate(action.offset)
                # As the broker's: what went past the cut is not taken for delivered.
                for table in (self.consume.table, self.schedule.offsets, self.timer.table):
                    table.truncated(self.log.queue_max_offset)
                self.sim.on_truncated(self)
                self.epoch_file.save(action.epochs)
                term.epochs = action.epochs
            elif isinstance(action, RecordEpoch):
                self.epoch_file.save(action.epochs)
                term.epochs = action.epochs
            elif isinstance(action, WriteAt):
                if self.sim.maybe_crash_writing(self, action.data):
                    return
                self.log.append_raw(action.offset, action.data)
            elif isinstance(action, SendToMaster):
                stream.send(self.name, action.data, self.sim.now, self.sim.network.delay())
        term.confirm_offset = conn.confirm_offset
        ack = conn.poll(now)
        if ack is not None:
            stream.send(self.name, ack, self.sim.now, self.sim.network.delay())
