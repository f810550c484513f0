"""Timer messages in the deterministic cluster simulation, driven by hand: the masters
run the broker's timer core, and every acked timer message is delivered to its topic, at
or after its time, through a master's kill too."""

from __future__ import annotations

import pytest

from triomq.protocol.message import decode
from triomq.testing.clustersim import DELIVER_HEAL_LIMIT_MS, TIMER_PRECISION_MS, Simulation
from triomq.testing.clustersim_parts import TOPIC


@pytest.mark.parametrize("seed", [3, 8])
def test_every_acked_timer_message_is_delivered_at_its_time_through_a_master_kill(
        seed: int) -> None:
    sim = Simulation(seed, replicas=3, chaos=False, namesrvs=1, delayed=True)
    sim.run_until(lambda: sim.master() is not None and sim.delayed_acked >= 12,
                  20_000, "delayed and timer messages acked")
    old = sim.master()
    assert old is not None
    sim.crash_broker(old.name, 60_000)
    killed = sim.now
    sim.run_until(lambda: sim.master() is not None, 5_000, "a new master")
    sim.run_until(lambda: not sim.undelivered(acked_by=killed), DELIVER_HEAL_LIMIT_MS,
                  "every timer message acked before the kill delivered")
    sim.check_timer_times(TIMER_PRECISION_MS)
    records = [decode(acked.record)[0] for acked in sim.acked]
    timers = {r.properties["UNIQ_KEY"] for r, acked in zip(records, sim.acked, strict=True)
              if r.topic == "rmq_sys_wheel_timer" and acked.at <= killed}
    # The delivery is the message itself, in its topic, REAL_TOPIC gone, TIMER_OUT_MS kept.
    deliveries = [r for r in records if r.topic == TOPIC and "TIMER_OUT_MS" in r.properties]
    assert len(timers) >= 5
    assert timers <= {r.properties["UNIQ_KEY"] for r in deliveries}
    for r in deliveries:
        assert "REAL_TOPIC" not in r.properties and "TIMER_DEQUEUE_MS" in r.properties
        assert r.store_timestamp >= int(r.properties["TIMER_OUT_MS"]) + TIMER_PRECISION_MS
