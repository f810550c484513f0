"""The broker's and clients' epoch clock: one per trio run, moved by trio's clock."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from triomq.clock import EpochClock, epoch_ms, wall_ms


async def test_every_clock_of_a_run_agrees_and_moves_with_trio(autojump_clock: MockClock
                                                               ) -> None:
    first = EpochClock()
    assert abs(first() - wall_ms()) < 60_000
    await trio.sleep(3600)  # an hour of mock time, none of the wall clock's
    second = EpochClock()
    assert first() == second() == epoch_ms()
    assert first() - wall_ms() > 3_000_000


async def test_sleep_until_wakes_when_the_clock_reads_the_time(autojump_clock: MockClock
                                                               ) -> None:
    clock = EpochClock(start_ms=1_700_000_000_000)
    assert clock() == 1_700_000_000_000
    await clock.sleep_until(1_700_000_000_333)
    assert clock() == 1_700_000_000_333
    await clock.sleep_until(5)  # past: at once
    assert clock() == 1_700_000_000_333
