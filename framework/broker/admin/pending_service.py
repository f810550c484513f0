"""GET_PENDING_MESSAGES (triomq's 7001): what waits in the broker's system topics.

An admin request (``triomq.admin_access``) that ``triomq admin
pending-delayed``, ``pending-half`` and ``pending-popped`` send each broker
group's master. Its header: ``kind`` (``delayed``, ``half`` or ``popped``)
and ``maxNum`` (messages listed per level or view, default 32). The body
is JSON, by ``triomq.broker.admin.core.pending``'s rules over what the
broker holds now, read as the delivering services read it (each queue up
to the confirm offset):

- ``delayed``: ``{"levels": [...], "timer": {...} | null}``: every delay
  level's backlog from its offset in ``delayOffset.json``, and the timer
  messages from ``timerCheckpoint.json``'s on (null without
  ``timer_wheel_enable``);
- ``half``: ``{"checkProgress", "count", "messages"}``: the open
  transactions from the check's progress, the op records read into a
  ``TransactionLedger`` by ``TransactionReads.catch_up`` as a new term does;
- ``popped``: ``{"count", "queues", "checkpoints"}``: every revive queue's
  un-acked checkpoints from its revive offset, and the count per group,
  topic and queue.

Counts read the whole backlog (the timer's and the half queue's records
each once), so a view of a large backlog takes a while. Any role answers
from its own store and copied offsets; the tools ask masters. An unknown
``kind`` is INVALID_PARAMETER; a store that cannot be read SYSTEM_ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from triomq.broker.admin.core.pending import (
    KINDS,
    delayed_level,
    pending_halves,
    pending_pops,
    pending_timers,
    popped_by_queue,
)
from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.pull_lookup import confirmed_entries, confirmed_queue_max
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.pop.core.receipt import REVIVE_GROUP, revive_topic
from triomq.broker.pop.core.revive import ReadRevive, revive_records
from triomq.broker.secondary.core.delay_offsets import DelayOffsetTable
from triomq.broker.secondary.core.schedule_put import TIMER_TOPIC
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpointTable
from triomq.broker.secondary.core.transaction import HALF_TOPIC, TransactionLedger
from triomq.broker.secondary.core.transaction_reads import TransactionReads
from triomq.clock import wall_ms
from triomq.protocol.delay_levels import SCHEDULE_TOPIC
from triomq.protocol.header_fields import HeaderFieldError, HeaderFields
from triomq.protocol.message import MessageRecord, RecordError
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import dumps
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["DEFAULT_MAX_NUM", "PendingMessagesService"]

log = logging.getLogger("triomq.broker")

#: Messages listed per level or view unless the request says.
DEFAULT_MAX_NUM = 32
_MAX_NUM_BOUNDS = (1, 65536)


class PendingMessagesService:
    """Answers GET_PENDING_MESSAGES from the broker's log and its services' tables.

    ``delay_offsets``, ``timer_checkpoint`` (None: no timer wheel) and
    ``offsets`` are the tables the services keep; ``half_progress()`` is the
    transaction check's progress in the half queue.
    """

    def __init__(self, *, config: BrokerConfig, log: CommitLog, broker: ComponentView,
                 delay_offsets: DelayOffsetTable, timer_checkpoint: TimerCheckpointTable | None,
                 offsets: ConsumerOffsetService, half_progress: Callable[[], int]) -> None:
        self.config = config
        self.log = log
        self.broker = broker
        self.delay_offsets = delay_offsets
        self.timer_checkpoint = timer_checkpoint
        self.offsets = offsets
        self.half_progress = half_progress

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.GET_PENDING_MESSAGES, self.get_pending_messages,
                        inline=True)

    async def get_pending_messages(self, request: RemotingCommand, peer: RpcConnection
                                   ) -> RemotingCommand:
        try:
            header = HeaderFields(request.ext_fields, "GET_PENDING_MESSAGES")
            kind = header.string("kind")
            max_num = header.optional_integer("maxNum", _MAX_NUM_BOUNDS) or DEFAULT_MAX_NUM
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if kind not in KINDS:
            return RemotingCommand.response(
                ResponseCode.INVALID_PARAMETER,
                remark=f"GET_PENDING_MESSAGES: kind {kind[:40]!r} is none of "
                       f"{', '.join(KINDS)}")
        views = {"delayed": self._delayed, "half": self._half, "popped": self._popped}
        try:
            body = views[kind](max_num)
        except (StoreError, OSError) as exc:
            log.error("pending %s messages could not be read: %s", kind, exc)
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark="the store could not be read; see the broker's log")
        return RemotingCommand.response(body=dumps({"kind": kind, **body}))

    def _record(self, physical: int) -> MessageRecord | None:
        try:
            return self.log.read_record(physical)
        except (StoreError, RecordError):
            return None

    def _confirmed_max(self, topic: str, queue_id: int) -> int:
        return confirmed_queue_max(self.log, topic, queue_id, self.broker.confirm_offset)

    def _delayed(self, max_num: int) -> dict[str, Any]:
        confirm = self.broker.confirm_offset
        levels = []
        for level in range(1, len(self.config.delay_levels) + 1):
            offset = self.delay_offsets.offset(level)
            start = max(offset, self.log.queue_min_offset(SCHEDULE_TOPIC, level - 1))
            found = confirmed_entries(self.log, SCHEDULE_TOPIC, level - 1, start, max_num,
                                      confirm)
            levels.append(delayed_level(level, offset, found, self._record).to_json())
        timer = None
        if self.timer_checkpoint is not None:
            checkpoint = self.timer_checkpoint.checkpoint
            start = max(checkpoint.queue_offset, self.log.queue_min_offset(TIMER_TOPIC, 0))
            found = confirmed_entries(self.log, TIMER_TOPIC, 0, start,
                                      self._confirmed_max(TIMER_TOPIC, 0) - start, confirm)
            timer = pending_timers(checkpoint, self.config.timer_precision_ms, found.entries,
                                   self._record, max_num).to_json()
        return {"levels": levels, "timer": timer}

    def _half(self, max_num: int) -> dict[str, Any]:
        progress = self.half_progress()
        reads = TransactionReads(self.log)
        ledger = TransactionLedger()
        reads.catch_up(ledger, progress)
        end = self._confirmed_max(HALF_TOPIC, 0)
        entries = reads.queue_records(HALF_TOPIC, progress, max(0, end - progress))
        return pending_halves(entries, ledger.ended, progress=progress, now_ms=wall_ms(),
                              max_num=max_num).to_json()

    def _popped(self, max_num: int) -> dict[str, Any]:
        topic = revive_topic(self.config.cluster_name)
        now = wall_ms()
        found = []
        for queue_id in range(self.config.revive_queue_num):
            stored = self.offsets.table.query(REVIVE_GROUP, topic, queue_id)
            done = -1 if stored is None else stored
            count = self._confirmed_max(topic, queue_id) - (done + 1)
            records = revive_records(self.log, topic, ReadRevive(queue_id, done + 1, count),
                                     self.broker.confirm_offset, self._record)
            found += pending_pops(queue_id, done, records,
                                  broker_name=self.config.broker_name, now_ms=now)
        return {"count": sum(len(ck.offsets) for ck in found),
                "queues": popped_by_queue(found),
                "checkpoints": [ck.to_json() for ck in found[:max_num]]}
