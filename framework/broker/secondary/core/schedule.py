"""The delivery of one delay level's messages (sans-I/O): RocketMQ's ``ScheduleMessageService``.

A delayed message waits in ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``,
its consume-queue entry's tags code its delivery time
(``triomq.protocol.delay_levels``). ``LevelDelivery`` walks that queue
from the level's offset (``delayOffset.json``) in order, taking up to
``max_in_flight`` due messages at once (``schedule_max_in_flight``; 1 is
RocketMQ's default, ``syncDeliver``). Its driver
(``triomq.broker.secondary.schedule_service`` over trio, the cluster
simulation's broker over virtual time) feeds it the broker's clock
(epoch ms, the clock of its store times) and what it asked for, and does
what it returns:

- ``ReadEntries``: read up to ``max_count`` entries from ``start`` (only
  those replicated enough: a consumer's view of the queue), then
  ``entries_read``;
- ``ReadRecord``: read the record an entry names, then ``record_read``;
- ``Deliver``: put ``message`` through the escape bridge, then
  ``put_done`` with its queue offset and whether it succeeded (PUT_OK:
  stored, flushed and replicated as the master's policy asks). Several are
  under way at once: the driver answers them as they end, and the flow
  waits, asking nothing, while any is;
- ``StoreOffset``: the level's offset moved (the driver records it);
- ``WakeAt``: call ``woke`` when the clock reads ``at_ms`` (only with no put
  under way).

A due message (its delivery time at or before now; a delivery time
further away than the level's delay, as after the clock went back, counts
as due now, as RocketMQ's ``correctDeliverTimestamp``) is delivered to its
``REAL_TOPIC`` / ``REAL_QID`` with ``DELAY`` and the timer properties
cleared (``REAL_TOPIC`` and ``REAL_QID`` stay, as RocketMQ's
``messageTimeUp`` leaves them). The offset moves past a message only once
its put succeeded, and past every message before it, as RocketMQ's
``syncDeliver`` (a put that timed out waiting for the slaves may be on this
master only, which a failover may cut: the offset, copied by the slaves,
must not pass it); any other outcome is retried after a back-off (doubling
from ``RETRY_MIN_MS`` to ``RETRY_MAX_MS``, once the puts under way ended;
no message is taken meanwhile), never skipped: at least once. The puts of
a level's messages in flight together may end, and so land, in any order
(as a timer slot's); those stored after one not yet stored stay after
the offset, and a failover then delivers them again. A message that
cannot be delivered at all (no ``REAL_TOPIC``, a ``REAL_QID`` that is not a
queue id, a transaction's half topic, a record no longer in the log) is
skipped with a ``Skipped`` saying why, as RocketMQ skips it.

A slave acting for its absent master hands on what is due more than
``hand_on_beyond_ms`` later (its timer precision: another master's wheel
delivers within one) too: such a message goes through the escape bridge at
once as a timer message for its delivery time (``TIMER_DELIVER_MS``), so
that another master's timer wheel delivers it then and a returning master
(which takes back the acting slave's delay offsets) does not deliver it
again; one due sooner waits for its time, as a master's. A put of
such a message that fails ends the level's hand-on: that message
and the rest are delivered from the acting slave when due, as the
master's would be (the other master may run no timer wheel, or none may
be reachable).

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
    "MAX_IN_FLIGHT",
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
#: Messages of a level taken at once by default (``schedule_max_in_flight``), as the
#: timer wheel's: one level due at once is delivered at the rate of the puts in flight.
MAX_IN_FLIGHT = 16
#: The properties a delivered message leaves behind (RocketMQ's ``messageTimeUp``).
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
_CLEARED = (PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, "TIMER_DELAY_SEC")
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
    ``put_done`` with ``queue_offset``. Several may be under way at once."""

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


