"""The controller's own stalls are no fault of the brokers; a broker that stops still is.

The core with explicit time: an input later than the core's next deadline
(at most one scan interval after the input before) is a stall of the
controller (its loop did not run), left out of every broker's silence; time
it ran counts in full.
"""

from __future__ import annotations

import logging

import pytest
from core_pump import INACTIVE, SCAN, Pump

from triomq.controller.core.requests import AlterSyncStateSet, ElectMaster
from triomq.controller.core.service_core import Elected

STALL = 3000


def group_of_three() -> tuple[Pump, list[int]]:
    """A leader with a group of three: the first replica master, all in sync, all beating."""
    pump = Pump()
    pump.lead()
    brokers = [pump.join() for _ in range(3)]
    pump.request(ElectMaster("DefaultCluster", "broker-a", brokers[0]))
    pump.run()
    pump.request(AlterSyncStateSet("broker-a", brokers[0], 1, 1, set(brokers)))
    pump.run()
    assert pump.manager.group("broker-a").sync_state_set == set(brokers)
    running(pump, 2 * INACTIVE, brokers)
    return pump, brokers


def running(pump: Pump, ms: int, beating: list[int]) -> None:
    """``ms`` pass with the controller running (fired every scan interval) and ``beating``
    sending a heartbeat every scan interval."""
    end = pump.now + ms
    while pump.now < end:
        for broker_id in beating:
            pump.beat(broker_id)
        pump.advance(SCAN)
        pump.run()


def elected(pump: Pump) -> list[int | None]:
    """The masters of the elections after the first one."""
    return [e.info.master_broker_id for e in pump.of(Elected)[1:]]


@pytest.mark.parametrize("first", ["the timer", "a heartbeat"])
def test_a_controller_stalled_for_3_s_elects_nobody(
        first: str, caplog: pytest.LogCaptureFixture) -> None:
    pump, brokers = group_of_three()
    caplog.set_level(logging.INFO, "triomq.controller")
    # Nothing runs for 3 s; then the overdue timer fires, first or right after
    # one heartbeat queued during the stall is read.
    if first == "the timer":
        pump.advance(STALL)
    else:
        pump.now += STALL
        pump.beat(brokers[2])
        pump.advance(0)
    pump.run()
    # The other heartbeats queued meanwhile are read, and the cluster goes on.
    running(pump, 3 * INACTIVE, brokers)
    assert elected(pump) == []
    assert pump.core.elections == 1
    assert not any("inactive" in r.getMessage() for r in caplog.records)
    [stall] = [r for r in caplog.records if "did not run" in r.getMessage()]
    assert stall.levelno == logging.WARNING
    # It was due one scan interval after its last scan.
    assert f"did not run for {STALL - SCAN} ms" in stall.getMessage()


def test_a_master_that_stops_is_declared_inactive_within_its_timeout() -> None:
    pump, brokers = group_of_three()
    master, slaves = brokers[0], brokers[1:]
    # The master's last heartbeat is now; the slaves go on.
    pump.beat(master)
    stopped = pump.now
    running(pump, INACTIVE, slaves)
    assert elected(pump) == []
    running(pump, SCAN, slaves)
    assert elected(pump) == [slaves[0]]
    assert pump.now - stopped <= INACTIVE + SCAN


def test_a_master_that_stops_before_a_stall_is_declared_once_its_silence_is_up() -> None:
    pump, brokers = group_of_three()
    master, slaves = brokers[0], brokers[1:]
    pump.beat(master)
    running(pump, 2 * SCAN, slaves)
    # Silent for 2 + 1 scan intervals of running time (the rest of the stall is left out).
    pump.advance(STALL)
    pump.run()
    running(pump, INACTIVE - 3 * SCAN, slaves)
    assert elected(pump) == []
    running(pump, SCAN, slaves)
    assert elected(pump) == [slaves[0]]


def test_a_controller_stalled_again_and_again_still_finds_a_dead_master() -> None:
    # Fired every 3 scan intervals: each gap is one interval of running, two of stall.
    pump, brokers = group_of_three()
    master, slaves = brokers[0], brokers[1:]
    pump.beat(master)
    gaps = 0
    while not elected(pump):
        for slave in slaves:
            pump.beat(slave)
        pump.advance(3 * SCAN)
        pump.run()
        gaps += 1
    assert elected(pump) == [slaves[0]]
    # Its silence counted one interval a gap: inactive after INACTIVE of that.
    assert gaps == INACTIVE // SCAN + 1


def test_a_new_leader_gives_every_broker_a_whole_timeout() -> None:
    pump, brokers = group_of_three()
    slaves = brokers[1:]
    pump.lead(term=2, leader=2)  # another controller leads for a while
    running(pump, 2 * INACTIVE, brokers)
    # The heartbeats to this controller are cut for 4 scan intervals; then it leads.
    running(pump, INACTIVE - SCAN, [])
    pump.lead(term=3)
    running(pump, INACTIVE, slaves)
    assert elected(pump) == []
    # The master stays silent: it is found gone one timeout after the leadership began.
    running(pump, SCAN, slaves)
    assert elected(pump) == [slaves[0]]
