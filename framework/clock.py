"""The drivers' clock in milliseconds, the time base of the pure cores."""

from __future__ import annotations

import time

import trio

__all__ = ["now_ms", "wall_ms"]


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
