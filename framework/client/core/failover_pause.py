"""How long a client waits between two route fetches while a broker group fails over. Pure.

A new master is routed some hundreds of milliseconds after the old one is
lost; a producer's send and a consumer's pull fetch the route again at once,
then after pauses that double from ``FIRST_PAUSE`` to ``LONGEST_PAUSE``: quick
to see the new master, without asking the name servers in a busy loop.
"""

from __future__ import annotations

__all__ = ["FIRST_PAUSE", "LONGEST_PAUSE", "next_pause"]

#: Seconds before the second route fetch.
FIRST_PAUSE = 0.05
#: The longest pause between two route fetches.
LONGEST_PAUSE = 0.4


def next_pause(pause: float, longest: float = LONGEST_PAUSE) -> float:
    """The pause after one of ``pause`` (``longest``: ``LONGEST_PAUSE`` in the caller's unit
    of time)."""
    return min(pause * 2, longest)
