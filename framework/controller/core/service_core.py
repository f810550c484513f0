"""The controller service's rules, as one pure object that its pumps run.

A controller runs one Raft member whose state machine is the replicas-info
manager; the Raft leader is the *active* controller. ``ControllerCore``
decides everything the service does; a pump (the trio service in
``plugins/controller_dledger``, or the cluster simulation) feeds it and
carries out what it asks:

- inputs: ``request(request_id, request, now)`` (``requests``' values),
  ``lead(Leadership)`` whenever the Raft view changes, ``settle(ticket,
  outcome, now)`` once a Raft operation it asked for ends, and
  ``fire(now)`` once ``next_deadline()`` is reached;
- outputs, drained with ``drain()``: ``Reply`` to send back, ``Propose``
  (an encoded event for Raft) and ``ReadBarrier`` (a read index) to start,
  ``Notify`` to send to a broker, ``Elected`` to report.

Its time is the ``now`` it is handed (ms of a monotonic clock); it never
reads a clock, imports trio or does I/O.

The rules: only the leader serves requests (others answer
CONTROLLER_NOT_LEADER naming the leader they know), except heartbeats,
metadata and configuration, which every controller answers. A
state-changing request waits for its turn (one at a time), then for a read
barrier once per leader term, so it sees every earlier one's effects; its
events are proposed one by one, and it is answered once each is applied
here (CONTROLLER_INVALID_REQUEST when one no longer applied: the state
changed meanwhile). Reads take a barrier every time. A request not done
within ``request_timeout`` is answered CONTROLLER_JRAFT_INTERNAL_ERROR.
Every controller records heartbeats, so a new leader knows who is alive;
the leader scans every ``scan_not_active_broker_interval``, drops silent
brokers and elects for each group whose master is gone (or that has
none), one group at a time, then notifies the group's brokers. Silence
is counted in the time the controller ran: an input later than
``next_deadline()`` (at most one scan interval after the one before) is a
stall of its own, left out of every broker's silence, and a new leader
gives every active broker a whole timeout.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from triomq.controller.core.codes import ResponseCode
from triomq.controller.core.config import ControllerConfig, to_properties, with_property_name
from triomq.controller.core.election import ElectionPolicy, LiveInfoLookup
from triomq.controller.core.events import Event, encode_event
from triomq.controller.core.group import BrokerGroup
from triomq.controller.core.heartbeat import BrokerHeartbeatTable
from triomq.controller.core.replicas_info import ReplicasInfoManager
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    CleanBrokerData,
    ConfigValues,
    ControllerRequest,
    ElectAnswer,
    ElectMaster,
    GetControllerConfig,
    GetMetadata,
    GetNextBrokerId,
    GetReplicaInfo,
    GetSyncStateData,
    Malformed,
    NextBrokerId,
    Payload,
    RegisterBroker,
    Reply,
    SyncStateSet,
    SyncStateTable,
    UpdateControllerConfig,
)
from triomq.controller.core.results import ControllerResult
from triomq.controller.core.wire import ControllerMetadata, ReplicaInfo
from triomq.errors import ConfigError, PluginError
from triomq.settings import from_mapping

__all__ = [
    "MUTABLE_KEYS",
    "Applied",
    "ControllerCore",
    "Elected",
    "Leadership",
    "LostLeadership",
    "NotCommitted",
    "Notify",
    "Outcome",
    "Output",
    "Propose",
    "ReadBarrier",
]

logger = logging.getLogger("triomq.controller")

Code = ResponseCode

#: Keys UPDATE_CONTROLLER_CONFIG may change at run time (on one controller).
MUTABLE_KEYS = frozenset({
    "scan_not_active_broker_interval", "broker_not_active_timeout",
    "enable_elect_unclean_master", "election_policy", "notify_broker_role_changed",
    "request_timeout",
})


# -- outputs ----------------------------------------------------------------------


@attrs.frozen
class Propose:
    """Propose ``data`` (one encoded event) to Raft; settle ``ticket`` once applied here."""

    ticket: int
    data: bytes


@attrs.frozen
class ReadBarrier:
    """Take a Raft read index; settle ``ticket`` once this node has applied up to it."""

    ticket: int


@attrs.frozen
class Notify:
    """Send NOTIFY_BROKER_ROLE_CHANGED (oneway) with ``info`` to the broker at ``address``."""

    address: str
    info: ReplicaInfo


@attrs.frozen
class Elected:
    """This controller committed an election: its result code and the group after it."""

    code: int
    remark: str
    info: ReplicaInfo


Output = Reply | Propose | ReadBarrier | Notify | Elected


# -- inputs -----------------------------------------------------------------------


@attrs.frozen
class Leadership:
    """The Raft view: term, the leader known (0: none) and its address, this node's role."""

    term: int = 0
    leader_id: int = 0
    leader_address: str = ""
    is_leader: bool = False


