"""Delayed messages in the deterministic cluster simulation, driven by hand: the masters
run the broker's schedule core, and every acked delayed message is delivered to its
topic, through a master's kill too."""

from __future__ import annotations

import pytest

from triomq.protocol.delay_levels import SCHEDULE_TOPIC
from triomq.protocol.message import decode
from triomq.testing.clustersim import DELIVER_HEAL_LIMIT_MS, Simulation
from triomq.testing.clustersim_parts import TOPIC


@pytest.mark.parametrize("seed", [3, 8])
def test_every_acked_delayed_message_is_delivered_through_a_master_kill(seed: int) -> None:
    sim = Simulation(seed, replicas=3, chaos=False, namesrvs=1, delayed=True)
    # Half of what waits is delayed, half timer messages (test_clustersim_timer).
    sim.run_until(lambda: sim.master() is not None and sim.delayed_acked >= 12,
                  20_000, "delayed messages acked")
    old = sim.master()
    assert old is not None
    sim.crash_broker(old.name, 60_000)
    killed = sim.now
    sim.run_until(lambda: sim.master() is not None, 5_000, "a new master")
    sim.run_until(lambda: not sim.undelivered(acked_by=killed), DELIVER_HEAL_LIMIT_MS,
                  "every delayed message acked before the kill delivered")
    records = [decode(acked.record)[0] for acked in sim.acked]
    delayed = {r.properties["UNIQ_KEY"] for r, acked in zip(records, sim.acked, strict=True)
               if r.topic == SCHEDULE_TOPIC and acked.at <= killed}
    # The delivery is the message itself, in its topic, with no DELAY left.
    deliveries = [r for r in records if r.topic == TOPIC and "REAL_TOPIC" in r.properties]
    assert len(delayed) >= 6
    assert delayed <= {r.properties["UNIQ_KEY"] for r in deliveries}
    assert all("DELAY" not in r.properties and r.properties["REAL_TOPIC"] == TOPIC
               for r in deliveries)


def test_a_run_without_delayed_messages_stores_none() -> None:
    sim = Simulation(5, replicas=2, chaos=False, namesrvs=1)
    sim.run_for(3_000)
    assert not sim.delayed and sim.delayed_acked == 0
