"""The delivery of timer messages (sans-I/O): RocketMQ 5's ``TimerMessageStore``.

A timer message waits in ``rmq_sys_wheel_timer`` queue 0, its
``TIMER_OUT_MS`` the start of its slot (``schedule_put``). ``TimerDelivery``
scans that queue in order, reading each record once for its time, and
hangs the entry (queue offset, physical offset, size) on its slot of a
``TimerWheel``: slots by delivery time, each a chain of entries, and a heap
of the slots' times. Once a slot has passed (the clock at or past its
start plus ``timer_precision_ms``), its chain is read again and put,
through the escape bridge, to ``REAL_TOPIC`` / ``REAL_QID``: the properties
kept, ``REAL_TOPIC`` and ``REAL_QID`` cleared, ``TIMER_ENQUEUE_MS`` (its
store time in the timer topic) and ``TIMER_DEQUEUE_MS`` (now) added, as
RocketMQ's ``convert``/``convertMessage``: ``TIMER_OUT_MS`` stays, so the
put is not routed to the wheel again. A tick costs the slots that passed
and the entries due or new, never the number pending: a slot's chain is
a dict lookup, the next non-empty slot the heap's top.

An entry scanned after its slot passed (a message due within the
precision, a scan behind) is delivered at once, before the slots.

A slave acting for its absent master (``hand_on``) puts the entries whose
slot has not passed through the escape bridge at once instead, as timer
messages (``hand_on_message``) for the end of their slot, when this wheel
would have delivered them: another master's wheel of the same precision
puts them in the same slot. They count as delivered, so the checkpoint
moves past them and a returning master (which takes it back) does not
deliver them again. A hand-on that fails ends the handing on: that entry
and the later ones wait in this wheel, as a master's (the other master may
run no timer wheel, or none may be reachable).

Its driver (``triomq.broker.secondary.timer_service`` over trio, the
cluster simulation's broker over virtual time) feeds it the broker's clock
(epoch ms, the clock of its store times) and what it asked for, and does
what it returns:

- ``ReadEntries``: read up to ``max_count`` entries of the timer queue from
  ``start`` (a consumer's view: only those replicated enough), then
  ``entries_read``;
- ``ReadRecord``: read the record an entry names, then ``record_read``;
- ``Deliver``: put ``message`` through the escape bridge, then
  ``put_done`` (up to ``MAX_IN_FLIGHT`` at once: the driver answers them as
  they end, and the flow waits, asking nothing, while any is under way);
- ``StoreCheckpoint``: the checkpoint moved (the driver records it);
- ``WakeAt``: call ``woke`` when the clock reads ``at_ms`` (the next slot's end:
  the wheel ticks every precision, scanning the queue's new entries);
- ``Skipped``: an entry that cannot be delivered (no ``TIMER_OUT_MS``, no
  ``REAL_TOPIC``, a record gone, a put refused as illegal), and why.

Delivered at least once, never lost: the checkpoint
(``triomq.broker.secondary.core.timer_checkpoint``) moves past an entry only
once its put returned PUT_OK (the read time moves past a slot once every
put of its chain did); any other outcome but MESSAGE_ILLEGAL (which
RocketMQ does not retry either) is retried, once the puts under way ended,
after a back-off doubling from ``RETRY_MIN_MS`` to ``RETRY_MAX_MS``.

Persisted by rebuilding, not by a wheel file: the wheel lives in memory
and is rebuilt at each start (a restart, a new master term) from the timer
topic's consume queue and the checkpoint: from ``queueOffset`` S, an entry
before ``scanOffset`` F whose time is before ``readTimeMs`` T was
delivered, every other one is pending. A new master holds the same queue
(replicated with the commit log) and its master's checkpoint (copied with
GET_TIMER_CHECK_POINT), so it continues from where the old one stopped;
what the old one delivered after the copy is delivered again. The rebuild
reads every record from S: up to ``timer_max_delay_sec`` of timer
messages. The wheel does not tick while it rebuilds.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Sequence

import attrs

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.secondary.core.schedule import (
    RETRY_MAX_MS,
    RETRY_MIN_MS,
    Deliver,
    ReadEntries,
    ReadRecord,
    Skipped,
    WakeAt,
)
from triomq.broker.secondary.core.schedule_put import PROPERTY_TIMER_OUT_MS, TIMER_TOPIC
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpoint
from triomq.protocol.delay_levels import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from triomq.protocol.message import MessageRecord

__all__ = [
    "BATCH",
    "MAX_IN_FLIGHT",
    "PROPERTY_TIMER_DEQUEUE_MS",
    "PROPERTY_TIMER_ENQUEUE_MS",
    "Deliver",
    "ReadEntries",
    "ReadRecord",
    "Skipped",
    "StoreCheckpoint",
    "TimerAction",
    "TimerDelivery",
    "TimerWheel",
    "WakeAt",
    "hand_on_message",
    "time_up",
    "timer_out_ms",
]

#: Entries read at once.
BATCH = 32
#: Deliveries read or put at once (RocketMQ runs three put threads, each waiting for
#: its put): a slot of many is delivered at the rate of the puts in flight.
MAX_IN_FLIGHT = 16
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
#: What a handed-on message leaves behind: where it waited, and the timer properties
#: its new delivery time replaces (``TIMER_DELAY_SEC`` and ``_MS`` would take precedence).
_HANDED_ON_CLEARED = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TIMER_OUT_MS,
                      "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: An entry of the wheel: ``(queue offset, physical offset, size)``.
Entry = tuple[int, int, int]


@attrs.frozen
class StoreCheckpoint:
    checkpoint: TimerCheckpoint


TimerAction = ReadEntries | ReadRecord | Deliver | StoreCheckpoint | WakeAt | Skipped


def timer_out_ms(record: MessageRecord) -> int | str:
    """A scanned record's slot time, or why it cannot be delivered."""
    properties = record.properties
    out = properties.get(PROPERTY_TIMER_OUT_MS, "")
    if not (out.isascii() and out.isdigit()) or len(out) > 18:
        return f"{PROPERTY_TIMER_OUT_MS} {out[:40]!r} is not a time"
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue_id = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic:
        return f"no {PROPERTY_REAL_TOPIC}"
    if not (queue_id.isascii() and queue_id.isdigit()) or int(queue_id) >= 2**31:
        return f"{PROPERTY_REAL_QUEUE_ID} {queue_id[:40]!r} is not a queue id"
    if topic in (_TRANS_HALF_TOPIC, TIMER_TOPIC):
        return f"its {PROPERTY_REAL_TOPIC} is {topic}"
    return int(out)


