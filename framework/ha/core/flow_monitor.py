"""Bytes moved per second over an HA connection, pure: RocketMQ's ``FlowMonitor``.

RocketMQ counts what a connection transfers into the current second and
shows the last whole second's count (``transferredByteInSecond``, which
``mqadmin haStatus`` prints). Here the seconds are those of the ``now_ms``
passed in: a second in which nothing moved shows 0.
"""

from __future__ import annotations

__all__ = ["FlowMonitor"]


class FlowMonitor:
    """Bytes counted per whole second of ``now_ms``."""

    def __init__(self) -> None:
        self._second = -1
        self._current = 0
        self._last = 0

    def add(self, size: int, now_ms: int) -> None:
        """``size`` bytes moved at ``now_ms``."""
        self._roll(now_ms)
        self._current += size

    def per_second(self, now_ms: int) -> int:
        """The bytes of the last whole second before ``now_ms``'s."""
        self._roll(now_ms)
        return self._last

    def _roll(self, now_ms: int) -> None:
        second = now_ms // 1000
        if second != self._second:
            self._last = self._current if second == self._second + 1 else 0
            self._current = 0
            self._second = second
