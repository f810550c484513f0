"""A simulated controller: Raft plus the replicas-info state machine, served like the real one.

It mirrors ``plugins/controller_dledger/service.py`` step for step, with
generator tasks (``clustersim_net.Tasks``) in place of trio: only the Raft
leader takes requests (others answer CONTROLLER_NOT_LEADER with the
leader's name); state-changing requests are handled one at a time behind a
read barrier taken once per leader term; their events are proposed one by
one and the answer goes out once each is applied here (an event that no
longer applies is answered CONTROLLER_INVALID_REQUEST). Every controller
records heartbeats; the leader scans for silent brokers and elects, then
notifies the group's brokers. A crash keeps only the Raft disk; a restart
rebuilds the state machine from the disk's snapshot (``compact`` takes one
with ``ReplicasInfoManager.snapshot``) and the committed entries after it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from framework.consensus.log import EntryKind, bootstrap_entries
from framework.consensus.messages import Message
from framework.consensus.messages import ResponseCode as RaftCode
from framework.consensus.raft import ProposalRejected, Raft, RaftConfig
from framework.consensus.ready import Role
from framework.controller import (
    ControllerResult,
    ReplicasInfoManager,
    ResponseCode,
    decode_event,
    encode_event,
)
from framework.controller.heartbeat import BrokerHeartbeatTable
from framework.controller.wire import ReplicaInfo
from framework.testing.clustersim_net import TaskGen, Tasks, wait_for
from framework.testing.raftsim_parts import Disk

if TYPE_CHECKING:
    from framework.testing.clustersim import Simulation

Code = ResponseCode

#: Raft timing for the simulation: one tick per 10 ms step.
CONTROLLER_RAFT_CONFIG = RaftConfig(election_ticks=10, heartbeat_ticks=2, max_wait_ack_ticks=50)


@attrs.frozen
class ControllerSettings:
    """The controller's timing and election knobs (ms; ``ControllerConfig``'s names)."""

    scan_not_active_broker_interval: int = 100
    broker_not_active_timeout: int = 500
    request_timeout: int = 1000
    enable_elect_unclean_master: bool = False


@attrs.frozen
class RaftPacket:
    """A Raft message between controllers."""

    message: Message


@attrs.frozen
class Request:
    """A controller request (``kind`` is the request's name, ``args`` its header)."""

    id: int
    kind: str
    args: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen
class Response:
    """A controller answer; ``leader`` is the hint a NOT_LEADER answer carries."""

    id: int
    code: int
    remark: str = ""
    payload: Any = None
    leader: str | None = None


@attrs.frozen
class Notify:
    """NOTIFY_BROKER_ROLE_CHANGED (oneway)."""

    info: ReplicaInfo


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.remark)
        self.response = response


def controller_name(node_id: int) -> str:
    """The network name of controller ``node_id``."""
    return f"c{node_id}"