def time_up(record: MessageRecord, now_ms: int) -> EscapedMessage | str:
    """The message a due record is delivered as, or why it cannot be."""
    checked = timer_out_ms(record)
    if isinstance(checked, str):
        return checked
    properties = dict(record.properties)
    topic = properties.pop(PROPERTY_REAL_TOPIC)
    queue_id = int(properties.pop(PROPERTY_REAL_QUEUE_ID))
    properties[PROPERTY_TIMER_ENQUEUE_MS] = str(record.store_timestamp)
    properties[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    return EscapedMessage(
        topic=topic, queue_id=queue_id, body=record.body, properties=properties,
        flag=record.flag, sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
        born_host=record.born_host, reconsume_times=record.reconsume_times)


def hand_on_message(record: MessageRecord, slot_ms: int, precision_ms: int
                    ) -> EscapedMessage | str:
    """The timer message a record whose slot (``slot_ms``) has not passed is handed on
    as: to its real topic and queue, for the slot's end, or why it cannot be."""
    checked = timer_out_ms(record)
    if isinstance(checked, str):
        return checked
    properties = {k: v for k, v in record.properties.items() if k not in _HANDED_ON_CLEARED}
    properties[PROPERTY_TIMER_DELIVER_MS] = str(slot_ms + precision_ms)
    return EscapedMessage(
        topic=record.properties[PROPERTY_REAL_TOPIC],
        queue_id=int(record.properties[PROPERTY_REAL_QUEUE_ID]), body=record.body,
        properties=properties, flag=record.flag, sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp, born_host=record.born_host,
        reconsume_times=record.reconsume_times)


class TimerWheel:
    """Slots by delivery time (multiples of ``precision_ms``), each a chain of entries."""

    def __init__(self, precision_ms: int) -> None:
        self.precision_ms = precision_ms
        self._slots: dict[int, list[Entry]] = {}
        #: The slots' times, a heap: the next one to deliver is the first.
        self._times: list[int] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, slot_ms: int, entry: Entry) -> None:
        chain = self._slots.get(slot_ms)
        if chain is None:
            self._slots[slot_ms] = [entry]
            heapq.heappush(self._times, slot_ms)
        else:
            chain.append(entry)
        self._count += 1

    def first_slot(self) -> int | None:
        """The earliest slot holding an entry."""
        return self._times[0] if self._times else None

    def pop_first(self) -> list[Entry]:
        """The earliest slot's chain, taken off the wheel."""
        chain = self._slots.pop(heapq.heappop(self._times))
        self._count -= len(chain)
        return chain


