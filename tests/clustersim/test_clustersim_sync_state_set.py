"""Bugs the simulation found in the framework, kept as regression scenarios.

- an expand whose answer is lost stays counted until it is read back
  (``framework/ha/master_driver.py``, ``framework/broker/replication/controller_mode.py``);
- the master adopts the SyncStateSet each poll of its own epoch shows;
- a restarted master confirms nothing its SyncStateSet members lack
  (``framework/broker/replication/replicas_manager.py``);
- a master that hears a newer master epoch completes no more puts.
"""

from __future__ import annotations

from triomq.broker.core.codes import ResponseCode
from triomq.testing.clustersim import Simulation
from triomq.testing.clustersim_controller import controller_name

CONTROLLERS = {controller_name(i) for i in (1, 2, 3)}


def test_expand_whose_answer_is_lost_keeps_counting_the_new_member() -> None:
    sim = Simulation(7, replicas=2, chaos=False)
    sim.run_until(lambda: sim.master() is not None, 5_000, "a master")
    master = sim.master()
    slave = next(b for b in sim.brokers if b != master.name)
    # The expand {master, slave} is in flight: its request reaches the
    # controllers, every answer to the master is lost.
    sim.run_until(lambda: master.term.master_term.tracker.pending is not None, 5_000,
                  "an expand in flight")
    for controller in CONTROLLERS:
        sim.network.partition({controller}, {master.name}, one_way=True)
    sim.run_until(lambda: sim.group_state.sync_state_set == {1, 2}, 3_000, "the expand committed")
    # The producer's puts in flight end first: those the slave acked may still succeed.
    sim.producing = False
    sim.run_until(lambda: not sim.producer.attempts, 3_000, "the producer's puts answered")
    sim.network.partition({slave}, {master.name})  # the new member stops acking
    cut = sim.now
    for _ in range(50):  # a put acked now would lack a SyncStateSet member (a Violation)
        sim.put(master.name)
        sim.run_for(100)
    assert master.term.master_term.tracker.effective_sync_state_set == {1, 2}
    # (The last of the producer's answers may land at ``cut`` itself.)
    assert not any(at > cut and src == master.name and code == ResponseCode.SUCCESS
                   for at, src, code in sim.put_results)
    assert any(at > cut and src == master.name for at, src, _ in sim.put_results)


def test_master_relearns_a_sync_state_set_whose_answer_was_lost() -> None:
    sim = Simulation(7, replicas=2, chaos=False)
    sim.run_until(lambda: sim.master() is not None, 5_000, "a master")
    master = sim.master()
    sim.run_until(lambda: master.term.master_term.tracker.pending is not None, 5_000,
                  "an expand in flight")
    for controller in CONTROLLERS:
        sim.network.partition({controller}, {master.name}, one_way=True)
    sim.run_until(lambda: sim.group_state.sync_state_set == {1, 2}, 3_000, "the expand committed")
    sim.run_for(3_000)  # answers still lost: the expand stays in flight, counted
    assert master.term.master_term.tracker.pending == {1, 2}
    assert master.term.master_term.tracker.sync_state_set == {master.flow.broker_id}
    sim.producing = False
    sim.heal()
    sim.run_until(lambda: master.term.master_term.tracker.pending is None, 3_000,
                  "the expand resolved")
    assert master.term.master_term.tracker.sync_state_set == {1, 2}
    assert master.flow.sync_state_set_epoch == sim.group_state.sync_state_set_epoch


def test_restarted_master_does_not_confirm_what_its_slaves_lack() -> None:
    sim = Simulation(7, replicas=3, chaos=False)
    sim.run_until(lambda: sim.master() is not None
                  and len(sim.group_state.sync_state_set) == 3
                  and len(sim.acked) >= 5, 10_000, "a settled group")
    master = sim.master()
    sim.producing = False
    sim.run_for(1_000)
    sim.network.partition({master.name}, set(sim.brokers))
    for _ in range(5):  # written by the master alone, never acked
        sim.put(master.name)
        sim.run_for(20)
    members = [sim.brokers[n] for n in sim.brokers if n != master.name]
    assert master.log.max_offset > max(m.log.max_offset for m in members)
    sim.crash_broker(master.name, 100)  # back before the controllers notice
    sim.run_until(lambda: sim.master() is master, 3_000, "the master back in its epoch")
    assert master.term.confirmed(master.log.max_offset) <= min(m.log.max_offset
                                                               for m in members)
