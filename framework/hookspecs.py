"""The plugin contract: every hook a triomq plugin may implement.

triomq uses pluggy with the project name ``"triomq"``. A plugin is any
module or object whose functions are decorated with ``triomq.hookimpl``
and named after the specs below. In-tree plugins and third-party ones are
found the same way: an entry point in group ``triomq`` naming the module::

    [project.entry-points.triomq]
    my_transport = "my_package.transport"

A host may also register plugin objects directly and disable discovered
plugins by name (``triomq.plugin_manager.PluginManager``).

Provider hooks (``triomq_transport``, ``triomq_log_store``,
``triomq_election_policy``, ``triomq_escape_bridge``) return a mapping from
the name they provide to a factory. All implementations are collected; when
two plugins provide the same name, the one registered last wins, so a host
that registers its own plugin overrides an in-tree one. Asking for a name no
plugin provides raises ``PluginError`` listing the names that exist.

Role hooks (``triomq_config_sections``, ``triomq_roles``) are how a role
plugin joins the node's configuration: the kernel names no role itself.
``triomq_broker_components`` adds components to every broker.

Lifecycle hooks are called by ``triomq.runtime`` for every node; they
receive the ``Node`` so a plugin can look at its config, role and services.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse

    from triomq.broker.components import BrokerComponent, ComponentView
    from triomq.broker.core.escape_bridge import EscapeBridge
    from triomq.plugin_manager import PluginManager
    from triomq.runtime import Node
    from triomq.transport import Transport

PROJECT = "triomq"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: A factory building a transport from its options (the ``[transport]``
#: table of the node's config, e.g. TLS files). Called once per node.
TransportFactory = Callable[[Mapping[str, Any]], "Transport"]

#: A factory opening a store at a directory with its options; it runs the
#: store's recovery before returning. Blocking: drivers call it in a thread.
StoreFactory = Callable[[str, Mapping[str, Any]], Any]

#: A service is an async function run in the node's nursery until the node
#: stops. It receives the node and ``task_status``; it calls
#: ``task_status.started()`` once it is ready to serve.
Service = Callable[..., Awaitable[None]]

#: A factory building an escape bridge for a broker node; called while the
#: node's broker runs (``triomq.broker.core.escape_bridge``).
EscapeBridgeFactory = Callable[["Node"], "EscapeBridge"]


# --------------------------------------------------------------------------
# Provider hooks: the four seams named by the design.
# --------------------------------------------------------------------------


@hookspec
def triomq_transport() -> Mapping[str, TransportFactory]:
    """Return the transports this plugin provides, by address scheme.

    Example: ``{"tcp": TcpTransport.from_options}``. A factory receives the
    node's transport options and returns an object satisfying
    ``triomq.transport.Transport``; its ``scheme`` equals the key.
    """


@hookspec
def triomq_log_store() -> Mapping[tuple[str, str], StoreFactory]:
    """Return the stores this plugin provides, by ``(kind, scheme)``.

    ``kind`` is one of ``triomq.store.STORE_KINDS``: ``"commitlog"``
    (a ``CommitLog``), ``"entrylog"`` (a Raft ``EntryLog``) or ``"meta"``
    (a ``MetaStore``). ``scheme`` names the implementation (``"mmap"``,
    ``"lmdb"``). The factory takes ``(directory, options)``.
    """


@hookspec
def triomq_election_policy() -> Mapping[str, Callable[..., Any]]:
    """Return the master-election policies this plugin provides, by name.

    The controller looks its policy up by the ``election_policy`` config key
    (default ``"default"``, RocketMQ's policy). A policy is a pure callable
    ``policy(group, live_info, designated_broker_id, enable_elect_unclean_master)``
    returning the broker id to elect or ``None``; the contract is
    ``triomq.controller.core.election.ElectionPolicy``. Whatever a policy
    answers, the controller never elects an unregistered broker, nor one
    outside the SyncStateSet unless unclean election is enabled.
    """


@hookspec
def triomq_escape_bridge() -> Mapping[str, EscapeBridgeFactory]:
    """Return the escape bridges this plugin provides, by name.

    An acting master (a slave serving for an absent master) must not write
    its own commit log; the secondary-message services hand their output to
    an escape bridge, which puts it on a master (local or remote). The
    factory takes the broker's node and returns a
    ``triomq.broker.core.escape_bridge.EscapeBridge``; the broker plugin provides
    ``"local"`` (a put through this broker's own put flow, for a master).
    ``triomq.testing.escape_bridge_suite`` states what a bridge must do.
    """


# --------------------------------------------------------------------------
# Roles: what a role plugin adds to the node's configuration.
# --------------------------------------------------------------------------


@hookspec
def triomq_config_sections() -> Mapping[str, type]:
    """Return this plugin's configuration sections: table name -> attrs class.

    Example: ``{"broker": BrokerConfig}``. The table ``[broker]`` of a node's
    config is built into a ``BrokerConfig`` (with ``triomq.settings``: keys
    declared with ``setting``), a missing table is the class's defaults, and
    the node reads it as ``node.config.broker`` (or
    ``node.config.section("broker")``). ``triomq config`` lists its keys.
    When two plugins provide the same table, the one registered last wins; a
    table may not be named like a key of the node itself (``name``,
    ``store``, ...).
    """


@hookspec
def triomq_roles() -> Iterable[str]:
    """Return the roles this plugin runs: the values it gives the ``role`` key.

    Example: ``["broker"]``. A node of that role asks every plugin for its
    services (``triomq_node_services``); the kernel runs none of its own
    besides ``"standalone"`` (only what plugins add), and a config file
    naming a role no plugin declares is rejected.
    """


@hookspec
def triomq_broker_components(node: Node, broker: ComponentView
                             ) -> Iterable[BrokerComponent] | None:
    """Return the components this plugin adds to the broker running in ``node``.

    Called once when the broker starts, after its own components are built
    and before it takes a role; ``broker`` is all a component may know of
    the broker (role, epoch, confirm offset, commit log, master address).
    A component (``triomq.broker.components.BrokerComponent``) registers its
    request handlers, runs in its scope (always; each master term, started
    in the term's nursery and cancelled with it; each slave term, but not
    while the slave acts; or each acting term of a slave acting for its
    absent master) and hears of role changes. A
    component scoped to the acting term is refused by a broker without
    ``enable_slave_acting_master``, as is one named like another. Return
    ``None`` to add nothing.
    """


# --------------------------------------------------------------------------
# Lifecycle hooks.
# --------------------------------------------------------------------------


@hookspec
def triomq_node_services(node: Node) -> Mapping[str, Service] | None:
    """Return the services this plugin wants run in ``node``'s nursery, by name.

    Called once when the node starts, after the node's own role services.
    Return ``None`` (or an empty mapping) when the plugin has nothing to run
    for this node, e.g. because of its role. A service that raises stops the
    whole node with ``ServiceCrashed`` naming it.
    """


@hookspec
def triomq_node_started(node: Node) -> None:
    """Called once every service of ``node`` has reported it is ready."""


@hookspec
def triomq_node_stopping(node: Node) -> None:
    """Called when ``node`` begins a graceful stop, before services are cancelled."""


@hookspec
def triomq_role_changed(node: Node, broker_name: str, broker_id: int, role: str,
                        master_epoch: int) -> None:
    """Called after a broker replica changed role (``"master"`` or ``"slave"``).

    ``master_epoch`` is the epoch of the master the broker now serves or
    follows. Synchronous; a plugin that needs to do I/O starts it from one of
    its services.
    """


@hookspec
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction,
                            plugin_manager: PluginManager) -> None:
    """Add sub-commands to the ``triomq`` command line.

    Each sub-command sets ``func`` with ``parser.set_defaults(func=...)``;
    ``func(args)`` returns the process exit code. This is how store plugins
    add ``triomq store ...``, the Spark plugin ``triomq export ...`` and the
    demo plugin ``triomq demo``. ``plugin_manager`` is the one the command
    line runs with (its plugins, less ``plugins.disable``), for a command that
    opens nodes; an implementation may leave it out of its signature.
    """


@hookspec
def triomq_add_admin_commands(commands: argparse._SubParsersAction) -> None:
    """Add commands to ``triomq admin`` (mqadmin's), one sub-parser each.

    ``triomq admin`` is shared by every role plugin: the controller plugin
    adds its controller commands, the name-server plugin its topic and
    route commands. Each command sets ``func`` as for
    ``triomq_add_cli_commands``.
    """