class _Done:
    """Which scanned queue offsets are delivered (or skipped), from the first that is not."""

    def __init__(self, start: int) -> None:
        self._first = start
        self._flags = bytearray()
        self._head = 0

    @property
    def start(self) -> int:
        """The first offset not known done (the scan's end when all are)."""
        return self._first + self._head

    @property
    def end(self) -> int:
        """The scan's end: every offset before it was scanned."""
        return self._first + len(self._flags)

    def append(self, done: bool) -> None:
        self._flags.append(done)
        self._advance()

    def skip_to(self, offset: int) -> None:
        """Offsets up to ``offset`` are not in the queue: done."""
        if self._head == len(self._flags):
            self._first, self._flags, self._head = offset, bytearray(), 0
        else:
            self._flags.extend(b"\x01" * (offset - self.end))

    def cut(self, end: int) -> None:
        """The queue ends at ``end``, before the scan's end (a log cut at a failover):
        offsets from it are new ones."""
        if end >= self.end:
            return
        if end <= self._first:
            self._first, self._flags, self._head = end, bytearray(), 0
        else:
            del self._flags[end - self._first:]
            self._head = min(self._head, len(self._flags))

    def is_done(self, offset: int) -> bool:
        return offset < self.start or bool(self._flags[offset - self._first])

    def mark(self, offset: int) -> None:
        self._flags[offset - self._first] = 1
        self._advance()

    def _advance(self) -> None:
        flags, head = self._flags, self._head
        while head < len(flags) and flags[head]:
            head += 1
        if head > 4096 and 2 * head > len(flags):
            del flags[:head]
            self._first += head
            head = 0
        self._head = head


