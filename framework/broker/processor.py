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

GET_MAX_OFFSET / GET_MIN_OFFSET answer ``offset`` in ``extFields``: the
queue offset when ``topic`` and ``queueId`` are given, else the commit-log
offset.
"""

from __future__ import annotations

import ipaddress
import time

import trio

from framework.broker.codes import RequestCode, ResponseCode
from framework.broker.config import BrokerConfig
from framework.broker.headers import HeaderError, offset_msg_id, parse_send_header
from framework.broker.replicas_manager import ReplicasManager
from framework.ha.sync_replication import ReplicationStatus
from framework.protocol.message import MessageRecord, RecordError
from framework.protocol.remoting import RemotingCommand
from framework.rpc import RpcConnection, RpcServer
from framework.store import CommitLog, FlushService

__all__ = ["BrokerProcessor", "host_port"]

_UNKNOWN_HOST = ("0.0.0.0", 0)

_REPLICATION_CODES = {
    ReplicationStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    ReplicationStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT, "wait for the slaves' acks timed out"),
    ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (
        ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"),
}


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
                 config: BrokerConfig, store_host: tuple[str, int] = _UNKNOWN_HOST) -> None:
        self.log = log
        self.flush = flush
        self.replicas = replicas
        self.config = config
        self.store_host = store_host

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
        if not self.replicas.is_master:
            return RemotingCommand.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                remark=f"broker {self.config.broker_name} id {self.config.broker_id} is "
                       f"{self.replicas.role.value}, not master: messages go to the master")
        record = MessageRecord(
            topic=header.topic,
            body=request.body,
            queue_id=header.queue_id,
            flag=header.flag,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=host_port(peer.peer),
            store_timestamp=time.time_ns() // 1_000_000,
            store_host=self.store_host,
            reconsume_times=header.reconsume_times,
            properties=header.properties,
        )
        deadline = trio.current_time() + self.config.sync_flush_timeout / 1000
        try:
            placed = self.log.append(record)
        except RecordError as exc:
            return RemotingCommand.response(ResponseCode.MESSAGE_ILLEGAL, remark=exc.reason)
        self.replicas.appended()
        end = placed.physical_offset + placed.size
        fields = {
            "msgId": offset_msg_id(self.store_host, placed.physical_offset),
            "queueId": str(header.queue_id),
            "queueOffset": str(placed.queue_offset),
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
            value = (self.log.queue_max_offset(*queue) if max_offset
                     else self.log.queue_min_offset(*queue))
        return RemotingCommand.response(ext_fields={"offset": str(value)})
