"""What waits in a broker's system topics, pure: the admin views of pending messages.

GET_PENDING_MESSAGES (``triomq.broker.admin.pending_service``) answers one of
four views, each read by the rules of the service that delivers it, so a
view never disagrees with what that service will do:

- ``delayed_level``: a delay level's messages not yet delivered, from the
  level's offset (``delayOffset.json``) to the end of its queue of
  ``SCHEDULE_TOPIC_XXXX`` (queue ``level - 1``), each due at its entry's tags
  code (``triomq.broker.secondary.core.schedule``);
- ``pending_timers``: the timer messages from the checkpoint's ``queueOffset``
  on that ``TimerCheckpoint.delivered`` does not call delivered (the wheel's
  rebuild rule, ``triomq.broker.secondary.core.timer_wheel``), each due at its
  ``TIMER_OUT_MS``;
- ``pending_halves``: the open transactions, one per transaction key (the
  newest copy of its half message, with its check count), from the check's
  progress on, minus those the ``TransactionLedger`` has ended
  (``triomq.broker.secondary.core.transaction_check``'s pairing);
- ``pending_pops``: the checkpoints of one revive queue with offsets neither
  acked nor revived, paired by ``ReviveQueue.pair`` from the queue's revive
  offset on (``triomq.broker.pop.core.revive``). One past its invisible time
  by the revive margin is ``due``: the revive puts it into the group's pop
  retry topic, and it shows until the revive offset passes it.

Counts are of the whole backlog; each view lists at most ``max_num``
messages (checkpoints for pops), oldest first. ``to_json`` gives the shapes
of the answer's body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from triomq.broker.consume.core.pull import Entry
from triomq.broker.consume.core.pull_lookup import ConfirmedEntries
from triomq.broker.core.headers import offset_msg_id
from triomq.broker.pop.core.revive import REVIVE_MARGIN_MS, ReviveQueue, ReviveRecord
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpoint
from triomq.broker.secondary.core.timer_wheel import timer_out_ms
from triomq.broker.secondary.core.transaction import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    transaction_key,
)
from triomq.broker.secondary.core.transaction_check import HalfEntry, check_times
from triomq.protocol.delay_levels import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from triomq.protocol.message import PROPERTY_UNIQ_KEY, MessageRecord

__all__ = [
    "KINDS",
    "DelayedLevel",
    "HalfBacklog",
    "PendingHalf",
    "PendingMessage",
    "PoppedCheckpoint",
    "TimerBacklog",
    "delayed_level",
    "pending_halves",
    "pending_pops",
    "pending_timers",
    "popped_by_queue",
]

#: The views GET_PENDING_MESSAGES answers, by its ``kind`` field.
KINDS = ("delayed", "half", "popped")

RecordAt = Callable[[int], "MessageRecord | None"]


def _real_queue(record: MessageRecord) -> int | None:
    raw = record.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    return int(raw) if raw.isascii() and raw.isdigit() else None


@attrs.frozen
class PendingMessage:
    """A delayed or timer message waiting in its system queue."""

    queue_offset: int
    deliver_ms: int
    #: Where it goes: ``REAL_TOPIC`` / ``REAL_QID``.
    topic: str
    queue_id: int | None
    msg_id: str
    offset_msg_id: str
    store_timestamp: int

    @classmethod
    def of(cls, queue_offset: int, deliver_ms: int, record: MessageRecord) -> PendingMessage:
        store_id = offset_msg_id(record.store_host, record.physical_offset)
        return cls(queue_offset, deliver_ms, record.properties.get(PROPERTY_REAL_TOPIC, ""),
                   _real_queue(record), record.properties.get(PROPERTY_UNIQ_KEY) or store_id,
                   store_id, record.store_timestamp)

    def to_json(self) -> dict[str, Any]:
        return {"queueOffset": self.queue_offset, "deliverTimeMs": self.deliver_ms,
                "topic": self.topic, "queueId": self.queue_id, "msgId": self.msg_id,
                "offsetMsgId": self.offset_msg_id, "storeTimestamp": self.store_timestamp}


@attrs.frozen
class DelayedLevel:
    """One delay level: its delivery offset, its queue's end, what lies between."""

    level: int
    delivery_offset: int
    max_offset: int
    count: int
    messages: tuple[PendingMessage, ...]

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "deliveryOffset": self.delivery_offset,
                "maxOffset": self.max_offset, "count": self.count,
                "messages": [m.to_json() for m in self.messages]}


def delayed_level(level: int, delivery_offset: int, found: ConfirmedEntries,
                  record_at: RecordAt) -> DelayedLevel:
    """Level ``level``'s backlog: ``found`` are its queue's entries from
    ``delivery_offset`` (or the queue's first, if later) as many as are to be listed,
    with the queue's bounds; ``record_at`` reads a record (None: gone, not listed)."""
    start = max(delivery_offset, found.queue_min)
    messages: list[PendingMessage] = []
    for queue_offset, physical, _, deliver_ms in found.entries:
        record = record_at(physical)
        if record is not None:
            messages.append(PendingMessage.of(queue_offset, deliver_ms, record))
    return DelayedLevel(level, delivery_offset, found.queue_max,
                        max(0, found.queue_max - start), tuple(messages))


@attrs.frozen
class TimerBacklog:
    """The timer messages not yet delivered, from the checkpoint on."""

    checkpoint: TimerCheckpoint
    count: int
    messages: tuple[PendingMessage, ...]

    def to_json(self) -> dict[str, Any]:
        return {"queueOffset": self.checkpoint.queue_offset,
                "scanOffset": self.checkpoint.scan_offset,
                "readTimeMs": self.checkpoint.read_time_ms, "count": self.count,
                "messages": [m.to_json() for m in self.messages]}


