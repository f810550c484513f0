"""Where the timer wheel's delivery has reached, pure: ``config/timerCheckpoint.json``.

triomq's own file, not RocketMQ's ``timercheck`` (whose positions point into
a ``timerlog/`` triomq does not keep: its wheel is rebuilt from the timer
topic's consume queue, ``triomq.broker.secondary.core.timer_wheel``). A
checkpoint is three numbers over ``rmq_sys_wheel_timer`` queue 0:

- ``readTimeMs`` (T): the wheel's read time, RocketMQ's ``lastReadTimeMs``:
  every slot before it is delivered;
- ``scanOffset`` (F): every entry before it was scanned (and, if it was
  due before the read time when scanned, delivered), RocketMQ's
  ``lastTimerQueueOffset``;
- ``queueOffset`` (S): the first entry not known delivered; the rebuild
  reads from here. Every entry in [S, F) whose ``TIMER_OUT_MS`` is before T
  is delivered, every other one is pending.

The JSON, under a ``DataVersion`` that moves every write:
``{"dataVersion": {...}, "queueOffset": S, "readTimeMs": T, "scanOffset": F}``.
It is also GET_TIMER_CHECK_POINT's (60) body, which a slave asks its master
for every ``slave_synchronize_period`` and adopts (RocketMQ's
``SlaveSynchronize.syncTimerCheckPoint``; RocketMQ answers with its own
56-byte ``timercheck``, which names timerlog positions triomq has not: a
RocketMQ slave of a triomq master cannot use either), so that a slave
elected master rebuilds its wheel from where its master was, at worst
one copy period behind: those messages are delivered again (at least once).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from triomq.broker.secondary.core.schedule_put import TIMER_TOPIC
from triomq.protocol.route import DataVersion, RouteDataError, dumps, loads

__all__ = ["TIMER_CHECKPOINT_NAME", "TimerCheckpoint", "TimerCheckpointTable"]

TIMER_CHECKPOINT_NAME = "timerCheckpoint.json"


@attrs.frozen
class TimerCheckpoint:
    """Where the wheel's delivery has reached (see the module docstring)."""

    queue_offset: int = 0
    scan_offset: int = 0
    #: 0 before any delivery: the wheel starts at the clock.
    read_time_ms: int = 0

    def delivered(self, queue_offset: int, slot_ms: int) -> bool:
        """Whether the entry at ``queue_offset`` (at or after ``queue_offset`` S), due in
        the slot starting at ``slot_ms``, was delivered: scanned before F, due before T.
        The rebuild skips it; every other entry from S is pending."""
        return queue_offset < self.scan_offset and slot_ms < self.read_time_ms


class TimerCheckpointTable:
    """The broker's checkpoint, its DataVersion and revision (for the writes)."""

    def __init__(self, checkpoint: TimerCheckpoint | None = None,
                 data_version: DataVersion | None = None) -> None:
        self.checkpoint = checkpoint if checkpoint is not None else TimerCheckpoint()
        self.data_version = data_version if data_version is not None else DataVersion()
        #: Moves with every change: the broker writes the file when it moved.
        self.revision = 0

    def update(self, checkpoint: TimerCheckpoint, now_ms: int) -> None:
        """The wheel's delivery has reached ``checkpoint``."""
        if checkpoint == self.checkpoint:
            return
        self.checkpoint = checkpoint
        self.data_version = self.data_version.next(now_ms)
        self.revision += 1

    def truncated(self, queue_max: Callable[[str, int], int]) -> bool:
        """The log lost its tail: a scan past the timer queue's end now goes back to it,
        so that the entries there, others now, are pending again (``delivered`` would
        skip those due before the read time). Whether it moved."""
        end = queue_max(TIMER_TOPIC, 0)
        old = self.checkpoint
        if old.scan_offset <= end and old.queue_offset <= end:
            return False
        self.checkpoint = attrs.evolve(old, queue_offset=min(old.queue_offset, end),
                                       scan_offset=min(old.scan_offset, end))
        self.revision += 1
        return True

    def adopt_master(self, master: TimerCheckpointTable) -> bool:
        """Take the master's checkpoint (a slave's copy); whether anything changed."""
        if (master.checkpoint == self.checkpoint
                and master.data_version == self.data_version):
            return False
        self.checkpoint = master.checkpoint
        self.data_version = master.data_version
        self.revision += 1
        return True

    def encode(self) -> bytes:
        """``timerCheckpoint.json`` (also GET_TIMER_CHECK_POINT's body)."""
        c = self.checkpoint
        return dumps({"dataVersion": self.data_version.to_json(),
                      "queueOffset": c.queue_offset, "readTimeMs": c.read_time_ms,
                      "scanOffset": c.scan_offset})

    @classmethod
    def decode(cls, data: bytes) -> TimerCheckpointTable:
        """A table from ``timerCheckpoint.json``; ``RouteDataError`` names what is wrong."""
        obj = loads(data, TIMER_CHECKPOINT_NAME)
        if not isinstance(obj, dict):
            raise RouteDataError(f"{TIMER_CHECKPOINT_NAME}: expected an object")
        values = {}
        for key in ("queueOffset", "scanOffset", "readTimeMs"):
            value = obj.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RouteDataError(f"{TIMER_CHECKPOINT_NAME}: {key}: expected an offset "
                                     f"or a time (an integer >= 0), got {value!r:.40}")
            values[key] = value
        if values["queueOffset"] > values["scanOffset"]:
            raise RouteDataError(
                f"{TIMER_CHECKPOINT_NAME}: queueOffset {values['queueOffset']} is past "
                f"scanOffset {values['scanOffset']}")
        checkpoint = TimerCheckpoint(values["queueOffset"], values["scanOffset"],
                                     values["readTimeMs"])
        return cls(checkpoint, DataVersion.from_json(obj.get("dataVersion") or {}))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TimerCheckpointTable)
                and self.checkpoint == other.checkpoint
                and self.data_version == other.data_version)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TimerCheckpointTable({self.checkpoint}, {self.data_version})"
