"""The revive of popped messages not acked in time (RocketMQ's ``PopReviveService``). Pure.

One ``ReviveQueue`` flow per queue of the revive topic reads its records in
order from where its offset says (the revive group's consumer offset of
that queue, the last record it is done with: slaves copy it with the other
offsets, so a new master goes on from there) and pairs each checkpoint
with the acks that name it (``merge_key``: topic, group, queue, start
offset, pop time and broker name). A checkpoint whose invisible time has
passed by ``REVIVE_MARGIN_MS`` with offsets still un-acked is revived: each
such message is read and put through the escape bridge into the group's
pop retry topic (``%RETRY%<group>_<topic>``, queue 0) with its reconsume
times one higher and ``1ST_POP_TIME`` set on its first revive, where the
group's next pops find it. The offset moves to the record before the
oldest checkpoint still pending.

RocketMQ writes checkpoints and acks as timer messages due at the revive
time, so its scan meets them in that order; here they are in the revive
queue at once and the flow keeps every pending checkpoint, reviving any that
is due whatever its place. The margin (RocketMQ's ``ackTimeInterval`` plus a
second) covers an ack taken just before the revive time that is not yet
confirmed by the replicas, which the scan cannot read: ACK_MESSAGE refuses a
handle whose time has run out (``receipt.receipt_refusal``), so no ack
can come later.

A checkpoint of another broker group (a pop a slave acting for its absent
master took, its checkpoint escaped here, seed 003) is revived here too: its
``ReadMessage`` names that group, whose replicas the driver asks for the
message. A read that reaches none of them (``read_failed``) is tried again
after ``interval_ms``, as a failed put is; the checkpoint stays pending.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

import attrs

from triomq.broker.consume.core.pull_lookup import QueueStore, confirmed_entries
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.pop.core.checkpoint import (
    AckMsg,
    CheckPoint,
    RecordRefused,
    decode_ack,
    decode_checkpoint,
)
from triomq.broker.pop.core.receipt import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    PROPERTY_FIRST_POP_TIME,
    pop_retry_topic,
)
from triomq.broker.secondary.core.schedule import WakeAt
from triomq.protocol.message import PROPERTY_TAGS, MessageRecord
from triomq.protocol.topic_rules import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "REVIVE_BATCH",
    "REVIVE_MARGIN_MS",
    "NotRevived",
    "PendingCheckpoint",
    "ReadMessage",
    "ReadRevive",
    "Revive",
    "ReviveAction",
    "ReviveQueue",
    "ReviveRecord",
    "StoreReviveOffset",
    "WakeAt",
    "popped_record",
    "retry_message",
    "revive_records",
]

#: ms after a checkpoint's revive time before it is revived (RocketMQ's
#: ``PopAckConstants.ackTimeInterval`` + ``SECOND``).
REVIVE_MARGIN_MS = 2000
#: Revive-topic records read at once (RocketMQ's 32).
REVIVE_BATCH = 32

MergeKey = tuple[str, str, int, int, int, str]


@attrs.frozen
class ReviveRecord:
    """A record of the revive queue: its queue offset, its tags and its body."""

    queue_offset: int
    tags: str | None
    body: bytes


@attrs.frozen
class ReadRevive:
    """Read up to ``max_count`` records of revive queue ``queue_id`` from ``start``, up to
    the confirm offset; answer ``records_read``."""

    queue_id: int
    start: int
    max_count: int


@attrs.frozen
class ReadMessage:
    """Read the record at ``offset`` of ``topic``'s ``queue_id`` in broker group
    ``broker_name`` (this broker's own log, or that group's replicas); answer
    ``message_read``, or ``read_failed`` when no replica of another group answered."""

    topic: str
    queue_id: int
    offset: int
    broker_name: str


@attrs.frozen
class Revive:
    """Put ``message`` (into ``message.topic``, a pop retry topic, which the driver
    creates if missing) through the escape bridge; answer ``put_done``. It revives
    ``checkpoint``'s message at ``offset``."""

    message: EscapedMessage
    checkpoint: CheckPoint
    offset: int


@attrs.frozen
class StoreReviveOffset:
    """The revive group's offset of ``queue_id``: done up to ``offset`` (inclusive)."""

    queue_id: int
    offset: int


@attrs.frozen
class NotRevived:
    """Something not revived, and why (for the log)."""

    reason: str


