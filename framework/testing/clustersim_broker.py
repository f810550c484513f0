"""A simulated broker replica in controller mode, over the real HA state machines.

It mirrors ``framework/broker/controller_mode.py`` (identity, registration,
heartbeats, polling, role changes from the newest replica info, SyncStateSet
proposals fenced by both epochs), ``framework/broker/replicas_manager.py``
(terms, ``become_master`` / ``become_slave`` from ``framework.ha.roles``,
pending puts failing when a term ends) and ``framework/ha/master_driver.py``
(``MasterConnection`` / ``SlaveConnection`` per HA stream,
``SyncStateTracker`` and ``SyncReplication`` on the master), with the
simulation's generator tasks and streams instead of trio.

Simplifications: the HA address is the broker's name (no
EXCHANGE_BROKER_HA_INFO round trip); the commit log (``MemLog``) flushes
synchronously (SYNC_FLUSH) and a crash can only tear the write in progress,
so "acknowledged" means durable on every replica that acked; the election
priority is 0 for every replica.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from framework.controller import ResponseCode
from framework.controller.wire import ReplicaInfo
from framework.ha import roles
from framework.ha.errors import EpochError, HAProtocolError
from framework.ha.master import MasterConnection, MasterLog, Send, SlaveAcked, SlaveJoined
from framework.ha.master_driver import MasterFenced
from framework.ha.slave import RecordEpoch, SlaveConnection, SlaveLog, Truncate, WriteAt
from framework.ha.slave import Send as SlaveSend
from framework.ha.sync_replication import ReplicationStatus, SyncReplication
from framework.ha.sync_state import SyncStateTracker
from framework.protocol import message
from framework.protocol.ha import HAFrameError
from framework.testing.clustersim_controller import Notify, Request, Response, controller_name
from framework.testing.clustersim_net import TaskGen, Tasks, wait_for
from framework.testing.clustersim_parts import (
    BrokerSettings,
    EpochFile,
    MemLog,
    PutRequest,
    PutResponse,
    Term,
    inline,
    run_inline,
)

if TYPE_CHECKING:
    from framework.testing.clustersim import Simulation

Code = ResponseCode
CLUSTER, GROUP = "sim-cluster", "broker-a"
_HA_ERRORS = (HAProtocolError, HAFrameError, EpochError)


class SimBroker:
    """One broker replica: its log, epoch file and identity survive crashes."""

    def __init__(self, name: str, sim: Simulation, settings: BrokerSettings) -> None:
        self.name = name
        self.sim = sim
        self.settings = settings
        self.log = MemLog()
        self.epoch_file = EpochFile()
        self.identity: tuple[int, str] | None = None
        self.rate = sim.rng.choice([0.95, 1.0, 1.0, 1.05])
        self.offset = sim.rng.randint(0, 10_000)
        self.up = False
        self.start()

    # -- life --------------------------------------------------------------------

    def start(self) -> None:
        """Boot: register with the controllers, then follow them."""
        self.up = True
        self.sim.network.down.discard(self.name)
        self.tasks = Tasks()
        self.term: Term | None = None
        self.replica_info: ReplicaInfo | None = None
        self.sync_state_set_epoch = 0
        self.registered = False
        self.wake = False
        self.responses: dict[int, Response] = {}
        self.accepted: set[int] = set()
        self.recorded_epoch = self.epoch_file.cache.last_epoch or 0
        self.leader_hint: str | None = None
        self.no_master_reason = ""
        self.max_epoch_seen = -1
        self.tasks.spawn(self._apply_loop())
        self.tasks.spawn(self._register_then_follow())

    def crash(self, torn: bytes = b"") -> None:
        """Die: only the log (plus ``torn``, a partial write) and the files remain."""
        self.log.data += torn
        self.up = False
        self.tasks.clear()
        self.term = None
        self.sim.network.down.add(self.name)
        self.sim.network.break_streams()

    @property
    def broker_id(self) -> int:
        return self.identity[0] if self.identity is not None else -1

    def now_ms(self) -> int:
        """This host's (skewed) clock."""
        return int(self.sim.now * self.rate) + self.offset

    @property
    def role(self) -> str:
        return self.term.role if self.term is not None else "none"

    @property
    def master_epoch(self) -> int:
        return self.term.epoch if self.term is not None else -1

    @property
    def confirm_offset(self) -> int:
        term = self.term
        if term is None:
            return -1
        if term.tracker is not None:
            return term.tracker.confirm_offset(self.log.max_offset)
        return term.confirm_offset

    def _send(self, dst: str, payload: object) -> None:
        self.sim.network.send(self.name, dst, payload, self.sim.now)

    def _sleep(self, ms: int) -> TaskGen:
        wake = self.now_ms() + ms
        yield from wait_for(lambda: self.now_ms() >= wake)

    # -- driving -------------------------------------------------------------------

    def step(self) -> None:
        """One simulation step: tasks, then the HA term's connections."""
        if not self.up:
            return
        self.tasks.run()
        term = self.term
        if term is not None and term.tracker is not None:
            self._master_step(term)
        elif term is not None and term.role == "slave":
            self._slave_step(term)
        self._refuse_streams()

    def receive(self, src: str, payload: object) -> None:
        """A datagram arrived."""
        if not self.up:
            return
        if isinstance(payload, Response):
            self.responses[payload.id] = payload
        elif isinstance(payload, Notify):
            if payload.info.broker_name == GROUP and self.registered:
                self.offer(payload.info)
        elif isinstance(payload, PutRequest):
            self._put(src, payload)
        self.tasks.run()

    # -- the controller client ---------------------------------------------------------

    def _call(self, kind: str, **args: Any) -> TaskGen:
        """ControllerClient.call: follow NOT_LEADER hints, retry until the timeout."""
        end = self.now_ms() + self.settings.client_timeout
        names = [controller_name(i) for i in sorted(self.sim.controller_ids)]
        turn = 0
        while self.now_ms() < end:
            target = self.leader_hint or names[turn % len(names)]
            turn += 1
            rid = self.sim.next_request_id()
            self._send(target, Request(rid, kind, {"cluster_name": CLUSTER,
                                                   "broker_name": GROUP, **args}))
            attempt = min(end, self.now_ms() + self.settings.attempt_timeout)
            yield from wait_for(lambda r=rid, a=attempt: r in self.responses
                                or self.now_ms() >= a)
            response = self.responses.pop(rid, None)
            if response is None:
                self.leader_hint = None
                continue
            if response.code != Code.CONTROLLER_NOT_LEADER:
                self.leader_hint = target
                return response
            self.leader_hint = response.leader if response.leader != target else None
            yield from self._sleep(50)
        return None

    # -- registration and roles (ControllerMode) -----------------------------------------

    def _register_then_follow(self) -> TaskGen:
        info = yield from self._register()
        for cid in sorted(self.sim.controller_ids):
            self.tasks.spawn(self._heartbeat_loop(controller_name(cid)))
        self.tasks.spawn(self._poll_loop())
        yield from self._offer_or_elect(info)

    def _register(self) -> TaskGen:
        period = self.settings.sync_controller_metadata_period
        while True:
            if self.identity is None:
                response = yield from self._call("get_next_broker_id")
                if response is None or response.code != Code.SUCCESS:
                    yield from self._sleep(period)
                    continue
                broker_id, check = response.payload, f"{self.name};{self.sim.now}"
                response = yield from self._call("apply_broker_id", broker_id=broker_id,
                                                 address=self.name, check_code=check)
                if response is None or response.code != Code.SUCCESS:
                    yield from self._sleep(period)
                    continue
                self.identity = (broker_id, check)
            response = yield from self._call("register_broker", broker_id=self.broker_id,
                                             address=self.name)
            forgotten = Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
            if response is not None and response.code == forgotten:
                yield from self._call("apply_broker_id", broker_id=self.broker_id,
                                      address=self.name, check_code=self.identity[1])
                response = yield from self._call("register_broker", broker_id=self.broker_id,
                                                 address=self.name)
            if response is None or response.code != Code.SUCCESS:
                yield from self._sleep(period)
                continue
            self.registered = True
            return response.payload

    def _offer_or_elect(self, info: ReplicaInfo) -> TaskGen:
        if info.master_broker_id is None:
            response = yield from self._call("elect_master", broker_id=self.broker_id)
            ok = (Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST)
            if response is None or response.code not in ok or response.payload is None:
                self.no_master_reason = response.remark if response is not None else "timeout"
                return
            info = response.payload
        self.no_master_reason = ""
        self.offer(info)

    def offer(self, info: ReplicaInfo) -> None:
        """Consider ``info``; older epochs are ignored."""
        current = self.replica_info
        if current is not None and info.is_older_than(current):
            return
        self.replica_info = info
        self.wake = True

    def _apply_loop(self) -> TaskGen:
        while True:
            yield from wait_for(lambda: self.wake)
            self.wake = False
            info = self.replica_info
            if info is None:
                continue
            try:
                self._follow(info)
            except EpochError:
                yield from self._sleep(self.settings.sync_controller_metadata_period)
                self.wake = True

    def _follow(self, info: ReplicaInfo) -> None:
        if info.master_epoch < self.master_epoch or info.master_broker_id is None:
            return
        if info.master_broker_id == self.broker_id:
            members = _addresses(info, info.sync_state_set)
            term = self.term
            if not (self.role == "master" and self.master_epoch == info.master_epoch):
                self.change_to_master(info.master_epoch, members)
            elif (term is not None and term.tracker is not None
                  and info.sync_state_set_epoch >= self.sync_state_set_epoch):
                term.tracker.learn(members)
                self._update_puts(term)
            self.sync_state_set_epoch = max(self.sync_state_set_epoch,
                                            info.sync_state_set_epoch)
            return
        if self.role == "slave" and self.master_epoch == info.master_epoch:
            return
        if info.master_address is not None:
            self.change_to_slave(info.master_address, info.master_epoch)

    def _heartbeat_loop(self, controller: str) -> TaskGen:
        while True:
            term = self.term
            epoch = term.epochs.last_epoch if term is not None else self.recorded_epoch
            self._send(controller, Request(self.sim.next_request_id(), "heartbeat", {
                "cluster_name": CLUSTER, "broker_name": GROUP, "broker_id": self.broker_id,
                "address": self.name, "epoch": epoch or 0, "max_offset": self.log.max_offset,
                "confirm_offset": max(self.confirm_offset, 0)}))
            yield from self._sleep(self.settings.broker_heartbeat_interval)

    def _poll_loop(self) -> TaskGen:
        while True:
            yield from self._sleep(self.settings.sync_controller_metadata_period)
            response = yield from self._call("get_replica_info")
            if response is None:
                continue
            if response.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                info = yield from self._register()
            elif response.code != Code.SUCCESS:
                continue
            else:
                info = response.payload
            yield from self._offer_or_elect(info)

    def _alter_sync_state_set(self, proposal: frozenset[str]) -> TaskGen:
        """ControllerMode.alter_sync_state_set: addresses -> ids, fenced by both epochs.

        The set the controller holds afterwards, None if unknown; raises
        ``MasterFenced`` once a newer master exists.
        """
        info, epoch = self.replica_info, self.master_epoch
        if info is None:
            return None
        ids = {info.broker_id_of(a) for a in proposal}
        if None in ids:
            # A replica that registered after our last news: learn the group anew.
            info = yield from self._read_sync_state_set(epoch)
            if info is None:
                return None
            ids = {info.broker_id_of(a) for a in proposal}
            if None in ids:
                return _addresses(info, info.sync_state_set)
        response = yield from self._call(
            "alter_sync_state_set", master_broker_id=self.broker_id, master_epoch=epoch,
            sync_state_set=frozenset(ids), sync_state_set_epoch=self.sync_state_set_epoch)
        if response is None:
            return None
        if response.code == Code.CONTROLLER_FENCED_MASTER_EPOCH:
            yield from self._read_sync_state_set(epoch)
            raise MasterFenced(response.remark)
        if response.code != Code.SUCCESS:
            current = yield from self._read_sync_state_set(epoch)
            return None if current is None else _addresses(current, current.sync_state_set)
        applied, new_epoch = response.payload
        self.sync_state_set_epoch = max(self.sync_state_set_epoch, new_epoch)
        return _addresses(info, applied)

    def _read_sync_state_set(self, master_epoch: int) -> TaskGen:
        """ControllerMode._read_sync_state_set: this term's replica info, or None."""
        response = yield from self._call("get_replica_info")
        if response is None or response.code != Code.SUCCESS:
            return None
        info: ReplicaInfo = response.payload
        self.offer(info)
        if info.master_epoch > master_epoch:
            raise MasterFenced(f"the controller is at master epoch {info.master_epoch}")
        if (info.master_epoch != master_epoch or info.master_broker_id != self.broker_id
                or info.sync_state_set_epoch < self.sync_state_set_epoch):
            return None
        self.sync_state_set_epoch = info.sync_state_set_epoch
        return info

    # -- role changes (ReplicasManager) ---------------------------------------------------

    def change_to_master(self, epoch: int, sync_state_set: frozenset[str]) -> None:
        """Serve as master of ``epoch`` (``EpochError`` if older than the recorded one)."""
        confirmed = self.confirm_offset
        self._end_term()
        if self.log.max_offset > 0 and self.epoch_file.cache.last is None:
            self.epoch_file.save(self.epoch_file.cache.append(epoch, 0))
        epochs = run_inline(roles.become_master(self.log, self.epoch_file, epoch, offload=inline))
        max_offset = self.log.max_offset
        term = Term("master", epoch, self.name, epochs)
        term.tracker = SyncStateTracker(
            master=self.name, sync_state_set=sync_state_set | {self.name},
            epoch_start_offset=epochs.last.start_offset,
            confirm_offset=min(confirmed, max_offset) if confirmed >= 0 else 0,
            started_ms=self.now_ms(),
            max_time_slave_not_catchup_ms=self.settings.ha_max_time_slave_not_catchup)
        term.puts = SyncReplication(
            all_ack_in_sync_state_set=self.settings.all_ack_in_sync_state_set)
        self.term = term
        term.tasks = [self.tasks.spawn(self._check_loop(term)),
                      self.tasks.spawn(self._report_loop(term))]
        self._took_role(term)

    def change_to_slave(self, master: str, epoch: int) -> None:
        """Follow ``master`` (of ``epoch``)."""
        self._end_term()
        epochs = run_inline(roles.become_slave(self.log, self.epoch_file, offload=inline))
        term = Term("slave", epoch, master, epochs)
        term.backoff = self.settings.reconnect_min
        self.term = term
        self._took_role(term)

    def _took_role(self, term: Term) -> None:
        if term.epoch < self.max_epoch_seen:
            self.sim.violation(f"broker {self.name} went back from epoch "
                               f"{self.max_epoch_seen} to {term.epoch}")
        self.max_epoch_seen = term.epoch
        self.sim.on_role(self, term)

    def _end_term(self) -> None:
        term, self.term = self.term, None
        if term is None:
            return
        for handle in term.tasks:
            self.tasks.cancel(handle)
        for stream, _ in term.conns.values():
            self.sim.network.close(stream)
        if term.stream is not None:
            self.sim.network.close(term.stream)
        for src, rid, _, _ in term.waiters.values():
            self._send(src, PutResponse(rid, ReplicationStatus.FLUSH_SLAVE_TIMEOUT))

    # -- the master (HAMaster) --------------------------------------------------------------

    def _view(self, term: Term) -> MasterLog:
        assert term.tracker is not None
        max_offset = self.log.max_offset
        return MasterLog(max_offset, 0, term.epochs, term.tracker.confirm_offset(max_offset))

    def _propose(self, term: Term, proposal: frozenset[str] | None) -> None:
        if proposal is not None and not term.fenced:
            term.reporting = True
            term.proposals.append(proposal)

    def _check_loop(self, term: Term) -> TaskGen:
        assert term.tracker is not None
        while not term.fenced:
            if not term.reporting:
                # A proposal whose outcome is unknown is asked again.
                self._propose(term, term.tracker.pending)
            self._propose(term, term.tracker.maybe_shrink(self.now_ms()))
            for address in sorted(term.tracker.slaves):
                self._propose(term, term.tracker.maybe_expand(address, self.log.max_offset))
            yield from self._sleep(self.settings.check_sync_state_set_period)

    def _report_loop(self, term: Term) -> TaskGen:
        assert term.tracker is not None
        while True:
            yield from wait_for(lambda: bool(term.proposals))
            proposal = term.proposals.popleft()
            try:
                current = yield from self._alter_sync_state_set(proposal)
            except MasterFenced:
                self._fence(term)
                return
            if current is not None:
                term.tracker.apply(current)
            term.reporting = False
            self._update_puts(term)

    def _fence(self, term: Term) -> None:
        """HAMaster.fence: fail pending puts and complete no more."""
        term.fenced = True
        for waiter, (src, rid, _, _) in list(term.waiters.items()):
            assert term.puts is not None
            term.puts.discard(waiter)
            del term.waiters[waiter]
            self._send(src, PutResponse(rid, ReplicationStatus.FLUSH_SLAVE_TIMEOUT))

    def _put(self, src: str, put: PutRequest) -> None:
        term = self.term
        if term is None or term.tracker is None or term.puts is None:
            self._send(src, PutResponse(put.id, None))
            return
        offset = self.log.max_offset
        record = message.encode(message.MessageRecord(
            topic="sim", body=put.body, physical_offset=offset, store_timestamp=self.sim.now))
        if self.sim.maybe_crash_writing(self, record):
            return
        self.log.append_raw(offset, record)
        if term.fenced:  # HAMaster.wait_replicated
            self._send(src, PutResponse(put.id, ReplicationStatus.FLUSH_SLAVE_TIMEOUT))
            return
        waiter = object()
        failed = term.puts.add(waiter, self.log.max_offset,
                               self.now_ms() + self.settings.put_timeout,
                               term.tracker.effective_sync_state_set)
        if failed is not None:
            self._send(src, PutResponse(put.id, failed.status))
            return
        term.waiters[waiter] = (src, put.id, offset, record)
        self._update_puts(term)

    def _update_puts(self, term: Term) -> None:
        if term.tracker is None or term.puts is None or self.term is not term or term.fenced:
            return
        members = term.tracker.effective_sync_state_set
        max_offset = self.log.max_offset
        acks = {m: term.tracker.ack_offset(m, max_offset) for m in members}
        results = term.puts.update(acks, members) + term.puts.expire(self.now_ms())
        for outcome in results:
            src, rid, offset, record = term.waiters.pop(outcome.waiter)
            if outcome.status is ReplicationStatus.PUT_OK:
                self.sim.on_acked(self, term, offset, record, members)
            self._send(src, PutResponse(rid, outcome.status))

    def _refuse_streams(self) -> None:
        term = self.term
        for stream in list(self.sim.network.streams.values()):
            if stream.server != self.name or stream.id in self.accepted:
                continue
            self.accepted.add(stream.id)
            if term is not None and term.tracker is not None:
                term.conns[stream.id] = (stream, MasterConnection(
                    now_ms=self.now_ms(), transfer_batch_size=self.settings.ha_transfer_batch_size,
                    heartbeat_interval_ms=self.settings.ha_send_heartbeat_interval))
            else:
                self.sim.network.close(stream)

    def _master_step(self, term: Term) -> None:
        tracker = term.tracker
        assert tracker is not None
        now = self.now_ms()
        for stream_id, (stream, conn) in list(term.conns.items()):
            try:
                if stream.closed:
                    raise HAProtocolError("stream closed", conn.peer)
                data = stream.receive(self.name, self.sim.now)
                outs = conn.receive_data(data, self._view(term), now) if data else []
                for out in outs:
                    if isinstance(out, Send):
                        stream.send(self.name, out.data, self.sim.now, self.sim.network.delay())
                    elif isinstance(out, SlaveJoined):
                        tracker.slave_connected(out.handshake.address,
                                                is_async_learner=out.handshake.is_async_learner,
                                                now_ms=now)
                    elif isinstance(out, SlaveAcked):
                        tracker.slave_acked(out.address, out.ack_offset,
                                            out.last_caught_up_time_ms)
                        self._propose(term, tracker.maybe_expand(out.address,
                                                                 self.log.max_offset))
                for _ in range(8):
                    plan = conn.poll_transfer(self._view(term), now)
                    if plan is None:
                        break
                    body = self.log.read(plan.offset, plan.max_size) if plan.max_size else b""
                    stream.send(self.name, conn.build_transfer(plan, body, now), self.sim.now,
                                self.sim.network.delay())
            except _HA_ERRORS:
                self.sim.network.close(stream)
                del term.conns[stream_id]
                if conn.slave is not None:
                    tracker.slave_disconnected(conn.slave.address)
        self._update_puts(term)

    # -- the slave (HASlave) ------------------------------------------------------------------

    def _slave_step(self, term: Term) -> None:
        now = self.now_ms()
        settings = self.settings
        if term.stream is not None and term.stream.closed:
            handshook = term.conn is not None and term.conn.max_offset >= 0
            term.stream, term.conn = None, None
            if handshook:
                term.backoff = settings.reconnect_min
            term.retry_at = now + term.backoff
            term.backoff = min(term.backoff * 2, settings.reconnect_max)
        if term.stream is None:
            if now < term.retry_at:
                return
            stream = self.sim.network.connect(self.name, term.master)
            if stream is None:
                term.retry_at = now + term.backoff
                term.backoff = min(term.backoff * 2, settings.reconnect_max)
                return
            term.stream = stream
            term.conn = SlaveConnection(address=self.name, now_ms=now,
                                        ack_interval_ms=settings.ha_send_heartbeat_interval)
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
            elif isinstance(action, SlaveSend):
                stream.send(self.name, action.data, self.sim.now, self.sim.network.delay())
        term.confirm_offset = conn.confirm_offset
        ack = conn.poll(now)
        if ack is not None:
            stream.send(self.name, ack, self.sim.now, self.sim.network.delay())


def _addresses(info: ReplicaInfo, broker_ids: Iterable[int]) -> frozenset[str]:
    """The addresses of ``broker_ids`` that ``info`` knows (controller_mode's helper)."""
    return frozenset(a for a in map(info.address_of, broker_ids) if a is not None)
