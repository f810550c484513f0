"""The interpreter of a failover scenario (``triomq.testing.scenarios``), sans-I/O.

``ScenarioRun`` reads no clock and does no I/O: its pump shows it the
cluster as a ``ClusterSnapshot`` and carries out the ``Action``, ``Advance`` or
``Done`` it answers with. A wait ends when its condition holds or after
``LIVENESS_MS`` of the snapshots' time; either way its outcome is what the
last snapshot shows, so a bound passed shows as an outcome that differs,
never as a timing assertion.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from triomq.testing.scenarios import (
    Action,
    Advance,
    ArmLeaderKill,
    CheckAcked,
    ClusterSnapshot,
    Command,
    CutFromControllers,
    CutMasterFromControllers,
    CutReplication,
    CutReplicationOf,
    CutSlaveReplication,
    Done,
    ExpectElectedOnce,
    ExpectRole,
    Heal,
    HealAll,
    KillBroker,
    KillLeaderAtElection,
    KillMaster,
    Launch,
    PullAll,
    Pulled,
    PullOne,
    Put,
    PutOne,
    Scenario,
    Settle,
    SetUncleanElection,
    Start,
    StartBroker,
    StartControllers,
    Step,
    UncleanElection,
    WaitMaster,
    WaitNewEpoch,
    WaitRole,
    WaitSyncStateSet,
)

__all__ = ["LIVENESS_MS", "ScenarioRun"]

#: How long a wait may take before its outcome is reported as it stands (ms).
LIVENESS_MS = 15_000
#: Pulls of one queue by ``PullAll`` at most (each serves up to 32 messages).
MAX_PULLS = 100

_Script = Generator[Command, tuple[ClusterSnapshot, object], None]


class ScenarioRun:
    """One run of a scenario: fed snapshots, it asks for actions and waits (sans-I/O).

    The pump calls ``next(snapshot, answer)`` with the cluster as it is and
    the answer to the last action (``None`` for other commands), and does
    what the returned command says until ``Done``; ``outcomes`` then holds
    (step index, outcome) for every step that observes something.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.outcomes: list[tuple[int, str]] = []
        #: Broker name -> the part it plays in the outcomes.
        self.parts: dict[str, str] = {}
        self._fault_epoch = 0
        self._fault_set: frozenset[str] = frozenset()
        self._controllers_started = False
        self._leader_kill_armed = False
        self._script: _Script | None = None

    def next(self, snapshot: ClusterSnapshot, answer: object = None) -> Command:
        """The next command, given the cluster now and the last action's answer."""
        try:
            if self._script is None:
                self._script = self._run(snapshot)
                return next(self._script)
            return self._script.send((snapshot, answer))
        except StopIteration:
            return Done()

    # -- naming ------------------------------------------------------------------

    def part(self, name: str | None) -> str:
        """The part broker ``name`` plays (``replica`` unless a step named it)."""
        return "none" if name is None else self.parts.get(name, "replica")

    def resolve(self, who: str, snapshot: ClusterSnapshot) -> str:
        """A broker name from a name or a part (``master``: the serving master)."""
        if who == "master":
            serving = snapshot.serving_master()
            if serving is not None:
                return serving
        for name, part in self.parts.items():
            if part == who:
                return name
        return who

    def _cast(self, name: str, part: str) -> None:
        for other in [n for n, p in self.parts.items() if p == part]:
            del self.parts[other]
        self.parts[name] = part

    def _members(self, names: frozenset[str]) -> str:
        return "(" + ", ".join(sorted(self.part(n) for n in names)) + ")"

    def _epoch(self, epoch: int) -> str:
        return f"epoch +{epoch - self._fault_epoch}"

    def _mark_fault(self, snapshot: ClusterSnapshot) -> Generator[
            Command, tuple[ClusterSnapshot, object], tuple[str, ClusterSnapshot]]:
        """Wait for a serving master, remember the epoch and SyncStateSet the fault hits."""
        snapshot = yield from self._wait(snapshot, lambda s: s.serving_master() is not None)
        master = snapshot.serving_master()
        if master is None:
            raise AssertionError(f"{self.scenario.name}: no master for the fault to hit")
        self._fault_epoch = snapshot.master_epoch
        self._fault_set = snapshot.sync_state_set
        self._cast(master, "old master")
        return master, snapshot

    # -- the script ----------------------------------------------------------------------

    def _run(self, snapshot: ClusterSnapshot) -> _Script:
        for index, step in enumerate(self.scenario.steps):
            outcome, snapshot = yield from self._step(step, snapshot)
            if outcome is not None:
                self.outcomes.append((index, outcome))

    def _do(self, action: Action) -> Generator[Command, tuple[ClusterSnapshot, object],
                                                 tuple[ClusterSnapshot, object]]:
        snapshot, answer = yield action
        return snapshot, answer

    def _wait(self, snapshot: ClusterSnapshot, done: Callable[[ClusterSnapshot], bool],
              limit_ms: int = LIVENESS_MS) -> Generator[Command, tuple[ClusterSnapshot, object],
                                                        ClusterSnapshot]:
        """Advance until ``done(snapshot)`` or ``limit_ms`` passed; the last snapshot."""
        start = snapshot.now_ms
        while not done(snapshot) and snapshot.now_ms - start <= limit_ms:
            snapshot, _ = yield Advance()
        return snapshot

    def _step(self, step: Step, snapshot: ClusterSnapshot) -> Generator[
            Command, tuple[ClusterSnapshot, object], tuple[str | None, ClusterSnapshot]]:
        if isinstance(step, Start):
            return (yield from self._start(step, snapshot))
        if isinstance(step, Put):
            return (yield from self._put(step, snapshot))
        if isinstance(step, PullAll):
            return (yield from self._pull_all(step, snapshot))
        if isinstance(step, KillMaster):
            master, snapshot = yield from self._mark_fault(snapshot)
            snapshot, _ = yield from self._do(KillBroker(master))
            if self._leader_kill_armed:
                snapshot = yield from self._wait(snapshot, lambda s: s.leader_killed)
            return None, snapshot
        if isinstance(step, Launch):
            snapshot, _ = yield from self._do(StartBroker(self.resolve(step.who, snapshot)))
            return None, snapshot
        if isinstance(step, CutMasterFromControllers):
            master, snapshot = yield from self._mark_fault(snapshot)
            snapshot, _ = yield from self._do(CutFromControllers(master))
            return None, snapshot
        if isinstance(step, CutSlaveReplication):
            slave = min(n for n, b in snapshot.brokers.items() if b.up and b.role == "slave")
            self._cast(slave, "lagging")
            snapshot, _ = yield from self._do(CutReplication(slave))
            return None, snapshot
        if isinstance(step, CutReplicationOf):
            snapshot, _ = yield from self._do(CutReplication(self.resolve(step.who, snapshot)))
            return None, snapshot
        if isinstance(step, HealAll):
            snapshot, _ = yield from self._do(Heal())
            return None, snapshot
        if isinstance(step, UncleanElection):
            snapshot, _ = yield from self._do(SetUncleanElection(step.enabled))
            return None, snapshot
        if isinstance(step, KillLeaderAtElection):
            self._leader_kill_armed = True
            snapshot, _ = yield from self._do(ArmLeaderKill())
            return None, snapshot
        if isinstance(step, Settle):
            at = snapshot.now_ms
            snapshot = yield from self._wait(snapshot, lambda s: s.now_ms - at >= step.ms,
                                             step.ms)
            return None, snapshot
        return (yield from self._observe(step, snapshot))

    def _start(self, step: Start, snapshot: ClusterSnapshot) -> Generator[
            Command, tuple[ClusterSnapshot, object], tuple[str | None, ClusterSnapshot]]:
        if not self._controllers_started:
            self._controllers_started = True
            snapshot, _ = yield from self._do(StartControllers())
        names = step.brokers or tuple(f"b{i}" for i in range(1, self.scenario.replicas + 1))
        for name in names:
            snapshot, _ = yield from self._do(StartBroker(name))
        wanted = frozenset(names)

        def settled(s: ClusterSnapshot) -> bool:
            master = s.serving_master()
            return (master is not None and s.sync_state_set == wanted
                    and s.brokers[master].in_sync == wanted)

        snapshot = yield from self._wait(snapshot, settled)
        master = snapshot.serving_master()
        if master is not None:
            self._cast(master, "master")
        self._fault_epoch = 0
        return (f"master of epoch +{snapshot.master_epoch}, "
                f"SyncStateSet {self._members(snapshot.sync_state_set)}"), snapshot

    def _put(self, step: Put, snapshot: ClusterSnapshot) -> Generator[
            Command, tuple[ClusterSnapshot, object], tuple[str | None, ClusterSnapshot]]:
        if step.on == "master":
            snapshot = yield from self._wait(snapshot, lambda s: s.serving_master() is not None)
            if snapshot.serving_master() is None:  # the outcome says so; nothing is put
                return f"no serving master within {LIVENESS_MS} ms", snapshot
        target = self.resolve(step.on, snapshot)
        counts: dict[str, int] = {}
        for _ in range(step.count):
            snapshot, answer = yield from self._do(PutOne(target))
            counts[str(answer)] = counts.get(str(answer), 0) + 1
        return ", ".join(f"{n} {code}" for code, n in sorted(counts.items())), snapshot

    def _pull_all(self, step: PullAll, snapshot: ClusterSnapshot) -> Generator[
            Command, tuple[ClusterSnapshot, object], tuple[str | None, ClusterSnapshot]]:
        if step.on == "master":
            snapshot = yield from self._wait(snapshot, lambda s: s.serving_master() is not None)
        target = self.resolve(step.on, snapshot)
        served: list[bytes] = []
        for queue_id in range(snapshot.queues):
            offset = 0
            for _ in range(MAX_PULLS):
                snapshot, answer = yield from self._do(PullOne(target, queue_id, offset))
                assert isinstance(answer, Pulled), answer
                if answer.code != "SUCCESS":
                    break
                served += answer.bodies
                offset = answer.next_offset
        acked = snapshot.acked
        got = [body for body in served if body in acked]
        have = set(got)
        outcome = (f"{step.on} serves every acknowledged message" if have >= acked
                   else f"{step.on} serves {len(have)} of {len(acked)} acknowledged messages")
        if len(got) > len(have):
            outcome += f", {len(got) - len(have)} twice"
        return outcome, snapshot

    def _observe(self, step: Step, snapshot: ClusterSnapshot) -> Generator[
            Command, tuple[ClusterSnapshot, object], tuple[str | None, ClusterSnapshot]]:
        if isinstance(step, WaitMaster):
            snapshot = yield from self._wait(
                snapshot, lambda s: s.serving_master() is not None
                and s.master_epoch > self._fault_epoch)
            master = snapshot.serving_master()
            if master is None or snapshot.master_epoch <= self._fault_epoch:
                return f"no master, {self._epoch(snapshot.master_epoch)}", snapshot
            where = ("from the SyncStateSet" if master in self._fault_set
                     else "from outside the SyncStateSet")
            self._cast(master, "new master")
            loss = (", possible message loss reported"
                    if snapshot.master_epoch in snapshot.loss_reported else "")
            return f"new master {where}, {self._epoch(snapshot.master_epoch)}{loss}", snapshot
        if isinstance(step, WaitNewEpoch):
            snapshot = yield from self._wait(
                snapshot, lambda s: s.master_epoch > self._fault_epoch)
            master = snapshot.serving_master()
            who = "no master" if snapshot.master is None else (
                self.part(master) if master is not None else
                f"{self.part(snapshot.master)} (not serving)")
            return f"{who}, {self._epoch(snapshot.master_epoch)}", snapshot
        if isinstance(step, WaitRole | ExpectRole):
            name = self.resolve(step.who, snapshot)
            if isinstance(step, WaitRole):
                snapshot = yield from self._wait(
                    snapshot, lambda s: s.brokers[name].role == step.role
                    and s.brokers[name].epoch == s.master_epoch)
            view = snapshot.brokers[name]
            return f"{step.who}: {view.role} of {self._epoch(view.epoch)}", snapshot
        if isinstance(step, WaitSyncStateSet):
            def reached(s: ClusterSnapshot) -> bool:
                master = s.serving_master()
                return (master is not None
                        and self._members(s.sync_state_set) == self._members_of(step.members)
                        and s.brokers[master].in_sync == s.sync_state_set)

            snapshot = yield from self._wait(snapshot, reached)
            return f"SyncStateSet {self._members(snapshot.sync_state_set)}", snapshot
        if isinstance(step, ExpectElectedOnce):
            controllers = sorted({self._epoch(e) for e in snapshot.controller_epochs})
            brokers = sorted({self._epoch(b.epoch) for b in snapshot.brokers.values() if b.up})
            masters = sum(1 for b in snapshot.brokers.values() if b.up and b.role == "master")
            killed = "leader killed, " if snapshot.leader_killed else ""
            return (f"{killed}{len(snapshot.controller_epochs)} controllers at "
                    f"{', '.join(controllers)}; brokers at {', '.join(brokers)}; "
                    f"{masters} master"), snapshot
        if isinstance(step, CheckAcked):
            def caught_up(s: ClusterSnapshot) -> bool:
                master = s.serving_master()
                if master is None:
                    return False
                end = s.brokers[master].max_offset
                return all(s.brokers[n].max_offset >= end for n in s.sync_state_set
                           if n in s.brokers and s.brokers[n].up)

            snapshot = yield from self._wait(snapshot, caught_up)
            holders = {n for n in snapshot.sync_state_set | {snapshot.master or ""}
                       if n in snapshot.brokers and snapshot.brokers[n].up}
            lacking = [f"{self.part(n)} lacks {snapshot.brokers[n].missing}"
                       for n in sorted(holders, key=self.part) if snapshot.brokers[n].missing]
            return "acknowledged messages lacking: " + (", ".join(lacking) or "none"), snapshot
        raise TypeError(f"not a scenario step: {step!r}")

    def _members_of(self, parts: tuple[str, ...]) -> str:
        return "(" + ", ".join(sorted(parts)) + ")"
