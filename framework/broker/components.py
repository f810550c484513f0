"""Broker components: the parts a broker runs, each with the role it runs in.

A component registers its request handlers, runs its tasks and hears of
role changes (``BrokerComponent``). Its ``scope`` says when it runs:

- ``ALWAYS``: started in the broker's nursery when the broker starts, in
  list order, and cancelled when the broker stops;
- ``MASTER_TERM``: started in each master term's nursery once the term's
  HA service runs and the role shows, and cancelled with the term when the replica steps down
  (the ``ReplicasManager`` ends a term by cancelling its nursery, so a
  master-only task never checks whether it is still master);
- ``SLAVE_TERM``: a slave following its master (RocketMQ's
  ``SlaveSynchronize``: the copies of the master's tables): started in each
  slave term's nursery once the role shows, cancelled when the term ends,
  and paused while the slave acts for its absent master (its own tables
  are the newer then), started again when that acting term ends;
- ``ACTING_TERM``: a slave acting for its absent master (RIP-32,
  RocketMQ's ``changeSpecialServiceStatus``): started in the acting term's
  nursery when the broker's acting-master policy (a plugin's component)
  begins a term with ``ComponentView.start_acting``, and cancelled when it ends it
  or the replica's role changes. A broker without
  ``enable_slave_acting_master`` never acts: a component scoped to the
  acting term is refused when it starts, never left unstarted.

Every component's handlers are registered once, when the broker starts
(an RPC server keeps its handlers); a handler of a term-scoped component
answers by the role it reads from its ``ComponentView``.

Components see their broker through ``ComponentView`` (role, epoch, confirm
offset, commit log, the master's address), never the whole broker, so a
plugin's component (hook ``triomq_broker_components``) depends on what a
broker is, not on how this one is built.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

import trio

from triomq.broker.core.role import BrokerRole
from triomq.clock import EpochClock
from triomq.errors import PluginError
from triomq.rpc import RpcServer
from triomq.store import CommitLog

__all__ = [
    "ActingTerm",
    "BrokerComponent",
    "Component",
    "ComponentHost",
    "ComponentView",
    "Scope",
]


class Scope(enum.Enum):
    """When a component runs."""

    ALWAYS = "always"
    MASTER_TERM = "master term"
    SLAVE_TERM = "slave term"
    ACTING_TERM = "acting term"


class ComponentView(Protocol):
    """What a component may know of its broker."""

    @property
    def role(self) -> BrokerRole:
        """The replica's role now (``NONE`` during a change)."""
        ...

    @property
    def is_master(self) -> bool:
        """True while the replica is master: it may append to its log."""
        ...

    @property
    def master_epoch(self) -> int:
        """The epoch of the master the replica is or follows (-1 with no role)."""
        ...

    @property
    def confirm_offset(self) -> int:
        """The commit-log offset every record below which is replicated enough."""
        ...

    @property
    def log(self) -> CommitLog:
        """The replica's commit log."""
        ...

    def master_address(self) -> str | None:
        """The group's master's RPC address as this replica knows it (None: unknown)."""
        ...

    @property
    def broker_id(self) -> int:
        """This replica's brokerId (the controllers' in controller mode)."""
        ...

    @property
    def acting(self) -> bool:
        """True during an acting term: a slave acting for its absent master."""
        ...

    @property
    def clock(self) -> EpochClock:
        """The broker's clock (ms since the epoch): its store, timer, transaction and pop
        times are on it, so a test's mock clock moves a component's times with them."""
        ...

    async def start_acting(self) -> ActingTerm:
        """Begin an acting term: the ``ACTING_TERM`` components start, in the slave
        term's nursery, so a role change ends the acting term with the slave
        term. ``RuntimeError`` if the broker may not act now (no
        ``enable_slave_acting_master``, not a slave, or a term still runs)."""
        ...


@runtime_checkable
class BrokerComponent(Protocol):
    """A part of a broker: its handlers, its tasks, its reaction to role changes."""

    @property
    def name(self) -> str:
        """Names the component in errors and logs."""
        ...

    @property
    def scope(self) -> Scope:
        """When the component runs."""
        ...

    def register(self, server: RpcServer) -> None:
        """Register the component's request handlers (once, when the broker starts)."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run until cancelled (or return when there is nothing to run); call
        ``task_status.started()`` once serving."""
        ...

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        """Called after every role change, once the new term runs. Synchronous."""
        ...


Task = Callable[..., Awaitable[None]]


class ActingTerm:
    """A running acting term's handle (``ComponentView.start_acting``)."""

    def __init__(self) -> None:
        self._scope = trio.CancelScope()
        self._ended = trio.Event()

    @property
    def ended(self) -> bool:
        """True once the term's components are cancelled and gone."""
        return self._ended.is_set()

    def end(self) -> None:
        """End the term: its components are cancelled (``wait_ended`` to see them go)."""
        self._scope.cancel()

    async def wait_ended(self) -> None:
        await self._ended.wait()


