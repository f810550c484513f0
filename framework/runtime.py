"""A node: services under one trio nursery, plugin lifecycle hooks, graceful stop.

Hosts embed a node in their own trio program::

    async with triomq.open_node(config) as node:
        ...  # the node serves until this block ends

Processes use ``triomq <role> --config FILE`` (``run_node``), which stops
gracefully on SIGINT or SIGTERM.

Every node has an RPC client (``node.rpc``: ``await node.rpc.invoke(address,
code, ...)`` over whichever transport the address names) and an RPC server
(``node.rpc_server``), which accepts connections on ``config.listen`` once
every service has started, so services register their handlers first.

When any service raises, every other service is cancelled and ``open_node``
raises ``ServiceCrashed`` naming the service, instead of leaving a
half-alive node behind; one that raises before it has started raises
``ServiceStartFailed`` (not logged: the caller reports it).

A service that listens on an address of its own declares it from
``triomq_node_services`` with ``node.declare_listen(address)``: the node
binds the RPC address and every declared one before any service starts, so
a port in use stops the node before a service has done anything (such as
writing its store); the service's ``node.listen(address)`` then takes the
bound listener.
"""

from __future__ import annotations

import logging
import secrets
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from triomq.admin_access import ADMIN_CODES, AdminAccess
from triomq.clock import wall_ms
from triomq.config import NodeConfig
from triomq.errors import PluginError, ServiceCrashed
from triomq.hookspecs import Service
from triomq.node_auth import INTERNAL_CODES, InnerAuth, is_internal
from triomq.plugin_manager import PluginManager
from triomq.protocol.remoting import ROCKETMQ_VERSION, RemotingCommand
from triomq.rpc import ConnectionLimits, RpcClient, RpcConnection, RpcServer, open_rpc_client
from triomq.rpc.client import Sign
from triomq.rpc.peer import client_certificate
from triomq.rpc.server import Guard
from triomq.transport import Listener, Transport, split_address


class ServiceStartFailed(ServiceCrashed):
    """A node service raised before it had started; the node was stopped."""

    def __init__(self, service: str, cause: BaseException) -> None:
        super().__init__(service, cause)
        self.args = (f"service {service!r} could not start: {type(cause).__name__}: {cause}",)


class _StartWatch:
    """A service's ``task_status`` that remembers whether ``started`` was called."""

    def __init__(self, task_status: trio.TaskStatus[Any]) -> None:
        self._task_status = task_status
        self.started_yet = False

    def started(self, value: Any = None) -> None:
        self.started_yet = True
        self._task_status.started(value)


