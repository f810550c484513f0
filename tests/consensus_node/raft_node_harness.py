"""A cluster of real nodes, each running ``open_raft_node``, for the driver's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from triomq.config import NodeConfig, StoreConfig, TransportConfig
from triomq.consensus.core.config import RaftConfig
from triomq.consensus.node import RaftNode, open_raft_node
from triomq.plugin_manager import PluginManager
from triomq.runtime import Node, open_node
from triomq.testing.cluster import free_tcp_port


class Journal:
    """A state machine remembering every command applied, in order."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply(self, index: int, data: bytes) -> Any:
        if data == b"boom":
            raise ValueError("boom")
        self.applied.append((index, data))
        return (index, data)

    def snapshot(self) -> bytes:
        return json.dumps([[i, d.hex()] for i, d in self.applied]).encode()

    def restore(self, data: bytes) -> None:
        self.applied = [(i, bytes.fromhex(d)) for i, d in json.loads(data)]

    @property
    def commands(self) -> list[bytes]:
        return [d for _, d in self.applied]


class Member:
    """One node of the cluster, which can be stopped and started again."""

    def __init__(self, node_id: int, node_config: NodeConfig, raft_config: RaftConfig) -> None:
        self.node_id = node_id
        self.node_config = node_config
        self.raft_config = raft_config
        self.journal = Journal()
        self.raft: RaftNode | None = None
        self.node: Node | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()

    @property
    def r(self) -> RaftNode:
        assert self.raft is not None, f"node {self.node_id} is down"
        return self.raft

    async def _run(self, plugins: PluginManager,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.journal = Journal()
        self._stopped = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                async with open_node(self.node_config, plugins=plugins) as node, \
                        open_raft_node(node, self.raft_config, self.journal) as raft:
                    self.node, self.raft = node, raft
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            self.node = self.raft = None
            self._stopped.set()

    async def stop(self) -> None:
        assert self._scope is not None
        self._scope.cancel()
        await self._stopped.wait()


class Cluster:
    """Members by id, started in a nursery; helpers to find the leader."""

    def __init__(self, nursery: trio.Nursery, plugins: PluginManager,
                 members: dict[int, Member]) -> None:
        self.nursery = nursery
        self.plugins = plugins
        self.members = members

    def __getitem__(self, node_id: int) -> Member:
        return self.members[node_id]

    async def start(self, node_id: int) -> Member:
        member = self.members[node_id]
        await self.nursery.start(member._run, self.plugins)
        return member

    async def leader(self, among: set[int] | None = None) -> Member:
        """Wait until one running member (of ``among``) leads and the others follow it."""
        while True:
            up = [m for i, m in self.members.items()
                  if m.raft is not None and (among is None or i in among)]
            leaders = [m for m in up if m.r.is_leader]
            if len(leaders) == 1 and all(m.r.leader_id == leaders[0].node_id for m in up):
                return leaders[0]
            await trio.sleep(0.05)

    async def until_applied(self, count: int, ids: set[int] | None = None) -> None:
        """Wait until the members (default: all running) applied ``count`` commands."""
        while True:
            chosen = [m for i, m in self.members.items()
                      if m.raft is not None and (ids is None or i in ids)]
            if all(len(m.journal.applied) >= count for m in chosen):
                return
            await trio.sleep(0.05)


def free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 right now."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_tcp_port())
    return sorted(ports)


def make_members(tmp_path: Path, ids: list[int], *, transport: str = "inproc",
                 network: str = "", scheme: str = "mmap", extra: list[int] | None = None,
                 **raft_options: Any) -> dict[int, Member]:
    """Members ``ids`` (founders) plus ``extra`` (joiners), addressed over ``transport``."""
    everyone = ids + (extra or [])
    if transport == "tcp":
        ports = free_ports(len(everyone))
        addresses = {i: f"tcp://127.0.0.1:{p}" for i, p in zip(everyone, ports, strict=True)}
    else:
        addresses = {i: f"inproc://n{i}" for i in everyone}
    members = {}
    for i in everyone:
        options = {"inproc": {"network": network, "local": addresses[i]}} if network else {}
        node_config = NodeConfig(name=f"n{i}", listen=addresses[i],
                                 transport=TransportConfig(options=options),
                                 store=StoreConfig(path=str(tmp_path / f"n{i}")))
        raft_config = RaftConfig(node_id=i, peers=addresses, members=tuple(ids),
                                 join=i not in ids, store_scheme=scheme, **raft_options)
        members[i] = Member(i, node_config, raft_config)
    return members
