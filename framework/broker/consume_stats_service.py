"""GET_CONSUME_STATS (208) at run time: the handler, and the count of messages pulled.

The rules and the table are ``triomq.broker.consume_stats``'s; this reads
the broker's topics, offsets, online consumers and commit log for them, and
keeps the time: ``got`` is called by the pull handler for every FOUND pull
and counts its messages at ``trio.current_time()``.

A missing ``consumerGroup`` is INVALID_PARAMETER naming it (RocketMQ would
fail the decoding with SYSTEM_ERROR); a store that cannot be read is
SYSTEM_ERROR, its own words staying in the broker's log.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

import trio

from triomq.broker.clients import ClientService
from triomq.broker.codes import RequestCode, ResponseCode
from triomq.broker.consume_stats import (
    GroupGetNums,
    consume_stats,
    parse_stats_header,
    topics_to_collect,
)
from triomq.broker.headers import HeaderError
from triomq.broker.offset_service import ConsumerOffsetService
from triomq.broker.topics import TopicService
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["ConsumeStatsService"]

log = logging.getLogger("triomq.broker")


class ConsumeStatsService:
    """Answers GET_CONSUME_STATS from the broker's state when asked.

    ``confirmed()``: the confirm offset, which bounds the queues' ends.
    """

    def __init__(self, *, log: CommitLog, broker_name: str, topics: TopicService,
                 offsets: ConsumerOffsetService, clients: ClientService,
                 confirmed: Callable[[], int]) -> None:
        self.log = log
        self.broker_name = broker_name
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.confirmed = confirmed
        self.group_get_nums = GroupGetNums()

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.GET_CONSUME_STATS, self.get_consume_stats, inline=True)

    def got(self, group: str, topic: str, count: int) -> None:
        """A pull returned ``count`` messages of ``topic`` to ``group``."""
        self.group_get_nums.add(group, topic, count, trio.current_time())

    async def get_consume_stats(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        try:
            stats_request = parse_stats_header(request.ext_fields)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"GET_CONSUME_STATS: {exc}")
        group = stats_request.consumer_group
        online = self.clients.table.consumer_group(group)
        held = self.topics.table.configs()
        if stats_request.topic and stats_request.topic not in held:
            log.info("consume stats of group %s: topic %r is not on this broker, skipped",
                     group, stats_request.topic[:80])
        topics = topics_to_collect(
            stats_request, offset_topics=self.offsets.table.topics_of(group), held=held,
            subscribed=online.subscriptions.keys() if online is not None else ())
        try:
            stats = consume_stats(
                group, topics, broker_name=self.broker_name, store=self.log,
                offsets=self.offsets.table, confirm_offset=self.confirmed(),
                got=self.group_get_nums, now=trio.current_time())
        except (StoreError, OSError) as exc:
            log.error("consume stats of group %s failed: %s", group, exc)
            reason = errno.errorcode.get(getattr(exc, "errno", 0) or 0, type(exc).__name__)
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the store could not be read ({reason}); see the broker's log")
        return RemotingCommand.response(body=stats.encode())
