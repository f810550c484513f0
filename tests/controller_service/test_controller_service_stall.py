"""A stall of the whole process is no fault of the brokers; a broker that stops still is.

In-process cluster under a mock clock: jumping the clock stalls every node's
trio loop at once (as a GC pause or a starved host does), and every timer is
overdue when they run again.
"""

from __future__ import annotations

import logging
import re

import pytest
import trio
from controller_service_helpers import controllers, wait_full_sync_state_set
from trio.testing import MockClock

from triomq.controller.config import ControllerConfig

DEFAULTS = ControllerConfig()


@pytest.fixture
def stall_clock() -> MockClock:
    """Virtual time that jumps ahead once the run has been idle for a moment (the stores
    work in threads: an instant autojump would race ahead of them)."""
    return MockClock(autojump_threshold=0.02)


def elections(cluster) -> int:
    return sum(s.elections for s in controllers(cluster).values())


async def test_a_loop_stalled_for_3_s_elects_nobody(make_cluster, stall_clock):
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        before = elections(cluster)
        stall_clock.jump(3)
        await trio.sleep(3 * DEFAULTS.broker_not_active_timeout / 1000)
        assert cluster.masters() == [master]
        assert cluster.broker(master).replicas.master_epoch == 1
        assert elections(cluster) == before


async def test_a_master_that_stops_is_declared_inactive_within_its_timeout(
        make_cluster, stall_clock, caplog):
    caplog.set_level(logging.INFO, "triomq.controller")
    async with make_cluster() as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        address = cluster.broker(master).node.address
        await cluster.kill(master)
        new_master = await cluster.wait_master(epoch_above=1)
        assert new_master != master
        # The active controller found it silent once its timeout was up, at its next scan
        # (what it counted, not what the clock read meanwhile).
        timeout = DEFAULTS.broker_not_active_timeout
        silences = [int(m[1]) for r in caplog.records
                    if (m := re.search(f"{address} is inactive: silent for (\\d+) ms",
                                       r.getMessage()))]
        assert silences
        assert all(timeout < silent <= timeout + DEFAULTS.scan_not_active_broker_interval
                   for silent in silences)
