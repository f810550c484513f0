"""The ReplicasManager: a broker replica's role (master or slave) and its HA service.

It owns the HA listener for the broker's whole life, so the HA address does
not change with the role: while master, accepted slave streams are served by
the term's ``HAMaster`` (at most ``ha_max_connections`` at once, admitted
by ``triomq.ha.core.admission``: a newcomer takes the slot of the oldest
connection without a handshake, and a replica named by a SyncStateSet is
always admitted; with a cluster credential, ``auth``, only a handshake whose
credential proves it is that slave's: ``triomq.node_auth``, and then its
connection's acks count for that slave alone); while slave, they are closed
at once and the slave signs its own handshakes. A role change
ends the current *term* (its tasks are cancelled and awaited, its pending
puts fail), prepares the log and the epoch file, then starts the next term,
in the order of ``triomq.ha.core.role_change.RoleChange``.

Role-scoped work (``TermHost``, the broker's components) starts in each
term's nursery once the term's HA service runs and the new role shows, and
ends with the term; the host then hears of the change.

The controller seam: ``change_to_master`` / ``change_to_slave`` are what a
controller client calls when it learns of an election, and the master's
SyncStateSet proposals go to the ``SyncStateSetReporter`` given here (static
mode: ``ApproveLocally``; the controller client implements it later).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Hashable, Mapping
from functools import partial
from typing import Any, Protocol

import attrs
import trio

from triomq.broker.core.role import BrokerRole
from triomq.clock import wall_ms
from triomq.ha.core.admission import HAAdmission, RefuseHandshake
from triomq.ha.core.epoch import EpochStore
from triomq.ha.core.role_change import (
    EndTerm,
    LoadEpochs,
    RoleChange,
    RoleChangeAction,
    StartTerm,
    TermLog,
    ToMaster,
    ToSlave,
    TruncateTornTail,
)
from triomq.ha.core.sync_replication import ReplicationStatus
from triomq.ha.driver import Offload, ReplicaLog
from triomq.ha.master_driver import (
    ApproveLocally,
    HAMaster,
    HAMasterConfig,
    SyncStateSetReporter,
)
from triomq.ha.slave_driver import HASlave, HASlaveConfig
from triomq.node_auth import InnerAuth
from triomq.transport import Listener

__all__ = [
    "BrokerRole",
    "ReplicaLogWithTerms",
    "ReplicaState",
    "ReplicasManager",
    "TermHost",
]

logger = logging.getLogger("triomq.broker")


class ReplicaLogWithTerms(ReplicaLog, TermLog, Protocol):
    """The commit-log calls replication and role changes need."""


class TermHost(Protocol):
    """What runs with the replica's terms (the broker's ``ComponentHost``)."""

    async def run_term(self, role: BrokerRole, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run ``role``'s work until cancelled: the term's end cancels it."""
        ...

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        """Called after every change, once the new term runs."""
        ...


@attrs.frozen
class ReplicaState:
    """A snapshot of the replica: role, epoch, whom it follows, what is confirmed."""

    role: BrokerRole
    master_epoch: int
    master_ha_address: str
    sync_state_set: frozenset[int]
    confirm_offset: int
    max_offset: int


class _Term:
    """One role held from one change to the next."""

    def __init__(self, role: BrokerRole, epoch: int, master_address: str) -> None:
        self.role = role
        self.epoch = epoch
        self.master_address = master_address
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.nursery: trio.Nursery | None = None
        self.scope = trio.CancelScope()
        self.ended = trio.Event()


