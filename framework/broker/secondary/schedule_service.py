"""Delayed messages at run time: their delivery, ``config/delayOffset.json``, a slave's copy.

``ScheduleMessageService`` runs one ``LevelDelivery`` (``triomq.broker.secondary.core.schedule``)
per level of ``message_delay_level`` while the broker is master
(``deliver``, in the master term: cancelled when the broker steps down),
reading ``SCHEDULE_TOPIC_XXXX`` as consumers do (up to the confirm offset)
and putting due messages through the escape bridge, never onto the log
directly: up to ``schedule_max_in_flight`` puts of a level at once, each in
its own task, their answers back through a memory channel.

Each level's offset is in a ``DelayOffsetTable``
(``triomq.broker.secondary.core.delay_offsets``), written to ``<store
root>/config/delayOffset.json`` every ``flush_delay_offset_interval`` when
it moved and once more on the way out (with a ``.bak``, as the other
files under ``config/``). It serves GET_ALL_DELAY_OFFSET 45 (the file's
JSON), which a slave asks its master every ``slave_synchronize_period``
for and adopts, so that a slave elected master goes on delivering from
where its master was.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections import deque

import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.pull_lookup import confirmed_entries
from triomq.broker.core.codes import RequestCode
from triomq.broker.core.escape_bridge import EscapeBridge, EscapeResult
from triomq.broker.metadata import config_files
from triomq.broker.secondary.core.delay_offsets import DELAY_OFFSETS_NAME, DelayOffsetTable
from triomq.broker.secondary.core.schedule import (
    Deliver,
    LevelDelivery,
    ReadEntries,
    ReadRecord,
    ScheduleAction,
    Skipped,
    StoreOffset,
    WakeAt,
)
from triomq.clock import EpochClock
from triomq.protocol.delay_levels import SCHEDULE_TOPIC
from triomq.protocol.message import MessageRecord, RecordError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["DELAY_OFFSETS_FILE", "ScheduleMessageService", "load_delay_offsets"]

log = logging.getLogger("triomq.broker")

DELAY_OFFSETS_FILE = os.path.join("config", DELAY_OFFSETS_NAME)


def load_delay_offsets(root: str, version_step: int) -> DelayOffsetTable:
    """The table in ``<root>/config/delayOffset.json`` (or its ``.bak``), else an empty one."""
    table = config_files.load(root, DELAY_OFFSETS_FILE, functools.partial(
        DelayOffsetTable.decode, version_step=version_step))
    return table if table is not None else DelayOffsetTable(version_step=version_step)


class ScheduleMessageService:
    """The broker's delayed messages: their delivery, their offsets' file and copy."""

    def __init__(self, root: str, config: BrokerConfig, table: DelayOffsetTable, *,
                 log: CommitLog, broker: ComponentView, bridge: EscapeBridge,
                 clock: EpochClock) -> None:
        self.root = root
        self.config = config
        self.table = table
        self.log = log
        self.broker = broker
        self.bridge = bridge
        #: The broker's clock: the store times the levels' delivery times come from.
        self.clock = clock
        self._revision_on_disk = table.revision

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.GET_ALL_DELAY_OFFSET, self.get_all_delay_offset,
                        inline=True)

    async def get_all_delay_offset(self, request: RemotingCommand, peer: RpcConnection
                                   ) -> RemotingCommand:
        return RemotingCommand.response(body=self.table.encode())

    async def deliver(self, bridge: EscapeBridge | None = None) -> None:
        """A master term's task: every level's delivery through the master's own
        bridge until cancelled (the puts under way, up to ``schedule_max_in_flight`` a
        level, are cancelled with it); with ``bridge``, an acting slave's, which
        hands on what is due more than ``timer_precision_ms`` later too."""
        async with trio.open_nursery() as nursery:
            for level, delay in enumerate(self.config.delay_levels, 1):
                nursery.start_soon(self._deliver_level, bridge or self.bridge, LevelDelivery(
                    level, delay, self.table.offset(level),
                    max_in_flight=self.config.schedule_max_in_flight,
                    hand_on_beyond_ms=(None if bridge is None
                                       else self.config.timer_precision_ms)))

    async def _deliver_level(self, bridge: EscapeBridge, flow: LevelDelivery) -> None:
        ended_send, ended = trio.open_memory_channel[tuple[Deliver, EscapeResult]](math.inf)
        in_flight = 0
        async with trio.open_nursery() as nursery:
            actions: deque[ScheduleAction] = deque(flow.start(self.clock()))
            while True:
                while actions:
                    action = actions.popleft()
                    if isinstance(action, StoreOffset):
                        self.table.update(action.level, action.offset, self.clock())
                    elif isinstance(action, Skipped):
                        log.warning("delayed message %d of level %d not delivered: %s",
                                    action.queue_offset, flow.level, action.reason)
                    elif isinstance(action, ReadEntries):
                        actions.extend(self._read_entries(flow, action))
                    elif isinstance(action, ReadRecord):
                        actions.extend(flow.record_read(self._read_record(action),
                                                        self.clock()))
                    elif isinstance(action, Deliver):
                        in_flight += 1
                        nursery.start_soon(self._put, bridge, flow.level, action, ended_send)
                    elif isinstance(action, WakeAt):
                        await self.clock.sleep_until(action.at_ms)
                        actions.extend(flow.woke(self.clock()))
                if not in_flight:
                    raise AssertionError("the level's flow stopped without waiting")
                put, result = await ended.receive()
                in_flight -= 1
                actions.extend(flow.put_done(put.queue_offset, result.ok, self.clock()))

    async def _put(self, bridge: EscapeBridge, level: int, put: Deliver,
                   ended: trio.MemorySendChannel[tuple[Deliver, EscapeResult]]) -> None:
        result = await bridge.put_message(put.message)
        if not result.ok:
            log.info("delivery of delayed message %d of level %d to %s failed (%d %s); "
                     "retrying", put.queue_offset, level, put.message.topic, result.code,
                     result.remark)
        ended.send_nowait((put, result))

    def _read_entries(self, flow: LevelDelivery, read: ReadEntries) -> list[ScheduleAction]:
        found = confirmed_entries(self.log, SCHEDULE_TOPIC, read.queue_id, read.start,
                                  read.max_count, self.broker.confirm_offset)
        return flow.entries_read(*found, self.clock())

    def _read_record(self, read: ReadRecord) -> MessageRecord | None:
        try:
            return self.log.read_record(read.physical_offset)
        except (StoreError, RecordError) as exc:
            log.warning("delayed message at %d unreadable: %s", read.physical_offset, exc)
            return None

    async def persist_loop(self) -> None:
        """Write the table every ``flush_delay_offset_interval`` when it moved (in a
        thread: it fsyncs); on the way out, write what moved last."""
        await config_files.write_every(self.config.flush_delay_offset_interval, self.root,
                                       DELAY_OFFSETS_FILE, self.table, self._revision_on_disk)

    async def copy_from_master(self, rpc: RpcClient) -> None:
        """A slave-term task: take the master's offsets every ``slave_synchronize_period``."""
        await config_files.copy_from_master(
            what="delay offsets", code=RequestCode.GET_ALL_DELAY_OFFSET,
            decode=functools.partial(DelayOffsetTable.decode,
                                     version_step=self.config.delay_offset_update_version_step),
            adopt=self.table.adopt_master, rpc=rpc, broker=self.broker,
            period_ms=self.config.slave_synchronize_period)
