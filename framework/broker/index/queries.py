"""Queries of stored messages: by time, by offset id and by key.

- SEARCH_OFFSET_BY_TIMESTAMP 29 (``topic``, ``queueId``, ``timestamp``):
  ``offset``, the queue's first offset stored at or after ``timestamp``
  (its max offset if none);
- GET_EARLIEST_MSG_STORETIME 32 (``topic``, ``queueId``): ``timestamp``, the
  store time of the queue's first readable record, -1 for an empty queue;
- VIEW_MESSAGE_BY_ID 33 (``offset``): the record stored at that commit-log
  offset as the body. A client gets the offset, and the broker to ask, from
  the message id (RocketMQ's ``MessageDecoder.decodeMessageId``: store host
  address, port, offset); no record there is SYSTEM_ERROR "can not find
  message by the offset", as RocketMQ answers;
- QUERY_MESSAGE 12 (``topic``, ``key``, ``maxNum``, ``beginTimestamp``,
  ``endTimestamp``): the records indexed under ``topic#key`` stored in that
  time range, at most ``max_msgs_num_batch`` (``default_query_max_num``
  when ``_UNIQUE_KEY_QUERY`` is ``true``), newest first, back to back as the
  body, with ``indexLastUpdateTimestamp`` / ``indexLastUpdatePhyoffset``;
  QUERY_NOT_FOUND when none. A record is answered only if it really carries
  the key (a hash collision in the index, or an entry left by a cut log,
  never answers another message).

A missing or malformed header field is INVALID_PARAMETER naming it.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

from triomq.broker.config import BrokerConfig
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.index.core.index_dispatch import index_keys
from triomq.broker.index.index_service import IndexService
from triomq.protocol.header_fields import INT32, INT64, HeaderFields
from triomq.protocol.message import RecordError, decode
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["UNIQUE_KEY_QUERY", "QueryService"]

#: RocketMQ's ``MixAll.UNIQUE_MSG_QUERY_FLAG``: the key is a message's UNIQ_KEY.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


class _BadField(Exception):
    def __init__(self, remark: str) -> None:
        self.remark = remark


def _text(request: RemotingCommand, what: str, key: str) -> str:
    return HeaderFields(request.ext_fields, what, error=_BadField).string(key)


def _integer(request: RemotingCommand, what: str, key: str,
             bounds: tuple[int, int] = INT64) -> int:
    return HeaderFields(request.ext_fields, what, error=_BadField).integer(key, bounds)


def _handler(what: str, answer: Callable[[RemotingCommand, str], Awaitable[RemotingCommand]]
             ) -> Callable[[RemotingCommand, RpcConnection], Awaitable[RemotingCommand]]:
    """A request handler answering INVALID_PARAMETER for a bad header field."""
    async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        try:
            return await answer(request, what)
        except _BadField as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=exc.remark)
    return handle


class QueryService:
    """Serves the message queries against the commit log and its index."""

    def __init__(self, log: CommitLog, index: IndexService | None, config: BrokerConfig
                 ) -> None:
        self.log = log
        self.index = index
        self.config = config

    def register(self, server: RpcServer) -> None:
        for code, what, answer, inline in [
            (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, "SEARCH_OFFSET_BY_TIMESTAMP",
             self.search_offset, True),
            (RequestCode.GET_EARLIEST_MSG_STORETIME, "GET_EARLIEST_MSG_STORETIME",
             self.earliest_store_time, True),
            (RequestCode.VIEW_MESSAGE_BY_ID, "VIEW_MESSAGE_BY_ID", self.view_message, True),
            # Waits for the index's batch being put, if any.
            (RequestCode.QUERY_MESSAGE, "QUERY_MESSAGE", self.query_message, False),
        ]:
            server.register(code, _handler(what, answer), inline=inline)

    def _queue(self, request: RemotingCommand, what: str) -> tuple[str, int]:
        return (_text(request, what, "topic"),
                _integer(request, what, "queueId", (0, INT32[1])))

    async def search_offset(self, request: RemotingCommand, what: str) -> RemotingCommand:
        topic, queue_id = self._queue(request, what)
        timestamp = _integer(request, what, "timestamp")
        offset = self.log.search_queue_offset(topic, queue_id, timestamp)
        return RemotingCommand.response(ext_fields={"offset": str(offset)})

    async def earliest_store_time(self, request: RemotingCommand, what: str) -> RemotingCommand:
        topic, queue_id = self._queue(request, what)
        earliest = self.log.earliest_store_time(topic, queue_id)
        return RemotingCommand.response(
            ext_fields={"timestamp": str(-1 if earliest is None else earliest)})

    async def view_message(self, request: RemotingCommand, what: str) -> RemotingCommand:
        offset = _integer(request, what, "offset")
        data = self.record_bytes(offset)
        if data is None:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}")
        return RemotingCommand.response(body=data)

    def record_bytes(self, offset: int) -> bytes | None:
        """The stored bytes of the record at ``offset``, None if no record starts there."""
        if not self.log.min_offset <= offset < self.log.last_whole_record_end():
            return None
        try:
            head = self.log.read(offset, 4)
            total = struct.unpack(">i", head)[0] if len(head) == 4 else 0
            if total <= 0:
                return None
            data = self.log.read(offset, total)
            record, size = decode(data)
        except (StoreError, RecordError, struct.error):
            return None
        return data if size == len(data) and record.physical_offset == offset else None

    async def query_message(self, request: RemotingCommand, what: str) -> RemotingCommand:
        topic = _text(request, what, "topic")
        key = _text(request, what, "key")
        max_num = _integer(request, what, "maxNum", INT32)
        begin = _integer(request, what, "beginTimestamp")
        end = _integer(request, what, "endTimestamp")
        if request.ext_fields.get(UNIQUE_KEY_QUERY) == "true":
            max_num = self.config.default_query_max_num
        max_num = min(max_num, self.config.max_msgs_num_batch)
        found = (await self.index.query(f"{topic}#{key}", max_num, begin, end)
                 if self.index is not None and max_num > 0 else None)
        body = bytearray()
        wanted = f"{topic}#{key}"
        for offset in dict.fromkeys(found.offsets if found is not None else ()):
            data = self.record_bytes(offset)
            if data is None:
                continue
            record, _ = decode(data, verify_crc=False)
            if record.topic == topic and wanted in index_keys(topic, dict(record.properties),
                                                              record.sys_flag):
                body += data
        fields = {"indexLastUpdateTimestamp": str(found.last_update_timestamp if found else 0),
                  "indexLastUpdatePhyoffset": str(found.last_update_phy_offset if found else 0)}
        if not body:
            return RemotingCommand.response(
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct", ext_fields=fields)
        return RemotingCommand.response(ext_fields=fields, body=bytes(body))
