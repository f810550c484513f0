"""The drivers' clocks in milliseconds, the time base of the pure cores."""

from __future__ import annotations

import time

import trio

__all__ = ["EpochClock", "epoch_ms", "now_ms", "wall_ms"]


def now_ms() -> int:
    """Trio's clock in ms.

    Rounded, not floored: after ``sleep_until(t / 1000)`` the clock must read
    ``t``, or a core asked "is ``t`` due?" says no and its driver sleeps until
    the same past deadline again, forever under a mock clock.
    """
    return round(trio.current_time() * 1000)


def wall_ms() -> int:
    """The wall clock in ms since the epoch: times other nodes compare with their own
    (a signed request's), which trio's clock, one per process, is not."""
    return time.time_ns() // 1_000_000


#: The (epoch ms, trio time) pair every EpochClock of one trio run counts from.
_anchor: trio.lowlevel.RunVar[tuple[int, float]] = trio.lowlevel.RunVar("epoch_anchor")


def _run_anchor() -> tuple[int, float]:
    try:
        return _anchor.get()
    except LookupError:
        anchor = (wall_ms(), trio.current_time())
        _anchor.set(anchor)
        return anchor


class EpochClock:
    """ms since the epoch: the wall clock when the trio run first made one, moved on by
    trio's clock.

    A broker's store times and the times its secondary messages wait for
    (delay levels, timers, transaction checks, pop invisibility) are on one
    of these, made once per broker, and a client's born times too: they stay
    comparable with other hosts' epoch times, a step of the wall clock does
    not move a due time, and a test's ``MockClock`` moves them all. Every
    clock of one run counts from one anchor, so the nodes and clients of a
    process agree to the millisecond, under a mock clock too (``start_ms``:
    another anchor, for a test).
    """

    def __init__(self, start_ms: int | None = None) -> None:
        anchor = _run_anchor()
        self._start_ms = anchor[0] if start_ms is None else start_ms
        self._start = anchor[1] if start_ms is None else trio.current_time()

    def __call__(self) -> int:
        # Rounded, as now_ms: after sleep_until(at) the clock reads at.
        return self._start_ms + round((trio.current_time() - self._start) * 1000)

    def deadline(self, at_ms: int) -> float:
        """The trio time at which this clock reads ``at_ms``."""
        return self._start + (at_ms - self._start_ms) / 1000

    async def sleep_until(self, at_ms: int) -> None:
        """Sleep until this clock reads ``at_ms`` (a time past: a checkpoint only)."""
        await trio.sleep_until(self.deadline(at_ms))


def epoch_ms() -> int:
    """The run's ``EpochClock`` now: a client's born times, comparable with its brokers'."""
    return EpochClock()()
