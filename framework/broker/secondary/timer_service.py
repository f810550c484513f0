"""Timer messages at run time: their wheel, ``config/timerCheckpoint.json``, a slave's copy.

``TimerMessageService`` runs one ``TimerDelivery``
(``triomq.broker.secondary.core.timer_wheel``) while the broker is master
(``deliver``, in the master term: cancelled when the broker steps down, a
new wheel rebuilt from the checkpoint in the next term), reading
``rmq_sys_wheel_timer`` queue 0 as consumers do (up to the confirm offset)
and putting due messages through the escape bridge, never onto the log
directly.

The checkpoint is in a ``TimerCheckpointTable``
(``triomq.broker.secondary.core.timer_checkpoint``), written to ``<store
root>/config/timerCheckpoint.json`` every ``timer_flush_interval_ms`` when
it moved and once more on the way out (with a ``.bak``, as the other files
under ``config/``). It serves GET_TIMER_CHECK_POINT 60 (the file's JSON),
which a slave asks its master every ``slave_synchronize_period`` for and
adopts, so that a slave elected master rebuilds its wheel from where its
master was. GET_BROKER_RUNTIME_INFO's ``timer*`` keys come from
``runtime_fields``.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque

import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.pull_lookup import confirmed_entries
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapeBridge, EscapeResult
from triomq.broker.metadata import config_files
from triomq.broker.secondary.core.schedule_put import TIMER_TOPIC
from triomq.broker.secondary.core.timer_checkpoint import (
    TIMER_CHECKPOINT_NAME,
    TimerCheckpointTable,
)
from triomq.broker.secondary.core.timer_wheel import (
    Deliver,
    ReadEntries,
    ReadRecord,
    Skipped,
    StoreCheckpoint,
    TimerAction,
    TimerDelivery,
    WakeAt,
)
from triomq.clock import EpochClock
from triomq.protocol.message import MessageRecord, RecordError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["TIMER_CHECKPOINT_FILE", "TimerMessageService", "load_timer_checkpoint"]

log = logging.getLogger("triomq.broker")

TIMER_CHECKPOINT_FILE = os.path.join("config", TIMER_CHECKPOINT_NAME)
#: ms over which the enqueue and dequeue rates are counted.
RATE_WINDOW_MS = 10_000


def load_timer_checkpoint(root: str) -> TimerCheckpointTable:
    """The table in ``<root>/config/timerCheckpoint.json`` (or its ``.bak``), else a new one."""
    table = config_files.load(root, TIMER_CHECKPOINT_FILE, TimerCheckpointTable.decode)
    return table if table is not None else TimerCheckpointTable()


class TimerMessageService:
    """The broker's timer messages: their wheel, its checkpoint's file and copy."""

    def __init__(self, root: str, config: BrokerConfig, table: TimerCheckpointTable, *,
                 log: CommitLog, broker: ComponentView, bridge: EscapeBridge,
                 clock: EpochClock) -> None:
        self.root = root
        self.config = config
        self.table = table
        self.log = log
        self.broker = broker
        self.bridge = bridge
        #: The broker's clock: the store times the timers' delivery times come from.
        self.clock = clock
        #: The wheel of the current master term (None outside one).
        self.flow: TimerDelivery | None = None
        self._revision_on_disk = table.revision
        #: ``(ms, enqueued, dequeued)`` at the start and the end of the last window.
        self._rates: deque[tuple[int, int, int]] = deque(maxlen=2)

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.GET_TIMER_CHECK_POINT, self.get_timer_check_point, inline=True)

    async def get_timer_check_point(self, request: RemotingCommand, peer: RpcConnection
                                    ) -> RemotingCommand:
        return RemotingCommand.response(ResponseCode.SUCCESS, body=self.table.encode())

    async def deliver(self, bridge: EscapeBridge | None = None) -> None:
        """A term's task: the wheel, rebuilt from the checkpoint, delivering through the
        master's own bridge until cancelled (its puts under way, several at once, are
        cancelled with it); with ``bridge``, an acting slave's, which hands on what is
        not due yet too."""
        flow = self.flow = TimerDelivery(self.config.timer_precision_ms,
                                         self.table.checkpoint, hand_on=bridge is not None)
        bridge = bridge or self.bridge
        self._rates.clear()
        ended_send, ended = trio.open_memory_channel[tuple[Deliver, EscapeResult]](math.inf)
        in_flight = 0
        try:
            async with trio.open_nursery() as nursery:
                actions: deque[TimerAction] = deque(flow.start(self.clock()))
                while True:
                    while actions:
                        action = actions.popleft()
                        if isinstance(action, Deliver):
                            in_flight += 1
                            nursery.start_soon(self._put, bridge, action, ended_send)
                        elif isinstance(action, ReadEntries):
                            # A rebuild or a backlog reads many batches: the broker
                            # serves between two.
                            await trio.sleep(0)
                            actions.extend(self._read_entries(flow, action))
                        elif isinstance(action, WakeAt):
                            self._sample(flow)
                            await self.clock.sleep_until(action.at_ms)
                            actions.extend(flow.woke(self.clock()))
                        else:
                            actions.extend(self._do(flow, action))
                    if not in_flight:
                        raise AssertionError("the timer flow stopped without waiting")
                    put, result = await ended.receive()
                    in_flight -= 1
                    actions.extend(flow.put_done(
                        put.queue_offset, result.ok, self.clock(),
                        illegal=result.code == ResponseCode.MESSAGE_ILLEGAL))
        finally:
            self.flow = None

    async def _put(self, bridge: EscapeBridge, put: Deliver,
                   ended: trio.MemorySendChannel[tuple[Deliver, EscapeResult]]) -> None:
        result = await bridge.put_message(put.message)
        if not result.ok:
            log.info("delivery of timer message %d to %s failed (%d %s); %s",
                     put.queue_offset, put.message.topic, result.code, result.remark,
                     "skipped" if result.code == ResponseCode.MESSAGE_ILLEGAL else "retrying")
        ended.send_nowait((put, result))

    def _do(self, flow: TimerDelivery, action: TimerAction) -> list[TimerAction]:
        if isinstance(action, StoreCheckpoint):
            self.table.update(action.checkpoint, self.clock())
        elif isinstance(action, Skipped):
            log.warning("timer message %d not delivered: %s", action.queue_offset,
                        action.reason)
        elif isinstance(action, ReadRecord):
            return flow.record_read(self._read_record(action), self.clock())
        return []

    def _read_entries(self, flow: TimerDelivery, read: ReadEntries) -> list[TimerAction]:
        found = confirmed_entries(self.log, TIMER_TOPIC, read.queue_id, read.start,
                                  read.max_count, self.broker.confirm_offset)
        return flow.entries_read(*found, self.clock(),
                                 log_max=self.log.queue_max_offset(TIMER_TOPIC, read.queue_id))

    def _read_record(self, read: ReadRecord) -> MessageRecord | None:
        try:
            return self.log.read_record(read.physical_offset)
        except (StoreError, RecordError) as exc:
            log.warning("timer message at %d unreadable: %s", read.physical_offset, exc)
            return None

    def _sample(self, flow: TimerDelivery) -> None:
        now = self.clock()
        if not self._rates or now - self._rates[-1][0] >= RATE_WINDOW_MS:
            self._rates.append((now, flow.enqueued, flow.dequeued))

    def runtime_fields(self) -> dict[str, int | float] | None:
        """GET_BROKER_RUNTIME_INFO's timer values while the wheel runs, else None:
        RocketMQ's ``timerReadBehind`` (s the read time is behind the clock),
        ``timerOffsetBehind`` (entries not yet scanned), ``timerCongestNum`` (timer
        messages pending), ``timerEnqueueTps`` and ``timerDequeueTps`` (over the last
        window)."""
        flow = self.flow
        if flow is None:
            return None
        queue_max = self.log.queue_max_offset(TIMER_TOPIC, 0)
        enqueue_tps = dequeue_tps = 0.0
        if len(self._rates) == 2:
            (t0, e0, d0), (t1, e1, d1) = self._rates
            if t1 > t0:
                enqueue_tps = (e1 - e0) * 1000 / (t1 - t0)
                dequeue_tps = (d1 - d0) * 1000 / (t1 - t0)
        return {"timerReadBehind": max(0, self.clock() - flow.read_time_ms) // 1000,
                "timerOffsetBehind": max(0, queue_max - flow.scan_offset),
                "timerCongestNum": flow.pending(),
                "timerEnqueueTps": enqueue_tps, "timerDequeueTps": dequeue_tps}

    async def persist_loop(self) -> None:
        """Write the table every ``timer_flush_interval_ms`` when it moved (in a thread:
        it fsyncs); on the way out, write what moved last."""
        await config_files.write_every(self.config.timer_flush_interval_ms, self.root,
                                       TIMER_CHECKPOINT_FILE, self.table,
                                       self._revision_on_disk)

    async def copy_from_master(self, rpc: RpcClient) -> None:
        """A slave-term task: take the master's checkpoint every ``slave_synchronize_period``."""
        await config_files.copy_from_master(
            what="timer checkpoint", code=RequestCode.GET_TIMER_CHECK_POINT,
            decode=TimerCheckpointTable.decode, adopt=self.table.adopt_master, rpc=rpc,
            broker=self.broker, period_ms=self.config.slave_synchronize_period)