def pending_timers(checkpoint: TimerCheckpoint, precision_ms: int, entries: Iterable[Entry],
                   record_at: RecordAt, max_num: int) -> TimerBacklog:
    """The timer queue's ``entries`` from ``checkpoint.queue_offset`` on, less those the
    checkpoint says are delivered and those the wheel cannot deliver (no time, no real
    topic, a record gone), which it skips."""
    count = 0
    messages: list[PendingMessage] = []
    for queue_offset, physical, _, _ in entries:
        record = record_at(physical)
        out = timer_out_ms(record) if record is not None else ""
        if record is None or isinstance(out, str):
            continue
        if checkpoint.delivered(queue_offset, out // precision_ms * precision_ms):
            continue
        count += 1
        if len(messages) < max_num:
            messages.append(PendingMessage.of(queue_offset, out, record))
    return TimerBacklog(checkpoint, count, tuple(messages))


@attrs.frozen
class PendingHalf:
    """An open transaction: the newest copy of its half message."""

    transaction_key: int
    queue_offset: int
    producer_group: str
    transaction_id: str
    topic: str
    msg_id: str
    offset_msg_id: str
    born_timestamp: int
    age_ms: int
    check_times: int

    def to_json(self) -> dict[str, Any]:
        return {"transactionKey": self.transaction_key, "queueOffset": self.queue_offset,
                "producerGroup": self.producer_group, "transactionId": self.transaction_id,
                "topic": self.topic, "msgId": self.msg_id, "offsetMsgId": self.offset_msg_id,
                "bornTimestamp": self.born_timestamp, "ageMs": self.age_ms,
                "checkTimes": self.check_times}


@attrs.frozen
class HalfBacklog:
    progress: int
    count: int
    messages: tuple[PendingHalf, ...]

    def to_json(self) -> dict[str, Any]:
        return {"checkProgress": self.progress, "count": self.count,
                "messages": [m.to_json() for m in self.messages]}


def pending_halves(entries: Iterable[HalfEntry], ended: Mapping[int, str], *, progress: int,
                   now_ms: int, max_num: int) -> HalfBacklog:
    """The open transactions among the half queue's ``entries`` from the check's
    ``progress`` (``ended``: the ``TransactionLedger``'s), oldest key first."""
    newest: dict[int, MessageRecord] = {}
    for entry in entries:
        half = entry.record
        if half is None:
            continue
        key = transaction_key(half)
        if key not in ended:
            newest[key] = half
    halves: list[PendingHalf] = []
    for key in sorted(newest)[:max_num]:
        half = newest[key]
        store_id = offset_msg_id(half.store_host, half.physical_offset)
        unique = half.properties.get(PROPERTY_UNIQ_KEY, "")
        halves.append(PendingHalf(
            key, half.queue_offset, half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            half.properties.get(PROPERTY_TRANSACTION_ID) or unique,
            half.properties.get(PROPERTY_REAL_TOPIC, ""), unique or store_id, store_id,
            half.born_timestamp, now_ms - half.born_timestamp, check_times(half)))
    return HalfBacklog(progress, len(newest), tuple(halves))


@attrs.frozen
class PoppedCheckpoint:
    """A pop's checkpoint with offsets neither acked nor revived."""

    group: str
    topic: str
    queue_id: int
    #: The popped offsets still waiting for their ack, in order.
    offsets: tuple[int, ...]
    pop_time: int
    #: When they become visible again (the checkpoint's revive time).
    invisible_until: int
    broker_name: str
    revive_queue_id: int
    revive_offset: int
    #: Past its invisible time by the revive margin: being revived, or revived.
    due: bool

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "queueId": self.queue_id,
                "offsets": list(self.offsets), "popTime": self.pop_time,
                "invisibleUntil": self.invisible_until, "brokerName": self.broker_name,
                "reviveQueueId": self.revive_queue_id, "reviveOffset": self.revive_offset,
                "due": self.due}


def pending_pops(queue_id: int, done: int, records: Sequence[ReviveRecord], *,
                 broker_name: str, now_ms: int) -> list[PoppedCheckpoint]:
    """The checkpoints of revive queue ``queue_id`` left un-acked by ``records`` (the
    queue's records after ``done``, its revive offset), in revive-queue order."""
    queue = ReviveQueue(queue_id, done, broker_name=broker_name, interval_ms=0)
    queue.pair(records)
    found: list[PoppedCheckpoint] = []
    for pending in sorted(queue.pending.values(), key=lambda p: p.revive_offset):
        ck = pending.ck
        found.append(PoppedCheckpoint(
            ck.group, ck.topic, ck.queue_id, tuple(pending.left), ck.pop_time, ck.revive_time,
            ck.broker_name, queue_id, pending.revive_offset,
            ck.revive_time + REVIVE_MARGIN_MS <= now_ms))
    return found


def popped_by_queue(checkpoints: Iterable[PoppedCheckpoint]) -> list[dict[str, Any]]:
    """How many popped messages wait for their ack, per group, topic and queue."""
    counts: dict[tuple[str, str, int], int] = {}
    for ck in checkpoints:
        key = (ck.group, ck.topic, ck.queue_id)
        counts[key] = counts.get(key, 0) + len(ck.offsets)
    return [{"group": g, "topic": t, "queueId": q, "count": n}
            for (g, t, q), n in sorted(counts.items())]
