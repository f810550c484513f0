"""Deterministic simulation of a Raft cluster, driven by one seed.

A seed picks the fault rates and drives everything else: message drop,
duplication, reordering and delay; symmetric and one-way partitions; crashes
(also in the middle of persisting a ``Ready``, losing the unsynced writes)
and restarts from what was persisted; clock skew; membership changes
(learners, promotions, removals, joint changes replacing the leader);
leadership transfers; snapshots and log compaction; and a fuzzer injecting
malformed, unknown-node, old-term and impossible-index messages.

Invariants checked throughout: at most one leader per term; log matching
(an index and term name one entry and one history); leader completeness
(a new leader holds every committed entry); state-machine safety (no two
nodes apply different entries at one index); linearizable reads (a read
index is never behind a write acknowledged before the read began); committed
entries are never
lost (no disk ever truncates one); and liveness (once
the network heals and every node is up, a proposal commits in bounded time).

Replay a seed with ``triomq sim --seeds 1 --start SEED`` or
``python -m triomq.testing.raftsim --seeds 1 --start SEED``. The test
suite runs 300 seeds (about 8 s); a longer run, e.g. ``python -m
triomq.testing.raftsim --seeds 10000 --start 1000`` (about 5 minutes on
one core), is worth doing after any change to ``triomq.consensus``.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections import deque
from collections.abc import Sequence

import attrs

from triomq.consensus.core.confchange import (
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
)
from triomq.consensus.core.log import Entry, bootstrap_entries
from triomq.consensus.core.messages import DLedgerCode
from triomq.consensus.core.raft import ProposalRejected, Raft, RaftSettings
from triomq.consensus.core.ready import Role, TruncateSuffix
from triomq.testing import seeds
from triomq.testing.raftsim_fuzz import mutate
from triomq.testing.raftsim_parts import Disk, Faults, HashChain, RaftNetwork
from triomq.testing.seeds import SimSummary, Violation

SIM_RAFT_CONFIG = RaftSettings(
    election_ticks=10,
    heartbeat_ticks=2,
    push_timeout_ticks=4,
    max_wait_ack_ticks=20,
    max_pending_size=8,
    max_batch_entries=3,
    push_quota_bytes=4096,
    fast_forward_ticks=4,
    max_buffered_pushes=16,
)


@attrs.frozen
class RaftSeedResult:
    """The outcome of one seed."""

    seed: int
    ok: bool
    violation: str = ""
    ticks: int = 0
    committed: int = 0
    elections: int = 0

    @property
    def replay(self) -> str:
        """The command that replays this seed."""
        return f"triomq sim --seeds 1 --start {self.seed}"


@attrs.define
class SimNode:
    """A simulated host: its disk survives crashes, its Raft does not."""

    id: int
    disk: Disk
    rate: float
    raft: Raft | None = None
    sm: HashChain = attrs.field(factory=HashChain)
    down_until: int = 0


class RaftSimulation:
    """One seeded run over a cluster of ``Raft`` state machines."""

    def __init__(self, seed: int, chaos_ticks: int = 300, heal_ticks: int = 300) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.chaos_ticks = chaos_ticks
        self.heal_ticks = heal_ticks
        self.now = 0
        self.network = RaftNetwork(random.Random(self.rng.getrandbits(64)))
        rng = self.rng
        self.chaos = Faults(
            drop=rng.choice([0.0, 0.02, 0.1]),
            duplicate=rng.choice([0.0, 0.02, 0.05]),
            max_delay=rng.choice([0, 1, 3]),
        )
        self.p_partition = rng.choice([0.0, 0.01, 0.02])
        self.p_crash = rng.choice([0.0, 0.01, 0.03, 0.06])
        self.p_member = rng.choice([0.0, 0.01, 0.03])
        self.p_fuzz = rng.choice([0.0, 0.05])
        self.p_propose = rng.choice([0.2, 0.5])
        self.nodes: dict[int, SimNode] = {}
        founders = list(range(1, rng.choice([1, 3, 5, 5]) + 1))
        hard_state, entries = bootstrap_entries(founders)
        for node_id in founders:
            self._add_node(node_id, Disk(hard_state, entries))
        self.next_id = len(founders) + 1
        # Invariant bookkeeping.
        self.leaders: dict[int, int] = {}  # term -> leader id
        self.entries: dict[tuple[int, int], tuple[Entry, int | None]] = {}
        self.applied: dict[int, bytes] = {}  # index -> state-machine digest
        self.committed: dict[int, int] = {}  # index -> term, as applied anywhere
        self.max_committed = 0
        self.commit_marks: dict[int, int] = {}  # term -> last index its leader committed
        self.successes = 0
        self.acked_index = 0  # the highest index a client was told is committed
        self.reads: dict[bytes, int] = {}  # read context -> acked_index when asked
        self.recent: deque[object] = deque(maxlen=64)  # real messages for the fuzzer

    # ------------------------------------------------------------ nodes

    def _add_node(self, node_id: int, disk: Disk) -> SimNode:
        node = SimNode(node_id, disk, rate=self.rng.choice([0.7, 1.0, 1.0, 1.3]))
        self.nodes[node_id] = node
        self._start(node)
        return node

    def _start(self, node: SimNode) -> None:
        disk = node.disk
        node.raft = Raft(
            node.id,
            SIM_RAFT_CONFIG,
            hard_state=disk.hard_state,
            snapshot=disk.snapshot,
            entries=list(disk.entries),
            rng=random.Random(self.rng.getrandbits(64)),
        )
        node.sm = HashChain()
        if disk.snapshot.index:
            node.sm.restore(disk.snapshot)

    def _crash(self, node: SimNode, until: int) -> None:
        node.raft = None
        node.down_until = until

    def _alive(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.raft is not None]

    def _leader(self) -> SimNode | None:
        best = None
        for node in self._alive():
            assert node.raft is not None
            if node.raft.role is Role.LEADER and (best is None or node.raft.term > best.raft.term):
                best = node
        return best

    # ------------------------------------------------------------ ready

    def _process(self, node: SimNode, chaos: bool) -> None:
        raft = node.raft
        if raft is None or not raft.has_ready():
            return
        ready = raft.ready()
        if chaos and self.p_crash and self.rng.random() < self.p_crash / 2:
            # Crash while persisting: only a prefix of the writes reached disk.
            kept = self.rng.randint(0, len(ready.writes))
            for write in ready.writes[:kept]:
                self._persist(node, write)
            self._crash(node, self.now + self.rng.randint(1, 10))
            return
        for write in ready.writes:
            self._persist(node, write)
        for message in ready.messages:
            self.network.send(message, self.now)
            if self.p_fuzz:
                self.recent.append(message)
        if ready.snapshot is not None:
            node.sm.restore(ready.snapshot)
        for entry in ready.committed_entries:
            node.sm.apply(entry)
            self._check_applied(node, entry)
        for result in ready.results:
            if result.code is DLedgerCode.SUCCESS:
                self.successes += 1
                self.acked_index = max(self.acked_index, result.index)
        for state in ready.read_states:
            asked = self.reads.pop(state.context)
            if state.code is DLedgerCode.SUCCESS and state.index < asked:
                raise Violation(
                    f"stale read: node {node.id} answered a read at {state.index}, but "
                    f"{asked} was acknowledged before the read began"
                )
        if raft.role is Role.LEADER:
            self._check_leader(node)

    def _persist(self, node: SimNode, write: object) -> None:
        self._check_truncation(node, write)
        for entry, prev_term in node.disk.apply(write):  # type: ignore[arg-type]
            key = (entry.index, entry.term)
            seen = self.entries.setdefault(key, (entry, prev_term))
            if seen != (entry, prev_term):
                raise Violation(
                    f"log matching: node {node.id} stored {entry} after term {prev_term}, "
                    f"another node has {seen[0]} after term {seen[1]}"
                )

    def _check_applied(self, node: SimNode, entry: Entry) -> None:
        digest = self.applied.setdefault(entry.index, node.sm.digest)
        if digest != node.sm.digest:
            raise Violation(f"state-machine safety: node {node.id} applied a different {entry}")
        term = self.committed.setdefault(entry.index, entry.term)
        if term != entry.term:
            raise Violation(f"committed entry {entry.index} changed term {term}->{entry.term}")
        self.max_committed = max(self.max_committed, entry.index)

    def _check_leader(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        holder = self.leaders.setdefault(raft.term, node.id)
        if holder != node.id:
            raise Violation(f"two leaders in term {raft.term}: {holder} and {node.id}")
        # Entries committed in earlier terms must all be in this leader's log;
        # by log matching it is enough to look at the last of them.
        marks = self.commit_marks
        index = max((i for t, i in marks.items() if t < raft.term), default=0)
        marks[raft.term] = max(marks.get(raft.term, 0), raft.commit_index)
        if index > raft.log.snapshot.index and raft.log.term_at(index) != self.committed[index]:
            raise Violation(
                f"leader completeness: leader {node.id} (term {raft.term}) lacks committed "
                f"entry {index} of term {self.committed[index]}"
            )

    def _check_truncation(self, node: SimNode, write: object) -> None:
        """A truncation may drop divergent entries, never a committed one."""
        if not isinstance(write, TruncateSuffix):
            return
        disk = node.disk
        for index in range(write.index, min(disk.last_index, self.max_committed) + 1):
            if disk.term_at(index) == self.committed.get(index):
                raise Violation(
                    f"committed entry lost: node {node.id} truncates committed entry {index}"
                )

    # ------------------------------------------------------------ chaos

    def _chaos(self) -> None:
        rng = self.rng
        everyone = set(self.nodes)
        if self.p_partition and rng.random() < self.p_partition:
            if self.network.blocked and rng.random() < 0.5:
                self.network.heal()
            else:
                size = rng.randint(1, max(1, len(everyone) // 2))
                group = set(rng.sample(sorted(everyone), size))
                self.network.partition(group, everyone, one_way=rng.random() < 0.3)
        if self.p_crash and rng.random() < self.p_crash:
            alive = self._alive()
            leader = self._leader()
            if leader is not None and rng.random() < 0.5:
                self._crash(leader, self.now + rng.randint(1, 40))  # leader churn
            elif alive:
                self._crash(rng.choice(alive), self.now + rng.randint(1, 40))
        if self.p_member and rng.random() < self.p_member:
            self._change_membership()
        leader = self._leader()
        if leader is not None and rng.random() < 0.005:
            voters = sorted(leader.raft.configuration.voters.ids() - {leader.id})
            if voters:
                with contextlib.suppress(ProposalRejected):
                    leader.raft.transfer_leadership(rng.choice(voters))
        for node in self._alive():
            raft = node.raft
            if rng.random() < 0.01 and raft.applied_index > raft.log.snapshot.index + 4:
                raft.compact(raft.applied_index, node.sm.snapshot_data())
        if self.p_fuzz and self.recent and rng.random() < self.p_fuzz:
            victim = rng.choice(sorted(self.nodes))
            message = self.recent[rng.randrange(len(self.recent))]
            self.network.inject(mutate(rng, message, victim), self.now)

    def _change_membership(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        raft = leader.raft
        config = raft.configuration
        rng = self.rng
        voters = sorted(config.voters.incoming.voters)
        learners = sorted(config.learners)
        add, remove, learner = (
            ConfChangeType.ADD_NODE,
            ConfChangeType.REMOVE_NODE,
            ConfChangeType.ADD_LEARNER_NODE,
        )
        if config.is_joint:
            change = ConfChangeV2()  # leave explicitly (needed after EXPLICIT)
        else:
            choice = rng.randrange(5)
            if choice == 0 and len(self.nodes) < 8:
                change = ConfChangeV2([ConfChangeSingle(learner, self._new_node())])
            elif choice == 1 and learners:
                change = ConfChangeV2([ConfChangeSingle(add, rng.choice(learners))])
            elif choice == 2 and len(voters) > 2:
                change = ConfChangeV2([ConfChangeSingle(remove, rng.choice(voters))])
            elif choice == 3 and len(self.nodes) < 8:
                # Replace a voter (often the leader) through a joint configuration.
                gone = leader.id if rng.random() < 0.5 else rng.choice(voters)
                new = learners[0] if learners else self._new_node()
                transition = rng.choice(list(ConfChangeTransition))
                change = ConfChangeV2(
                    [ConfChangeSingle(remove, gone), ConfChangeSingle(add, new)], transition
                )
            elif choice == 4 and len(voters) > 1:
                change = ConfChangeV2(
                    [ConfChangeSingle(learner, rng.choice(voters))], ConfChangeTransition.IMPLICIT
                )
            else:
                return
        with contextlib.suppress(ProposalRejected):
            raft.propose_conf_change(change)

    def _new_node(self) -> int:
        node_id = self.next_id
        self.next_id += 1
        self._add_node(node_id, Disk())
        return node_id

    # ------------------------------------------------------------ steps

    def _step(self, chaos: bool) -> None:
        self.now += 1
        rng = self.rng
        if chaos:
            self._chaos()
        for node in self.nodes.values():
            if node.raft is None:
                if node.down_until <= self.now:
                    self._start(node)
                continue
            ticks = int(node.rate) + (rng.random() < node.rate % 1)
            for _ in range(ticks):
                node.raft.tick()
        leader = self._leader()
        if leader is not None and rng.random() < self.p_propose:
            with contextlib.suppress(ProposalRejected):
                leader.raft.propose(b"cmd-%d-%d" % (self.seed, self.now))
        leaders = [n for n in self._alive() if n.raft.role is Role.LEADER]
        if leaders and rng.random() < self.p_propose / 4:
            context = b"read-%d" % self.now  # any leader, stale ones included
            with contextlib.suppress(ProposalRejected):
                rng.choice(leaders).raft.read_index(context)
                self.reads[context] = self.acked_index
        for message in self.network.due(self.now):
            target = self.nodes.get(getattr(message, "dst", -1))
            if target is None:
                target = self.nodes[rng.choice(sorted(self.nodes))]
            if target.raft is not None:
                target.raft.step(message)  # type: ignore[arg-type]
                self._process(target, chaos)
        for node in list(self.nodes.values()):
            self._process(node, chaos)

    def run(self) -> RaftSeedResult:
        """Run chaos, then heal everything and require a commit in bounded time."""
        try:
            self.network.faults = self.chaos
            for _ in range(self.chaos_ticks):
                self._step(chaos=True)
            self.network.faults = Faults()
            self.network.heal()
            for node in self.nodes.values():
                node.down_until = 0
            before = self.successes
            healed_at = self.now
            while self.successes == before:
                if self.now - healed_at > self.heal_ticks:
                    raise Violation(
                        f"liveness: no proposal committed within {self.heal_ticks} ticks of healing"
                    )
                self._step(chaos=False)
        except Violation as violation:
            return self._result(ok=False, violation=str(violation))
        return self._result(ok=True)

    def _result(self, ok: bool, violation: str = "") -> RaftSeedResult:
        return RaftSeedResult(
            seed=self.seed,
            ok=ok,
            violation=violation,
            ticks=self.now,
            committed=self.max_committed,
            elections=len(self.leaders),
        )


def run_seed(seed: int) -> RaftSeedResult:
    """Simulate one seed."""
    return RaftSimulation(seed).run()


def run_seeds(count: int, start: int = 0) -> SimSummary:
    """Simulate seeds ``start .. start + count - 1``."""
    return seeds.run_seeds(run_seed, count, start)


def main(argv: Sequence[str] | None = None) -> int:
    """``--seeds N [--start K]``: print failures with replay commands, then the tally."""
    return seeds.main("raftsim", __doc__.splitlines()[0], run_seed,
                      lambda r: f"tick {r.ticks}", argv)


if __name__ == "__main__":
    sys.exit(main())
