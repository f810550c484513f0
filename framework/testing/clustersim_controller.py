"""A simulated controller: the controller service's own core and applier, pumped by the simulation.

The rules of a controller are ``triomq.controller.core.service_core``'s
``ControllerCore`` and the application of Raft's output is
``triomq.consensus.core.applier.Applier``, the very objects the trio service
(``triomq.controller.service``) runs. This module is only their pump in
virtual time: Raft ticks at this host's (skewed) clock rate, its messages
and the controller's requests, replies and notifications are datagrams of
the simulation's network, and the core's timers fire on this host's clock.
Heartbeats are oneway here (their replies are not sent). A crash keeps only
the Raft disk; a restart rebuilds the state machine from the disk's snapshot
(``compact`` takes one) and the committed entries after it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from triomq.consensus.core.applier import Applier
from triomq.consensus.core.log import bootstrap_entries
from triomq.consensus.core.messages import DLedgerCode as RaftCode
from triomq.consensus.core.messages import Message
from triomq.consensus.core.raft import ProposalRejected, Raft, RaftSettings
from triomq.consensus.core.ready import Role
from triomq.controller import ReplicasInfoManager, decode_event, default_election_policy
from triomq.controller.core.config import ControllerConfig
from triomq.controller.core.election import ElectionPolicy
from triomq.controller.core.requests import BrokerHeartbeat, ControllerRequest, Payload, Reply
from triomq.controller.core.service_core import (
    Applied,
    ControllerCore,
    Elected,
    Leadership,
    LostLeadership,
    NotCommitted,
    Notify,
    Outcome,
    Propose,
    ReadBarrier,
)
from triomq.controller.core.state_machine import ReplicasStateMachine
from triomq.errors import PluginError
from triomq.testing.raftsim_parts import Disk

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation

#: The simulated controllers' log: silent unless the caller configures logging.
logger = logging.getLogger("triomq.testing.clustersim.controller")
logger.addHandler(logging.NullHandler())

#: Raft timing for the simulation: one tick per 10 ms step.
CONTROLLER_RAFT_CONFIG = RaftSettings(election_ticks=10, heartbeat_ticks=2, max_wait_ack_ticks=50)


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
    """A controller request: the value the controller's core reads, as a broker made it."""

    id: int
    request: ControllerRequest


@attrs.frozen
class Response:
    """A controller answer; ``leader`` is the hint a NOT_LEADER answer carries."""

    id: int
    code: int
    remark: str = ""
    payload: Payload | None = None
    leader: str | None = None


def controller_name(node_id: int) -> str:
    """The network name of controller ``node_id``."""
    return f"c{node_id}"


def _response(reply: Reply) -> Response:
    return Response(reply.request_id, reply.code, reply.remark, reply.payload,
                    reply.leader_address or None)


def _policy(name: str) -> ElectionPolicy:
    if name != "default":
        raise PluginError(f"the simulation knows no election policy {name!r}")
    return default_election_policy


class _WatchedMachine(ReplicasStateMachine):
    """The replicas-info state machine, showing each applied event to the invariants."""

    def __init__(self, controller: SimController) -> None:
        super().__init__()
        self.controller = controller

    def apply(self, index: int, data: bytes) -> bool:
        event = decode_event(data)
        before = self.manager.group(getattr(event, "broker_name", ""))
        changed = super().apply(index, data)
        self.controller.sim.on_applied(self.controller, index, event, before, changed)
        return changed


