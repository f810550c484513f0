"""The broker's request handlers: puts and commit-log offsets.

The sends (SEND_MESSAGE_V2, SEND_MESSAGE, SEND_BATCH_MESSAGE) and the
broker's own puts (the local escape bridge's) run the put core,
``triomq.broker.send.core.put_flow`` (its checks, refusals and answers are there):
this driver gives it the broker's state and the clocks (trio's for the
waits, the broker's ``EpochClock`` for the store time and the delivery
times computed from it), and carries out
what it asks: save a topic it created, append to the commit log (waking
the HA connections at once and counting the put), wait for the flush
and for the replication.

GET_MAX_OFFSET / GET_MIN_OFFSET answer ``offset`` in ``extFields``: the
queue offset when ``topic`` and ``queueId`` are given (the max as consumers
see it: up to the confirm offset), else the commit-log offset.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable

import trio

from triomq.broker.admin.core.store_stats import StoreStats
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.pull_service import confirmed_queue_max
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.metadata.topics import TopicService
from triomq.broker.replication.replicas_manager import ReplicasManager
from triomq.broker.send.core.put_checks import UNKNOWN_HOST, BrokerState, PutSettings
from triomq.broker.send.core.put_flow import (
    Append,
    PutAction,
    PutFlow,
    PutReply,
    TopicCreated,
    WaitFlushed,
    WaitReplicated,
)
from triomq.clock import EpochClock
from triomq.protocol.message import RecordError
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import AppendResult, CommitLog, FlushService, StoreOutOfResources

__all__ = ["BrokerProcessor"]

log = logging.getLogger("triomq.broker")


class BrokerProcessor:
    """Handles the broker's requests against its commit log and replicas."""

    def __init__(self, *, log: CommitLog, flush: FlushService, replicas: ReplicasManager,
                 config: BrokerConfig, topics: TopicService, clock: EpochClock,
                 store_host: tuple[str, int] = UNKNOWN_HOST,
                 stats: StoreStats | None = None) -> None:
        self.log = log
        #: The broker's clock: store times, and the timer times computed at the put.
        self.clock = clock
        self.topics = topics
        self.flush = flush
        self.replicas = replicas
        self.config = config
        self.store_host = store_host
        self.settings = PutSettings(
            broker_name=config.broker_name, cluster_name=config.cluster_name,
            max_message_size=config.max_message_size,
            min_in_sync_replicas=config.min_in_sync_replicas,
            auto_create_topic_enable=config.auto_create_topic_enable,
            auto_create_topic_limit=config.auto_create_topic_limit,
            default_topic_queue_nums=config.default_topic_queue_nums,
            sync_flush_timeout=config.sync_flush_timeout, flush_policy=flush.policy,
            store_host=store_host, segment_size=log.segment_size,
            reject_transaction_message=config.reject_transaction_message,
            max_delay_level=len(config.delay_levels), timer=config.timer)
        #: This replica's id (the controllers' in controller mode), for refusals.
        self.broker_id = config.broker_id
        #: Whether the replica acts for its absent master (its broker tells).
        self.acting: Callable[[], bool] = lambda: False
        #: Counts the messages stored (GET_BROKER_RUNTIME_INFO's rates and totals).
        self.stats = stats if stats is not None else StoreStats(clock())
        self.unique_ids = UniqueIdGenerator(store_host[0], os.getpid(), random.getrandbits(32))

    def register(self, server: RpcServer) -> None:
        """Register the handlers on ``server``."""
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE,
                     RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.send_message)
        server.register(RequestCode.GET_MAX_OFFSET, self.get_max_offset, inline=True)
        server.register(RequestCode.GET_MIN_OFFSET, self.get_min_offset, inline=True)

    def _state(self) -> BrokerState:
        replicas = self.replicas
        return BrokerState(broker_id=self.broker_id, role=replicas.role.value,
                           is_master=replicas.is_master,
                           in_sync_replicas=len(replicas.sync_state_set),
                           acting=self.acting())

    async def send_message(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        """A send (single, V1 or batch): check, store, flush and replicate it."""
        flow = PutFlow(self.settings, now=trio.current_time())
        action = flow.start(request, peer.peer, self._state(), self.topics.table,
                            store_ms=self.clock(), new_id=self.unique_ids.next_id)
        return await self._run(flow, action)

    async def put_own(self, message: EscapedMessage) -> RemotingCommand:
        """Store a message the broker itself writes (the local escape bridge's)."""
        flow = PutFlow(self.settings, now=trio.current_time())
        action = flow.start_own(message, self._state(), store_ms=self.clock(),
                                new_id=self.unique_ids.next_id)
        return await self._run(flow, action)

    async def _run(self, flow: PutFlow, action: PutAction) -> RemotingCommand:
        """Carry out the put's actions until its answer."""
        while not isinstance(action, PutReply):
            if isinstance(action, TopicCreated):
                self.topics.changed()
                action = flow.resume()
            elif isinstance(action, Append):
                action = self._append(flow, action)
            elif isinstance(action, WaitFlushed):
                with trio.move_on_at(action.deadline):
                    await self.flush.wait_flushed(action.offset)
                action = flow.flushed(self.flush.flushed, trio.current_time())
            elif isinstance(action, WaitReplicated):
                action = flow.replicated(
                    await self.replicas.wait_replicated(action.offset, action.timeout_ms))
        return action.response

    def _append(self, flow: PutFlow, append: Append) -> PutAction:
        try:
            placed: list[AppendResult] = (
                self.log.append_batch(list(append.records)) if append.batch
                else [self.log.append(append.records[0])])
        except RecordError as exc:
            return flow.append_failed(exc)
        except StoreOutOfResources as exc:
            log.warning("a put to topic %s refused: %s", flow.topic, exc)
            return flow.append_failed(exc, out_of_resources=True)
        except OSError as exc:
            # The store's own words name its files: they stay in the server's log.
            log.error("storing a message of topic %s failed: %s", flow.topic, exc)
            return flow.append_failed(exc)
        self.replicas.appended()
        self.stats.put(flow.topic, len(placed), sum(p.size for p in placed),
                       trio.current_time())
        return flow.appended(placed, trio.current_time())

    async def get_max_offset(self, request: RemotingCommand, peer: RpcConnection
                             ) -> RemotingCommand:
        """GET_MAX_OFFSET: the queue's next offset, or the commit log's end."""
        return self._offset(request, max_offset=True)

    async def get_min_offset(self, request: RemotingCommand, peer: RpcConnection
                             ) -> RemotingCommand:
        """GET_MIN_OFFSET: the queue's first offset, or the commit log's first byte."""
        return self._offset(request, max_offset=False)

    def _offset(self, request: RemotingCommand, *, max_offset: bool) -> RemotingCommand:
        topic = request.ext_fields.get("topic")
        if topic is None:
            value = self.log.max_offset if max_offset else self.log.min_offset
        else:
            raw = request.ext_fields.get("queueId", "")
            if not raw.isdigit():
                return RemotingCommand.response(
                    ResponseCode.SYSTEM_ERROR,
                    remark=f"header field 'queueId': expected an integer, got {raw[:40]!r}")
            queue = (topic, int(raw))
            # A queue's end as its consumers see it: its confirmed records.
            value = (confirmed_queue_max(self.log, *queue, self.replicas.confirm_offset)
                     if max_offset else self.log.queue_min_offset(*queue))
        return RemotingCommand.response(ext_fields={"offset": str(value)})