@attrs.frozen
class Applied:
    """A proposal applied here (``result``: whether it changed the state), or a barrier passed."""

    result: Any = None


@attrs.frozen
class LostLeadership:
    """The operation failed because this node is not (or no longer) the leader."""


@attrs.frozen
class NotCommitted:
    """The proposal failed in Raft (``message`` says how); it may still commit later."""

    message: str


Outcome = Applied | LostLeadership | NotCommitted


# -- requests in progress ---------------------------------------------------------


@attrs.define(eq=False)
class _Work:
    """A request being served: waiting its turn, at its barrier, or committing."""

    #: ``None`` for the scan's own elections, which answer nobody.
    request_id: int | None
    request: ControllerRequest
    #: A state change: one at a time, barrier once per leader term.
    serialized: bool
    result: ControllerResult | None = None
    #: The events still to commit; the first is in Raft while ``ticket`` is.
    events: deque[Event] = attrs.Factory(deque)
    ticket: int = 0
    deadline: int = 0
    #: The term whose barrier is awaited (-1: a read's barrier, taken every time).
    barrier_term: int = -1


#: The ELECT_MASTER codes answered with the group (a broker follows the master named).
_ELECT_ANSWERS = frozenset({Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST})

_WRITES = (ApplyBrokerId, RegisterBroker, AlterSyncStateSet, ElectMaster, CleanBrokerData)
_READS = (GetNextBrokerId, GetReplicaInfo, GetSyncStateData)


