"""The named statistics' windows, as RocketMQ's ``StatsItem`` samples and reports them."""

from __future__ import annotations

import json

from triomq.broker.admin.core.stats_items import (
    GROUP_GET_NUMS,
    TOPIC_PUT_NUMS,
    StatsItems,
    StatsSnapshot,
)

SECOND, MINUTE, HOUR = 1000, 60_000, 3_600_000


def test_the_minute_window_keeps_seven_samples_ten_seconds_apart() -> None:
    items = StatsItems()
    assert items.tick(0) == 10 * SECOND
    items.add(TOPIC_PUT_NUMS, "orders", 3)
    for n in range(1, 7):  # a put of 3 messages before each of six samples
        assert items.tick(n * 10 * SECOND) == (n + 1) * 10 * SECOND
        items.add(TOPIC_PUT_NUMS, "orders", 3)
    # Samples at 10 s ... 60 s and the zeros before the first: all 18 in 60 s, 6 calls.
    view = items.view(TOPIC_PUT_NUMS, "orders")
    assert view is not None and view.minute == StatsSnapshot(18, 0.3, 3.0)
    # The next sample pushes out the zeros: from 10 s (3 counted) to 70 s (21).
    items.tick(70 * SECOND)
    view = items.view(TOPIC_PUT_NUMS, "orders")
    assert view is not None and view.minute == StatsSnapshot(18, 0.3, 3.0)
    items.tick(80 * SECOND)  # nothing new: 6 counted from 20 s to 80 s
    view = items.view(TOPIC_PUT_NUMS, "orders")
    assert view is not None and view.minute == StatsSnapshot(15, 0.25, 3.0)


def test_the_hour_and_the_day_sample_on_their_own_timers() -> None:
    items = StatsItems()
    items.tick(0)
    items.add(GROUP_GET_NUMS, "orders@cg", 8, times=2)
    items.tick(10 * SECOND)
    view = items.view(GROUP_GET_NUMS, "orders@cg")
    assert view is not None and (view.hour, view.day) == (StatsSnapshot(), StatsSnapshot())
    # A timer late by many periods samples once and keeps its pace.
    assert items.tick(10 * MINUTE + 5 * SECOND) == 10 * MINUTE + 10 * SECOND
    view = items.view(GROUP_GET_NUMS, "orders@cg")
    assert view is not None and view.hour == StatsSnapshot(8, 8 / 600, 4.0)
    items.tick(HOUR)
    view = items.view(GROUP_GET_NUMS, "orders@cg")
    assert view is not None and view.day == StatsSnapshot(8, 8 / 3600, 4.0)
    # The hour's window: the zeros 10 minutes before its first sample (at 10:05) to now.
    assert view.hour == StatsSnapshot(8, 8000 / (HOUR - 5 * SECOND), 4.0)
    assert json.loads(view.encode()) == {
        f"stats{name}": {"avgpt": 4.0, "sum": 8, "tps": snapshot.tps}
        for name, snapshot in (("Minute", view.minute), ("Hour", view.hour), ("Day", view.day))}


def test_a_key_idle_for_a_day_is_forgotten_and_an_unknown_one_is_none() -> None:
    items = StatsItems()
    items.tick(0)
    items.add(TOPIC_PUT_NUMS, "old", 1)
    items.add(TOPIC_PUT_NUMS, "busy", 1)
    for hour in range(1, 26):
        items.tick(hour * HOUR)
        items.add(TOPIC_PUT_NUMS, "busy", 1)
    assert items.view(TOPIC_PUT_NUMS, "busy") is not None
    assert items.view(TOPIC_PUT_NUMS, "old") is None
    assert items.view("BROKER_PUT_NUMS", "busy") is None