class Component:
    """A component made of a service's parts: handlers, tasks and a role reaction.

    ``start`` are run with ``nursery.start`` in order (they report when they
    are ready), ``soon`` with ``start_soon`` after them.
    """

    def __init__(self, name: str, *, scope: Scope = Scope.ALWAYS,
                 register: Callable[[RpcServer], None] | Sequence[Callable[[RpcServer], None]]
                 = (),
                 start: Sequence[Task] = (), soon: Sequence[Task] = (),
                 role_changed: Callable[[BrokerRole, int], None] | None = None) -> None:
        self.name = name
        self.scope = scope
        self._register = (register,) if callable(register) else tuple(register)
        self._start = tuple(start)
        self._soon = tuple(soon)
        self._role_changed = role_changed

    def register(self, server: RpcServer) -> None:
        for register in self._register:
            register(server)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            for task in self._start:
                await nursery.start(task)
            for task in self._soon:
                nursery.start_soon(task)
            task_status.started()

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        if self._role_changed is not None:
            self._role_changed(role, master_epoch)

    def __repr__(self) -> str:
        return f"Component({self.name!r}, {self.scope.value})"


class ComponentHost:
    """Runs a broker's components, each in the nursery of its scope.

    ``start`` runs the ``ALWAYS`` components in the broker's nursery;
    ``run_term`` is what the ``ReplicasManager`` runs in a new term's
    nursery; ``role_changed`` tells every component of a change.
    """

    def __init__(self, components: Iterable[BrokerComponent], *,
                 may_act: bool = False, online: trio.Event | None = None) -> None:
        self.components = tuple(components)
        #: Set once the broker may serve as master (a returning master's pre-online
        #: done): its master-term components wait for it.
        self.online = online
        #: The running acting term, and the scope of the slave-term components it pauses.
        self._acting: ActingTerm | None = None
        self._following: trio.CancelScope | None = None
        for component in self.components:
            if not isinstance(component, BrokerComponent):
                raise PluginError(f"broker component {component!r} is not a BrokerComponent "
                                  "(name, scope, register, run, role_changed)")
            if not isinstance(component.scope, Scope):
                raise PluginError(f"broker component {component.name!r}: scope "
                                  f"{component.scope!r} is not a triomq.broker.components.Scope")
            if component.scope is Scope.ACTING_TERM and not may_act:
                raise PluginError(
                    f"broker component {component.name!r} runs in the acting-master term, "
                    "which this broker never holds: enable_slave_acting_master is off")
        names = [component.name for component in self.components]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise PluginError(f"broker components named twice: {', '.join(twice)}")

    def scoped(self, scope: Scope) -> tuple[BrokerComponent, ...]:
        """The components of ``scope``, in order."""
        return tuple(c for c in self.components if c.scope is scope)

    async def start(self, nursery: trio.Nursery, server: RpcServer) -> None:
        """Start the ``ALWAYS`` components in ``nursery``, each before its handlers
        are registered, and register the term-scoped components' handlers."""
        for component in self.components:
            if component.scope is Scope.ALWAYS:
                await nursery.start(component.run)
            component.register(server)

    async def run_term(self, role: BrokerRole, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the components of ``role``'s term until the term's scope is cancelled."""
        if role is BrokerRole.SLAVE:
            await self._follow(task_status)
        elif role is not BrokerRole.MASTER:
            task_status.started()
        elif self.online is None or self.online.is_set():
            await self.run_scope(Scope.MASTER_TERM, task_status=task_status)
        else:
            # Isolated: the term runs (its HA service serves the slaves) while its
            # components wait for the pre-online to end.
            task_status.started()
            await self.online.wait()
            await self.run_scope(Scope.MASTER_TERM)

    async def _follow(self, task_status: trio.TaskStatus[None]) -> None:
        """The slave term: its components run, but not while an acting term runs (its
        start cancels them; they start again once it ended)."""
        status = task_status
        while True:
            acting = self._acting
            if acting is not None:
                await acting.wait_ended()
            # No checkpoint between the scope's creation and the check: an acting term
            # that begins after it cancels this scope.
            with trio.CancelScope() as self._following:
                if self._acting is None:
                    first, status = status, trio.TASK_STATUS_IGNORED
                    await self.run_scope(Scope.SLAVE_TERM, task_status=first)
                    await trio.sleep_forever()

    async def run_scope(self, scope: Scope, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the components of a term's ``scope``, in order, until cancelled."""
        async with trio.open_nursery() as nursery:
            for component in self.components:
                if component.scope is scope:
                    await nursery.start(component.run)
            task_status.started()

    async def run_acting_term(self, *, task_status: trio.TaskStatus[ActingTerm]
                              = trio.TASK_STATUS_IGNORED) -> None:
        """Run an acting term's components until its handle ends it (or this is
        cancelled); reports the handle once they started."""
        term = self._acting = ActingTerm()
        if self._following is not None:
            self._following.cancel()
        try:
            with term._scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.run_scope, Scope.ACTING_TERM)
                    task_status.started(term)
                    await trio.sleep_forever()
        finally:
            self._acting = None
            term._ended.set()

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        """Tell every component, in order."""
        for component in self.components:
            component.role_changed(role, master_epoch)

