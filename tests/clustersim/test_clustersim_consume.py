"""Consuming in the deterministic cluster simulation, driven by hand.

The simulation checks the consume invariants all along (pull answers are
whole records of the pulled queue within the broker's confirm offset,
delivered in queue order, offsets never committed past an unconsumed
message), so each scenario also fails if one of them breaks; here each one
also ends with every acknowledged message consumed.
"""

from __future__ import annotations

import attrs
import pytest

from triomq.client.core.process_queue import ProcessQueue
from triomq.testing import clustersim_pulls
from triomq.testing.clustersim import Simulation, run_seed
from triomq.testing.clustersim_consumer import CONSUMER_GROUP
from triomq.testing.clustersim_group import CONSUME_HEAL_LIMIT_MS
from triomq.testing.clustersim_parts import TOPIC, TOPIC_QUEUES


def consuming(seed: int, *, replicas: int = 3, consumers: int = 1) -> Simulation:
    """A settled group whose consumers have consumed a few acked messages."""
    sim = Simulation(seed, replicas=replicas, chaos=False, namesrvs=1, consumers=consumers)
    sim.run_until(lambda: sim.master() is not None
                  and len(sim.group_state.sync_state_set) == replicas
                  and len(sim.acked) >= 20 and len(sim.group.deliveries) >= 10,
                  15_000, "a settled group consuming")
    return sim


def all_consumed(sim: Simulation) -> None:
    sim.run_until(lambda: not sim.group.unconsumed(), CONSUME_HEAL_LIMIT_MS,
                  "every acknowledged message consumed")


def stored(sim: Simulation, broker: str) -> dict[int, int]:
    """The group's offsets a broker stores, by queue id."""
    return sim.brokers[broker].consume.table.offsets().get(f"{TOPIC}@{CONSUMER_GROUP}", {})


@pytest.mark.parametrize(("seed", "replicas", "consumers"), [(7, 3, 1), (13, 2, 2), (21, 3, 2)])
def test_consuming_through_a_master_kill_loses_no_acked_message(
        seed: int, replicas: int, consumers: int) -> None:
    sim = consuming(seed, replicas=replicas, consumers=consumers)
    old = sim.master()
    # What a consumer restarting now could be given again: past the offsets the
    # surviving replicas store, up to what the group consumed.
    consumed_to = {q: 0 for q in range(TOPIC_QUEUES)}
    for consumer in sim.group.consumers.values():
        for queue, held in consumer.queues.items():
            consumed_to[queue.queue_id] = max(consumed_to[queue.queue_id],
                                              held.first_not_done())
    survivors = [name for name in sim.brokers if name != old.name]
    bound = sum(max(0, consumed_to[q] - min(stored(sim, b).get(q, 0) for b in survivors))
                for q in range(TOPIC_QUEUES))
    sim.crash_broker(old.name, 60_000)
    sim.run_until(lambda: sim.master() is not None, 5_000, "a new master")
    new = sim.master()
    assert new.name != old.name
    sim.run_for(3_000)
    sim.producing = False
    all_consumed(sim)
    assert sim.possibly_lost == 0
    assert sim.group.duplicates <= bound
    # The new master had its predecessor's offsets (copied), then the consumers'.
    assert stored(sim, new.name)


def test_a_restarted_consumer_resumes_from_the_committed_offsets() -> None:
    sim = consuming(7)
    sim.producing = False
    all_consumed(sim)
    consumer = sim.group.consumers["r1"]
    sim.run_for(3 * consumer.settings.persist_interval)  # offsets stored everywhere
    master = sim.master()
    committed = stored(sim, master.name)
    assert sum(committed.values()) >= len(sim.group.deliveries)
    sim.group.crash("r1", 500)
    sim.run_until(lambda: consumer.up and len(consumer.queues) == TOPIC_QUEUES
                  and all(h.start >= 0 for h in consumer.queues.values()), 5_000,
                  "the consumer back with its queues")
    assert {q.queue_id: h.start for q, h in consumer.queues.items()} == committed
    sim.producing = True
    sim.run_for(2_000)
    sim.producing = False
    all_consumed(sim)
    assert sim.group.duplicates == 0  # everything consumed was committed before the crash


