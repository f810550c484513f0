"""Where each delay level's delivery has reached, pure: RocketMQ's ``delayOffset.json``.

The table maps a delay level to the next queue offset of its queue in
``SCHEDULE_TOPIC_XXXX`` (queue ``level - 1``) the schedule service
delivers, under a ``DataVersion`` that moves every
``delay_offset_update_version_step`` moves (RocketMQ's
``ScheduleMessageService.updateOffset``); ``revision`` counts every move,
for the broker's writes. ``encode`` is the file under ``<store
root>/config/`` and GET_ALL_DELAY_OFFSET's body, as RocketMQ's
``DelayOffsetSerializeWrapper``: ``{"dataVersion": {...}, "offsetTable":
{"1": 12, "2": 0}}`` (fastjson's bare ``{1:12}`` is read too).

A slave takes its master's table whole with ``adopt_master`` (RocketMQ's
``SlaveSynchronize.syncDelayOffset`` writes the master's file over its
own), so a slave elected master continues where its master was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from triomq.protocol.delay_levels import SCHEDULE_TOPIC
from triomq.protocol.route import DataVersion, RouteDataError, dumps, loads

__all__ = ["DELAY_OFFSETS_NAME", "DelayOffsetTable"]

DELAY_OFFSETS_NAME = "delayOffset.json"


class DelayOffsetTable:
    """Each delay level's next queue offset to deliver, and their DataVersion."""

    def __init__(self, offsets: Mapping[int, int] | None = None,
                 data_version: DataVersion | None = None, *, version_step: int = 200) -> None:
        self._offsets = dict(offsets or {})
        self.data_version = data_version if data_version is not None else DataVersion()
        self.version_step = version_step
        #: Moves with every change: the broker writes the file when it moved.
        self.revision = 0
        self._moves = 0

    def offset(self, level: int) -> int:
        """Where ``level``'s delivery goes on (0 before any)."""
        return self._offsets.get(level, 0)

    def update(self, level: int, offset: int, now_ms: int) -> None:
        """``level``'s delivery has reached queue offset ``offset``."""
        if self._offsets.get(level) == offset:
            return
        self._offsets[level] = offset
        self.revision += 1
        self._moves += 1
        if self._moves % self.version_step == 0:
            self.data_version = self.data_version.next(now_ms)

    def truncated(self, queue_max: Callable[[str, int], int]) -> bool:
        """The log lost its tail: a level's offset past its queue's end now goes back to
        it (the delayed messages there are others, none delivered). Whether any moved."""
        moved = False
        for level, offset in self._offsets.items():
            end = queue_max(SCHEDULE_TOPIC, level - 1)
            if offset > end:
                self._offsets[level] = end
                moved = True
        if moved:
            self.revision += 1
        return moved

    def offsets(self) -> dict[int, int]:
        """A copy of the table: level -> offset."""
        return dict(self._offsets)

    def adopt_master(self, master: DelayOffsetTable) -> bool:
        """Take the master's table and DataVersion (a slave's copy); whether anything
        changed."""
        if master.offsets() == self._offsets and master.data_version == self.data_version:
            return False
        self._offsets = master.offsets()
        self.data_version = master.data_version
        self.revision += 1
        return True

    def encode(self) -> bytes:
        """``delayOffset.json`` (also GET_ALL_DELAY_OFFSET's body)."""
        return dumps({"dataVersion": self.data_version.to_json(),
                      "offsetTable": {str(level): offset
                                      for level, offset in sorted(self._offsets.items())}})

    @classmethod
    def decode(cls, data: bytes, *, version_step: int = 200) -> DelayOffsetTable:
        """A table from ``delayOffset.json``; ``RouteDataError`` names what is wrong."""
        obj = loads(data, DELAY_OFFSETS_NAME)
        if not isinstance(obj, dict):
            raise RouteDataError(f"{DELAY_OFFSETS_NAME}: expected an object")
        table = obj.get("offsetTable") or {}
        if not isinstance(table, dict):
            raise RouteDataError(f"{DELAY_OFFSETS_NAME}: offsetTable: expected an object")
        offsets = {}
        for level, offset in table.items():
            if (not level.isascii() or not level.isdigit() or isinstance(offset, bool)
                    or not isinstance(offset, int) or offset < 0):
                raise RouteDataError(f"{DELAY_OFFSETS_NAME}: offsetTable: expected level -> "
                                     f"offset, got {level[:40]!r}: {offset!r}")
            offsets[int(level)] = offset
        return cls(offsets, DataVersion.from_json(obj.get("dataVersion") or {}),
                   version_step=version_step)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DelayOffsetTable) and self._offsets == other._offsets
                and self.data_version == other.data_version)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DelayOffsetTable({self._offsets}, {self.data_version})"
