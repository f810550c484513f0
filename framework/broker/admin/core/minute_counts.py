"""Counts over the last minute, by key: RocketMQ's per-minute ``StatsItemSet`` rates. Pure.

RocketMQ's broker keeps, per statistic, a table from a key (a topic for
``TOPIC_PUT_NUMS``, ``topic@group`` for ``GROUP_GET_NUMS``: ``stats_key``)
to what was counted, and reports a key's rate over the last minute
(``consumeTps`` in GET_CONSUME_STATS, ``topicPutTps`` in
GET_TOPIC_STATS_INFO). ``MinuteCounts`` keeps one such table in one-second
buckets: what was counted at ``now`` counts for ``window`` seconds, give or
take one. The caller passes the time.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["TPS_WINDOW", "MinuteCounts", "stats_key"]

#: Seconds a rate is counted over (RocketMQ's per-minute stats).
TPS_WINDOW = 60


def stats_key(topic: str, group: str) -> str:
    """A topic's and a group's key, as RocketMQ's ``buildStatsKey`` writes it."""
    return f"{topic}@{group}"


class MinuteCounts:
    """What was counted per key over the last ``window`` seconds."""

    def __init__(self, window: int = TPS_WINDOW) -> None:
        self.window = window
        #: key -> [second, count] buckets, oldest first.
        self._buckets: dict[str, deque[list[int]]] = {}
        self._swept = -math.inf

    def add(self, key: str, count: int, now: float) -> None:
        """Count ``count`` for ``key`` at ``now``."""
        if count <= 0:
            return
        second = math.floor(now)
        buckets = self._buckets.setdefault(key, deque())
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += count
        else:
            buckets.append([second, count])
        while buckets[0][0] <= second - self.window:
            buckets.popleft()
        if second - self._swept >= self.window:
            self._sweep(second)

    def _sweep(self, second: int) -> None:
        # Forget keys that counted nothing for a whole window: the table stays as small
        # as the set of keys counting now.
        self._swept = second
        for key in [k for k, b in self._buckets.items() if b[-1][0] <= second - self.window]:
            del self._buckets[key]

    def count(self, key: str, now: float) -> int:
        """What was counted for ``key`` in the window ending at ``now``."""
        start = math.floor(now) - self.window
        return sum(n for second, n in self._buckets.get(key, ()) if second > start)

    def tps(self, key: str, now: float) -> float:
        """``count`` a second."""
        return self.count(key, now) / self.window