class ReplicasManager:
    """Role changes and the HA service of one broker replica.

    ``address`` names this replica in its logs; in the SyncStateSet and its HA
    handshakes it is the broker id each role change names. ``ha_listener`` is where slaves
    connect; ``connect(address)`` opens a stream to a master's HA address.
    ``terms`` runs in every term and hears of every change.
    Run ``run`` in a nursery first; it starts with no role.
    """

    def __init__(
        self,
        *,
        log: ReplicaLogWithTerms,
        epoch_store: EpochStore,
        address: str,
        ha_listener: Listener,
        connect: Callable[[str], Awaitable[trio.abc.Stream]],
        master_config: HAMasterConfig | None = None,
        slave_config: HASlaveConfig | None = None,
        reporter: SyncStateSetReporter | None = None,
        terms: TermHost | None = None,
        offload: Offload = trio.to_thread.run_sync,
        auth: InnerAuth | None = None,
    ) -> None:
        #: The node's cluster credential: slaves' handshakes must prove it, ours carry it.
        self.auth = auth
        self.log = log
        self.epoch_store = epoch_store
        self.address = address
        self.ha_listener = ha_listener
        self.connect = connect
        self.master_config = master_config or HAMasterConfig()
        self.slave_config = slave_config or HASlaveConfig()
        self.reporter: SyncStateSetReporter = reporter or ApproveLocally()
        self.terms = terms
        self.offload = offload
        self._term: _Term | None = None
        self._changing = trio.Lock()
        #: Called after records land in the log or get confirmed: a master's put,
        #: a slave's ack to it, a slave's replicated append (held pulls are
        #: answered then).
        self.on_appended: Callable[[], None] = lambda: None
        #: Called after a slave's log was cut back to its master's (the HA handshake's
        #: truncation): the broker's tables must not point past the cut.
        self.on_truncated: Callable[[], None] = lambda: None
        self._nursery: trio.Nursery | None = None
        #: The HA port's slots (``ha_max_connections``), and the cancel scope
        #: of each connection holding one.
        self.admission = HAAdmission(max_connections=self.master_config.ha_max_connections)
        self._connections: dict[object, trio.CancelScope] = {}
        #: Connections closed to give their slot to a newcomer, slave handshakes
        #: refused for want of one, and those refused for want of a credential.
        self.ha_connections_evicted = 0
        self.ha_handshakes_refused = 0
        self.ha_handshakes_unauthenticated = 0

    # -- state ------------------------------------------------------------------

    @property
    def ha_address(self) -> str:
        """The address slaves connect to (the listener's, port resolved)."""
        return self.ha_listener.address

    @property
    def ha_connections(self) -> int:
        """Connections the HA port serves."""
        return self.admission.held

    @property
    def role(self) -> BrokerRole:
        """The current role (``NONE`` while a change is in progress)."""
        return self._term.role if self._term is not None else BrokerRole.NONE

    @property
    def is_master(self) -> bool:
        """True while this replica may append to its commit log."""
        return self._term is not None and self._term.master is not None

    @property
    def ha_master(self) -> HAMaster | None:
        """The master term's HA service, while master."""
        return self._term.master if self._term is not None else None

    @property
    def ha_slave(self) -> HASlave | None:
        """The slave term's HA client, while slave."""
        return self._term.slave if self._term is not None else None

    @property
    def master_epoch(self) -> int:
        """The epoch of the master this replica is or follows (-1 with no role)."""
        return self._term.epoch if self._term is not None else -1

    @property
    def confirm_offset(self) -> int:
        """Master: min ack over the SyncStateSet; slave: the last one the master sent."""
        term = self._term
        if term is not None and term.master is not None:
            return term.master.confirm_offset
        if term is not None and term.slave is not None:
            return term.slave.confirm_offset
        return -1

    @property
    def transferring_slaves(self) -> frozenset[int]:
        """The broker ids of the slaves replicating from this master now (none unless master)."""
        master = self.ha_master
        return master.transferring_slaves if master is not None else frozenset()

    @property
    def sync_state_set(self) -> frozenset[int]:
        """The SyncStateSet the master counts acks over (empty unless master)."""
        master = self.ha_master
        return master.tracker.effective_sync_state_set if master is not None else frozenset()

    def state(self) -> ReplicaState:
        """A snapshot of the replica's state."""
        term = self._term
        return ReplicaState(
            role=self.role,
            master_epoch=self.master_epoch,
            master_ha_address=term.master_address if term is not None else "",
            sync_state_set=self.sync_state_set,
            confirm_offset=self.confirm_offset,
            max_offset=self.log.max_offset,
        )

    # -- running ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept HA connections and host the terms until cancelled; closes the listener."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._accept_loop)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._term = None
            with trio.CancelScope(shield=True):
                await self.ha_listener.aclose()

    async def _accept_loop(self) -> None:
        while True:
            try:
                stream = await self.ha_listener.accept()
            except trio.ClosedResourceError:
                return
            except OSError as exc:
                logger.warning("HA accept on %s failed: %s", self.ha_address, exc)
                await trio.sleep(0.1)
                continue
            term = self._term
            if term is None or term.master is None or term.nursery is None:
                # Not a master (or between roles): the slave reconnects with backoff.
                await trio.aclose_forcefully(stream)
            else:
                key, scope = object(), trio.CancelScope()
                self._connections[key] = scope
                self._close(self.admission.opened(key).close)
                term.nursery.start_soon(self._serve, term.master, stream, key, scope)

    async def _serve(self, master: HAMaster, stream: trio.abc.Stream, key: object,
                     scope: trio.CancelScope) -> None:
        try:
            with scope:
                await master.serve(stream, lambda broker_id, credential: self._admit(
                    master, key, broker_id, credential))
        finally:
            self.admission.closed(key)
            del self._connections[key]

    def _admit(self, master: HAMaster, key: object, broker_id: int,
               credential: Mapping[str, str] | None) -> str | None:
        if self.auth is not None:
            # Before the admission: an unproven handshake replaces no slave's connection.
            why = self.auth.handshake_refusal(credential, broker_id, wall_ms())
            if why is not None:
                self.ha_handshakes_unauthenticated += 1
                return why
        tracker = master.tracker
        self.admission.remember(tracker.sync_state_set | (tracker.pending or frozenset()))
        decision = self.admission.handshaken(key, broker_id)
        if isinstance(decision, RefuseHandshake):
            self.ha_handshakes_refused += 1
            return decision.reason
        self._close(decision.close)
        return None

    def _close(self, keys: tuple[Hashable, ...]) -> None:
        """Close the connections the admission gave up (their tasks end as cancelled)."""
        for key in keys:
            self.ha_connections_evicted += 1
            self._connections[key].cancel()

    # -- role changes -------------------------------------------------------------

    async def change_to_master(
        self, epoch: int, broker_id: int, sync_state_set: frozenset[int] = frozenset()
    ) -> None:
        """Serve as master of ``epoch``, as broker ``broker_id`` of the group, with
        ``sync_state_set`` (broker ids; this replica is always in it).

        Truncates a torn tail and records <epoch, max offset> before serving.
        A log with bytes but no epoch recorded (a store from before HA) is
        adopted whole into ``epoch``, from its first byte.
        ``EpochError`` if ``epoch`` is older than the last recorded one.
        """
        await self._change(ToMaster(epoch, broker_id, sync_state_set))

    async def change_to_slave(self, master_ha_address: str, epoch: int, broker_id: int) -> None:
        """Follow the master at ``master_ha_address`` (of ``epoch``, for the record) as
        broker ``broker_id`` of the group."""
        await self._change(ToSlave(master_ha_address, epoch, broker_id))

    async def _change(self, target: ToMaster | ToSlave) -> None:
        """Carry out a ``RoleChange`` (``triomq.ha.core.role_change``: the order is its)."""
        self._check_running()
        async with self._changing:
            change = RoleChange(target, confirmed=self.confirm_offset)
            action: RoleChangeAction = change.start()
            while not isinstance(action, StartTerm):
                if isinstance(action, EndTerm):
                    await self._end_term()
                    action = change.term_ended()
                elif isinstance(action, TruncateTornTail):
                    end = await self.offload(self.log.truncate_to_last_whole_record)
                    action = change.truncated(end, self.log.min_offset)
                elif isinstance(action, LoadEpochs):
                    action = change.loaded(await self.offload(self.epoch_store.load))
                else:
                    await self.offload(self.epoch_store.save, action.epochs)
                    action = change.saved()
            await self._start_term(self._term_of(action))

    def _term_of(self, start: StartTerm) -> _Term:
        target = start.target
        if isinstance(target, ToMaster):
            self.admission.remember(target.sync_state_set)
            term = _Term(BrokerRole.MASTER, target.epoch, self.ha_address)
            term.master = HAMaster(
                log=self.log,
                epochs=start.epochs,
                broker_id=target.broker_id,
                sync_state_set=target.sync_state_set,
                confirm_offset=start.confirm_offset,
                reporter=self.reporter,
                config=self.master_config,
                on_acked=lambda: self.on_appended(),
            )
            return term
        term = _Term(BrokerRole.SLAVE, target.epoch, target.master_ha_address)
        address = target.master_ha_address
        term.slave = HASlave(
            log=self.log,
            epoch_store=self.epoch_store,
            broker_id=target.broker_id,
            connect=lambda: self.connect(address),
            config=self.slave_config,
            offload=self.offload,
            on_appended=lambda: self.on_appended(),
            on_truncated=lambda: self.on_truncated(),
            credential=None if self.auth is None else partial(
                self._handshake_credential, target.broker_id),
        )
        return term

    def _handshake_credential(self, broker_id: int) -> dict[str, str]:
        assert self.auth is not None
        return self.auth.handshake_credential(broker_id, now_ms=wall_ms(),
                                              nonce=secrets.token_hex(16))

    def master_announced(self, master_ha_address: str) -> bool:
        """The master at ``master_ha_address`` said it is back: a slave following it
        reconnects now. False if this replica follows no such master."""
        term = self._term
        if term is None or term.slave is None or term.master_address != master_ha_address:
            return False
        term.slave.master_announced()
        return True

    async def start_in_term(self, task: Callable[..., Awaitable[Any]]) -> Any:
        """``nursery.start(task)`` in the current term's nursery: the term's end (any
        role change) cancels it, before the next term starts."""
        term = self._term
        if term is None or term.nursery is None:
            raise RuntimeError("no term runs: the replica's role is changing")
        return await term.nursery.start(task)

    async def _end_term(self) -> None:
        term, self._term = self._term, None
        if term is not None:
            if term.master is not None:
                term.master.end()
            term.scope.cancel()
            await term.ended.wait()

    def _check_running(self) -> None:
        if self._nursery is None:
            raise RuntimeError("start ReplicasManager.run before changing roles")

    async def _start_term(self, term: _Term) -> None:
        # A change that ends while the broker stops (its thread work is not
        # cancellable) must stop here, not start a term in a closing nursery.
        await trio.lowlevel.checkpoint_if_cancelled()
        assert self._nursery is not None
        await self._nursery.start(self._run_term, term)
        self._term = term
        logger.info("replica %s is now %s in epoch %d", self.address, term.role.value,
                    term.epoch)
        if self.terms is not None:
            # Started once the role shows, in the term's nursery: cancelled with it.
            assert term.nursery is not None
            await term.nursery.start(self.terms.run_term, term.role)
            self.terms.role_changed(term.role, term.epoch)

    async def _run_term(self, term: _Term, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with term.scope:
                async with trio.open_nursery() as nursery:
                    term.nursery = nursery
                    if term.master is not None:
                        await nursery.start(term.master.run)
                    if term.slave is not None:
                        await nursery.start(term.slave.run)
                    task_status.started()
        finally:
            term.ended.set()

    # -- synchronous puts -----------------------------------------------------------

    def appended(self) -> None:
        """New bytes were appended locally (master): wake the slave connections."""
        master = self.ha_master
        if master is not None:
            master.appended()
        self.on_appended()

    async def wait_replicated(self, next_offset: int, timeout_ms: int
                              ) -> ReplicationStatus | None:
        """Wait until enough replicas hold the bytes before ``next_offset``.

        ``None`` if this replica is not master, or stops being master first.
        """
        master = self.ha_master
        if master is None:
            return None
        return await master.wait_replicated(next_offset, timeout_ms)
