"""When a slave connects to its master again (sans-I/O).

After a connection ends, or fails to open, the slave waits before the
next try: ``reconnect_min`` at first, doubling up to ``reconnect_max``
while tries keep failing; a connection whose handshake completed starts
the doubling over (the master was reachable: it may well be again). A
master that announces itself (EXCHANGE_BROKER_HA_INFO, a static master back
through pre-online) is tried at once, and the doubling starts over.
"""

from __future__ import annotations

__all__ = ["Reconnect"]


class Reconnect:
    """A slave's reconnect backoff (module docstring); times in ms."""

    def __init__(self, minimum_ms: int, maximum_ms: int) -> None:
        if not 0 < minimum_ms <= maximum_ms:
            raise ValueError(f"reconnect backoff needs 0 < min <= max, got {minimum_ms}, "
                             f"{maximum_ms}")
        self.minimum_ms = minimum_ms
        self.maximum_ms = maximum_ms
        self.backoff_ms = minimum_ms

    def delay_after(self, *, handshook: bool) -> int:
        """How long to wait before the next try, after a connection (or a try) ended."""
        if handshook:
            self.backoff_ms = self.minimum_ms
        delay = self.backoff_ms
        self.backoff_ms = min(self.backoff_ms * 2, self.maximum_ms)
        return delay

    def announced(self) -> None:
        """The master said it is back: the next try is now, and the doubling starts over."""
        self.backoff_ms = self.minimum_ms