def time_up(record: MessageRecord, deliver_at_ms: int | None = None) -> EscapedMessage | str:
    """The message a due record is delivered as, or why it cannot be; with
    ``deliver_at_ms``, as a timer message for that time (handed on before it is due)."""
    properties = record.properties
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue_id = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic:
        return f"no {PROPERTY_REAL_TOPIC}"
    if not (queue_id.isascii() and queue_id.isdigit()) or int(queue_id) >= 2**31:
        return f"{PROPERTY_REAL_QUEUE_ID} {queue_id[:40]!r} is not a queue id"
    if topic == _TRANS_HALF_TOPIC:
        return f"its {PROPERTY_REAL_TOPIC} is {_TRANS_HALF_TOPIC}"
    kept = {k: v for k, v in properties.items() if k not in _CLEARED}
    if deliver_at_ms is not None:
        kept[PROPERTY_TIMER_DELIVER_MS] = str(deliver_at_ms)
    return EscapedMessage(
        topic=topic, queue_id=int(queue_id), body=record.body, properties=kept,
        flag=record.flag, sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
        born_host=record.born_host, reconsume_times=record.reconsume_times)


class LevelDelivery:
    """One delay level's delivery, from queue offset ``offset`` (``delay_ms``: the
    level's delay), up to ``max_in_flight`` messages taken at once;
    ``hand_on_beyond_ms``: an acting slave's, handing on what is due later than that
    (module docstring)."""

    def __init__(self, level: int, delay_ms: int, offset: int, *,
                 max_in_flight: int = MAX_IN_FLIGHT,
                 hand_on_beyond_ms: int | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight {max_in_flight} is not positive")
        self.level = level
        self.delay_ms = delay_ms
        self.max_in_flight = max_in_flight
        #: None: no message is handed on before its time (a master's, or an acting
        #: slave's once a hand-on failed).
        self.hand_on_beyond_ms = hand_on_beyond_ms
        #: The level's offset: every message before it is stored (or skipped).
        self.offset = offset
        #: The next queue offset to take: every one before it is taken.
        self._taken_to = offset
        self._entries: deque[Entry] = deque()
        self._more = False
        self._reading_entries = False
        #: The queue offsets taken and not yet behind the offset, in order (at most
        #: ``max_in_flight``: a failover delivers them again), and those of them done.
        self._window: deque[int] = deque()
        self._done: set[int] = set()
        #: Taken, their records being read, in order, with their delivery times.
        self._reading: deque[tuple[int, int]] = deque()
        #: Queue offset -> the delivery time of a message handed on before it.
        self._handed_on: dict[int, int] = {}
        #: Queue offset -> the record of a message handed on, to deliver it plainly at its
        #: time if the hand-on fails.
        self._records: dict[int, MessageRecord] = {}
        #: Queue offset -> when a failed put may be tried again at the earliest (its
        #: delivery time, for one that was handed on before it).
        self._not_before: dict[int, int] = {}
        #: Queue offset -> the message being put.
        self._in_flight: dict[int, EscapedMessage] = {}
        #: Puts that failed: retried once the others ended and a back-off passed.
        self._failed: dict[int, EscapedMessage] = {}
        self._retry_ms = RETRY_MIN_MS

    @property
    def queue_id(self) -> int:
        return self.level - 1

    def start(self, now_ms: int) -> list[ScheduleAction]:
        """Begin: read the queue from the level's offset."""
        return [self._read()]

    def _read(self) -> ReadEntries:
        self._reading_entries = True
        return ReadEntries(self.queue_id, self._taken_to, BATCH)

    def entries_read(self, entries: Sequence[Entry], queue_min: int, queue_max: int,
                     now_ms: int) -> list[ScheduleAction]:
        """The entries from the offset (``queue_min``/``queue_max``: the queue's bounds
        as consumers see them)."""
        self._reading_entries = False
        self._entries = deque(e for e in entries if e[0] >= self._taken_to)
        self._more = len(entries) == BATCH
        if not entries and not self._window:
            # RocketMQ's reset of an offset the queue no longer (or not yet) holds.
            corrected = min(max(self.offset, queue_min), queue_max)
            if corrected != self.offset:
                self._taken_to = corrected
                return [*self._store(), self._read()]
        return self._advance(now_ms)

    def _trim(self) -> None:
        """Drop the done messages at the window's start."""
        window, done = self._window, self._done
        while window and window[0] in done:
            done.remove(window.popleft())

    def _store(self) -> list[ScheduleAction]:
        """The offset up to the first message taken and not done (or what is taken)."""
        self._trim()
        offset = self._window[0] if self._window else self._taken_to
        if offset == self.offset:
            return []
        self.offset = offset
        return [StoreOffset(self.level, offset)]

    def _advance(self, now_ms: int) -> list[ScheduleAction]:
        """Take the due messages the window has room for; with nothing under way, the
        retries' back-off, the next delivery time or the next look."""
        taken: list[ScheduleAction] = []
        entries, window = self._entries, self._window
        self._trim()
        # A failure stops the taking: a stored message after it would wait in the
        # window, the offset behind it, and go on failing like it.
        while entries and not self._failed and len(window) < self.max_in_flight:
            queue_offset, physical_offset, size, due = entries[0][:4]
            # Entries past a gap: the queue starts later.
            self._taken_to = max(self._taken_to, queue_offset)
            if due > now_ms + self.delay_ms:
                due = now_ms
            beyond = self.hand_on_beyond_ms
            if due > now_ms and (beyond is None or due <= now_ms + beyond):
                break
            entries.popleft()
            window.append(queue_offset)
            self._reading.append((queue_offset, due))
            self._taken_to = queue_offset + 1
            taken.append(ReadRecord(physical_offset, size))
        if not entries and self._more and not self._reading_entries:
            taken.append(self._read())
        stored = self._store()
        if self._reading or self._in_flight or self._reading_entries:
            return [*stored, *taken]
        if self._failed:
            wait, self._retry_ms = self._retry_ms, min(2 * self._retry_ms, RETRY_MAX_MS)
            return [*stored, WakeAt(now_ms + wait)]
        if entries:  # the first is not due yet
            return [*stored, WakeAt(entries[0][3])]
        return [*stored, WakeAt(now_ms + idle_ms(self.delay_ms))]

    def record_read(self, record: MessageRecord | None, now_ms: int) -> list[ScheduleAction]:
        """The record of the first ``ReadRecord`` not yet answered (None: no longer in
        the log)."""
        queue_offset, due = self._reading.popleft()
        handed_on = due > now_ms
        message = (time_up(record, due if handed_on else None) if record is not None
                   else "its record is gone")
        if isinstance(message, str):
            return [Skipped(queue_offset, message), *self._passed(queue_offset, now_ms)]
        if handed_on:
            assert record is not None
            self._handed_on[queue_offset] = due
            self._records[queue_offset] = record
        self._in_flight[queue_offset] = message
        return [Deliver(queue_offset, message)]

    def put_done(self, queue_offset: int, ok: bool, now_ms: int) -> list[ScheduleAction]:
        """The put of ``Deliver(queue_offset, ...)`` ended: ``ok`` (PUT_OK), or anything
        else (retried)."""
        message = self._in_flight.pop(queue_offset)
        due = self._handed_on.pop(queue_offset, None)
        record = self._records.pop(queue_offset, None)
        if not ok:
            if due is not None and record is not None:
                # Handed on before its time and refused: this one and the rest wait it.
                self.hand_on_beyond_ms = None
                delivered = time_up(record)
                assert not isinstance(delivered, str)  # it was deliverable a moment ago
                message = delivered
                self._not_before[queue_offset] = due
            self._failed[queue_offset] = message
            return self._advance(now_ms)
        if not self._failed:
            self._retry_ms = RETRY_MIN_MS
        return self._passed(queue_offset, now_ms)

    def _passed(self, queue_offset: int, now_ms: int) -> list[ScheduleAction]:
        self._done.add(queue_offset)
        self._not_before.pop(queue_offset, None)
        return self._advance(now_ms)

    def woke(self, now_ms: int) -> list[ScheduleAction]:
        """The time a ``WakeAt`` asked for has come: the retries, else the next look."""
        if self._failed:
            failed = sorted((queue_offset, message)
                            for queue_offset, message in self._failed.items()
                            if self._not_before.get(queue_offset, now_ms) <= now_ms)
            if not failed:
                return [WakeAt(min(self._not_before[q] for q in self._failed))]
            for queue_offset, _ in failed:
                del self._failed[queue_offset]
            self._in_flight.update(failed)
            return [Deliver(queue_offset, message) for queue_offset, message in failed]
        if self._entries:
            return self._advance(now_ms)
        return [self._read()]