ReviveAction = ReadRevive | ReadMessage | Revive | StoreReviveOffset | WakeAt | NotRevived


def revive_records(store: QueueStore, topic: str, read: ReadRevive, confirm_offset: int,
                   record_at: Callable[[int], MessageRecord | None]) -> list[ReviveRecord]:
    """The records ``read`` asks for, as ``ReviveQueue.records_read`` takes them: from the
    queue's first entry when it was cut below ``read.start``, up to its confirmed end;
    ``record_at`` reads the record at a commit-log offset (None: unreadable, left out)."""
    start = max(read.start, store.queue_min_offset(topic, read.queue_id))
    found = confirmed_entries(store, topic, read.queue_id, start, read.max_count,
                              confirm_offset)
    records = []
    for queue_offset, physical, _, _ in found.entries:
        record = record_at(physical)
        if record is not None:
            records.append(ReviveRecord(queue_offset, record.properties.get(PROPERTY_TAGS),
                                        record.body))
    return records


def popped_record(store: QueueStore, read: ReadMessage,
                  record_at: Callable[[int], MessageRecord | None]) -> MessageRecord | None:
    """The popped message ``read`` asks for, as ``ReviveQueue.message_read`` takes it:
    None when its queue no longer holds that offset."""
    entries = store.queue_entries(read.topic, read.queue_id, read.offset, 1)
    if not entries or entries[0][0] != read.offset:
        return None
    return record_at(entries[0][1])


