"""A hand-driven cluster of Raft state machines, for scenario tests.

Unlike ``raftsim.RaftSimulation`` nothing here is random: a test ticks nodes,
lets messages settle, cuts links, crashes and restarts nodes (keeping only
their disks) and looks at the result. Messages are delivered in send order.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable

from triomq.consensus.core.log import Entry, HardState, bootstrap_entries
from triomq.consensus.core.messages import Message
from triomq.consensus.core.raft import Raft, RaftSettings
from triomq.consensus.core.ready import ProposalResult, Ready, Role
from triomq.testing.raftsim_parts import Disk, HashChain

#: Deterministic timing for scenarios: no pre-vote surprises unless asked.
SCENARIO_CONFIG = RaftSettings(election_ticks=10, heartbeat_ticks=1)


class ClusterNode:
    """One host: a disk that survives crashes and the Raft running on it."""

    def __init__(self, node_id: int, disk: Disk, config: RaftSettings) -> None:
        self.id = node_id
        self.disk = disk
        self.config = config
        self.raft: Raft | None = None
        self.sm = HashChain()
        self.applied: list[Entry] = []
        self.results: list[ProposalResult] = []
        self.readies: list[Ready] = []
        self.start()

    def start(self) -> None:
        """Boot from the disk (as after a restart)."""
        self.raft = Raft(
            self.id,
            self.config,
            hard_state=self.disk.hard_state,
            snapshot=self.disk.snapshot,
            entries=list(self.disk.entries),
            rng=random.Random(self.id),
        )
        self.sm = HashChain()
        self.applied = [e for e in self.applied if e.index <= self.disk.snapshot.index]
        if self.disk.snapshot.index:
            self.sm.restore(self.disk.snapshot)

    @property
    def up(self) -> bool:
        return self.raft is not None

    def r(self) -> Raft:
        """The running Raft (fails if crashed)."""
        assert self.raft is not None, f"node {self.id} is down"
        return self.raft


class RaftCluster:
    """Nodes, a FIFO network with cuttable links, and helpers to drive them."""

    def __init__(
        self,
        voters: Iterable[int] = (1, 2, 3),
        config: RaftSettings = SCENARIO_CONFIG,
    ) -> None:
        self.config = config
        hard_state, entries = bootstrap_entries(voters)
        self.nodes: dict[int, ClusterNode] = {
            i: ClusterNode(i, Disk(hard_state, entries), config) for i in sorted(set(voters))
        }
        self.queue: deque[Message] = deque()
        self.blocked: set[tuple[int, int]] = set()
        #: Messages for which this returns True are dropped.
        self.drop: Callable[[Message], bool] = lambda m: False
        self.delivered: list[Message] = []

    # ------------------------------------------------------------ nodes

    def __getitem__(self, node_id: int) -> Raft:
        return self.nodes[node_id].r()

    def add_node(self, node_id: int) -> ClusterNode:
        """A new, empty node (it learns everything by replication)."""
        node = ClusterNode(node_id, Disk(HardState(), ()), self.config)
        self.nodes[node_id] = node
        return node

    def crash(self, node_id: int) -> None:
        """Stop a node; only its disk survives."""
        self.nodes[node_id].raft = None

    def restart(self, node_id: int) -> None:
        """Start a crashed (or running) node again from its disk."""
        self.nodes[node_id].start()

    def leader(self) -> int | None:
        """The leader with the highest term among running nodes."""
        best: tuple[int, int] | None = None
        for node in self.nodes.values():
            if node.up and node.r().role is Role.LEADER:
                candidate = (node.r().term, node.id)
                best = candidate if best is None or candidate > best else best
        return best[1] if best else None

    # ------------------------------------------------------------ network

    def isolate(self, node_id: int) -> None:
        """Cut every link to and from ``node_id``."""
        self.partition({node_id})

    def partition(self, group: set[int], one_way: bool = False) -> None:
        """Cut ``group`` from everyone else (only outgoing links when ``one_way``)."""
        others = set(self.nodes) - group
        for a in group:
            for b in others:
                self.blocked.add((a, b))
                if not one_way:
                    self.blocked.add((b, a))

    def heal(self) -> None:
        """Restore every link and stop dropping messages."""
        self.blocked.clear()
        self.drop = lambda m: False

    # ------------------------------------------------------------ driving

    def process(self, node_id: int) -> None:
        """Carry out a node's Ready: persist, send, restore, apply."""
        node = self.nodes[node_id]
        if not node.up or not node.r().has_ready():
            return
        ready = node.r().ready()
        node.readies.append(ready)
        for write in ready.writes:
            node.disk.apply(write)
        self.queue.extend(ready.messages)
        if ready.snapshot is not None:
            node.sm.restore(ready.snapshot)
            node.applied = []
        for entry in ready.committed_entries:
            node.sm.apply(entry)
            node.applied.append(entry)
        node.results.extend(ready.results)

    def settle(self, limit: int = 100_000) -> None:
        """Process readies and deliver messages until nothing moves."""
        for _ in range(limit):
            for node_id in sorted(self.nodes):
                self.process(node_id)
            if not self.queue:
                return
            while self.queue:
                self.deliver(self.queue.popleft())
        raise AssertionError("cluster did not settle")

    def deliver(self, message: Message) -> None:
        """Hand one message to its receiver unless cut, dropped or down."""
        target = self.nodes.get(message.dst)
        if (
            target is None
            or not target.up
            or (message.src, message.dst) in self.blocked
            or self.drop(message)
        ):
            return
        self.delivered.append(message)
        target.r().step(message)
        self.process(message.dst)

    def tick(self, times: int = 1, nodes: Iterable[int] | None = None) -> None:
        """Tick the given (default: all running) nodes, settling after each tick."""
        for _ in range(times):
            for node_id in sorted(nodes if nodes is not None else self.nodes):
                if self.nodes[node_id].up:
                    self.nodes[node_id].r().tick()
            self.settle()

    def elect(self, node_id: int) -> None:
        """Make ``node_id`` campaign and let the election finish."""
        self[node_id].campaign()
        self.settle()
        assert self[node_id].role is Role.LEADER, f"node {node_id} did not win"

    def run_until(self, predicate: Callable[[], bool], max_ticks: int = 500) -> int:
        """Tick until ``predicate()`` holds; return the ticks it took."""
        for ticks in range(max_ticks + 1):
            if predicate():
                return ticks
            self.tick()
        raise AssertionError(f"condition not reached within {max_ticks} ticks")

    def propose(self, node_id: int, data: bytes) -> int:
        """Propose at ``node_id`` and settle; return the index."""
        index = self[node_id].propose(data)
        self.settle()
        return index

    def results(self, node_id: int) -> dict[int, ProposalResult]:
        """Results a node has delivered, by index."""
        return {r.index: r for r in self.nodes[node_id].results}

    def applied_data(self, node_id: int) -> list[bytes]:
        """Data of the NORMAL entries a node applied since its last restore."""
        return [e.data for e in self.nodes[node_id].applied if e.kind.name == "NORMAL"]
