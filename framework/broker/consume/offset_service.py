"""Consumer offsets at run time: ``config/consumerOffset.json``, the requests, a slave's copy.

``ConsumerOffsetService`` holds the broker's ``ConsumerOffsetTable`` (the
rules live there), loads it from ``<store root>/config/consumerOffset.json``
(or its ``.bak``), writes it every ``flush_consumer_offset_interval`` when it
changed and once more on the way out (a temporary file renamed into place,
the previous version kept as ``consumerOffset.json.bak``, as for
``topics.json``), and serves:

- QUERY_CONSUMER_OFFSET 14: ``consumerGroup``, ``topic``, ``queueId``,
  ``setZeroIfNotFound``; answers ``offset``, or QUERY_NOT_FOUND;
- UPDATE_CONSUMER_OFFSET 15: ``consumerGroup``, ``topic``, ``queueId``,
  ``commitOffset``; the group must be known (SUBSCRIPTION_GROUP_NOT_EXIST),
  the topic held (TOPIC_NOT_EXIST) and the queue id one of its queues
  (INVALID_PARAMETER; RocketMQ does not check it, and a client could then
  fill the table with queues that do not exist);
- GET_ALL_CONSUMER_OFFSET 43: the table as ``consumerOffset.json``;
- INVOKE_BROKER_TO_RESET_OFFSET 222 (``mqadmin resetOffsetByTime``,
  ``skipAccumulatedMessage``): an admin request (the node's admin access
  guards it), by the rules of ``triomq.broker.consume.core.offset_reset``; the queues'
  ends are where consumers see them (the confirm offset bounds them). While
  a reset of a queue is pending, UPDATE_CONSUMER_OFFSET for it answers
  SUCCESS "Offset has been previously reset" and stores nothing, as
  RocketMQ's broker does.

Every replica takes commits, a slave's being stored locally (RocketMQ 5
stores a pull's and an update's commit on any role). Every
``slave_synchronize_period`` a slave copies its master's table
(``ConsumerOffsetTable.adopt_master``), so a slave elected master, or one a
group reads from while it has no master, knows where consumers were.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.consumer_offsets import (
    ConsumerOffsetTable,
    answer_query,
    parse_offset_header,
    update_refusal,
)
from triomq.broker.consume.core.offset_reset import (
    ResetRefused,
    parse_reset_header,
    reset_body,
    reset_offsets,
)
from triomq.broker.consume.core.pull_lookup import confirmed_queue_max
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import HeaderError
from triomq.broker.metadata import config_files
from triomq.broker.metadata.topics import TopicService
from triomq.clock import now_ms
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcConnection, RpcServer
from triomq.store import CommitLog

__all__ = ["OFFSETS_FILE", "ConsumerOffsetService", "load_offsets"]

log = logging.getLogger("triomq.broker")

OFFSETS_FILE = os.path.join("config", "consumerOffset.json")


def load_offsets(root: str, version_step: int) -> ConsumerOffsetTable:
    """The table in ``<root>/config/consumerOffset.json`` (or its ``.bak``), else an empty one."""
    table = config_files.load(
        root, OFFSETS_FILE,
        functools.partial(ConsumerOffsetTable.decode, version_step=version_step))
    return table if table is not None else ConsumerOffsetTable(version_step=version_step)


class ConsumerOffsetService:
    """The broker's consumer offsets, their file and their requests.

    ``group_known(group)`` says whether a consumer group exists (or was
    created), ``group_exists(group)`` whether it has a config now;
    ``memory_window`` is how many bytes behind the log's end count as in
    memory (see ``PullLimits.memory_window``); ``broker``'s confirm offset
    bounds the queues' ends.
    """

    def __init__(self, root: str, config: BrokerConfig, table: ConsumerOffsetTable, *,
                 log: CommitLog, topics: TopicService, broker: ComponentView,
                 memory_window: int, group_known: Callable[[str], bool] = lambda group: True,
                 group_exists: Callable[[str], bool] = lambda group: True) -> None:
        self.root = root
        self.config = config
        self.table = table
        self.log = log
        self.topics = topics
        self.broker = broker
        self.memory_window = memory_window
        self.group_known = group_known
        self.group_exists = group_exists
        self._revision_on_disk = table.revision

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_consumer_offset,
                        inline=True)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset,
                        inline=True)
        server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.get_all_consumer_offset,
                        inline=True)
        server.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset,
                        inline=True)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store a consumer group's offset (an update, or a pull's commit flag)."""
        self.table.commit(group, topic, queue_id, offset, now_ms())

    async def query_consumer_offset(self, request: RemotingCommand, peer: RpcConnection
                                    ) -> RemotingCommand:
        try:
            header = parse_offset_header(request.ext_fields, commit=False)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        answer = answer_query(self.table, header, self.log, memory_window=self.memory_window)
        fields = {"offset": str(answer.offset)} if answer.offset is not None else {}
        return RemotingCommand.response(answer.code, remark=answer.remark, ext_fields=fields)

    async def update_consumer_offset(self, request: RemotingCommand, peer: RpcConnection
                                     ) -> RemotingCommand:
        try:
            header = parse_offset_header(request.ext_fields, commit=True)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        refusal = update_refusal(header, self.topics.table.get(header.topic),
                                 group_known=self.group_known(header.consumer_group))
        if refusal is not None:
            return RemotingCommand.response(refusal[0], remark=refusal[1])
        assert header.commit_offset is not None
        if self.table.has_reset(header.consumer_group, header.topic, header.queue_id):
            return RemotingCommand.response(remark="Offset has been previously reset")
        self.commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        return RemotingCommand.response()

    async def get_all_consumer_offset(self, request: RemotingCommand, peer: RpcConnection
                                      ) -> RemotingCommand:
        return RemotingCommand.response(body=self.table.encode())

    async def reset_offset(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        try:
            reset = parse_reset_header(request.ext_fields)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"INVOKE_BROKER_TO_RESET_OFFSET: {exc}")
        topic = reset.topic
        confirm_offset = self.broker.confirm_offset
        offsets = reset_offsets(
            reset, is_master=self.broker.is_master, topic=self.topics.table.get(topic),
            group_exists=self.group_exists(reset.group),
            queue_range=lambda q: (self.log.queue_min_offset(topic, q),
                                   confirmed_queue_max(self.log, topic, q, confirm_offset)),
            offset_at=lambda q, ts: self.log.search_queue_offset(topic, q, ts))
        if isinstance(offsets, ResetRefused):
            log.warning("offset reset of group %s on topic %s by %s refused: %s",
                        reset.group[:80], topic[:80], peer.peer, offsets.remark)
            return RemotingCommand.response(offsets.code, remark=offsets.remark)
        now = now_ms()
        for queue_id, offset in offsets.items():
            self.table.assign_reset(reset.group, topic, queue_id, offset, now)
        log.info("offsets of group %s on topic %s reset by %s (timestamp %d): %s",
                 reset.group, topic, peer.peer, reset.timestamp, offsets)
        return RemotingCommand.response(
            body=reset_body(topic, self.config.broker_name, offsets))

    async def persist_loop(self) -> None:
        """Write the table every ``flush_consumer_offset_interval`` when it changed (in a
        thread: it fsyncs); on the way out, write what changed last."""
        await config_files.write_every(self.config.flush_consumer_offset_interval, self.root,
                                       OFFSETS_FILE, self.table, self._revision_on_disk)

    async def copy_from_master(self, rpc: RpcClient) -> None:
        """A slave-term task: take the master's offsets every ``slave_synchronize_period``."""
        await config_files.copy_from_master(
            what="consumer offsets", code=RequestCode.GET_ALL_CONSUMER_OFFSET,
            decode=ConsumerOffsetTable.decode, adopt=self.table.adopt_master, rpc=rpc,
            broker=self.broker,
            period_ms=self.config.slave_synchronize_period)
