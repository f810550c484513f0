"""The revive of popped messages at run time: one ``ReviveQueue`` flow per revive queue.

``triomq.broker.pop.core.revive`` holds the rules; in each master term this
driver runs one flow per queue of ``rmq_sys_REVIVE_LOG_<cluster>``
(``revive_queue_num``), reading the queue as consumers do (up to the
confirm offset), the popped messages from the commit log, and putting the
revived copies through the escape bridge, never onto the log directly.
Each flow starts from its queue's revive offset, the consumer offset of
group ``CID_RMQ_SYS_REVIVE_GROUP`` on that queue, as RocketMQ keeps it: it is
in ``config/consumerOffset.json``, which slaves copy, so a new master goes on
where the old one was. A slave acting for its absent master runs the same
flows over its own revive topic (``acting-revive``), its revived copies
escaped to another master's pop retry topic, its offsets its own consumer
offsets (which the returning master's pre-online takes back).

The pops an acting slave serves have their checkpoints escaped to a master
of another group: there, a checkpoint names the acting slave's group, and
its message is read from that group's replicas over PULL_MESSAGE
(``core.remote_read``), found through the name servers' route of its topic.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.codes import RequestCode
from triomq.broker.core.escape_bridge import EscapeBridge
from triomq.broker.pop.core.receipt import REVIVE_GROUP, revive_topic
from triomq.broker.pop.core.remote_read import (
    Unread,
    answer,
    inner_consumer_group,
    pull_fields,
    replica_addresses,
)
from triomq.broker.pop.core.revive import (
    NotRevived,
    ReadMessage,
    ReadRevive,
    Revive,
    ReviveAction,
    ReviveQueue,
    ReviveRecord,
    StoreReviveOffset,
    WakeAt,
    popped_record,
    revive_records,
)
from triomq.broker.registration.namesrv_client import query_route, rpc_address
from triomq.clock import EpochClock
from triomq.protocol.message import MessageRecord, RecordError
from triomq.rpc import RpcClient, RpcError
from triomq.store import CommitLog, StoreError

__all__ = ["ReviveService"]

log = logging.getLogger("triomq.broker")

#: Seconds a route query or a read of another group waits for its answer.
REMOTE_TIMEOUT = 3.0


class ReviveService:
    """The master term's revive of un-acked pops (``revive``), one task per revive queue."""

    def __init__(self, *, config: BrokerConfig, log: CommitLog,
                 offsets: ConsumerOffsetService, broker: ComponentView, bridge: EscapeBridge,
                 clock: EpochClock, ensure_retry_topic: Callable[[str], bool],
                 ensure_revive_topic: Callable[[], None], rpc: RpcClient) -> None:
        self.config = config
        #: How another group's messages are read.
        self.rpc = rpc
        self.log = log
        self.offsets = offsets
        self.broker = broker
        self.bridge = bridge
        self.clock = clock
        self.ensure_retry_topic = ensure_retry_topic
        self.ensure_revive_topic = ensure_revive_topic
        self.topic = revive_topic(config.cluster_name)
        #: The running flows, by revive queue (for tests and admin views).
        self.flows: dict[int, ReviveQueue] = {}

    async def revive(self, bridge: EscapeBridge | None = None) -> None:
        """A term's task: every revive queue's flow, until cancelled, its revived copies
        through ``bridge`` (the master's own by default; an acting slave's escapes them
        to another master, and creates no topic of its own)."""
        own = bridge is None
        if own:
            self.ensure_revive_topic()
        async with trio.open_nursery() as nursery:
            for queue_id in range(self.config.revive_queue_num):
                done = self.offsets.table.query(REVIVE_GROUP, self.topic, queue_id)
                flow = self.flows[queue_id] = ReviveQueue(
                    queue_id, -1 if done is None else done,
                    broker_name=self.config.broker_name,
                    interval_ms=self.config.revive_interval)
                nursery.start_soon(self._run, flow, bridge or self.bridge, own)

    async def _run(self, flow: ReviveQueue, bridge: EscapeBridge, own: bool) -> None:
        actions: deque[ReviveAction] = deque(flow.start(self.clock()))
        while actions:
            action = actions.popleft()
            if isinstance(action, ReadRevive):
                actions.extend(flow.records_read(self._read_revive(action), self.clock()))
            elif isinstance(action, ReadMessage):
                if action.broker_name == self.config.broker_name:
                    record = popped_record(self.log, action, self._record)
                else:
                    found = await self._read_remote(action)
                    if found is Unread.NOT_HERE:
                        actions.extend(flow.read_failed(self.clock()))
                        continue
                    record = None if found is Unread.GONE else found
                actions.extend(flow.message_read(record, self.clock()))
            elif isinstance(action, Revive):
                ok = self.ensure_retry_topic(action.message.topic) if own else True
                if ok:
                    result = await bridge.put_message(action.message)
                    ok = result.stored
                    if not ok:
                        log.info("revive into %s failed (%d %s); retrying",
                                 action.message.topic, result.code, result.remark)
                actions.extend(flow.put_done(ok, self.clock()))
            elif isinstance(action, StoreReviveOffset):
                self.offsets.commit(REVIVE_GROUP, self.topic, action.queue_id, action.offset)
            elif isinstance(action, NotRevived):
                log.warning("revive queue %d: %s", flow.queue_id, action.reason)
            elif isinstance(action, WakeAt):
                await self.clock.sleep_until(action.at_ms)
                actions.extend(flow.woke(self.clock()))

    def _read_revive(self, read: ReadRevive) -> list[ReviveRecord]:
        return revive_records(self.log, self.topic, read, self.broker.confirm_offset,
                              self._record)

    async def _read_remote(self, read: ReadMessage) -> MessageRecord | Unread:
        """The message from its group's replicas: the record, ``GONE``, or ``NOT_HERE``
        when none of them could tell."""
        route = await query_route(self.rpc, self.config.namesrv_addr, read.topic,
                                  timeout=REMOTE_TIMEOUT)
        addresses = [] if route is None else replica_addresses(route, read.broker_name)
        group = inner_consumer_group(self.config.broker_name, self.config.broker_id)
        for address in addresses:
            try:
                reply = await self.rpc.invoke(rpc_address(address), RequestCode.PULL_MESSAGE,
                                              pull_fields(read, group), timeout=REMOTE_TIMEOUT)
            except RpcError as exc:
                log.info("reading %s queue %d offset %d from %s failed: %s", read.topic,
                         read.queue_id, read.offset, address, exc)
                continue
            found = answer(read, reply.code, reply.ext_fields, reply.body or b"")
            if found is not Unread.NOT_HERE:
                return found
        log.info("no replica of %s answered for %s queue %d offset %d; the revive waits",
                 read.broker_name, read.topic, read.queue_id, read.offset)
        return Unread.NOT_HERE

    def _record(self, physical: int) -> MessageRecord | None:
        try:
            return self.log.read_record(physical)
        except (StoreError, RecordError) as exc:
            log.warning("record at %d unreadable for the revive: %s", physical, exc)
            return None
