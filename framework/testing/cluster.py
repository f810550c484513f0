"""An embedded controller-mode cluster: name servers, controllers and one broker group.

For tests, demos and benchmarks. Every node is a real ``triomq.runtime``
node run through the plugin manager (the controller plugin, the broker
plugin, a transport and a store), each in a task of its own so that it can
be killed and restarted alone::

    async with open_cluster(tmp_path, transport="inproc") as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await cluster.kill_broker(master)

Nodes: name servers ``n1``..``nK`` (none by default; the brokers register
with every one), controllers ``c1``..``cN`` (Raft ids 1..N) and brokers
``b1``..``bM`` of group ``broker-a``. In-process addresses are ``inproc://<name>`` on a
network of the cluster's own; over TCP, controllers get free ports chosen
up front (their peers need them) and brokers port 0.
"""

from __future__ import annotations

import collections
import itertools
import random
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.broker.service import Broker, broker_of
from triomq.config import NodeConfig
from triomq.plugin_manager import PluginManager
from triomq.runtime import Node, open_node
from triomq.settings import from_mapping

__all__ = ["BROKER_NAME", "Cluster", "free_tcp_port", "open_cluster"]

BROKER_NAME = "broker-a"

_networks = itertools.count(1)

def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux's range, else IANA's)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


