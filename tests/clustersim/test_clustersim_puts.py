"""The simulated brokers serve puts with the broker's own put core: the processor's
refusals, in its order, and nothing stored on a refusal."""

from __future__ import annotations

import ast
import pathlib

import attrs

import triomq.testing
from triomq.broker.core.codes import ResponseCode
from triomq.testing.clustersim import Simulation
from triomq.testing.clustersim_parts import SIM_MASTER, BrokerSettings, PutResponse


class _Answers(Simulation):
    """A simulation keeping every put's answer by request id."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.answers: dict[int, PutResponse] = {}

    def _on_put_response(self, src: str, response: PutResponse) -> None:
        self.answers[response.id] = response
        super()._on_put_response(src, response)


def answer(sim: _Answers, broker: str) -> PutResponse:
    rid = sim.put(broker)
    sim.run_until(lambda: rid in sim.answers, 3_000, "the put's answer")
    return sim.answers[rid]


def test_a_slave_refuses_a_put_as_the_brokers_processor_does() -> None:
    sim = _Answers(7, replicas=2, chaos=False)
    sim.run_until(lambda: sim.master() is not None, 5_000, "a master")
    master = sim.master()
    slave = next(b for b in sim.brokers.values() if b is not master)
    sim.run_until(lambda: slave.term.role == "slave", 3_000, "a slave")
    sim.producing = False
    end = slave.log.max_offset
    refused = answer(sim, slave.name).command
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert refused.remark == (f"broker broker-a id {slave.broker_id} is slave, not master: "
                              "messages go to the master")
    assert slave.log.max_offset == end
    stored = answer(sim, master.name).command
    assert stored.code == ResponseCode.SUCCESS
    assert set(stored.ext_fields) == {"msgId", "queueId", "queueOffset"}


def test_a_sync_state_set_too_small_refuses_before_anything_is_stored() -> None:
    settings = BrokerSettings(master=attrs.evolve(SIM_MASTER, min_in_sync_replicas=2))
    sim = _Answers(7, replicas=2, chaos=False, broker_settings=settings)
    sim.run_until(lambda: sim.master() is not None and len(sim.acked) >= 3, 10_000,
                  "a master acking puts")
    master = sim.master()
    sim.producing = False
    sim.network.partition({master.name}, set(sim.brokers) - {master.name})
    sim.run_until(lambda: len(master.term.master_term.tracker.effective_sync_state_set) == 1,
                  5_000, "the slave dropped from the SyncStateSet")
    end = master.log.max_offset
    refused = answer(sim, master.name).command
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert refused.remark is not None and refused.remark.endswith(
        "holds 1 of min_in_sync_replicas 2; nothing was stored")
    assert master.log.max_offset == end  # a retry elsewhere stores no duplicate


def test_the_simulation_runs_the_cores_never_the_trio_drivers() -> None:
    drivers = {"triomq.broker.send.processor", "triomq.broker.consume.pull_service",
               "triomq.broker.replication.replicas_manager", "triomq.ha.master_driver",
               "triomq.client.producer"}
    folder = pathlib.Path(triomq.testing.__file__).parent
    for path in sorted(folder.glob("clustersim*.py")):
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & drivers, path.name
    for module, core in (("clustersim_puts.py", "triomq.broker.send.core.put_flow"),
                         ("clustersim_parts.py", "triomq.ha.core.role_change")):
        tree = ast.parse((folder / module).read_text())
        assert any(isinstance(node, ast.ImportFrom) and node.module == core
                   for node in ast.walk(tree)), (module, core)


def test_the_producer_rides_through_a_master_crash_with_the_clients_send_flow() -> None:
    sim = Simulation(7, replicas=3, chaos=False)
    sim.run_until(lambda: sim.master() is not None and len(sim.acked) >= 5, 10_000,
                  "a master acking the producer's sends")
    old = sim.master()
    failed, sent = sim.producer.failed, sim.producer.sent
    in_flight = list(sim.producer.sends)
    sim.crash_broker(old.name, 60_000)
    crashed = sim.now
    sim.run_until(lambda: sim.master() is not None, 10_000, "a new master")
    new = sim.master()
    sim.run_for(4_000)
    # The sends under way and those after found the new master through the name
    # servers' route (no send is aimed at a broker by hand here) and were stored there.
    assert not set(map(id, in_flight)) & set(map(id, sim.producer.sends))
    assert sim.producer.failed == failed and sim.producer.sent > sent + 10
    assert any(at > crashed and src == new.name and code == ResponseCode.SUCCESS
               for at, src, code in sim.put_results)
    assert sim.producer.info is not None
    assert sim.producer.info.masters == {"broker-a": f"{new.name}:10911"}
