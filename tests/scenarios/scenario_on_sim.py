"""The simulation's pump of a scenario: ``triomq.testing.clustersim`` in virtual time.

No chaos and no producer of its own: only the script's actions change the
cluster. Every node starts down (the script starts them); a killed node
stays down. The simulation's invariants are checked all along, so a
scenario also fails on a ``Violation``.
"""

from __future__ import annotations

from triomq.broker.core.codes import ResponseCode
from triomq.protocol.message import decode
from triomq.testing import scenarios as sc
from triomq.testing.clustersim import Simulation
from triomq.testing.clustersim_broker import GROUP
from triomq.testing.clustersim_controller import controller_name
from triomq.testing.clustersim_parts import TOPIC_QUEUES, PutResponse
from triomq.testing.scenario_run import ScenarioRun

#: Long enough to stay down for the whole scenario.
FOREVER_MS = 10**9


class _ScriptedSimulation(Simulation):
    """A simulation remembering each put's answer by request id."""

    def __init__(self, seed: int, replicas: int) -> None:
        super().__init__(seed, replicas=replicas, unclean=False, chaos=False)
        self.answers: dict[int, ResponseCode] = {}

    def _on_put_response(self, src: str, response: PutResponse) -> None:
        self.answers[response.id] = ResponseCode(response.command.code)
        super()._on_put_response(src, response)


class SimulationPump:
    """Runs one scenario over a ``Simulation`` of ``seed``."""

    def __init__(self, scenario: sc.Scenario, seed: int = 7) -> None:
        self.sim = sim = _ScriptedSimulation(seed, scenario.replicas)
        sim.producing = False
        for name in sim.brokers:
            sim.crash_broker(name, FOREVER_MS)
        for node_id in sim.controller_ids:
            sim.crash_controller(node_id, FOREVER_MS)
        self.run = ScenarioRun(scenario)
        #: The bodies of the acknowledged records, decoded once (a snapshot a step).
        self._bodies: dict[bytes, bytes] = {}
        self.leader_kill_armed = False
        self.leader_killed = False

    def __call__(self) -> ScenarioRun:
        """Run the script to its end; its outcomes are on the returned run."""
        answer: object = None
        while not isinstance(command := self.run.next(self.snapshot(), answer), sc.Done):
            answer = None
            if isinstance(command, sc.Advance):
                self._step()
            else:
                answer = self._perform(command)
        return self.run

    # -- time and faults -------------------------------------------------------------

    def _step(self) -> None:
        self.sim.step()
        if self.leader_kill_armed and self._election_proposed():
            self.leader_kill_armed = False
            leader = self.sim.leader()
            assert leader is not None
            self.sim.crash_controller(leader.id, FOREVER_MS)
            self.leader_killed = True

    def _election_proposed(self) -> bool:
        leader = self.sim.leader()
        if leader is None or leader.raft is None:
            return False
        log = leader.raft.log
        pending = log.slice(leader.raft.commit_index + 1, log.last_index)
        return any(b'"ElectMaster"' in entry.data for entry in pending)

    def _bring_up(self, name: str) -> None:
        self.sim.down_until[name] = self.sim.now  # restarted by the next step

    def _perform(self, action: sc.Action) -> object:
        sim = self.sim
        controllers = {controller_name(i) for i in sim.controller_ids}
        if isinstance(action, sc.StartControllers):
            for name in sorted(controllers):
                self._bring_up(name)
        elif isinstance(action, sc.StartBroker):
            self._bring_up(action.name)
        elif isinstance(action, sc.KillBroker):
            sim.crash_broker(action.name, FOREVER_MS)
        elif isinstance(action, sc.CutFromControllers):
            sim.network.partition({action.name}, controllers)
        elif isinstance(action, sc.CutReplication):
            # The simulated HA address is the broker's own: cut the brokers apart, their
            # HA connections staying open, as the real cluster's cut links leave them.
            sim.network.stall(action.name)
            sim.network.partition({action.name}, set(sim.brokers))
        elif isinstance(action, sc.Heal):
            sim.network.heal()
        elif isinstance(action, sc.SetUncleanElection):
            sim.update_controller_config({"enable_elect_unclean_master": action.enabled})
        elif isinstance(action, sc.ArmLeaderKill):
            self.leader_kill_armed = True
        elif isinstance(action, sc.PutOne):
            return self._put(action.name)
        elif isinstance(action, sc.PullOne):
            return self._pull(action)
        else:
            raise TypeError(f"not an action: {action!r}")
        return None

    def _put(self, broker: str) -> str:
        sim = self.sim
        rid = sim.put(broker)
        while rid in sim.outstanding:  # the producer gives up on a put after 1.5 s
            self._step()
        return sim.answers[rid].name if rid in sim.answers else "NO_ANSWER"

    def _pull(self, action: sc.PullOne) -> sc.Pulled:
        sim = self.sim
        rid = sim.pull(action.name, action.queue_id, action.offset)
        while rid in sim.outstanding:  # given up after 1.5 s, as a put
            self._step()
        answer = sim.pulled.pop(rid, None)
        if answer is None:
            return sc.Pulled("NO_ANSWER")
        return sc.Pulled.of(answer.code, answer.fields, answer.body)

    # -- what it shows ------------------------------------------------------------------

    def _names(self, broker_ids: frozenset[int]) -> frozenset[str]:
        """The brokers (names, their addresses in the simulation) of ``broker_ids``."""
        group = self.sim.group_state
        return frozenset() if group is None else frozenset(
            a for a in map(group.address_of, broker_ids) if a is not None)

    def snapshot(self) -> sc.ClusterSnapshot:
        """The simulated cluster now."""
        sim = self.sim
        brokers = {}
        for name, broker in sim.brokers.items():
            if not broker.up:
                brokers[name] = sc.BrokerView(name, up=False)
                continue
            term = broker.term
            master = term.master_term
            missing = sum(1 for m in sim.acked
                          if broker.log.read(m.offset, len(m.record)) != m.record)
            brokers[name] = sc.BrokerView(
                name, up=True, role=term.role, epoch=term.epoch,
                max_offset=broker.log.max_offset, missing=missing,
                in_sync=(self._names(master.tracker.effective_sync_state_set)
                         if master is not None else frozenset()))
        group = sim.group_state
        epochs = tuple(g.master_epoch for c in sim.controllers.values()
                       if c.up and (g := c.manager.group(GROUP)) is not None)
        losses = frozenset(info.master_epoch for _, _, _, info in sim.elections
                           if info.possible_message_loss)
        for m in sim.acked:
            if m.record not in self._bodies:
                self._bodies[m.record] = decode(m.record)[0].body
        acked = frozenset(self._bodies[m.record] for m in sim.acked)
        if group is None:
            return sc.ClusterSnapshot(sim.now, brokers, controller_epochs=epochs,
                               loss_reported=losses, leader_killed=self.leader_killed,
                               acked=acked, queues=TOPIC_QUEUES)
        return sc.ClusterSnapshot(sim.now, brokers, master=group.master_address,
                           master_epoch=group.master_epoch,
                           sync_state_set=self._names(group.sync_state_set),
                           controller_epochs=epochs, loss_reported=losses,
                           leader_killed=self.leader_killed, acked=acked,
                           queues=TOPIC_QUEUES)


def run_on_simulation(scenario: sc.Scenario, seed: int = 7) -> ScenarioRun:
    """Run ``scenario`` in the simulation of ``seed``."""
    return SimulationPump(scenario, seed)()