class ControllerCore:
    """One controller's service rules (see the module docstring).

    ``manager`` is the applied replicas-info state (the pump applies
    committed entries to it); ``policies`` resolves an election policy by
    name (``PluginError`` for an unknown one). Elections, inactive brokers
    and configuration changes are logged to ``log``.
    """

    def __init__(self, config: ControllerConfig, manager: ReplicasInfoManager,
                 policies: Callable[[str], ElectionPolicy], now: int, *,
                 log: logging.Logger = logger) -> None:
        self.config = config
        self._log = log
        self.manager = manager
        self._policies = policies
        self.policy: ElectionPolicy = policies(config.election_policy)
        self.heartbeats = BrokerHeartbeatTable()
        self.leadership = Leadership()
        #: Elections committed by this controller.
        self.elections = 0
        self.now = now
        self._outputs: list[Output] = []
        self._tickets = itertools.count(1)
        self._waiting: dict[int, _Work] = {}
        self._turns: deque[_Work] = deque()
        self._writing: _Work | None = None
        self._starting = False
        self._caught_up_term = -1
        self._scan_at: int | None = now + config.scan_not_active_broker_interval
        self._scan_term = -1
        self._scan_rest: list[tuple[str, BrokerGroup]] = []

    # -- inputs -------------------------------------------------------------------

    def lead(self, leadership: Leadership) -> None:
        """The Raft view changed; a new leader gives every active broker a whole timeout
        (its Raft may have been stalled, its records kept while it followed)."""
        before = self.leadership
        if leadership.is_leader and not (before.is_leader and before.term == leadership.term):
            self.heartbeats.restart(self.now, self.config.broker_not_active_timeout)
        self.leadership = leadership

    def request(self, request_id: int, request: ControllerRequest, now: int) -> None:
        """A request arrived; its ``Reply`` comes out of ``drain`` now or later."""
        self._advance(now)
        if isinstance(request, _WRITES):
            refusal = self._check_elect(request) if isinstance(request, ElectMaster) else None
            if refusal is not None:
                self._outputs.append(Reply(request_id, Code.CONTROLLER_INVALID_REQUEST,
                                           refusal))
                return
            self._turns.append(_Work(request_id, request, serialized=True))
            self._next_turn()
        elif isinstance(request, _READS):
            self._begin(_Work(request_id, request, serialized=False))
        else:
            self._outputs.append(self._answer_at_once(request_id, request))

    def settle(self, ticket: int, outcome: Outcome, now: int) -> None:
        """The Raft operation ``ticket`` ended (one already timed out is ignored)."""
        self._advance(now)
        work = self._waiting.pop(ticket, None)
        if work is None:
            return
        if isinstance(outcome, LostLeadership):
            self._finish(work, self._not_leader(work.request_id), refused=True)
        elif work.result is None:
            self._barrier_settled(work, outcome)
        else:
            self._commit_settled(work, outcome)

    def fire(self, now: int) -> None:
        """Time passed: expire requests past their deadline, run a due scan."""
        self._advance(now)
        for ticket, work in list(self._waiting.items()):
            if work.deadline <= now and self._waiting.pop(ticket, None) is work:
                remark = ("the read barrier timed out" if work.result is None
                          else "not committed in time; it may still take effect")
                self._finish(work, self._reply(work, Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                               remark), refused=True)
        if self._scan_at is not None and now >= self._scan_at:
            self._scan()

    def _advance(self, now: int) -> None:
        """Take ``now`` as the time. An input later than ``next_deadline`` (as of the one
        before) means this controller did not run when it asked to (a blocked loop, a GC
        pause, a starved host) while heartbeats waited unread in its sockets: that time is
        left out of the brokers' silence, as lease-based systems restart their lease
        timers after a pause."""
        unseen = now - max(self.next_deadline(), self.now)
        self.now = now
        if unseen <= 0:
            return
        self.heartbeats.pause(now, unseen)
        # Said only when it would have cost a failover, or a scan; short ones are common.
        if unseen >= self.config.scan_not_active_broker_interval:
            self._log.log(
                logging.WARNING if unseen >= self.config.broker_not_active_timeout
                else logging.INFO,
                "controller %s did not run for %d ms (a stall of its own: a busy host, a "
                "pause): not counted as the brokers' silence", self.config.node_id, unseen)

    # -- outputs ------------------------------------------------------------------

    def drain(self) -> list[Output]:
        """What to do, in order, since the last call."""
        outputs, self._outputs = self._outputs, []
        return outputs

    def next_deadline(self) -> int:
        """When ``fire`` is next due: at the latest one scan interval after the last input,
        so that a later input is a stall (``_advance``)."""
        deadlines = [work.deadline for work in self._waiting.values()]
        deadlines.append(self.now + self.config.scan_not_active_broker_interval)
        if self._scan_at is not None:
            deadlines.append(self._scan_at)
        return min(deadlines)

    # -- views --------------------------------------------------------------------

    def live_info(self, cluster_name: str, broker_name: str) -> LiveInfoLookup:
        """The heartbeats of one group as the election policy sees them now."""
        return self.heartbeats.live_info(self.now, self.config.broker_not_active_timeout,
                                         cluster_name, broker_name)

    def _group_live_info(self, broker_name: str) -> LiveInfoLookup:
        group = self.manager.group(broker_name)
        return self.live_info(group.cluster_name if group is not None else "", broker_name)

    def metadata(self) -> ControllerMetadata:
        """This controller's Raft view, as GET_METADATA_INFO answers it."""
        lead, config = self.leadership, self.config
        return ControllerMetadata(
            group=config.group,
            leader_id=str(lead.leader_id) if lead.leader_id else None,
            leader_address=lead.leader_address if lead.leader_id else None,
            is_leader=lead.is_leader,
            peers=tuple((str(k), v) for k, v in sorted(config.peers.items())),
        )

    # -- answers ------------------------------------------------------------------

    @staticmethod
    def _reply(work: _Work, code: int, remark: str = "", payload: Payload | None = None
               ) -> Reply:
        return Reply(work.request_id or 0, code, remark, payload)

    def _not_leader(self, request_id: int | None) -> Reply:
        lead = self.leadership
        where = f"{lead.leader_id} at {lead.leader_address}" if lead.leader_id else "unknown"
        return Reply(request_id or 0, Code.CONTROLLER_NOT_LEADER,
                     f"controller {self.config.node_id} is not the leader; the leader is {where}",
                     leader_id=lead.leader_id, leader_address=lead.leader_address)

    def _check_elect(self, request: ElectMaster) -> str | None:
        group = self.manager.group(request.broker_name)
        if group is not None and group.cluster_name != request.cluster_name:
            return (f"broker group {request.broker_name!r} belongs to cluster "
                    f"{group.cluster_name!r}, not {request.cluster_name!r}")
        return None

    def _answer_at_once(self, request_id: int, request: ControllerRequest) -> Reply:
        if isinstance(request, Malformed):
            return Reply(request_id, request.code, request.reason)
        if isinstance(request, BrokerHeartbeat):
            return self._heartbeat(request_id, request)
        if isinstance(request, GetMetadata):
            return Reply(request_id, Code.SUCCESS, payload=self.metadata())
        if isinstance(request, GetControllerConfig):
            values = attrs.asdict(self.config)
            del values["raft"]  # a table: no property holds it
            return Reply(request_id, Code.SUCCESS, payload=ConfigValues(to_properties(values)))
        assert isinstance(request, UpdateControllerConfig)
        return self._update_config(request_id, dict(request.values))

    def _heartbeat(self, request_id: int, beat: BrokerHeartbeat) -> Reply:
        result = self.manager.check_heartbeat(beat.cluster_name, beat.broker_name, beat.broker_id)
        if result.ok:
            self.heartbeats.heartbeat(
                self.now, beat.cluster_name, beat.broker_name, beat.broker_id,
                beat.broker_address, epoch=beat.epoch, max_offset=beat.max_offset,
                confirm_offset=beat.confirm_offset, election_priority=beat.election_priority,
                heartbeat_timeout_ms=beat.heartbeat_timeout_ms)
        return Reply(request_id, result.code, result.remark)

    def _update_config(self, request_id: int, values: dict[str, Any]) -> Reply:
        fixed = sorted(set(values) - MUTABLE_KEYS)
        if fixed:
            # Named both ways: mqadmin's users know the property names.
            return Reply(request_id, Code.CONTROLLER_INVALID_REQUEST,
                         f"keys {', '.join(map(with_property_name, fixed))} cannot change at "
                         "run time; mutable keys: "
                         f"{', '.join(map(with_property_name, sorted(MUTABLE_KEYS)))}")
        current = {f.name: getattr(self.config, f.name) for f in attrs.fields(ControllerConfig)}
        try:
            config = from_mapping(ControllerConfig, {**current, **values}, "controller")
            policy = self._policies(config.election_policy)
        except (ConfigError, PluginError) as exc:
            return Reply(request_id, Code.CONTROLLER_INVALID_REQUEST, str(exc))
        self.config, self.policy = config, policy
        self._log.info("controller %s: configuration updated: %s", config.node_id, values)
        return Reply(request_id, Code.SUCCESS)

    # -- serving: turn, barrier, commit -------------------------------------------

    def _next_turn(self) -> None:
        # A finished request starts the next one, which may finish at once and
        # start the next: one loop, not a recursion per queued request.
        if self._starting:
            return
        self._starting = True
        try:
            while self._writing is None and self._turns:
                self._writing = self._turns.popleft()
                self._begin(self._writing)
        finally:
            self._starting = False

    def _begin(self, work: _Work) -> None:
        lead = self.leadership
        if not lead.is_leader:
            self._finish(work, self._not_leader(work.request_id), refused=True)
        elif not work.serialized or lead.term != self._caught_up_term:
            work.barrier_term = lead.term if work.serialized else -1
            self._await(work, ReadBarrier(self._ticket(work)))
        else:
            self._serve(work)

    def _ticket(self, work: _Work) -> int:
        work.ticket = next(self._tickets)
        return work.ticket

    def _await(self, work: _Work, operation: Propose | ReadBarrier) -> None:
        work.deadline = self.now + self.config.request_timeout
        self._waiting[work.ticket] = work
        self._outputs.append(operation)

    def _barrier_settled(self, work: _Work, outcome: Outcome) -> None:
        if isinstance(outcome, NotCommitted):
            self._finish(work, self._reply(work, Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                           f"the read barrier failed: {outcome.message}"),
                         refused=True)
            return
        if work.barrier_term >= 0:
            self._caught_up_term = work.barrier_term
        self._serve(work)

    def _serve(self, work: _Work) -> None:
        """Past the barrier: answer a read, or validate a write and commit its events."""
        request, manager = work.request, self.manager
        if isinstance(request, GetNextBrokerId):
            result = manager.get_next_broker_id(request.cluster_name, request.broker_name)
            payload = NextBrokerId(result.payload.next_broker_id) if result.ok else None
            self._finish(work, self._reply(work, result.code, result.remark, payload))
        elif isinstance(request, GetReplicaInfo):
            group = manager.group(request.broker_name)
            if group is None:
                self._finish(work, self._reply(
                    work, Code.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                    f"broker group {request.broker_name!r} is not registered"))
            else:
                self._finish(work, self._reply(work, Code.SUCCESS,
                                               payload=ReplicaInfo.of_group(group)))
        elif isinstance(request, GetSyncStateData):
            result = manager.get_sync_state_data(request.broker_names, self.live_info)
            self._finish(work, self._reply(work, Code.SUCCESS,
                                           payload=SyncStateTable(result.payload or ())))
        else:
            work.result = self._validate(request)
            work.events.extend(work.result.events)
            self._commit_next(work)

    def _validate(self, request: ControllerRequest) -> ControllerResult:
        manager = self.manager
        if isinstance(request, ApplyBrokerId):
            return manager.apply_broker_id(request.cluster_name, request.broker_name,
                                           request.broker_id, request.broker_address,
                                           request.check_code)
        if isinstance(request, RegisterBroker):
            return manager.register_broker(
                request.cluster_name, request.broker_name, request.broker_id,
                request.broker_address, self.live_info(request.cluster_name, request.broker_name))
        if isinstance(request, AlterSyncStateSet):
            return manager.alter_sync_state_set(
                request.broker_name, request.master_broker_id, request.master_epoch,
                request.new_sync_state_set, request.sync_state_set_epoch,
                self._group_live_info(request.broker_name))
        if isinstance(request, ElectMaster):
            return manager.elect_master(
                request.broker_name, self._group_live_info(request.broker_name),
                broker_id=request.broker_id, designate=request.designate, policy=self.policy,
                enable_elect_unclean_master=self.config.enable_elect_unclean_master)
        assert isinstance(request, CleanBrokerData)
        return manager.clean_broker_data(
            request.cluster_name, request.broker_name,
            self.live_info(request.cluster_name, request.broker_name),
            broker_ids=request.broker_ids, clean_living_broker=request.clean_living_broker)

    def _commit_next(self, work: _Work) -> None:
        if work.events:
            self._await(work, Propose(self._ticket(work), encode_event(work.events[0])))
        else:
            self._committed(work)

    def _commit_settled(self, work: _Work, outcome: Outcome) -> None:
        event = work.events.popleft()
        if isinstance(outcome, NotCommitted):
            self._finish(work, self._reply(work, Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                           f"not committed: {outcome.message}"), refused=True)
        elif not outcome.result:
            self._finish(work, self._reply(
                work, Code.CONTROLLER_INVALID_REQUEST,
                f"{type(event).__name__} no longer applied when committed (the state changed "
                "meanwhile); retry"), refused=True)
        else:
            self._commit_next(work)

    def _committed(self, work: _Work) -> None:
        """Every event of a write is applied here: the answer, and what follows from it."""
        request, result = work.request, work.result
        assert result is not None
        reply = self._reply(work, result.code, result.remark)
        if isinstance(request, RegisterBroker) and result.ok:
            self.heartbeats.heartbeat(self.now, request.cluster_name, request.broker_name,
                                      request.broker_id, request.broker_address)
            p = result.payload
            group = self.manager.group(request.broker_name)
            reply = attrs.evolve(reply, payload=ReplicaInfo(
                request.broker_name, p.master_broker_id, p.master_address, p.master_epoch,
                p.sync_state_set, p.sync_state_set_epoch,
                tuple(sorted(group.addresses.items())) if group else ()))
        elif isinstance(request, AlterSyncStateSet) and result.ok:
            reply = attrs.evolve(reply, payload=SyncStateSet(
                result.payload.sync_state_set, result.payload.sync_state_set_epoch))
        elif isinstance(request, ElectMaster):
            reply = attrs.evolve(reply, payload=self._elected(request.broker_name, result))
        elif isinstance(request, CleanBrokerData) and result.ok:
            self.heartbeats.remove(request.cluster_name, request.broker_name, request.broker_ids)
        self._finish(work, reply)

    def _elected(self, broker_name: str, result: ControllerResult) -> ElectAnswer | None:
        """The answer to an election: the group after it, for SUCCESS and
        CONTROLLER_MASTER_STILL_EXIST only (RocketMQ's refusals carry nothing). A committed
        election is counted, logged and notified."""
        group = self.manager.group(broker_name)
        if group is None:
            return None
        loss = result.payload is not None and result.payload.possible_message_loss
        info = ReplicaInfo.of_group(group, possible_message_loss=loss)
        answer = (ElectAnswer(group.cluster_name, info) if result.code in _ELECT_ANSWERS
                  else None)
        if not result.events:
            return answer
        self.elections += 1
        # A master elected from the SyncStateSet is routine; a group left without
        # one, or a master that may lack acknowledged messages, needs attention.
        level = logging.WARNING
        if info.master_broker_id is None:
            outcome = f"no master in epoch {info.master_epoch}: {result.remark}"
        else:
            outcome = f"master {info.master_broker_id} elected in epoch {info.master_epoch}"
            if result.remark:
                outcome += f" ({result.remark})"
            if not info.possible_message_loss:
                level = logging.INFO
        self._log.log(level, "controller %s: group %r: %s", self.config.node_id, broker_name,
                   outcome)
        self._outputs.append(Elected(result.code, result.remark, info))
        if self.config.notify_broker_role_changed:
            self._outputs.extend(Notify(address, info) for _, address in info.replicas)
        return answer

    def _finish(self, work: _Work, reply: Reply, *, refused: bool = False) -> None:
        if work.request_id is not None:
            self._outputs.append(reply)
        elif refused:
            self._log.info("controller %s: election for %r not done: %s", self.config.node_id,
                        work.request.broker_name, reply.remark)
        if work is self._writing:
            self._writing = None
            self._next_turn()
        if work.request_id is None:
            self._scan_next()

    # -- the inactive-broker scan -------------------------------------------------

    def _scan(self) -> None:
        """Drop silent brokers; then elect, group by group, where the master is gone."""
        self._scan_at = None
        lead = self.leadership
        if not lead.is_leader:
            self._scan_next()
            return
        if lead.term != self._scan_term:
            self._scan_term = lead.term
            self.heartbeats.expect_masters(self.now, self.manager.groups.values())
        for record in self.heartbeats.scan(self.now, self.config.broker_not_active_timeout):
            self._log.info("controller %s: broker %s/%d at %s is inactive: silent for %d ms",
                           self.config.node_id, record.broker_name, record.broker_id,
                           record.broker_address, self.now - record.last_update_ms)
        self._scan_rest = sorted(self.manager.groups.items(), reverse=True)
        self._scan_next()

    def _scan_next(self) -> None:
        timeout = self.config.broker_not_active_timeout
        while self._scan_rest:
            name, group = self._scan_rest.pop()
            master = group.master_broker_id
            gone = master is not None and not self.heartbeats.is_active(
                self.now, timeout, group.cluster_name, name, master)
            if gone or (master is None and group.master_epoch > 0):
                self._turns.append(_Work(None, ElectMaster(group.cluster_name, name),
                                         serialized=True))
                self._next_turn()
                return
        self._scan_at = self.now + self.config.scan_not_active_broker_interval
