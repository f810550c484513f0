"""Named statistics sampled over the last minute, hour and day: RocketMQ's ``StatsItemSet``. Pure.

VIEW_BROKER_STATS_DATA (315) asks a broker for one statistic of one key
(``mqadmin statsAll`` asks ``TOPIC_PUT_NUMS`` of each topic and
``GROUP_GET_NUMS`` of each ``topic@group``) and gets a ``BrokerStatsData``:
the sum, the rate a second and the average per count over three windows.
RocketMQ's broker keeps each statistic as running totals (``value`` and
``times``, the number of calls that added to it) and samples them on three
timers, started with the broker:

- every 10 s, the last 7 samples kept (a minute);
- every 10 minutes, the last 7 kept (an hour);
- every hour, the last 25 kept (a day).

A window's snapshot is the difference between its newest and oldest samples;
a key's first sample in a window comes with one of zeros a period before it,
so that what was counted before the first sample counts too.

``StatsItems`` keeps the statistics this broker counts (``KEPT``); it reads no
clock: ``tick(now_ms)`` takes the samples due at ``now_ms`` (a monotonic
clock's milliseconds) and says when the next are due. A key that counted
nothing over a whole day is forgotten at a day's sample, so the table holds
only the keys counting lately.
"""

from __future__ import annotations

from collections import deque

import attrs

from triomq.protocol.route import dumps

__all__ = ["DAY", "HOUR", "KEPT", "MINUTE", "WINDOWS", "BrokerStatsData", "StatsItems",
           "StatsSnapshot", "Window"]

#: The statistics counted, as RocketMQ names them: messages and bytes put to a topic
#: (key: the topic), and found by a group's pulls (key: ``topic@group``).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
KEPT = (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE)


@attrs.frozen
class Window:
    """One of the three sampling timers: its period and how many samples it keeps."""

    name: str
    period_ms: int
    keep: int


MINUTE = Window("minute", 10_000, 7)
HOUR = Window("hour", 600_000, 7)
DAY = Window("day", 3_600_000, 25)
WINDOWS = (MINUTE, HOUR, DAY)


@attrs.frozen
class StatsSnapshot:
    """A window's sum, its rate a second, and the average per count (RocketMQ's
    ``BrokerStatsItem``)."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0

    def fields(self) -> dict[str, object]:
        return {"avgpt": float(self.avgpt), "sum": self.sum, "tps": float(self.tps)}


@attrs.frozen
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA's body."""

    minute: StatsSnapshot
    hour: StatsSnapshot
    day: StatsSnapshot

    def encode(self) -> bytes:
        return dumps({"statsDay": self.day.fields(), "statsHour": self.hour.fields(),
                      "statsMinute": self.minute.fields()})


#: A sample: (milliseconds, times, value).
_Sample = tuple[int, int, int]


class _Item:
    """One key's running totals and its samples in each window."""

    def __init__(self) -> None:
        self.value = 0
        self.times = 0
        self.samples: dict[Window, deque[_Sample]] = {
            w: deque(maxlen=w.keep) for w in WINDOWS}

    def sample(self, window: Window, now_ms: int) -> None:
        samples = self.samples[window]
        if not samples:
            samples.append((now_ms - window.period_ms, 0, 0))
        samples.append((now_ms, self.times, self.value))

    def snapshot(self, window: Window) -> StatsSnapshot:
        samples = self.samples[window]
        if not samples:
            return StatsSnapshot()
        (first_ms, first_times, first_value), (last_ms, last_times, last_value) = \
            samples[0], samples[-1]
        total, times, elapsed = last_value - first_value, last_times - first_times, \
            last_ms - first_ms
        return StatsSnapshot(total, total * 1000 / elapsed if elapsed > 0 else 0.0,
                             total / times if times > 0 else 0.0)

    def idle_for_a_day(self) -> bool:
        samples = self.samples[DAY]
        return len(samples) == DAY.keep and samples[0][2] == samples[-1][2]


class StatsItems:
    """The broker's statistics in ``KEPT``, by name and key."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, _Item]] = {name: {} for name in KEPT}
        #: When each window samples next; None until the first tick, which samples all.
        self._next: dict[Window, int] | None = None

    def add(self, name: str, key: str, value: int, times: int = 1) -> None:
        """Count ``value`` for ``key`` of statistic ``name``, in ``times`` calls."""
        item = self._items[name].get(key)
        if item is None:
            item = self._items[name][key] = _Item()
        item.value += value
        item.times += times

    def tick(self, now_ms: int) -> int:
        """Take the samples due at ``now_ms``; when the next are due. A timer late by
        more than its period samples once and keeps its pace from there."""
        if self._next is None:
            self._next = {w: now_ms for w in WINDOWS}
        for window, due in self._next.items():
            if now_ms < due:
                continue
            for items in self._items.values():
                for item in items.values():
                    item.sample(window, now_ms)
            if window is DAY:
                self._forget_idle()
            late = (now_ms - due) // window.period_ms
            self._next[window] = due + (late + 1) * window.period_ms
        return min(self._next.values())

    def _forget_idle(self) -> None:
        for items in self._items.values():
            for key in [k for k, item in items.items() if item.idle_for_a_day()]:
                del items[key]

    def view(self, name: str, key: str) -> BrokerStatsData | None:
        """Statistic ``name`` of ``key`` over the three windows; None if ``name`` is not
        kept or ``key`` counted nothing lately."""
        item = self._items.get(name, {}).get(key)
        if item is None:
            return None
        return BrokerStatsData(*(item.snapshot(w) for w in WINDOWS))
