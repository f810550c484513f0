"""Message ids (``UNIQ_KEY``), laid out as RocketMQ's ``MessageClientIDSetter``.

An id is upper-case hex of: the client's IP (4 or 16 bytes), its process id
(2), a per-client random number (4: Java uses its class loader's hash),
the milliseconds since the start of the current month (4) and a counter
(2). Ids from one client are unique while fewer than 65,536 are made in
one millisecond; the fixed part tells clients apart. The caller passes the
clock's reading, so this module reads none.
"""

from __future__ import annotations

import datetime
import struct

from triomq.protocol.message import pack_ip

__all__ = ["UniqueIdGenerator"]


def _month_start_ms(now_ms: int) -> int:
    now = datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp()) * 1000


class UniqueIdGenerator:
    """Makes ``UNIQ_KEY`` values for one client."""

    def __init__(self, ip: str, pid: int, seed: int) -> None:
        self._fixed = (pack_ip(ip) + struct.pack(">HI", pid & 0xFFFF, seed & 0xFFFFFFFF)).hex()
        self._counter = 0
        self._month_start = 0
        self._next_month_start = 0

    def next_id(self, now_ms: int) -> str:
        """A new id made at ``now_ms`` (milliseconds since the epoch)."""
        if not self._month_start <= now_ms < self._next_month_start:
            self._month_start = _month_start_ms(now_ms)
            # 32 days on from the first is always in the next month.
            self._next_month_start = _month_start_ms(self._month_start + 32 * 86_400_000)
        since = (now_ms - self._month_start) & 0xFFFFFFFF
        counter = self._counter
        self._counter = (counter + 1) & 0xFFFF
        return (self._fixed + struct.pack(">IH", since, counter).hex()).upper()
