"""The broker side of controller mode as a state machine (sans-I/O).

``ControllerModeFlow`` decides what a broker replica asks the controllers
and which role it takes; its pumps (``triomq.broker.replication.controller_mode`` over
trio, the cluster simulation over virtual time) carry its outputs out and
feed the answers back:

1. **Identity.** A replica with no saved identity asks GET_NEXT_BROKER_ID,
   claims that id with APPLY_BROKER_ID and the check code it was given,
   and has the identity saved (``SaveIdentity``, then ``identity_saved``)
   before using it. A saved identity of another cluster or group is a
   ``ConfigError``.
2. **Registration.** REGISTER_BROKER (a forgotten replica claims its id
   again first) answers the group's alive master; with none the broker asks
   ELECT_MASTER for itself. A failed step is retried after
   ``sync_controller_metadata_period``.
3. **Roles.** Every answer, push and poll (GET_REPLICA_INFO every
   ``sync_controller_metadata_period``) is offered; the newest by master
   epoch is followed, one role change at a time (``TakeMaster``,
   ``TakeSlave``; the pump reports the replica's role with ``followed``);
   a poll of the master's own term hands it the committed set
   (``LearnSyncStateSet``).
4. **Heartbeats.** To every controller, one at a time,
   ``broker_heartbeat_interval`` after the previous one went out, or at
   once when that one's answer came later (the broker or that controller
   was stalled meanwhile: its silence is not drawn out by another interval).
5. **SyncStateSet.** ``propose`` turns the HA master's proposal (broker
   ids, as HA names the slaves) into ALTER_SYNC_STATE_SET (fenced by both
   epochs); its ``ProposalOutcome`` is the set the controller holds (read
   back after a refusal), None when unknown, or fenced once a newer master
   exists.

Controller requests go out as ``Call``; the pump makes each through the
leader-following retry (``triomq.controller.core.leader_calls``) and answers it
with ``answered``: an ``ControllerAnswer`` (the response's code, remark and decoded
payload) or None when no leader answered in time. Times are milliseconds.
The requests are the controller's own values (``triomq.controller.core.requests``:
its client writes them, its core reads them, the simulation hands them
over as they are); ``Call``, ``ControllerAnswer`` and the other outputs are
``triomq.broker.replication.core.controller_flow_messages``', re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from triomq.broker.core.identity import BrokerIdentity
from triomq.broker.core.role import BrokerRole
from triomq.broker.replication.core.controller_flow_messages import (
    Call,
    ControllerAnswer,
    LearnSyncStateSet,
    Log,
    Output,
    ProposalOutcome,
    Registered,
    SaveIdentity,
    SendHeartbeat,
    TakeMaster,
    TakeSlave,
)

# ``X as X``: re-exported, for the pumps that name a request's type.
from triomq.broker.replication.core.controller_flow_messages import (
    ControllerRequest as ControllerRequest,
)
from triomq.controller.core.codes import ResponseCode
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    ElectAnswer,
    ElectMaster,
    GetNextBrokerId,
    GetReplicaInfo,
    NextBrokerId,
    RegisterBroker,
    SyncStateSet,
)
from triomq.controller.core.wire import ReplicaInfo
from triomq.errors import ConfigError

__all__ = [
    "Call",
    "ControllerAnswer",
    "ControllerModeFlow",
    "FlowSettings",
    "LearnSyncStateSet",
    "Log",
    "ProposalOutcome",
    "Registered",
    "SaveIdentity",
    "SendHeartbeat",
    "TakeMaster",
    "TakeSlave",
]


@attrs.frozen
class FlowSettings:
    """Who the broker is and its controller-mode timing (ms; the config keys' names)."""

    cluster_name: str
    broker_name: str
    #: This replica's address, as the controllers know it.
    address: str
    controllers: tuple[str, ...]
    broker_heartbeat_interval: int
    sync_controller_metadata_period: int
    election_priority: int = 0
    #: The heartbeat timeout the broker asks the controllers for (None: theirs).
    controller_heartbeat_timeout: int | None = None


_Then = Callable[[float], None]
_Answered = Callable[[float, ControllerAnswer | None, str], None]


def _replica_info(answer: ControllerAnswer) -> ReplicaInfo:
    """The group's replica info a successful REGISTER_BROKER or GET_REPLICA_INFO carries."""
    assert isinstance(answer.payload, ReplicaInfo)
    return answer.payload


def _why(answer: ControllerAnswer | None, error: str) -> str:
    if answer is None:
        return error or "no controller leader answered"
    return f"code {answer.code}: {answer.remark or 'no remark'}"


class ControllerModeFlow:
    """One broker replica's controller-mode flow (module docstring)."""

    def __init__(self, settings: FlowSettings) -> None:
        self.settings = settings
        self.identity: BrokerIdentity | None = None
        #: Whether the controllers registered this replica (pushes count from then on).
        self.registered = False
        #: The newest replica info heard of (what the role changes work towards).
        self.replica_info: ReplicaInfo | None = None
        #: The SyncStateSet epoch of this broker's own master term.
        self.sync_state_set_epoch = 0
        #: The replica's role and epoch as the pump last reported them.
        self.role = BrokerRole.NONE
        self.master_epoch = -1
        self._recorded_epoch = 0
        self._check_code = ""
        #: Why the last election for this replica found no master ("" after one did).
        self.no_master_reason = ""
        self._outputs: list[Output] = []
        self._calls: dict[int, _Answered] = {}
        self._next_id = 0
        self._timers: dict[str, tuple[float, _Then]] = {}
        self._heartbeats_started = False
        #: When the last heartbeat to each controller went out.
        self._heartbeat_at: dict[str, float] = {}
        self._wake = False
        self._following: TakeMaster | TakeSlave | None = None

    @property
    def broker_id(self) -> int:
        """The id the controllers gave this replica (``-1`` until known)."""
        return self.identity.broker_id if self.identity is not None else -1

    @property
    def group_has_master(self) -> bool:
        """Whether the newest replica info heard of names a master for the group (none
        while an election cannot find one: its slaves then serve reads)."""
        return self.replica_info is not None and self.replica_info.master_broker_id is not None

    # -- driving ------------------------------------------------------------------------

    def outputs(self) -> list[Output]:
        """What to carry out, in order (drained)."""
        out, self._outputs = self._outputs, []
        return out

    def next_deadline(self) -> float | None:
        """When ``tick`` has timers to fire next (None: none armed)."""
        return min((due for due, _ in self._timers.values()), default=None)

    def tick(self, now: float) -> None:
        """Fire the timers due by ``now``."""
        for name, (due, fire) in sorted(self._timers.items(), key=lambda item: item[1][0]):
            if due <= now and self._timers.get(name, (None,))[0] == due:
                del self._timers[name]
                fire(now)

    def _after(self, name: str, at: float, fire: _Then) -> None:
        self._timers[name] = (at, fire)

    def _call(self, request: ControllerRequest, then: _Answered) -> None:
        self._next_id += 1
        self._calls[self._next_id] = then
        self._outputs.append(Call(self._next_id, request))

    def _log(self, text: str, *, warning: bool = True) -> None:
        self._outputs.append(Log(f"broker {self.settings.address}: {text}", warning))

    # -- inputs -------------------------------------------------------------------------

    def start(self, now: float, saved: BrokerIdentity | None, recorded_epoch: int,
              check_code: str) -> None:
        """Begin: ``saved`` identity (if any), the epoch the store recorded, a fresh check code.

        ``ConfigError`` if ``saved`` belongs to another cluster or group.
        """
        settings = self.settings
        if saved is not None and (saved.cluster_name, saved.broker_name) != (
                settings.cluster_name, settings.broker_name):
            raise ConfigError(
                f"the store belongs to {saved.cluster_name}/{saved.broker_name}, not "
                f"{settings.cluster_name}/{settings.broker_name}", "broker.broker_name")
        self.identity = saved
        self._recorded_epoch = recorded_epoch
        self._check_code = check_code
        self._register(now)

    def answered(self, now: float, call_id: int, answer: ControllerAnswer | None,
                 error: str = "") -> None:
        """The answer to ``Call`` ``call_id``; None when no leader answered (``error``: why)."""
        then = self._calls.pop(call_id, None)
        if then is not None:
            then(now, answer, error)

    def identity_saved(self, now: float) -> None:
        """The identity of the last ``SaveIdentity`` is durable: register with it."""
        self._call(self._registration(), self._on_registered)

    def heartbeat_sent(self, now: float, controller: str) -> None:
        """The heartbeat to ``controller`` was answered (or failed): the next one interval
        after it went out, at once if that is past."""
        sent = self._heartbeat_at.get(controller, now)
        self._after(f"heartbeat {controller}", sent + self.settings.broker_heartbeat_interval,
                    lambda at: self._heartbeat(at, controller))

    def notified(self, now: float, info: ReplicaInfo) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED: offered once registered, if of this group."""
        if info.broker_name == self.settings.broker_name and self.registered:
            self.offer(now, info)

    def offer(self, now: float, info: ReplicaInfo) -> None:
        """Consider ``info`` (from an answer, a push or a poll); older epochs are ignored."""
        current = self.replica_info
        if current is not None and info.is_older_than(current):
            return
        self.replica_info = info
        self._wake = True
        self._follow_next()

    def offer_or_elect(self, now: float, info: ReplicaInfo) -> None:
        """Offer ``info``, or ask ELECT_MASTER for this replica if it names no master."""
        self._offer_or_elect(now, info, lambda at: None)

    def followed(self, now: float, role: BrokerRole, master_epoch: int, error: str = "") -> None:
        """The last ``TakeMaster`` / ``TakeSlave`` ended: the replica is now ``role``
        of ``master_epoch``.

        ``error``: it failed (retried after ``sync_controller_metadata_period``).
        """
        action, self._following = self._following, None
        self.role, self.master_epoch = role, master_epoch
        if error:
            epoch = action.epoch if action is not None else master_epoch
            self._log(f"taking the role of epoch {epoch} failed, will retry: {error}")
            self._after("follow", now + self.settings.sync_controller_metadata_period,
                        self._follow_again)
            return
        if isinstance(action, TakeMaster):
            self.sync_state_set_epoch = max(self.sync_state_set_epoch,
                                            action.sync_state_set_epoch)
        self._follow_next()

    # -- registration -------------------------------------------------------------------

    def _register(self, now: float) -> None:
        if self.identity is None:
            self._call(GetNextBrokerId(self.settings.cluster_name, self.settings.broker_name),
                       self._on_next_id)
        else:
            self._call(self._registration(), self._on_registered)

    def _registration(self) -> RegisterBroker:
        s = self.settings
        return RegisterBroker(s.cluster_name, s.broker_name, self.broker_id, s.address)

    def _claim(self, broker_id: int, check_code: str) -> ApplyBrokerId:
        s = self.settings
        return ApplyBrokerId(s.cluster_name, s.broker_name, broker_id, check_code)

    def _registration_failed(self, now: float, answer: ControllerAnswer | None, error: str) -> None:
        self._log(f"registration with the controllers failed: {_why(answer, error)}")
        self._after("register", now + self.settings.sync_controller_metadata_period,
                    self._register)

    def _on_next_id(self, now: float, answer: ControllerAnswer | None, error: str) -> None:
        if answer is None or not answer.ok:
            self._registration_failed(now, answer, error)
            return
        settings = self.settings
        assert isinstance(answer.payload, NextBrokerId)
        identity = BrokerIdentity(settings.cluster_name, settings.broker_name,
                                  answer.payload.next_broker_id, self._check_code)
        self._call(self._claim(identity.broker_id, identity.register_check_code),
                   lambda at, applied, why: self._on_applied(at, applied, why, identity))

    def _on_applied(self, now: float, answer: ControllerAnswer | None, error: str,
                    identity: BrokerIdentity) -> None:
        if answer is not None and answer.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
            # Replicas starting together are all offered the same next id and the first
            # claim wins: a normal step of the registration, so ask for the next id again.
            self._log(f"broker id {identity.broker_id} went to a replica that claimed it "
                      f"first; asking the controllers for the next free id", warning=False)
            self._register(now)
            return
        if answer is None or not answer.ok:
            self._registration_failed(now, answer, error)
            return
        self.identity = identity
        self._outputs.append(SaveIdentity(identity))

    def _on_registered(self, now: float, answer: ControllerAnswer | None, error: str,
                       claimed_again: bool = False) -> None:
        if (answer is not None and not claimed_again
                and answer.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED):
            # The controllers forgot this replica (its group was cleaned): claim the id again.
            assert self.identity is not None
            self._call(self._claim(self.broker_id, self.identity.register_check_code),
                       self._on_claimed_again)
            return
        if answer is None or not answer.ok:
            self._registration_failed(now, answer, error)
            return
        self.registered = True
        self._outputs.append(Registered(self.broker_id))
        if not self._heartbeats_started:
            self._heartbeats_started = True
            for controller in self.settings.controllers:
                self._heartbeat(now, controller)
        self._offer_or_elect(now, _replica_info(answer), self._poll_later)

    def _on_claimed_again(self, now: float, answer: ControllerAnswer | None, error: str) -> None:
        if answer is None or not answer.ok:
            self._registration_failed(now, answer, error)
            return
        self._call(self._registration(),
                   lambda at, registered, why: self._on_registered(at, registered, why, True))

    def _offer_or_elect(self, now: float, info: ReplicaInfo, then: _Then) -> None:
        if info.master_broker_id is not None:
            self.no_master_reason = ""
            self.offer(now, info)
            then(now)
            return
        self._call(ElectMaster(self.settings.cluster_name, self.settings.broker_name,
                               self.broker_id),
                   lambda at, answer, error: self._on_elected(at, answer, error, then))

    def _on_elected(self, now: float, answer: ControllerAnswer | None, error: str,
                    then: _Then) -> None:
        elected = answer is not None and answer.code in (
            ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST)
        if answer is None:
            # The next poll asks again.
            self._log(f"electing a master failed: {_why(answer, error)}")
        elif not elected or answer.payload is None:
            if answer.remark != self.no_master_reason:  # say so once per reason
                self._log(f"group {self.settings.broker_name} has no master: {answer.remark}")
            self.no_master_reason = answer.remark
        else:
            assert isinstance(answer.payload, ElectAnswer)
            self.no_master_reason = ""
            self.offer(now, answer.payload.info)
        then(now)

    # -- heartbeats and polls -------------------------------------------------------------

    def _heartbeat(self, now: float, controller: str) -> None:
        self._heartbeat_at[controller] = now
        self._outputs.append(SendHeartbeat(controller, self.broker_id, self._recorded_epoch))

    def _poll_later(self, now: float) -> None:
        self._after("poll", now + self.settings.sync_controller_metadata_period, self._poll)

    def _poll(self, now: float) -> None:
        self._call(GetReplicaInfo(self.settings.broker_name), self._on_polled)

    def _on_polled(self, now: float, answer: ControllerAnswer | None, error: str) -> None:
        if answer is not None and answer.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            self._register(now)
        elif answer is None or not answer.ok:
            self._log(f"polling the controller failed: {_why(answer, error)}")
            self._poll_later(now)
        else:
            self._offer_or_elect(now, _replica_info(answer), self._poll_later)

    # -- roles ------------------------------------------------------------------------------

    def _follow_again(self, now: float) -> None:
        self._wake = True
        self._follow_next()

    def _follow_next(self) -> None:
        if self._following is not None or not self._wake or "follow" in self._timers:
            return
        self._wake = False
        info = self.replica_info
        if info is None or info.master_epoch < self.master_epoch or info.master_broker_id is None:
            return
        if info.master_broker_id == self.broker_id:
            members = info.sync_state_set
            if not (self.role is BrokerRole.MASTER and self.master_epoch == info.master_epoch):
                self._following = TakeMaster(info.master_epoch, self.broker_id, members,
                                             info.sync_state_set_epoch)
                self._outputs.append(self._following)
                return
            if info.sync_state_set_epoch >= self.sync_state_set_epoch:
                # The set itself, not only its epoch: an answer lost on the
                # way may have left the master's view behind the controller's.
                self._outputs.append(LearnSyncStateSet(members))
            self.sync_state_set_epoch = max(self.sync_state_set_epoch,
                                            info.sync_state_set_epoch)
            return
        if self.role is BrokerRole.SLAVE and self.master_epoch == info.master_epoch:
            return
        if info.master_address is not None:
            self._following = TakeSlave(info.master_address, info.master_epoch, self.broker_id)
            self._outputs.append(self._following)

    # -- SyncStateSet proposals ----------------------------------------------------------------

    def propose(self, now: float, proposal: frozenset[int], master_epoch: int) -> int:
        """Ask for ``proposal`` (broker ids) as the SyncStateSet of ``master_epoch``'s term.

        Returns the token its ``ProposalOutcome`` will carry.
        """
        self._next_id += 1
        token = self._next_id
        if self.replica_info is None or self.broker_id < 0:
            self._outputs.append(ProposalOutcome(token, None))
        else:
            self._alter(token, proposal, master_epoch)
        return token

    def _alter(self, token: int, proposal: frozenset[int], master_epoch: int) -> None:
        def altered(now: float, answer: ControllerAnswer | None, error: str) -> None:
            if answer is None:
                self._log(f"SyncStateSet {sorted(proposal)}: no answer, it may be applied: "
                          f"{_why(answer, error)}")
                self._outputs.append(ProposalOutcome(token, None))
            elif answer.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH:
                # Learn the new master now (and step down) instead of at the next poll.
                refused = f"SyncStateSet {sorted(proposal)} refused: {answer.remark}"
                self._read_back(master_epoch, lambda at, current, fenced: self._outputs.append(
                    ProposalOutcome(token, None, fenced or refused)))
            elif not answer.ok:
                self._log(f"SyncStateSet {sorted(proposal)} refused: {_why(answer, error)}")
                self._read_back(master_epoch, lambda at, current, fenced: self._outputs.append(
                    ProposalOutcome(token, None if current is None else current.sync_state_set,
                                    fenced)))
            else:
                applied = answer.payload
                assert isinstance(applied, SyncStateSet)
                self.sync_state_set_epoch = max(self.sync_state_set_epoch, applied.epoch)
                self._outputs.append(ProposalOutcome(token, applied.members))

        self._call(AlterSyncStateSet(self.settings.broker_name, self.broker_id, master_epoch,
                                     self.sync_state_set_epoch, proposal), altered)

    def _read_back(self, master_epoch: int,
                   then: Callable[[float, ReplicaInfo | None, str], None]) -> None:
        """The group's replica info if of this master's term (else None), or why it is fenced."""

        def read(now: float, answer: ControllerAnswer | None, error: str) -> None:
            if answer is None or not answer.ok:
                self._log(f"reading the SyncStateSet back failed: {_why(answer, error)}")
                then(now, None, "")
                return
            info = _replica_info(answer)
            self.offer(now, info)
            if info.master_epoch > master_epoch:
                then(now, None, f"the controller is at master epoch {info.master_epoch}")
            elif (info.master_epoch != master_epoch or info.master_broker_id != self.broker_id
                  or info.sync_state_set_epoch < self.sync_state_set_epoch):
                then(now, None, "")
            else:
                self.sync_state_set_epoch = info.sync_state_set_epoch
                then(now, info, "")

        self._call(GetReplicaInfo(self.settings.broker_name), read)