# Below the ephemeral range, so no outgoing connection (a client's, another test's) can take
# a port between its choice and its listener; random, so processes rarely pick alike.
_PORTS = range(max(1024, _ephemeral_low() - 12_000), _ephemeral_low())
_pick = random.Random()
# Ports this process handed out lately: a cluster picks several up front, before any of
# them listens, and one pick must not repeat another (a probe cannot see an unbound choice).
_handed_out: collections.deque[int] = collections.deque(maxlen=len(_PORTS) // 4)


def free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range, and
    not among the last few thousand this process handed out."""
    for _ in range(1_000):
        port = _pick.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.append(port)
        return port
    raise OSError(f"no free TCP port on 127.0.0.1 in {_PORTS.start}-{_PORTS.stop - 1}")


@attrs.define
class _Running:
    node: Node
    scope: trio.CancelScope
    stopped: trio.Event


class Cluster:
    """Controllers and brokers of one group; see ``open_cluster``."""

    def __init__(self, root: Path, nursery: trio.Nursery, *, transport: str, controllers: int,
                 brokers: int, plugins: PluginManager, controller: Mapping[str, Any],
                 broker: Mapping[str, Any], store: Mapping[str, Any],
                 namesrvs: int = 0, security: Mapping[str, Any] | None = None,
                 namesrv: Mapping[str, Any] | None = None) -> None:
        if transport not in ("inproc", "tcp"):
            raise ValueError(f"transport must be 'inproc' or 'tcp', not {transport!r}")
        self.root = Path(root)
        self.transport = transport
        self.plugins = plugins
        self.network = f"cluster-{next(_networks)}"
        self.controller_names = [f"c{i}" for i in range(1, controllers + 1)]
        self.broker_names = [f"b{i}" for i in range(1, brokers + 1)]
        self.controller_options = dict(controller)
        self.broker_options = dict(broker)
        self.store_options = dict(store)
        self.namesrv_options = dict(namesrv or {})
        self.security_options = dict(security or {})
        self.controller_addresses = {
            name: (f"inproc://{name}" if transport == "inproc"
                   else f"tcp://127.0.0.1:{free_tcp_port()}")
            for name in self.controller_names}
        self.namesrv_names = [f"n{i}" for i in range(1, namesrvs + 1)]
        self.namesrv_addresses = {
            name: (f"inproc://{name}" if transport == "inproc"
                   else f"tcp://127.0.0.1:{free_tcp_port()}")
            for name in self.namesrv_names}
        self.running: dict[str, _Running] = {}
        self._nursery = nursery

    # -- configs ------------------------------------------------------------------------

    def _base(self, name: str, role: str, listen: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": name, "role": role, "listen": listen, "log_level": "WARNING",
            "store": {"path": str(self.root / name), **self.store_options},
        }
        if self.security_options:
            data["security"] = dict(self.security_options)
        if self.transport == "inproc":
            data["transport"] = {"options": {"inproc": {"network": self.network,
                                                        "local": f"inproc://{name}"}}}
        return data

    def controller_config(self, name: str) -> NodeConfig:
        """The node config of controller ``name``."""
        data = self._base(name, "controller", self.controller_addresses[name])
        peers = {str(i): self.controller_addresses[n]
                 for i, n in enumerate(self.controller_names, 1)}
        data["controller"] = {"node_id": self.controller_names.index(name) + 1, "peers": peers,
                              **self.controller_options}
        return from_mapping(NodeConfig, data)

    def broker_config(self, name: str) -> NodeConfig:
        """The node config of broker ``name`` (controller mode)."""
        listen = f"inproc://{name}" if self.transport == "inproc" else "tcp://127.0.0.1:0"
        data = self._base(name, "broker", listen)
        data["broker"] = {
            "broker_name": BROKER_NAME, "enable_controller_mode": True,
            "controller_addresses": [self.controller_addresses[n] for n in self.controller_names],
            "ha_listen_port": 0,
            "namesrv_addr": [self.namesrv_addresses[n] for n in self.namesrv_names],
            **self.broker_options,
        }
        return from_mapping(NodeConfig, data)

    def namesrv_config(self, name: str) -> NodeConfig:
        """The node config of name server ``name``."""
        data = self._base(name, "nameserver", self.namesrv_addresses[name])
        if self.namesrv_options:
            data["namesrv"] = dict(self.namesrv_options)
        return from_mapping(NodeConfig, data)

    def client_config(self, name: str) -> NodeConfig:
        """A node that only calls others (producers, admin tools)."""
        data = self._base(name, "standalone", "")
        del data["store"]
        data.pop("security", None)  # a client is not one of the cluster's nodes
        return from_mapping(NodeConfig, data)

    # -- running nodes ---------------------------------------------------------------------

    async def start(self, name: str, config: NodeConfig | None = None) -> Node:
        """Start node ``name`` (its default config unless given); it runs until killed.

        Names that are neither controllers nor brokers start client nodes.
        """
        if name in self.running:
            raise ValueError(f"node {name!r} is already running")
        if config is None:
            config = (self.controller_config(name) if name in self.controller_names
                      else self.broker_config(name) if name in self.broker_names
                      else self.namesrv_config(name) if name in self.namesrv_names
                      else self.client_config(name))
        running: _Running = await self._nursery.start(self._run, config)
        self.running[name] = running
        return running.node

    async def _run(self, config: NodeConfig,
                   task_status: trio.TaskStatus[_Running] = trio.TASK_STATUS_IGNORED) -> None:
        stopped = trio.Event()
        try:
            with trio.CancelScope() as scope:
                async with open_node(config, plugins=self.plugins) as node:
                    task_status.started(_Running(node, scope, stopped))
                    await trio.sleep_forever()
        finally:
            stopped.set()

    async def kill(self, name: str) -> None:
        """Stop node ``name`` (its connections close) and wait until it is gone."""
        running = self.running.pop(name)
        running.scope.cancel()
        await running.stopped.wait()

    async def start_controllers(self) -> list[Node]:
        """Start every controller."""
        return [await self.start(name) for name in self.controller_names]

    async def start_namesrvs(self) -> list[Node]:
        """Start every name server."""
        return [await self.start(name) for name in self.namesrv_names]

    async def start_brokers(self) -> list[Node]:
        """Start every broker."""
        return [await self.start(name) for name in self.broker_names]

    def node(self, name: str) -> Node:
        """The running node ``name``."""
        return self.running[name].node

    def broker(self, name: str) -> Broker:
        """The broker running in node ``name``."""
        return broker_of(self.node(name))

    def brokers(self) -> dict[str, Broker]:
        """Every running broker, by node name."""
        return {n: self.broker(n) for n in self.broker_names if n in self.running}

    def masters(self) -> list[str]:
        """Names of the running brokers that are master now."""
        return [n for n, b in self.brokers().items() if b.replicas.role is BrokerRole.MASTER]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Poll ``predicate`` until it returns something true; a liveness bound, not a timing."""
        with trio.fail_after(timeout):
            while not (value := predicate()):
                await trio.sleep(0.01)
        return value

    async def wait_master(self, *, epoch_above: int = 0, timeout: float = 30.0) -> str:
        """The name of the broker that became master with an epoch above ``epoch_above``."""

        def found() -> str | None:
            for name in self.masters():
                if self.broker(name).replicas.master_epoch > epoch_above:
                    return name
            return None

        return await self.wait_for(found, timeout)


@asynccontextmanager
async def open_cluster(root: Path, *, transport: str = "inproc", controllers: int = 3,
                       brokers: int = 3, plugins: PluginManager | None = None,
                       controller: Mapping[str, Any] | None = None,
                       broker: Mapping[str, Any] | None = None,
                       store: Mapping[str, Any] | None = None,
                       namesrvs: int = 0,
                       security: Mapping[str, Any] | None = None,
                       namesrv: Mapping[str, Any] | None = None) -> AsyncIterator[Cluster]:
    """A cluster whose nodes keep their data under ``root``; every node stops at the end.

    ``controller`` / ``broker`` / ``store`` / ``namesrv`` are extra keys of those
    config sections for every node (e.g. ``broker={"all_ack_in_sync_state_set": True}``);
    ``security`` the ``[security]`` keys of every controller, broker and name
    server (client nodes go without: they are not the cluster's).
    Nothing starts by itself: call ``start_namesrvs`` / ``start_controllers`` /
    ``start_brokers``.
    """
    pm = plugins if plugins is not None else PluginManager.discover()
    async with trio.open_nursery() as nursery:
        cluster = Cluster(root, nursery, transport=transport, controllers=controllers,
                          brokers=brokers, plugins=pm, controller=controller or {},
                          broker=broker or {}, store=store or {}, namesrvs=namesrvs,
                          security=security, namesrv=namesrv)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()
