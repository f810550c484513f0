"""Broker components: a plugin's components run in their scopes, over one in-process broker.

trio's ``MockClock`` stands still (no autojump): nothing here waits for
time. The role changes are driven on the broker's ``ReplicasManager``
directly, and each change returns once the old term's tasks are cancelled
and awaited and the new term's components have started, so every
assertion follows from the order of the calls alone.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from broker_nodes import Cluster

from triomq.broker.components import BrokerComponent, Component, ComponentView, Scope
from triomq.broker.core.role import BrokerRole
from triomq.errors import ServiceCrashed
from triomq.hookspecs import hookimpl
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer

#: A request code no RocketMQ broker answers, for the plugin's handler.
ECHO_ROLE = 9901


class MasterTask:
    """A master-term component: records its starts and its cancellations."""

    name = "master-task"
    scope = Scope.MASTER_TERM

    def __init__(self, view: ComponentView, events: list[tuple[str, str, int]]) -> None:
        self.view = view
        self.events = events

    def register(self, server: RpcServer) -> None:
        pass

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        self.events.append(("started", self.view.role.value, self.view.master_epoch))
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.events.append(("cancelled", self.view.role.value, self.view.master_epoch))

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        self.events.append(("role", role.value, master_epoch))


class Plugin:
    """Adds a master-term component and an always-running one with a handler."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.views: list[ComponentView] = []
        #: The always-running component's task: started once, cancelled when the broker stops.
        self.serving: list[str] = []

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        self.serving.append("started")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.serving.append("cancelled")

    @hookimpl
    def triomq_broker_components(self, node, broker):
        self.views.append(broker)

        async def echo_role(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
            return RemotingCommand.response(remark=broker.role.value)

        always = Component(
            "echo-role",
            register=lambda server: server.register(ECHO_ROLE, echo_role, inline=True),
            start=[self.serve],
            role_changed=lambda role, epoch: self.events.append(("always", role.value, epoch)))
        return [MasterTask(broker, self.events), always]


def events_of(kind: str, events: list[tuple[str, str, int]]) -> list[tuple[str, int]]:
    return [(role, epoch) for what, role, epoch in events if what == kind]


async def test_a_master_term_component_runs_in_each_master_term_only(tmp_path, mock_clock):
    cluster = Cluster("inproc", tmp_path)
    plugin = Plugin()
    cluster.pm.register(plugin, name="components")
    async with cluster.client() as client, cluster.broker("a") as a:
        # Static master of epoch 1: the component started in the term, the handler answers.
        assert plugin.events == [("started", "master", 1), ("role", "master", 1),
                                 ("always", "master", 1)]
        answer = await client.rpc.invoke(a.node.address, ECHO_ROLE)
        assert (answer.code, answer.remark) == (0, "master")
        (view,) = plugin.views
        assert not hasattr(view, "replicas") and not hasattr(view, "node")
        assert (view.role, view.is_master, view.log) == (BrokerRole.MASTER, True, a.log)
        assert view.confirm_offset == a.replicas.confirm_offset
        # The broker's clock, which the mock clock moves: a component's times are its own.
        before = view.clock()
        mock_clock.jump(60)
        assert view.clock() - before == 60_000 and view.clock is a.clock

        # Stepping down cancels it with the master term, before the slave term starts.
        await a.replicas.change_to_slave("inproc://nobody-ha", 2, a.broker_id)
        assert plugin.events[3:] == [("cancelled", "none", -1), ("role", "slave", 2),
                                     ("always", "slave", 2)]
        answer = await client.rpc.invoke(a.node.address, ECHO_ROLE)
        assert answer.remark == "slave"

        # The next master term starts it again.
        await a.replicas.change_to_master(3, a.broker_id)
        assert plugin.events[6:] == [("started", "master", 3), ("role", "master", 3),
                                     ("always", "master", 3)]
        assert events_of("started", plugin.events) == [("master", 1), ("master", 3)]
        assert plugin.serving == ["started"]  # across every role change
    # The broker's stop cancels the running one.
    assert plugin.events[-1][0] == "cancelled"
    assert len(events_of("cancelled", plugin.events)) == 2
    assert plugin.serving == ["started", "cancelled"]


async def test_the_broker_runs_its_own_parts_as_components(tmp_path, mock_clock):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a:
        assert a.components is not None
        names = [component.name for component in a.components.components]
        assert names[:3] == ["role", "flush", "replicas"]
        assert {"sends", "pulls", "offsets", "clients", "topics"} <= set(names)
        assert all(isinstance(c, BrokerComponent) for c in a.components.components)
        # While master: consumers' failed messages taken back, transactions checked,
        # delayed and timer messages delivered, pops served and the un-acked ones revived.
        assert [c.name for c in a.components.scoped(Scope.MASTER_TERM)] == [
            "send-back", "transactions", "schedule", "pop", "timer"]


class Scoped:
    def __init__(self, name: str, scope: Scope) -> None:
        self.name, self.scope = name, scope

    @hookimpl
    def triomq_broker_components(self, node, broker):
        return [Component(self.name, scope=self.scope)]


@pytest.mark.parametrize(("name", "scope", "message"), [
    ("acting-task", Scope.ACTING_TERM,
     "broker component 'acting-task' runs in the acting-master term, which this broker never "
     "holds: enable_slave_acting_master is off"),
    ("pulls", Scope.ALWAYS, "broker components named twice: pulls"),
])
async def test_a_component_the_broker_cannot_run_is_refused_at_start(
        tmp_path, mock_clock, name, scope, message):
    cluster = Cluster("inproc", tmp_path)
    cluster.pm.register(Scoped(name, scope), name="scoped")
    with pytest.raises(ServiceCrashed) as info:
        async with cluster.broker("a"):
            pass
    assert info.value.service == "broker"
    assert f"PluginError: {message}" in str(info.value)
    # Nothing of the refused start stays bound: the broker starts without the plugin.
    cluster.pm.unregister("scoped")
    async with cluster.broker("a") as a:
        assert a.replicas.is_master


@pytest.mark.parametrize(("component", "message"), [
    (object(), "is not a BrokerComponent"),
    (Component("stringly", scope="always"),  # type: ignore[arg-type]
     "broker component 'stringly': scope 'always' is not a triomq.broker.components.Scope"),
])
async def test_what_is_no_component_is_refused(tmp_path, mock_clock, component, message):
    class NotAComponent:
        @hookimpl
        def triomq_broker_components(self, node, broker):
            return [component]

    cluster = Cluster("inproc", tmp_path)
    cluster.pm.register(NotAComponent(), name="bad")
    with pytest.raises(ServiceCrashed, match=message):
        async with cluster.broker("a"):
            pass


class ActingTask(MasterTask):
    """An acting-term component: records its starts and cancellations."""

    name = "acting-task"
    scope = Scope.ACTING_TERM


class TasksPlugin:
    """Adds a component of each of ``kinds``, all recording into one list."""

    def __init__(self, *kinds: type[MasterTask]) -> None:
        self.kinds = kinds
        self.events: list[tuple[str, str, int]] = []
        self.views: list[ComponentView] = []

    @hookimpl
    def triomq_broker_components(self, node, broker):
        self.views.append(broker)
        return [kind(broker, self.events) for kind in self.kinds]

    def runs(self) -> list[tuple[str, str, int]]:
        """The starts and cancellations, in order."""
        return [event for event in self.events if event[0] != "role"]


#: A slave that may act, with no name server answering: nothing but the test begins a term.
MAY_ACT = 'enable_slave_acting_master = true\nnamesrv_addr = ["inproc://nobody-ns"]'


async def test_an_acting_term_runs_in_the_slave_term_and_ends_with_it(tmp_path, mock_clock):
    cluster = Cluster("inproc", tmp_path)
    plugin = TasksPlugin(ActingTask, MasterTask)
    cluster.pm.register(plugin, name="acting")
    runs = plugin.runs
    async with cluster.broker("a", broker_id=1, master="inproc://nobody-ha",
                              extra=MAY_ACT) as a:
        (view,) = plugin.views
        assert view.role is BrokerRole.SLAVE and not view.acting and view.broker_id == 1
        assert runs() == []
        term = await view.start_acting()
        assert view.acting and runs() == [("started", "slave", 1)]
        with pytest.raises(RuntimeError, match="runs already"):
            await view.start_acting()
        # Its handle ends it.
        term.end()
        await term.wait_ended()
        assert not view.acting and runs()[-1] == ("cancelled", "slave", 1)
        # A role change ends a running term with the slave term, before the master's starts.
        await view.start_acting()
        await a.replicas.change_to_master(2, a.broker_id)
        assert not view.acting
        assert runs()[2:] == [("started", "slave", 1), ("cancelled", "none", -1),
                              ("started", "master", 2)]
        with pytest.raises(RuntimeError, match="does not act"):
            await view.start_acting()


class SlaveTask(MasterTask):
    """A slave-term component: records its starts and cancellations."""

    name = "slave-task"
    scope = Scope.SLAVE_TERM


async def test_a_slave_term_component_pauses_while_the_slave_acts(tmp_path, mock_clock):
    cluster = Cluster("inproc", tmp_path)
    plugin = TasksPlugin(SlaveTask)
    cluster.pm.register(plugin, name="following")
    runs = plugin.runs
    async with cluster.broker("a", broker_id=1, master="inproc://nobody-ha",
                              extra=MAY_ACT) as a:
        (view,) = plugin.views
        assert runs() == [("started", "slave", 1)]
        # Acting, the slave copies nothing from its master: its own tables are the newer.
        term = await view.start_acting()
        assert runs()[1:] == [("cancelled", "slave", 1)]
        term.end()
        await term.wait_ended()
        await trio.testing.wait_all_tasks_blocked()
        # Back to following once the acting term ended (and in each new slave term).
        assert runs()[2:] == [("started", "slave", 1)]
        await a.replicas.change_to_slave("inproc://nobody-ha", 2, a.broker_id)
        assert runs()[3:] == [("cancelled", "none", -1), ("started", "slave", 2)]
        # A master term runs none of it.
        await a.replicas.change_to_master(3, a.broker_id)
        assert runs()[5:] == [("cancelled", "none", -1)]
    assert [c.name for c in a.components.scoped(Scope.SLAVE_TERM)] == [
        "slave-flush", "replicated-stats", "slave-synchronize", "slave-task"]
