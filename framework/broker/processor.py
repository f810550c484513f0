"""The broker's request handlers: synchronous puts and commit-log offsets.

A put (SEND_MESSAGE_V2) on the master: the record is appended to the commit
log (the HA connections are woken at once), then the handler waits for the
record's flush (per the flush policy) and for its replication
(allAckInSyncStateSet or minInSyncReplicas), both within
``sync_flush_timeout``, and answers SUCCESS, FLUSH_DISK_TIMEOUT or
FLUSH_SLAVE_TIMEOUT. The answer always carries where the record went
(``msgId``, ``queueId``, ``queueOffset``): a timed-out put is stored on the
master and may still reach the slaves. A slave answers
SERVICE_NOT_AVAILABLE (see ``codes.ResponseCode``).

Every stored message carries the broker's cluster name as its ``CLUSTER``
property, as RocketMQ 5 adds it (its request-reply messages need it).
A message stored without a ``UNIQ_KEY`` property (the producer's message
id; Java clients always set one, ali-ons never does) gets one made here,
laid out as a client's, as RocketMQ 5's broker does: every consumer then
names it by that id, and a query by id finds it.

Before storing, a send is checked, every refusal a code and a remark naming
the field (never a server path or a traceback): the header and a body
within ``max_message_size``, a zlib-compressed one inflating to no more
(MESSAGE_ILLEGAL); a producer group, if named, by RocketMQ's group rules
(INVALID_PARAMETER); the topic as RocketMQ's send path checks it: a legal
name (INVALID_PARAMETER), not a topic clients may not send to
(NO_PERMISSION), known or created from the default topic
(``auto_create_topic_enable``, while the broker holds fewer than
``auto_create_topic_limit`` topics; else TOPIC_NOT_EXIST), writable, and a
queue id below its write queue count (MESSAGE_ILLEGAL): a client can only
make the broker keep the queues its topics declare. A put the SyncStateSet
is too small for (``min_in_sync_replicas``) is refused before it is stored,
so a retry stores no duplicate.

GET_MAX_OFFSET / GET_MIN_OFFSET answer ``offset`` in ``extFields``: the
queue offset when ``topic`` and ``queueId`` are given (the max as consumers
see it: up to the confirm offset), else the commit-log offset.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import logging
import os
import random
import time
from collections.abc import Callable, Mapping

import trio

from triomq.broker.codes import RequestCode, ResponseCode
from triomq.broker.config import BrokerConfig
from triomq.broker.escape_bridge import EscapedMessage
from triomq.broker.headers import HeaderError, SendHeader, offset_msg_id, parse_send_header
from triomq.broker.pull_service import confirmed_queue_max
from triomq.broker.replicas_manager import ReplicasManager
from triomq.broker.store_stats import StoreStats
from triomq.broker.topic_table import TopicRefused
from triomq.broker.topics import TopicService
from triomq.clock import now_ms
from triomq.ha.sync_replication import ReplicationStatus
from triomq.protocol.inflate import InflateError, check_inflated_size
from triomq.protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_UNIQ_KEY,
    MessageRecord,
    RecordError,
    zlib_compressed,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import PERM_WRITE
from triomq.protocol.topic_rules import (
    AUTO_CREATE_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    IllegalName,
    check_group,
    check_topic,
)
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import AppendResult, CommitLog, FlushService, StoreOutOfResources

__all__ = ["BrokerProcessor", "host_port"]

log = logging.getLogger("triomq.broker")

_UNKNOWN_HOST = ("0.0.0.0", 0)

_REPLICATION_CODES = {
    ReplicationStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    ReplicationStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT, "wait for the slaves' acks timed out"),
    ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (
        ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"),
}


@functools.lru_cache(maxsize=4096)  # per put otherwise, for the few peers a broker has
def host_port(address: str) -> tuple[str, int]:
    """``(ip, port)`` from ``"tcp://1.2.3.4:5"`` or ``"1.2.3.4:5"``; ``0.0.0.0:0`` otherwise.

    A record's born and store hosts must be IP addresses; in-process
    addresses and host names have none.
    """
    location = address.partition("://")[2] if "://" in address else address
    host, sep, port = location.rpartition(":")
    host = host.strip("[]")
    try:
        return str(ipaddress.ip_address(host)), int(port) if sep else 0
    except ValueError:
        return _UNKNOWN_HOST


class BrokerProcessor:
    """Handles the broker's requests against its commit log and replicas."""

    def __init__(self, *, log: CommitLog, flush: FlushService, replicas: ReplicasManager,
                 config: BrokerConfig, topics: TopicService,
                 store_host: tuple[str, int] = _UNKNOWN_HOST,
                 stats: StoreStats | None = None) -> None:
        self.log = log
        self.topics = topics
        self.flush = flush
        self.replicas = replicas
        self.config = config
        self.store_host = store_host
        #: This replica's id (the controllers' in controller mode), for refusals.
        self.broker_id = config.broker_id
        #: Counts the messages stored (GET_BROKER_RUNTIME_INFO's rates and totals).
        self.stats = stats if stats is not None else StoreStats(time.time_ns() // 1_000_000)
        self.unique_ids = UniqueIdGenerator(store_host[0], os.getpid(), random.getrandbits(32))

    def register(self, server: RpcServer) -> None:
        """Register the handlers on ``server``."""
        server.register(RequestCode.SEND_MESSAGE_V2, self.send_message)
        server.register(RequestCode.GET_MAX_OFFSET, self.get_max_offset, inline=True)
        server.register(RequestCode.GET_MIN_OFFSET, self.get_min_offset, inline=True)

    async def send_message(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        """SEND_MESSAGE_V2: store, flush and replicate one message."""
        try:
            header = parse_send_header(request.ext_fields)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
        refusal = self.check_send(header, len(request.body), request.ext_fields)
        if refusal is not None:
            return refusal
        too_large = self.inflates_too_large(header.sys_flag, request.body)
        if too_large is not None:
            return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=too_large)
        stored_at = time.time_ns() // 1_000_000
        properties = {**header.properties, PROPERTY_CLUSTER: self.config.cluster_name}
        if not properties.get(PROPERTY_UNIQ_KEY):
            properties[PROPERTY_UNIQ_KEY] = self.unique_ids.next_id(stored_at)
        record = MessageRecord(
            topic=header.topic,
            body=request.body,
            queue_id=header.queue_id,
            flag=header.flag,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=host_port(peer.peer),
            store_timestamp=stored_at,
            store_host=self.store_host,
            reconsume_times=header.reconsume_times,
            properties=properties,
        )
        return await self.put(header.topic, header.queue_id,
                              lambda: [self.log.append(record)])

    async def put_own(self, message: EscapedMessage) -> RemotingCommand:
        """Store a message the broker itself writes (the local escape bridge's): the
        store's checks (master, size, in-sync replicas), none of a client's send's
        (topic table, producer group), then the put flow of every send."""
        refusal = (self._check_master() or self._check_size(len(message.body))
                   or self._check_in_sync())
        if refusal is not None:
            return refusal
        stored_at = time.time_ns() // 1_000_000
        properties = {**message.properties, PROPERTY_CLUSTER: self.config.cluster_name}
        if not properties.get(PROPERTY_UNIQ_KEY):
            properties[PROPERTY_UNIQ_KEY] = self.unique_ids.next_id(stored_at)
        record = MessageRecord(
            topic=message.topic, body=message.body, queue_id=message.queue_id,
            flag=message.flag, sys_flag=message.sys_flag,
            born_timestamp=message.born_timestamp or stored_at,
            born_host=message.born_host or self.store_host, store_timestamp=stored_at,
            store_host=self.store_host, reconsume_times=message.reconsume_times,
            properties=properties)
        return await self.put(message.topic, message.queue_id,
                              lambda: [self.log.append(record)])

    def check_send(self, header: SendHeader, body_size: int, fields: Mapping[str, str]
                   ) -> RemotingCommand | None:
        """The checks every send passes before it is stored (one message or a batch of
        ``body_size`` bytes): the refusal, or None to go on."""
        refusal = self._check_master() or self._check_size(body_size)
        if refusal is not None:
            return refusal
        refusal = self._check_topic(header.topic, header.queue_id, fields)
        if refusal is not None:
            return refusal
        if header.producer_group:
            try:
                check_group(header.producer_group)
            except IllegalName as exc:
                return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                                remark=f"producerGroup: {exc}")
        return self._check_in_sync()

    def _check_master(self) -> RemotingCommand | None:
        if not self.replicas.is_master:
            return RemotingCommand.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                remark=f"broker {self.config.broker_name} id {self.broker_id} is "
                       f"{self.replicas.role.value}, not master: messages go to the master")
        return None

    def _check_size(self, body_size: int) -> RemotingCommand | None:
        if body_size > self.config.max_message_size:
            return RemotingCommand.response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"message body: {body_size} bytes exceed max_message_size "
                       f"{self.config.max_message_size}")
        return None

    def _check_in_sync(self) -> RemotingCommand | None:
        if len(self.replicas.sync_state_set) < self.config.min_in_sync_replicas:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"in-sync replicas not enough: the SyncStateSet holds "
                       f"{len(self.replicas.sync_state_set)} of min_in_sync_replicas "
                       f"{self.config.min_in_sync_replicas}; nothing was stored")
        return None

    def inflates_too_large(self, sys_flag: int, body: bytes) -> str | None:
        """Why a zlib-compressed body is refused: it inflates past ``max_message_size``
        (RocketMQ's producers check that size before they compress); None if it does
        not. A body too small to get there costs nothing; a larger one is inflated
        chunk by chunk, none of it kept, and no further than the limit."""
        if not zlib_compressed(sys_flag):
            return None
        try:
            check_inflated_size(body, self.config.max_message_size,
                                "the compressed message body")
        except InflateError as exc:
            return f"{exc} (max_message_size)"
        return None

    async def put(self, topic: str, queue_id: int, append: Callable[[], list[AppendResult]]
                  ) -> RemotingCommand:
        """Store what ``append`` appends (one record or a batch), then wait for its flush
        and replication; the answer names where it went (``msgId``: the records' offset
        ids joined by commas, ``queueOffset``: the first record's)."""
        deadline = trio.current_time() + self.config.sync_flush_timeout / 1000
        try:
            placed = append()
        except RecordError as exc:
            return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=exc.reason)
        except StoreOutOfResources as exc:
            # Out of descriptors or disk: refuse this put, keep serving what is held.
            log.warning("a put to topic %s refused: %s", topic, exc)
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the broker is out of {errno.errorcode.get(exc.errno, 'resources')}: "
                       f"the put was not stored; retry later or elsewhere")
        except OSError as exc:
            # The store's own words name its files: they stay in the server's log.
            log.error("storing a message of topic %s failed: %s", topic, exc)
            reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the store refused the message ({reason}); see the broker's log")
        self.replicas.appended()
        self.stats.put(topic, len(placed), sum(p.size for p in placed),
                       trio.current_time())
        end = placed[-1].physical_offset + placed[-1].size
        fields = {
            "msgId": ",".join(offset_msg_id(self.store_host, p.physical_offset) for p in placed),
            "queueId": str(queue_id),
            "queueOffset": str(placed[0].queue_offset),
        }
        with trio.move_on_at(deadline):
            await self.flush.wait_flushed(end)
        if self.flush.policy != "none" and self.flush.flushed < end:
            return RemotingCommand.response(
                ResponseCode.FLUSH_DISK_TIMEOUT, remark="flush to disk timed out",
                ext_fields=fields)
        remaining_ms = max(0, round((deadline - trio.current_time()) * 1000))
        status = await self.replicas.wait_replicated(end, remaining_ms)
        if status is None:
            return RemotingCommand.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                remark="the broker stopped being master before the put was replicated",
                ext_fields=fields)
        code, remark = _REPLICATION_CODES[status]
        return RemotingCommand.response(code, remark=remark, ext_fields=fields)

    def _check_topic(self, topic: str, queue_id: int, fields: Mapping[str, str]
                     ) -> RemotingCommand | None:
        """RocketMQ's send-time topic checks; the refusal, or None to go on."""
        try:
            check_topic(topic)
        except IllegalName as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return RemotingCommand.response(
                ResponseCode.NO_PERMISSION, remark=f"Sending message to topic[{topic}] is "
                                                   f"forbidden.")
        table = self.topics.table
        config = table.get(topic)
        if config is None and self.config.auto_create_topic_enable:
            if len(table) >= self.config.auto_create_topic_limit:
                return RemotingCommand.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    remark=f"topic[{topic}] not exist and not created: the broker holds "
                           f"{len(table)} topics, its auto_create_topic_limit; apply first "
                           "please!")
            raw = fields.get("d", "")
            queue_nums = (int(raw) if raw.isdigit() and len(raw) < 6
                          else self.config.default_topic_queue_nums)
            try:
                config = table.create_on_send(topic, fields.get("c") or AUTO_CREATE_TOPIC,
                                              queue_nums, now_ms())
            except TopicRefused as exc:
                return RemotingCommand.response(exc.code, remark=exc.remark)
            if config is not None:
                self.topics.changed()
        if config is None:
            return RemotingCommand.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist, apply first please!")
        if not config.perm & PERM_WRITE:
            return RemotingCommand.response(
                ResponseCode.NO_PERMISSION,
                remark=f"the topic[{topic}] sending message is forbidden (perm {config.perm})")
        if queue_id >= config.write_queue_nums:
            return RemotingCommand.response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"request queueId[{queue_id}] is illegal: topic {topic} has "
                       f"{config.write_queue_nums} write queues")
        return None

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