class Node:
    """A running node. Built by ``open_node``; do not construct it directly."""

    def __init__(self, config: NodeConfig, plugins: PluginManager,
                 nursery: trio.Nursery) -> None:
        self.config = config
        self.plugins = plugins
        #: Calls other nodes by address (set by ``open_node``).
        self.rpc: RpcClient
        #: Answers requests on ``config.listen``; register handlers by request code.
        self.rpc_server = RpcServer(limits=connection_limits(config),
                                    max_connections=config.remoting.max_connections,
                                    max_connections_per_peer=(
                                        config.remoting.max_connections_per_peer))
        #: The address peers dial (``config.listen`` with port 0 resolved), or "".
        self.address = ""
        self.log = logging.getLogger(f"triomq.{config.name}")
        self.log.setLevel(config.log_level)
        access = config.security.admin_access()
        #: The node's cluster credential (``[security] inner_client_access_key``), or None:
        #: its requests to other nodes are signed with it, theirs checked.
        self.inner_auth = config.security.inner_auth(config.name)
        codes = {*(ADMIN_CODES if access.enabled else ()),
                 *(INTERNAL_CODES if self.inner_auth is not None else ())}
        if codes:
            # Whichever role serves them: admin requests need an admin's credential,
            # cluster-internal ones the cluster's.
            self.rpc_server.guard(codes, _security_guard(access, self.inner_auth, self.log))
        self._nursery = nursery
        self._transports: dict[str, Transport] = {}
        self._services: list[str] = []
        self._stopping = False
        #: Addresses services declared (``declare_listen``), bound before they start.
        self._declared: list[str] = []
        self._bound: dict[str, Listener] = {}

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def role(self) -> str:
        return self.config.role

    @property
    def services(self) -> list[str]:
        """Names of the services started so far."""
        return list(self._services)

    @property
    def stopping(self) -> bool:
        """True once ``stop`` was called."""
        return self._stopping

    def sign_internal(self, rpc: RpcClient) -> None:
        """Have ``rpc`` sign the cluster-internal requests it sends with the node's
        cluster credential, if it has one (every RPC client a node service opens)."""
        if self.inner_auth is not None:
            rpc.sign = inner_signer(self.inner_auth)

    # -- transports ---------------------------------------------------------

    def transport(self, scheme: str) -> Transport:
        """The transport for ``scheme``, built once from ``[transport.options.<scheme>]``."""
        if scheme not in self._transports:
            options = self.config.transport.options.get(scheme, {})
            self._transports[scheme] = self.plugins.transport(scheme, options)
        return self._transports[scheme]

    async def connect(self, address: str) -> trio.abc.Stream:
        """Open a byte stream to ``address`` with the transport its scheme names."""
        return await self.transport(split_address(address)[0]).connect(address)

    async def listen(self, address: str) -> Listener:
        """Listen on ``address`` with the transport its scheme names (the listener
        bound for it already, if it was declared)."""
        bound = self._bound.pop(address, None)
        if bound is not None:
            return bound
        return await self.transport(split_address(address)[0]).listen(address)

    def declare_listen(self, address: str) -> None:
        """Say that a service will listen on ``address``: call it from
        ``triomq_node_services``. The node binds it before any service starts."""
        if address not in self._declared:
            self._declared.append(address)

    async def _bind_declared(self) -> None:
        for address in self._declared:
            if address not in self._bound:
                self._bound[address] = await self.transport(split_address(address)[0]
                                                            ).listen(address)

    async def _close_unclaimed(self) -> None:
        with trio.CancelScope(shield=True):
            while self._bound:
                await self._bound.popitem()[1].aclose()

    # -- services -----------------------------------------------------------

    async def start_service(self, name: str, service: Service) -> Any:
        """Run ``service(node, task_status=...)`` in the node's nursery.

        Returns once the service called ``task_status.started(value)``, with
        that value. A service that raises stops the node with ServiceCrashed.
        """
        if name in self._services:
            raise PluginError(f"node {self.name!r} already runs a service named {name!r}")
        self._services.append(name)
        return await self._nursery.start(self._run_service, name, service)

    async def _run_service(self, name: str, service: Service,
                           task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        watch = _StartWatch(task_status)
        try:
            await service(self, task_status=watch)
        except Exception as exc:
            if not watch.started_yet:
                raise ServiceStartFailed(name, exc) from exc
            self.log.error("service %r crashed: %s: %s", name, type(exc).__name__, exc)
            raise ServiceCrashed(name, exc) from exc
        self.log.debug("service %r ended", name)

    def stop(self) -> None:
        """Begin a graceful stop: call ``triomq_node_stopping``, then cancel every service."""
        if self._stopping:
            return
        self._stopping = True
        self.log.info("node %r stopping", self.name)
        self.plugins.hook.triomq_node_stopping(node=self)
        self._nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_node(config: NodeConfig, *, plugins: PluginManager | None = None,
                    services: Mapping[str, Service] | None = None) -> AsyncIterator[Node]:
    """Start a node for ``config`` and stop it when the block ends.

    ``plugins`` defaults to every plugin found by entry point, less
    ``config.plugins.disable``. ``services`` are extra services the host wants
    run in the node's nursery, started before the plugins' ones. The node's
    ``config`` holds a section for each plugin that contributes one (its
    defaults unless ``config`` gives it).
    """
    pm = plugins if plugins is not None else PluginManager.discover(config.plugins.disable)
    config = config.with_sections(pm)
    try:
        async with trio.open_nursery() as nursery:
            node = Node(config, pm, nursery)
            # Its requests declare the RocketMQ release it speaks for: RocketMQ's name
            # server reads a REGISTER_BROKER of version 0 as a pre-3.0.11 broker's.
            async with open_rpc_client(node.connect, limits=connection_limits(config),
                                       version=ROCKETMQ_VERSION) as node.rpc:
                node.sign_internal(node.rpc)
                try:
                    await _start(node, services or {})
                finally:
                    await node._close_unclaimed()
                try:
                    yield node
                finally:
                    node.stop()
    except BaseExceptionGroup as group:
        # A crashed service explains everything else that was cancelled; an
        # error of the host's own block comes back to the host unwrapped.
        crashed = group.subgroup(ServiceCrashed)
        leaves = _leaves(crashed if crashed is not None else group)
        if crashed is None and len(leaves) != 1:
            raise
        raise leaves[0] from (group if crashed is not None else None)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


async def _start(node: Node, host_services: Mapping[str, Service]) -> None:
    if not node.config.listen:
        await _start_services(node, host_services)
    else:
        listener = await node.listen(node.config.listen)
        node.address = listener.address
        try:
            await _start_services(node, host_services)
        except BaseException:
            with trio.CancelScope(shield=True):
                await listener.aclose()
            raise
        await node.start_service("rpc", _serve_rpc(listener))
    node.log.info("node %r started (%s): %s", node.name, node.role, ", ".join(node.services))
    node.plugins.hook.triomq_node_started(node=node)


async def _start_services(node: Node, host_services: Mapping[str, Service]) -> None:
    plugin_services: dict[str, Service] = {}
    for provided in node.plugins.hook.triomq_node_services(node=node):
        plugin_services.update(provided or {})
    if node.role != "standalone" and not plugin_services:
        raise PluginError(
            f"node {node.name!r}: no plugin runs role {node.role!r} "
            f"(plugins: {', '.join(p.name for p in node.plugins.plugins()) or 'none'})")
    await node._bind_declared()
    for name, service in {**host_services, **plugin_services}.items():
        await node.start_service(name, service)


def connection_limits(config: NodeConfig) -> ConnectionLimits:
    """The limits of the node's RPC connections, served and dialled (``[remoting]``)."""
    return ConnectionLimits(max_header_size=config.remoting.max_header_size,
                            max_ext_fields=config.remoting.max_ext_fields)


def inner_signer(auth: InnerAuth) -> Sign:
    """``auth`` as an RPC client's signer: internal requests get the credential, now."""
    def sign(code: int, ext_fields: Mapping[str, str] | None,
             body: bytes) -> Mapping[str, str] | None:
        if not is_internal(code, ext_fields):
            return ext_fields
        return auth.sign(code, ext_fields, body, now_ms=wall_ms(), nonce=secrets.token_hex(16))

    return sign


def _security_guard(access: AdminAccess, inner: InnerAuth | None, log: logging.Logger
                    ) -> Guard:
    """The RPC server's guard of admin and internal requests; refusals are logged."""
    def guard(request: RemotingCommand, connection: RpcConnection) -> RemotingCommand | None:
        if inner is not None and is_internal(request.code, request.ext_fields):
            refusal, kind = inner.refusal(request, wall_ms()), "cluster-internal"
        else:
            refusal = access.refusal(request, client_certificate(connection.stream), wall_ms())
            kind = "admin"
        if refusal is not None:
            log.warning("%s request from %s refused: %s", kind, connection.peer, refusal.remark)
        return refusal

    return guard


def _serve_rpc(listener: Listener) -> Service:
    async def serve(node: Node, task_status: trio.TaskStatus[str]) -> None:
        await node.rpc_server.serve(listener, task_status=task_status)

    return serve


async def run_node(config: NodeConfig, *, plugins: PluginManager | None = None) -> None:
    """Run a node until SIGINT or SIGTERM, then stop it gracefully (the CLI's entry)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_node(config, plugins=plugins) as node:
            async for signum in signals:
                node.log.info("received %s", signal.Signals(signum).name)
                break