class TimerDelivery:
    """The timer wheel of one master term, from ``checkpoint`` (``precision_ms``:
    a slot's length); ``hand_on``: an acting slave's (module docstring)."""

    def __init__(self, precision_ms: int, checkpoint: TimerCheckpoint, *,
                 hand_on: bool = False) -> None:
        self.precision_ms = precision_ms
        #: False: entries wait in the wheel (a master's, or an acting slave's once a
        #: hand-on failed).
        self.hand_on = hand_on
        self.wheel = TimerWheel(precision_ms)
        #: The read time: every slot before it is delivered (0 until ``start``).
        self.read_time_ms = checkpoint.read_time_ms
        #: Counts, for GET_BROKER_RUNTIME_INFO's rates.
        self.enqueued = 0
        self.dequeued = 0
        self._stored = checkpoint
        #: What the rebuild reads back: the checkpoint, its scan cut to the queue's end.
        self._rebuild = checkpoint
        self._done = _Done(checkpoint.queue_offset)
        self._entries: deque[Sequence[int]] = deque()
        self._more = False
        #: Scanned after their slot passed, not yet put: delivered first, in order.
        self._expired: deque[Entry] = deque()
        #: The queue offsets of the expired entries not yet delivered (the scan's end
        #: in the checkpoint stays before the first).
        self._expired_open: deque[int] = deque()
        #: The read time's slot's chain not yet put, while it is delivered (``_in_slot``).
        self._due: deque[Entry] = deque()
        self._in_slot = False
        #: Scanned, their slot not passed, to hand on: (entry, slot), in order.
        self._to_hand_on: deque[tuple[Entry, int]] = deque()
        #: Queue offset -> an entry being handed on, and its slot.
        self._handing_on: dict[int, tuple[Entry, int]] = {}
        #: The entries whose record is being read for their delivery, in order.
        self._reading: deque[Entry] = deque()
        #: Queue offset -> the message being put.
        self._in_flight: dict[int, EscapedMessage] = {}
        #: Puts that failed, retried once the others ended and a back-off passed.
        self._failed: list[tuple[int, EscapedMessage]] = []
        self._retry_ms = RETRY_MIN_MS

    @property
    def scan_offset(self) -> int:
        """The next queue offset to scan."""
        return self._done.end

    @property
    def rebuilding(self) -> bool:
        """Still reading back what the checkpoint's scan had reached."""
        return self.scan_offset < self._rebuild.scan_offset

    def pending(self) -> int:
        """Timer messages scanned and not yet delivered."""
        return (len(self.wheel) + len(self._expired) + len(self._due) + len(self._reading)
                + len(self._to_hand_on) + len(self._in_flight) + len(self._failed))

    def checkpoint(self) -> TimerCheckpoint:
        """Where the delivery has reached (the one it started from while it rebuilds)."""
        if self.rebuilding:
            return self._stored
        done, open_ = self._done, self._expired_open
        while open_ and done.is_done(open_[0]):
            open_.popleft()
        scanned = open_[0] if open_ else self.scan_offset
        return TimerCheckpoint(min(done.start, scanned), scanned, self.read_time_ms)

    def start(self, now_ms: int) -> list[TimerAction]:
        """Begin: rebuild from the checkpoint, then scan and tick."""
        if self.read_time_ms == 0:
            self.read_time_ms = now_ms // self.precision_ms * self.precision_ms
        return [self._read()]

    def _read(self) -> ReadEntries:
        return ReadEntries(0, self.scan_offset, BATCH)

    def _store(self) -> list[TimerAction]:
        checkpoint = self.checkpoint()
        if checkpoint == self._stored:
            return []
        self._stored = checkpoint
        return [StoreCheckpoint(checkpoint)]

    # -- the scan ------------------------------------------------------------------

    def entries_read(self, entries: Sequence[Sequence[int]], queue_min: int, queue_max: int,
                     now_ms: int, *, log_max: int | None = None) -> list[TimerAction]:
        """The entries from the scan offset: ``(queue offset, physical offset, size,
        ...)`` (``queue_min``/``queue_max``: the queue's bounds as consumers see them;
        ``log_max``: its end in the log, replicated enough or not, else ``queue_max``)."""
        if not entries:
            if self.scan_offset < queue_min:  # the queue starts later
                self._done.skip_to(queue_min)
                return [self._read()]
            end = queue_max if log_max is None else log_max
            if self.scan_offset > end:
                # The queue ends before the checkpoint's scan (a log cut at a failover,
                # an unclean election): the offsets from its end are new entries'.
                self._done.cut(end)
            # What the queue no longer holds is not rebuilt.
            self._rebuild = attrs.evolve(
                self._rebuild, scan_offset=min(self._rebuild.scan_offset, self.scan_offset))
            return self._advance(now_ms)
        self._entries = deque(e for e in entries if e[0] >= self.scan_offset)
        self._more = len(entries) == BATCH
        return self._scan_next(now_ms)

    def _scan_next(self, now_ms: int) -> list[TimerAction]:
        if not self._entries:
            return [self._read()] if self._more else self._advance(now_ms)
        queue_offset, physical_offset, size = self._entries[0][:3]
        if queue_offset != self.scan_offset:  # entries past a gap
            self._done.skip_to(queue_offset)
        return [ReadRecord(physical_offset, size)]

    def _scanned(self, record: MessageRecord | None, now_ms: int) -> list[TimerAction]:
        queue_offset, physical_offset, size = self._entries.popleft()[:3]
        out = timer_out_ms(record) if record is not None else "its record is gone"
        if isinstance(out, str):
            self._done.append(True)
            return [Skipped(queue_offset, out), *self._scan_next(now_ms)]
        slot = out // self.precision_ms * self.precision_ms
        if self._rebuild.delivered(queue_offset, slot):
            self._done.append(True)
            return self._scan_next(now_ms)
        self._done.append(False)
        self.enqueued += 1
        entry = (queue_offset, physical_offset, size)
        if self.hand_on and slot >= self.read_time_ms:
            self._to_hand_on.append((entry, slot))
        else:
            self._place(entry, slot)
        return self._scan_next(now_ms)

    def _place(self, entry: Entry, slot: int) -> None:
        """Hang a scanned entry on its slot, or deliver it first if its slot passed."""
        if slot < self.read_time_ms:
            self._expired.append(entry)
            # In order: the first open one bounds the checkpoint's scan.
            bisect.insort(self._expired_open, entry[0])
        elif slot == self.read_time_ms and self._in_slot:
            self._due.append(entry)
        else:
            self.wheel.add(slot, entry)

    # -- the delivery --------------------------------------------------------------

    def _advance(self, now_ms: int) -> list[TimerAction]:
        """Start what may be put; once all ended, the next slot or the next tick."""
        if self.rebuilding:  # not ticking yet
            return [self._read()]
        actions: list[TimerAction] = []
        precision = self.precision_ms
        boundary = now_ms // precision * precision
        while True:
            while len(self._reading) + len(self._in_flight) < MAX_IN_FLIGHT:
                queue = self._expired or self._due
                if queue:
                    entry = queue.popleft()
                elif self._to_hand_on and self.hand_on:
                    entry, slot = self._to_hand_on.popleft()
                    self._handing_on[entry[0]] = (entry, slot)
                else:
                    break
                self._reading.append(entry)
                actions.append(ReadRecord(entry[1], entry[2]))
            if self._reading or self._in_flight:
                return [*self._store(), *actions]
            if self._failed:
                wait, self._retry_ms = self._retry_ms, min(2 * self._retry_ms, RETRY_MAX_MS)
                return [*self._store(), WakeAt(now_ms + wait)]
            if self._in_slot:  # the read time's slot is delivered
                self._in_slot = False
                self.read_time_ms += precision
            first = self.wheel.first_slot()
            if first is None or first >= boundary:
                # Nothing due before the boundary: the read time goes up to it.
                self.read_time_ms = max(self.read_time_ms, min(
                    boundary, boundary if first is None else first))
                return [*self._store(), WakeAt(max(self.read_time_ms, boundary) + precision)]
            self.read_time_ms = first
            self._due = deque(self.wheel.pop_first())
            self._in_slot = True

    def record_read(self, record: MessageRecord | None, now_ms: int) -> list[TimerAction]:
        """The record a ``ReadRecord`` asked for (None: no longer in the log)."""
        if not self._reading:
            return self._scanned(record, now_ms)
        entry = self._reading.popleft()
        handing_on = self._handing_on.get(entry[0])
        if record is None:
            message: EscapedMessage | str = "its record is gone"
        elif handing_on is not None:
            message = hand_on_message(record, handing_on[1], self.precision_ms)
        else:
            message = time_up(record, now_ms)
        if isinstance(message, str):
            self._handing_on.pop(entry[0], None)
            return [Skipped(entry[0], message), *self._delivered(entry[0], now_ms)]
        self._in_flight[entry[0]] = message
        return [Deliver(entry[0], message)]

    def put_done(self, queue_offset: int, ok: bool, now_ms: int, *,
                 illegal: bool = False) -> list[TimerAction]:
        """The put of ``Deliver(queue_offset, ...)`` ended: ``ok`` (PUT_OK), ``illegal``
        (MESSAGE_ILLEGAL: it never will be stored), or anything else (retried)."""
        message = self._in_flight.pop(queue_offset)
        handed = self._handing_on.pop(queue_offset, None)
        if ok:
            self._retry_ms = RETRY_MIN_MS
            return self._delivered(queue_offset, now_ms)
        if handed is not None:
            # Not handed on (refused, even as illegal: here it is not): this entry and
            # the later ones wait in this wheel.
            self.hand_on = False
            waiting, self._to_hand_on = [handed, *self._to_hand_on], deque()
            for entry, slot in waiting:
                self._place(entry, slot)
            return self._advance(now_ms)
        if illegal:
            return [Skipped(queue_offset, "its put is refused as illegal"),
                    *self._delivered(queue_offset, now_ms)]
        self._failed.append((queue_offset, message))
        return self._advance(now_ms)

    def _delivered(self, queue_offset: int, now_ms: int) -> list[TimerAction]:
        self._done.mark(queue_offset)
        self.dequeued += 1
        return self._advance(now_ms)

    def woke(self, now_ms: int) -> list[TimerAction]:
        """The time a ``WakeAt`` asked for has come: the retries, else a tick."""
        if self._failed:
            failed, self._failed = self._failed, []
            self._in_flight.update(failed)
            return [Deliver(queue_offset, message) for queue_offset, message in failed]
        return [self._read()]
