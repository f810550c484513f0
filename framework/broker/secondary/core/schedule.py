"""The delivery of one delay level's messages (sans-I/O): RocketMQ's ``ScheduleMessageService``.

A delayed message waits in ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``,
its consume-queue entry's tags code its delivery time
(``triomq.protocol.delay_levels``). ``LevelDelivery`` walks that queue
from the level's offset (``delayOffset.json``) in order, one message at a
time. Its driver (``triomq.broker.secondary.schedule_service`` over trio, the
cluster simulation's broker over virtual time) feeds it the broker's clock
(epoch ms, the clock of its store times) and what it asked for, and does
what it returns:

- ``ReadEntries``: read up to ``max_count`` entries from ``start`` (only
  those replicated enough: a consumer's view of the queue), then
  ``entries_read``;
- ``ReadRecord``: read the record an entry names, then ``record_read``;
- ``Deliver``: put ``message`` through the escape bridge, then
  ``put_done`` with whether it succeeded (PUT_OK: stored, flushed and
  replicated as the master's policy asks);
- ``StoreOffset``: the level's offset moved (the driver records it);
- ``WakeAt``: call ``woke`` when the clock reads ``at_ms``.

A due message (its delivery time at or before now; a delivery time
further away than the level's delay, as after the clock went back, counts
as due now, as RocketMQ's ``correctDeliverTimestamp``) is delivered to its
``REAL_TOPIC`` / ``REAL_QID`` with ``DELAY`` and the timer properties
cleared (``REAL_TOPIC`` and ``REAL_QID`` stay, as RocketMQ's
``messageTimeUp`` leaves them). The offset moves past a message only once
its put succeeded, as RocketMQ's ``syncDeliver`` (a put that timed out
waiting for the slaves may be on this master only, which a failover may
cut: the offset, copied by the slaves, must not pass it); any other
outcome is retried after a back-off (doubling from ``RETRY_MIN_MS`` to
``RETRY_MAX_MS``), never skipped: at least once. A message that
cannot be delivered at all (no ``REAL_TOPIC``, a ``REAL_QID`` that is not a
queue id, a transaction's half topic, a record no longer in the log) is
skipped with a ``Skipped`` saying why, as RocketMQ skips it.

With nothing due the level waits for the first entry's delivery time; at
the queue's end it looks again after ``idle_ms(delay)``: the level's
delay, within ``SCAN_INTERVAL_MS`` (RocketMQ's 100 ms) and
``IDLE_MAX_MS``. An entry appended after a look is due no earlier than its
delay later, so it is seen before it is due, or at most a scan interval
late for a level shorter than that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.protocol.delay_levels import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from triomq.protocol.message import PROPERTY_DELAY, MessageRecord

__all__ = [
    "IDLE_MAX_MS",
    "RETRY_MAX_MS",
    "RETRY_MIN_MS",
    "SCAN_INTERVAL_MS",
    "Deliver",
    "LevelDelivery",
    "ReadEntries",
    "ReadRecord",
    "ScheduleAction",
    "Skipped",
    "StoreOffset",
    "WakeAt",
    "idle_ms",
    "time_up",
]

SCAN_INTERVAL_MS = 100
IDLE_MAX_MS = 1000
RETRY_MIN_MS = 100
RETRY_MAX_MS = 10_000
#: Entries read at once.
BATCH = 32
#: The properties a delivered message leaves behind (RocketMQ's ``messageTimeUp``).
_CLEARED = (PROPERTY_DELAY, "TIMER_DELIVER_MS", "TIMER_DELAY_SEC")
_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


@attrs.frozen
class ReadEntries:
    """Read up to ``max_count`` entries of queue ``queue_id`` of the waiting topic from
    ``start`` (the schedule's level queues, the timer wheel's queue 0)."""

    queue_id: int
    start: int
    max_count: int


@attrs.frozen
class ReadRecord:
    physical_offset: int
    size: int


@attrs.frozen
class Deliver:
    """Put ``message``, the entry at ``queue_offset``, through the escape bridge; then
    ``put_done``. The timer wheel has several under way at once."""

    queue_offset: int
    message: EscapedMessage


@attrs.frozen
class StoreOffset:
    level: int
    offset: int


@attrs.frozen
class WakeAt:
    at_ms: int


@attrs.frozen
class Skipped:
    """The message at ``queue_offset`` cannot be delivered (``reason``); the level goes on."""

    queue_offset: int
    reason: str


ScheduleAction = ReadEntries | ReadRecord | Deliver | StoreOffset | WakeAt | Skipped
#: A consume-queue entry: ``(queue offset, physical offset, size, tags code)``.
Entry = Sequence[int]


def idle_ms(delay_ms: int) -> int:
    """How long a level at the end of its queue waits before it looks again."""
    return max(SCAN_INTERVAL_MS, min(delay_ms, IDLE_MAX_MS))


def time_up(record: MessageRecord) -> EscapedMessage | str:
    """The message a due record is delivered as, or why it cannot be."""
    properties = record.properties
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue_id = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic:
        return f"no {PROPERTY_REAL_TOPIC}"
    if not (queue_id.isascii() and queue_id.isdigit()) or int(queue_id) >= 2**31:
        return f"{PROPERTY_REAL_QUEUE_ID} {queue_id[:40]!r} is not a queue id"
    if topic == _TRANS_HALF_TOPIC:
        return f"its {PROPERTY_REAL_TOPIC} is {_TRANS_HALF_TOPIC}"
    return EscapedMessage(
        topic=topic, queue_id=int(queue_id), body=record.body,
        properties={k: v for k, v in properties.items() if k not in _CLEARED},
        flag=record.flag, sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
        born_host=record.born_host, reconsume_times=record.reconsume_times)


class LevelDelivery:
    """One delay level's delivery, from queue offset ``offset`` (``delay_ms``: the
    level's delay)."""

    def __init__(self, level: int, delay_ms: int, offset: int) -> None:
        self.level = level
        self.delay_ms = delay_ms
        #: The next queue offset to deliver: every message before it is stored.
        self.offset = offset
        self._entries: deque[Entry] = deque()
        self._more = False
        self._message: EscapedMessage | None = None
        self._retry_ms = RETRY_MIN_MS

    @property
    def queue_id(self) -> int:
        return self.level - 1

    def start(self, now_ms: int) -> list[ScheduleAction]:
        """Begin: read the queue from the level's offset."""
        return [self._read()]

    def _read(self) -> ReadEntries:
        return ReadEntries(self.queue_id, self.offset, BATCH)

    def entries_read(self, entries: Sequence[Entry], queue_min: int, queue_max: int,
                     now_ms: int) -> list[ScheduleAction]:
        """The entries from the offset (``queue_min``/``queue_max``: the queue's bounds
        as consumers see them)."""
        moved: list[ScheduleAction] = []
        if not entries:
            # RocketMQ's reset of an offset the queue no longer (or not yet) holds.
            corrected = min(max(self.offset, queue_min), queue_max)
            if corrected != self.offset:
                self.offset = corrected
                moved.append(StoreOffset(self.level, corrected))
                return [*moved, self._read()]
            return [WakeAt(now_ms + idle_ms(self.delay_ms))]
        self._entries = deque(e for e in entries if e[0] >= self.offset)
        self._more = len(entries) == BATCH
        return self._next(now_ms)

    def _next(self, now_ms: int) -> list[ScheduleAction]:
        if not self._entries:
            return [self._read()] if self._more else [WakeAt(now_ms + idle_ms(self.delay_ms))]
        queue_offset, physical_offset, size, due = self._entries[0][:4]
        if queue_offset != self.offset:  # entries past a gap: the queue starts later
            self.offset = queue_offset
            return [StoreOffset(self.level, queue_offset), *self._next(now_ms)]
        if due > now_ms + self.delay_ms:
            due = now_ms
        if due > now_ms:
            return [WakeAt(due)]
        return [ReadRecord(physical_offset, size)]

    def record_read(self, record: MessageRecord | None, now_ms: int) -> list[ScheduleAction]:
        """The first entry's record (None: no longer in the log)."""
        message = time_up(record) if record is not None else "its record is gone"
        if isinstance(message, str):
            skipped = Skipped(self.offset, message)
            return [skipped, *self._passed(now_ms)]
        self._message = message
        return [Deliver(self.offset, message)]

    def put_done(self, ok: bool, now_ms: int) -> list[ScheduleAction]:
        """The delivery's put ended: ``ok`` (PUT_OK), or anything else."""
        if not ok:
            wait, self._retry_ms = self._retry_ms, min(2 * self._retry_ms, RETRY_MAX_MS)
            return [WakeAt(now_ms + wait)]
        self._message = None
        self._retry_ms = RETRY_MIN_MS
        return self._passed(now_ms)

    def _passed(self, now_ms: int) -> list[ScheduleAction]:
        self._entries.popleft()
        self.offset += 1
        return [StoreOffset(self.level, self.offset), *self._next(now_ms)]

    def woke(self, now_ms: int) -> list[ScheduleAction]:
        """The time a ``WakeAt`` asked for has come."""
        if self._message is not None:
            return [Deliver(self.offset, self._message)]
        if self._entries:
            return self._next(now_ms)
        return [self._read()]