class SimController:
    """One controller host: its Raft disk survives crashes, everything else does not."""

    def __init__(self, node_id: int, voters: list[int], sim: Simulation, rng: random.Random,
                 settings: ControllerSettings) -> None:
        self.id = node_id
        self.name = controller_name(node_id)
        self.sim = sim
        self.rng = rng
        self.config = ControllerConfig(
            node_id=node_id, peers={i: f"sim://{controller_name(i)}" for i in voters},
            **attrs.asdict(settings))
        hard_state, entries = bootstrap_entries(voters)
        self.disk = Disk(hard_state, entries)
        self.rate = rng.choice([0.9, 1.0, 1.0, 1.1])  # clock skew: local time runs at this rate
        self.offset = rng.randint(0, 10_000)
        self.raft: Raft | None = None
        # A stall (a busy host, a GC pause): the process runs nothing until ``stalled_until``
        # while its socket buffers keep what arrives, handed over when it runs again.
        self.stalled_until = 0
        self._backlog: list[tuple[str, object]] = []
        self.start()

    # -- life ------------------------------------------------------------------

    def start(self) -> None:
        """Boot from the disk."""
        raft = self.raft = Raft(
            self.id, CONTROLLER_RAFT_CONFIG, hard_state=self.disk.hard_state,
            snapshot=self.disk.snapshot, entries=list(self.disk.entries),
            rng=random.Random(self.rng.getrandbits(64)))
        self.machine = _WatchedMachine(self)
        if self.disk.snapshot.index:
            self.machine.restore(self.disk.snapshot.data)
        self.applier = Applier(self.machine, raft.applied_index, on_proposal=self._proposed,
                               on_read=self._read, log=logger)
        self.core = ControllerCore(self.config, self.machine.manager, _policy, self.now_ms(),
                                   log=logger)
        self._callers: dict[int, str] = {}
        self.tick_debt = 0.0
        self.sim.network.down.discard(self.name)

    def crash(self) -> None:
        """Stop; only the Raft disk survives."""
        self.raft = None
        self._backlog.clear()
        self.stalled_until = 0
        self.sim.network.down.add(self.name)

    def stall(self, for_ms: int) -> None:
        """Run nothing for ``for_ms`` (no Raft ticks are made up afterwards, as a driver's
        timer fires once however late); what arrives meanwhile waits."""
        self.stalled_until = self.sim.now + for_ms

    @property
    def stalled(self) -> bool:
        """Whether stalled now."""
        return self.sim.now < self.stalled_until

    @property
    def up(self) -> bool:
        """Whether running."""
        return self.raft is not None

    @property
    def is_leader(self) -> bool:
        """Whether this is the active controller."""
        return self.raft is not None and self.raft.role is Role.LEADER

    @property
    def manager(self) -> ReplicasInfoManager:
        """The applied replicas-info state."""
        return self.machine.manager

    def now_ms(self) -> int:
        """This host's (skewed) clock."""
        return int(self.sim.now * self.rate) + self.offset

    # -- driving -----------------------------------------------------------------

    def step(self) -> None:
        """One simulation step: tick Raft at this host's rate, fire the core's due timers."""
        raft = self.raft
        if raft is None or self.stalled:
            return
        self.tick_debt += self.rate
        while self.tick_debt >= 1:
            self.tick_debt -= 1
            raft.tick()
        self._run()
        # After a stall the late timer fires before the waiting input is read: the worst
        # order for the brokers, whose heartbeats are in that input.
        if self.core.next_deadline() <= self.now_ms():
            self._feed(self.core.fire)
        backlog, self._backlog = self._backlog, []
        for src, payload in backlog:
            self.receive(src, payload)

    def receive(self, src: str, payload: object) -> None:
        """A datagram arrived."""
        raft = self.raft
        if raft is None:
            return
        if self.stalled:
            self._backlog.append((src, payload))
            return
        if isinstance(payload, RaftPacket):
            raft.step(payload.message)
            self._run()
        elif isinstance(payload, Request):
            request = payload.request
            if not isinstance(request, BrokerHeartbeat):  # oneway
                self._callers[payload.id] = src
            self._feed(lambda now: self.core.request(payload.id, request, now))

    def compact(self) -> None:
        """Snapshot the state machine into the Raft log (log compaction)."""
        raft = self.raft
        if raft is not None and raft.applied_index > raft.log.snapshot.index + 4:
            raft.compact(raft.applied_index, self.manager.snapshot())
            self._run()

    def _follow_raft(self) -> None:
        raft = self.raft
        assert raft is not None
        leader = raft.leader_id
        leadership = Leadership(raft.term, leader, controller_name(leader) if leader else "",
                                raft.role is Role.LEADER)
        if leadership != self.core.leadership:
            self.core.lead(leadership)

    def _feed(self, step: Callable[[int], None]) -> None:
        self._follow_raft()
        step(self.now_ms())
        self._run()

    def _settle(self, ticket: int, outcome: Outcome) -> None:
        self._follow_raft()
        self.core.settle(ticket, outcome, self.now_ms())

    def _run(self) -> None:
        """Carry out the core's outputs and Raft's Readys until neither has any."""
        raft = self.raft
        assert raft is not None
        while True:
            outputs = self.core.drain()
            if outputs:
                for output in outputs:
                    self._carry_out(output)
            elif raft.has_ready():
                ready = raft.ready()
                for write in ready.writes:
                    self.disk.apply(write)
                for message in ready.messages:
                    self._send(controller_name(message.dst), RaftPacket(message))
                self.applier.carry_out(ready)
            else:
                return

    def _carry_out(self, output: object) -> None:
        raft = self.raft
        assert raft is not None
        if isinstance(output, Reply):
            caller = self._callers.pop(output.request_id, None)
            if caller is not None:
                self._send(caller, _response(output))
        elif isinstance(output, Propose):
            try:
                index = raft.propose(output.data)
            except ProposalRejected as exc:
                self._settle(output.ticket, _refused(exc))
            else:
                self.applier.expect(index, raft.term, output.ticket)
        elif isinstance(output, ReadBarrier):
            context = b"barrier-%d" % output.ticket
            try:
                raft.read_index(context)
            except ProposalRejected as exc:
                self._settle(output.ticket, _refused(exc))
            else:
                self.applier.expect_read(context, output.ticket)
        elif isinstance(output, Notify):
            self._send(output.address, output)
        elif isinstance(output, Elected):
            self.sim.on_election(self, output)

    def _proposed(self, ticket: int, result: Any, error: BaseException | None) -> None:
        self._settle(ticket, Applied(result) if error is None else NotCommitted(str(error)))

    def _read(self, ticket: int, confirmed: bool) -> None:
        self._settle(ticket, Applied() if confirmed else LostLeadership())

    def _send(self, dst: str, payload: object) -> None:
        self.sim.network.send(self.name, dst, payload, self.sim.now)


def _refused(exc: ProposalRejected) -> Outcome:
    return LostLeadership() if exc.code is RaftCode.NOT_LEADER else NotCommitted(str(exc))


__all__ = [
    "CONTROLLER_RAFT_CONFIG",
    "ControllerSettings",
    "RaftPacket",
    "Request",
    "Response",
    "SimController",
    "controller_name",
]
