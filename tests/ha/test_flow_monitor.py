"""The bytes an HA connection moved in the last whole second (RocketMQ's FlowMonitor)."""

from __future__ import annotations

from triomq.ha.core.flow_monitor import FlowMonitor


def test_the_last_whole_second_is_shown() -> None:
    flow = FlowMonitor()
    flow.add(100, 1_000)
    flow.add(50, 1_999)
    assert flow.per_second(1_999) == 0  # the second is not over
    assert flow.per_second(2_000) == 150
    flow.add(7, 2_500)
    assert flow.per_second(2_999) == 150
    assert flow.per_second(3_000) == 7
    assert flow.per_second(5_000) == 0  # a quiet second in between
