"""What the HA drivers share: the commit log they replicate, the clock, the
errors that end one connection.

The drivers (``triomq.ha.master_driver``, ``triomq.ha.slave_driver``)
are thin trio shells around the sans-I/O connections of
``triomq.ha.core.master`` and ``triomq.ha.core.slave``. Both work on any commit
log with the ``ReplicaLog`` subset of ``triomq.store.CommitLog``. Time is
``trio.current_time()`` in ms, so tests run under a mock clock.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from triomq.clock import now_ms
from triomq.ha.core.errors import HAProtocolError
from triomq.protocol.ha import HAFrameError

__all__ = ["CONNECTION_ERRORS", "Offload", "ReplicaLog", "describe", "now_ms"]

logger = logging.getLogger("triomq.ha")

#: Errors that end one connection; the service keeps running.
CONNECTION_ERRORS = (
    HAProtocolError,
    HAFrameError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)


class ReplicaLog(Protocol):
    """What replication needs of a commit log (a subset of ``triomq.store.CommitLog``).

    ``append_buffer`` on an empty log must accept an offset past
    ``max_offset`` (the log then starts there: a slave syncing from the
    master's last segment); otherwise the offset must equal ``max_offset``.
    A log without mapped space to lend gets the two append calls from
    ``triomq.store.ScratchAppend``, and ``read_view`` from
    ``triomq.store.ScratchRead``.
    """

    segment_size: int

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def read_view(self, offset: int, scratch: bytearray | memoryview) -> memoryview: ...

    def append_buffer(self, offset: int, size: int) -> memoryview: ...

    def append_written(self, offset: int, size: int) -> int: ...

    def truncate(self, offset: int) -> None: ...


#: Runs a blocking call without blocking trio (``trio.to_thread.run_sync``).
Offload = Callable[..., Awaitable[Any]]


def describe(group: BaseExceptionGroup) -> str:
    """The errors of ``group``, for a log line."""
    return "; ".join(f"{type(e).__name__}: {e}" for e in group.exceptions)