def retry_message(ck: CheckPoint, record: MessageRecord) -> EscapedMessage:
    """The copy of ``record`` the revive of ``ck`` puts: into the group's pop retry topic
    (a retry topic's own message stays in it), queue 0, reconsumed once more."""
    topic = (ck.topic if ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
             else pop_retry_topic(ck.topic, ck.group))
    properties = dict(record.properties)
    if record.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in properties:
        properties[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
    return EscapedMessage(topic=topic, queue_id=0, body=record.body, properties=properties,
                          flag=record.flag, sys_flag=record.sys_flag,
                          born_timestamp=record.born_timestamp,
                          reconsume_times=record.reconsume_times + 1)


@attrs.define
class PendingCheckpoint:
    """A checkpoint with offsets neither acked nor revived yet."""

    ck: CheckPoint
    #: The checkpoint's own offset in the revive queue.
    revive_offset: int
    #: Its offsets neither acked nor revived yet, in order.
    left: list[int]


class ReviveQueue:
    """The revive of one revive queue. ``done`` is its stored offset (-1: none)."""

    def __init__(self, queue_id: int, done: int, *, broker_name: str, interval_ms: int,
                 margin_ms: int = REVIVE_MARGIN_MS, batch: int = REVIVE_BATCH) -> None:
        self.queue_id = queue_id
        self.done = done
        self.broker_name = broker_name
        self.interval_ms = interval_ms
        self.margin_ms = margin_ms
        self.batch = batch
        #: The next revive-queue offset to read.
        self.next_read = done + 1
        #: Checkpoints with offsets left, in revive-queue order.
        self.pending: dict[MergeKey, PendingCheckpoint] = {}
        self._work: deque[tuple[MergeKey, int]] = deque()
        self._current: tuple[MergeKey, int] | None = None
        self._put_failed = False

    # -- inputs ------------------------------------------------------------------

    def start(self, now_ms: int) -> list[ReviveAction]:
        return [ReadRevive(self.queue_id, self.next_read, self.batch)]

    def woke(self, now_ms: int) -> list[ReviveAction]:
        return [ReadRevive(self.queue_id, self.next_read, self.batch)]

    def records_read(self, records: Sequence[ReviveRecord], now_ms: int
                     ) -> list[ReviveAction]:
        """The records of the last ``ReadRevive``, in order (fewer than asked: the end)."""
        actions: list[ReviveAction] = list(self.pair(records))
        if len(records) >= self.batch:
            actions.append(ReadRevive(self.queue_id, self.next_read, self.batch))
            return actions
        return actions + self._revive_due(now_ms)

    def pair(self, records: Sequence[ReviveRecord]) -> list[NotRevived]:
        """Take ``records`` (the queue's next, in order) into ``pending``: each checkpoint
        with offsets, each ack struck off its checkpoint; what is neither, skipped.
        Nothing is revived (``records_read`` does that next; an admin view stops here)."""
        skipped: list[NotRevived] = []
        for record in records:
            self.next_read = record.queue_offset + 1
            refused = self._take(record)
            if refused is not None:
                skipped.append(refused)
        return skipped

    def message_read(self, record: MessageRecord | None, now_ms: int) -> list[ReviveAction]:
        """The record a ``ReadMessage`` asked for (None: it is gone)."""
        assert self._current is not None
        key, offset = self._current
        pending = self.pending.get(key)
        if pending is None:  # acked meanwhile (not in this flow: records come in order)
            return self._next(now_ms)
        if record is None:
            self._resolve(pending, offset)
            return [NotRevived(f"message {offset} of {pending.ck.topic} queue "
                            f"{pending.ck.queue_id} not revived: it is no longer stored"),
                    *self._next(now_ms)]
        return [Revive(retry_message(pending.ck, record), pending.ck, offset)]

    def read_failed(self, now_ms: int) -> list[ReviveAction]:
        """The last ``ReadMessage`` of another group reached none of its replicas: the
        revive is tried again after ``interval_ms``, and the checkpoint stays pending."""
        return self.put_done(False, now_ms)

    def put_done(self, ok: bool, now_ms: int) -> list[ReviveAction]:
        """How the last ``Revive`` ended (``ok``: stored): a failed one is tried again after
        ``interval_ms``, and the checkpoint stays pending."""
        assert self._current is not None
        key, offset = self._current
        pending = self.pending.get(key)
        if not ok:
            self._put_failed = True
            self._work.clear()
        elif pending is not None:
            self._resolve(pending, offset)
        return self._next(now_ms)

    # -- the rules ---------------------------------------------------------------

    def _take(self, record: ReviveRecord) -> NotRevived | None:
        try:
            if record.tags == CK_TAG:
                ck = decode_checkpoint(record.body)
                if not ck.broker_name:
                    ck = attrs.evolve(ck, broker_name=self.broker_name)
                if ck.offset_diffs:
                    self.pending[ck.merge_key] = PendingCheckpoint(ck, record.queue_offset,
                                                          list(ck.offsets))
            elif record.tags in (ACK_TAG, BATCH_ACK_TAG):
                self._ack(decode_ack(record.body, batch=record.tags == BATCH_ACK_TAG))
            else:
                return NotRevived(f"revive record {record.queue_offset} has tags "
                               f"{record.tags!r}, neither a checkpoint nor an ack")
        except RecordRefused as exc:
            return NotRevived(f"revive record {record.queue_offset} ({record.tags}) unreadable: "
                           f"{exc}")
        return None

    def _ack(self, ack: AckMsg) -> None:
        if not ack.broker_name:
            ack = attrs.evolve(ack, broker_name=self.broker_name)
        pending = self.pending.get(ack.merge_key)
        if pending is None:  # its checkpoint is done with, or was never written
            return
        for offset in ack.offsets:
            if offset in pending.left:
                self._resolve(pending, offset)

    def _resolve(self, pending: PendingCheckpoint, offset: int) -> None:
        pending.left.remove(offset)
        if not pending.left:
            del self.pending[pending.ck.merge_key]

    def _revive_due(self, now_ms: int) -> list[ReviveAction]:
        self._put_failed = False
        for key, pending in list(self.pending.items()):
            if pending.ck.revive_time + self.margin_ms <= now_ms:
                self._work.extend((key, offset) for offset in pending.left)
        return self._next(now_ms)

    def _next(self, now_ms: int) -> list[ReviveAction]:
        if self._work:
            self._current = self._work.popleft()
            key, offset = self._current
            ck = self.pending[key].ck if key in self.pending else None
            if ck is None or offset not in self.pending[key].left:
                return self._next(now_ms)
            return [ReadMessage(ck.topic, ck.queue_id, offset, ck.broker_name)]
        self._current = None
        actions: list[ReviveAction] = []
        done = min((p.revive_offset for p in self.pending.values()),
                   default=self.next_read) - 1
        if done > self.done:
            self.done = done
            actions.append(StoreReviveOffset(self.queue_id, done))
        wake = now_ms + self.interval_ms
        if not self._put_failed:
            wake = min([wake, *self._due_times()])
        return [*actions, WakeAt(max(wake, now_ms))]

    def _due_times(self) -> Iterable[int]:
        return (p.ck.revive_time + self.margin_ms for p in self.pending.values())