class SimController:
    """One controller host: its Raft disk survives crashes, everything else does not."""

    def __init__(self, node_id: int, voters: list[int], sim: Simulation, rng: random.Random,
                 settings: ControllerSettings) -> None:
        self.id = node_id
        self.name = controller_name(node_id)
        self.sim = sim
        self.rng = rng
        self.settings = settings
        hard_state, entries = bootstrap_entries(voters)
        self.disk = Disk(hard_state, entries)
        self.rate = rng.choice([0.9, 1.0, 1.0, 1.1])  # clock skew: local time runs at this rate
        self.offset = rng.randint(0, 10_000)
        self.raft: Raft | None = None
        #: Elections this controller committed (service.elections).
        self.elections = 0
        self.start()

    # -- life ------------------------------------------------------------------

    def start(self) -> None:
        """Boot from the disk."""
        self.raft = Raft(self.id, CONTROLLER_RAFT_CONFIG, hard_state=self.disk.hard_state,
                         snapshot=self.disk.snapshot, entries=list(self.disk.entries),
                         rng=random.Random(self.rng.getrandbits(64)))
        self.manager = ReplicasInfoManager()
        if self.disk.snapshot.index:
            self.manager.restore(self.disk.snapshot.data)
        self.heartbeats = BrokerHeartbeatTable()
        self.tasks = Tasks()
        self.applied: dict[int, tuple[int, bool]] = {}  # index -> (term, changed)
        self.results: dict[int, tuple[int, RaftCode]] = {}
        self.reads: dict[bytes, tuple[int, RaftCode]] = {}
        self.busy = False
        self.caught_up_term = -1
        self.tick_debt = 0.0
        self.tasks.spawn(self._scan_loop())
        self.sim.network.down.discard(self.name)

    def crash(self) -> None:
        """Stop; only the Raft disk survives."""
        self.raft = None
        self.tasks.clear()
        self.sim.network.down.add(self.name)

    @property
    def up(self) -> bool:
        """Whether running."""
        return self.raft is not None

    @property
    def is_leader(self) -> bool:
        """Whether this is the active controller."""
        return self.raft is not None and self.raft.role is Role.LEADER

    def now_ms(self) -> int:
        """This host's (skewed) clock."""
        return int(self.sim.now * self.rate) + self.offset

    # -- driving -----------------------------------------------------------------

    def step(self) -> None:
        """One simulation step: tick Raft at this host's rate, run tasks, process output."""
        raft = self.raft
        if raft is None:
            return
        self.tick_debt += self.rate
        while self.tick_debt >= 1:
            self.tick_debt -= 1
            raft.tick()
        self.process()
        self.tasks.run()
        self.process()

    def receive(self, src: str, payload: object) -> None:
        """A datagram arrived."""
        raft = self.raft
        if raft is None:
            return
        if isinstance(payload, RaftPacket):
            raft.step(payload.message)
            self.process()
        elif isinstance(payload, Request):
            if payload.kind == "heartbeat":
                self._heartbeat(payload.args)
            else:
                self.tasks.spawn(self._serve(src, payload))
                self.tasks.run()
                self.process()

    def process(self) -> None:
        """Carry out the Raft node's Ready: persist, send, apply, record results."""
        raft = self.raft
        if raft is None or not raft.has_ready():
            return
        ready = raft.ready()
        for write in ready.writes:
            self.disk.apply(write)
        if ready.snapshot is not None:  # installed from the leader
            self.manager.restore(ready.snapshot.data)
        for message in ready.messages:
            self.sim.network.send(self.name, controller_name(message.dst), RaftPacket(message),
                                  self.sim.now)
        for entry in ready.committed_entries:
            changed = False
            if entry.kind is EntryKind.NORMAL and entry.data:
                event = decode_event(entry.data)
                before = self.manager.group(getattr(event, "broker_name", ""))
                changed = self.manager.apply(event)
                self.sim.on_applied(self, entry.index, event, before, changed)
            self.applied[entry.index] = (entry.term, changed)
        for result in ready.results:
            self.results[result.index] = (result.term, result.code)
        for state in ready.read_states:
            self.reads[state.context] = (state.index, state.code)

    def compact(self) -> None:
        """Snapshot the state machine into the Raft log (log compaction)."""
        raft = self.raft
        if raft is not None and raft.applied_index > raft.log.snapshot.index + 4:
            raft.compact(raft.applied_index, self.manager.snapshot())
            self.process()

    def _send(self, dst: str, payload: object) -> None:
        self.sim.network.send(self.name, dst, payload, self.sim.now)

    # -- requests ------------------------------------------------------------------

    def not_leader(self, request_id: int) -> Response:
        """CONTROLLER_NOT_LEADER naming the leader this controller knows of."""
        leader = self.raft.leader_id if self.raft is not None else 0
        return Response(request_id, Code.CONTROLLER_NOT_LEADER, f"{self.name} is not the leader",
                        leader=controller_name(leader) if leader else None)

    def _heartbeat(self, args: dict[str, Any]) -> None:
        cluster, name, broker_id = args["cluster_name"], args["broker_name"], args["broker_id"]
        if not self.manager.check_heartbeat(cluster, name, broker_id).ok:
            return
        self.heartbeats.heartbeat(
            self.now_ms(), cluster, name, broker_id, args["address"], epoch=args["epoch"],
            max_offset=args["max_offset"], confirm_offset=args["confirm_offset"],
            election_priority=0)

    def _live_info(self, cluster: str, name: str) -> Any:
        return self.heartbeats.live_info(self.now_ms(), self.settings.broker_not_active_timeout,
                                         cluster, name)

    def _serve(self, src: str, request: Request) -> TaskGen:
        rid, args = request.id, request.args
        try:
            response = yield from self._handle(request.kind, rid, args)
        except _Refused as refused:
            response = refused.response
        self._send(src, response)

    def _handle(self, kind: str, rid: int, args: dict[str, Any]) -> TaskGen:
        cluster, name = args.get("cluster_name", ""), args.get("broker_name", "")
        if kind == "get_next_broker_id":
            yield from self._barrier(rid, every_time=True)
            result = self.manager.get_next_broker_id(cluster, name)
            payload = result.payload.next_broker_id if result.ok else None
            return Response(rid, result.code, result.remark, payload)
        if kind == "get_replica_info":
            yield from self._barrier(rid, every_time=True)
            group = self.manager.group(name)
            if group is None:
                return Response(rid, Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, "no group")
            return Response(rid, Code.SUCCESS, payload=ReplicaInfo.of_group(group))
        if kind == "elect_master":
            result, info = yield from self.elect(name, rid, broker_id=args.get("broker_id"),
                                                 designate=args.get("designate", False))
            return Response(rid, result.code, result.remark, info)
        if kind == "apply_broker_id":
            result = yield from self._write(rid, lambda: self.manager.apply_broker_id(
                cluster, name, args["broker_id"], args["address"], args["check_code"]))
            return Response(rid, result.code, result.remark)
        if kind == "register_broker":
            result = yield from self._write(rid, lambda: self.manager.register_broker(
                cluster, name, args["broker_id"], args["address"], self._live_info(cluster, name)))
            if not result.ok:
                return Response(rid, result.code, result.remark)
            self.heartbeats.heartbeat(self.now_ms(), cluster, name, args["broker_id"],
                                      args["address"])
            p = result.payload
            group = self.manager.group(name)
            info = ReplicaInfo(name, p.master_broker_id, p.master_address, p.master_epoch,
                               p.sync_state_set, p.sync_state_set_epoch,
                               tuple(sorted(group.addresses.items())) if group else ())
            return Response(rid, Code.SUCCESS, payload=info)
        if kind == "alter_sync_state_set":
            group = self.manager.group(name)
            cluster = group.cluster_name if group is not None else ""
            result = yield from self._write(rid, lambda: self.manager.alter_sync_state_set(
                name, args["master_broker_id"], args["master_epoch"], args["sync_state_set"],
                args["sync_state_set_epoch"], self._live_info(cluster, name)))
            if not result.ok:
                return Response(rid, result.code, result.remark)
            p = result.payload
            return Response(rid, Code.SUCCESS, payload=(p.sync_state_set, p.sync_state_set_epoch))
        return Response(rid, Code.CONTROLLER_INVALID_REQUEST, f"unknown request {kind}")

    def _lock(self) -> TaskGen:
        yield from wait_for(lambda: not self.busy)
        self.busy = True

    def _write(self, rid: int, compute: Callable[[], ControllerResult]) -> TaskGen:
        yield from self._lock()
        try:
            yield from self._barrier(rid)
            result = compute()
            yield from self._commit(rid, result)
        finally:
            self.busy = False
        return result

    def _deadline(self) -> Callable[[], bool]:
        end = self.now_ms() + self.settings.request_timeout
        return lambda: self.now_ms() >= end

    def _barrier(self, rid: int, every_time: bool = False) -> TaskGen:
        """Refuse unless leader; make the applied state current (once per term, or always)."""
        raft = self.raft
        if raft is None or not self.is_leader:
            raise _Refused(self.not_leader(rid))
        term = raft.term
        if not every_time and term == self.caught_up_term:
            return
        context = b"barrier-%d-%d" % (rid, self.sim.now)
        try:
            raft.read_index(context)
        except ProposalRejected:
            raise _Refused(self.not_leader(rid)) from None
        late = self._deadline()
        yield from wait_for(lambda: context in self.reads or late())
        state = self.reads.pop(context, None)
        if state is None:
            raise _Refused(Response(rid, Code.CONTROLLER_JRAFT_INTERNAL_ERROR, "barrier timeout"))
        index, code = state
        if code is not RaftCode.SUCCESS:
            raise _Refused(self.not_leader(rid))
        yield from wait_for(lambda: raft.applied_index >= index or late())
        if raft.applied_index < index:
            raise _Refused(Response(rid, Code.CONTROLLER_JRAFT_INTERNAL_ERROR, "barrier timeout"))
        if not every_time:
            self.caught_up_term = term

    def _commit(self, rid: int, result: ControllerResult) -> TaskGen:
        """Propose ``result``'s events in order and wait until each is applied here."""
        raft = self.raft
        assert raft is not None
        for event in result.events:
            try:
                index = raft.propose(encode_event(event))
            except ProposalRejected:
                raise _Refused(self.not_leader(rid)) from None
            term = raft.term
            late = self._deadline()
            yield from wait_for(lambda i=index, t=term, d=late: self.applied.get(i, (0,))[0] == t
                                or self._failed(i, t) or d())
            applied = self.applied.get(index)
            if applied is None or applied[0] != term:
                raise _Refused(Response(rid, Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                        f"{type(event).__name__} not committed"))
            if not applied[1]:
                raise _Refused(Response(rid, Code.CONTROLLER_INVALID_REQUEST,
                                        f"{type(event).__name__} no longer applied; retry"))

    def _failed(self, index: int, term: int) -> bool:
        result = self.results.get(index)
        return result is not None and result[0] == term and result[1] is not RaftCode.SUCCESS

    # -- elections -------------------------------------------------------------------

    def elect(self, name: str, rid: int = 0, *, broker_id: int | None = None,
              designate: bool = False) -> TaskGen:
        """One election for a group: validate, commit, notify (service.elect)."""
        yield from self._lock()
        try:
            yield from self._barrier(rid)
            result = self.manager.elect_master(
                name, self._group_live_info(name), broker_id=broker_id, designate=designate,
                enable_elect_unclean_master=self.settings.enable_elect_unclean_master)
            yield from self._commit(rid, result)
        finally:
            self.busy = False
        group = self.manager.group(name)
        if group is None:
            return result, None
        loss = result.payload is not None and result.payload.possible_message_loss
        info = ReplicaInfo.of_group(group, possible_message_loss=loss)
        if result.events:
            self.elections += 1
            self.sim.on_election(self, result, info)
            for _, address in info.replicas:
                self._send(address, Notify(info))
        return result, info

    def _group_live_info(self, name: str) -> Any:
        group = self.manager.group(name)
        return self._live_info(group.cluster_name if group is not None else "", name)

    def _scan_loop(self) -> TaskGen:
        leader_term = -1
        while True:
            wake = self.now_ms() + self.settings.scan_not_active_broker_interval
            yield from wait_for(lambda w=wake: self.now_ms() >= w)
            raft = self.raft
            if raft is None or not self.is_leader:
                continue
            if raft.term != leader_term:
                leader_term = raft.term
                self.heartbeats.expect_masters(self.now_ms(), self.manager.groups.values())
            yield from self._scan()

    def _scan(self) -> TaskGen:
        timeout = self.settings.broker_not_active_timeout
        self.heartbeats.scan(self.now_ms(), timeout)
        for name, group in sorted(self.manager.groups.items()):
            master = group.master_broker_id
            gone = master is not None and not self.heartbeats.is_active(
                self.now_ms(), timeout, group.cluster_name, name, master)
            if gone or (master is None and group.master_epoch > 0):
                with contextlib.suppress(_Refused):
                    yield from self.elect(name)


__all__ = [
    "CONTROLLER_RAFT_CONFIG",
    "ControllerSettings",
    "Notify",
    "RaftPacket",
    "Request",
    "Response",
    "SimController",
    "controller_name",
]