def test_a_consumer_crash_before_its_offsets_are_stored_redelivers_only_those() -> None:
    sim = consuming(11)
    consumer = sim.group.consumers["r1"]
    master = sim.master()

    def ahead() -> dict[int, int]:
        """Per queue: consumed offsets the master does not store yet."""
        committed = stored(sim, master.name)
        return {q.queue_id: h.first_not_done() - committed.get(q.queue_id, 0)
                for q, h in consumer.queues.items()
                if h.first_not_done() > committed.get(q.queue_id, 0)}

    sim.run_until(lambda: sum(ahead().values()) >= 2, 10_000, "consumed, not yet stored")
    uncommitted = sum(ahead().values())
    sim.group.crash("r1", 300)
    sim.run_for(1_000)
    sim.producing = False
    all_consumed(sim)
    assert 0 < sim.group.duplicates <= uncommitted


def test_a_consumer_cut_from_the_master_consumes_once_the_link_heals() -> None:
    sim = consuming(5, consumers=2)
    master = sim.master()
    cut = sim.group.consumers["r2"]
    sim.network.partition({cut.name}, {master.name})
    sim.run_for(3_000)
    stalled = {q for q, h in cut.queues.items() if h.pull.next_offset >= 0}
    assert stalled  # it holds queues it cannot pull from the master
    sim.network.heal()
    sim.producing = False
    all_consumed(sim)


def test_offsets_reach_the_slaves_by_their_periodic_copy() -> None:
    sim = consuming(7)
    sim.producing = False
    all_consumed(sim)
    sim.run_for(3_000)
    master = sim.master()
    for name in sim.brokers:
        assert stored(sim, name) == stored(sim, master.name) != {}


def test_reading_past_the_confirm_offset_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clustersim_pulls.SimConsumeSide, "_confirmed",
                        lambda self: self.broker.log.max_offset)
    results = [run_seed(seed) for seed in range(3)]
    assert any("past its confirm offset" in r.violation for r in results)


def test_committing_past_an_unconsumed_message_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The ProcessQueue's rule broken: commit past whatever was pulled.
    monkeypatch.setattr(ProcessQueue, "committable",
                        lambda self: self.next_offset if self.next_offset >= 0 else None)
    results = [run_seed(seed) for seed in range(3)]
    assert any("it has not consumed" in r.violation for r in results)


@pytest.mark.parametrize("seed", [5, 9])
def test_a_group_left_without_master_is_consumed_from_its_slave(seed: int) -> None:
    sim = consuming(seed, replicas=2)
    sim.group.slave_read_enable = False  # a slave serves only while there is no master
    sim.group.crash("r1", 60_000)  # a backlog builds up meanwhile
    sim.run_until(lambda: len(sim.acked) >= 40, 10_000, "a backlog")
    sim.producing = False
    sim.run_for(1_000)
    master = sim.master()
    slave = next(b for b in sim.brokers.values() if b is not master)
    # The slave falls out of the SyncStateSet, so no election can pick it.
    sim.network.partition({master.name}, set(sim.brokers))
    sim.run_until(lambda: sim.group_state.sync_state_set == {master.broker_id}, 5_000,
                  "a SyncStateSet of the master alone")
    sim.crash_broker(master.name, 60_000)
    sim.run_until(lambda: not slave.flow.group_has_master, 5_000, "a group without master")
    sim.down_until["r1"] = sim.now  # the consumer back
    all_consumed(sim)
    assert sim.master() is None and slave.term.role == "slave"


@pytest.mark.parametrize("seed", [7, 13, 21, 33])
def test_a_consumer_pulls_from_a_new_master_within_a_second_of_its_route(seed: int) -> None:
    # Virtual time: the consumer learns of the failover from its failed pulls (the
    # killed broker's connections reset) and fetches the routes then, not at its poll.
    sim = consuming(seed)
    for consumer in sim.group.consumers.values():  # no route poll to come to the rescue
        consumer.settings = attrs.evolve(consumer.settings, route_interval=3_600_000)
        consumer.next_route = sim.now + 3_600_000
    old = sim.master()
    sim.crash_broker(old.name, 60_000)
    sim.run_until(lambda: sim.master() is not None and sim.namesrvs_route_master(), 5_000,
                  "the new master routed")
    routed_at = sim.now
    for _ in range(4):  # the simulation's producer finds the new master at a pace of its own
        sim.put(sim.master().name)
    took = sim.run_until(lambda: any(at >= routed_at for broker, at in
                                     sim.group.found_at.items() if broker != old.name),
                         1_000, "messages pulled from the new master's group")
    assert took <= 1_000
    all_consumed(sim)
