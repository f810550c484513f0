"""Who consumes what, how far, and how fast topics fill: the admin tool's stats at run time.

- GET_CONSUME_STATS (208): a group's offsets and rate, by the rules and the
  table of ``triomq.broker.admin.core.consume_stats``; ``got`` is called by the pull
  handler for every FOUND pull and counts its messages at
  ``trio.current_time()``.
- GET_TOPIC_STATS_INFO (202): a topic's queues and put rate, by
  ``triomq.broker.admin.core.topic_stats``'s rules (the rate from ``StoreStats``).
- GET_BROKER_CONSUME_STATS (317, ``mqadmin brokerConsumeStats``): every
  subscription group's stats per topic, by ``broker_consume_stats``'s rules,
  as a ``ConsumeStatsList`` naming this broker's address.
- QUERY_TOPIC_CONSUME_BY_WHO (300): the groups whose online consumers
  subscribe to the topic and those that stored offsets for it, as a
  ``GroupList`` (RocketMQ 5.3.3 means the same, but its table of online
  subscribers records topic names where it means groups).
- VIEW_BROKER_STATS_DATA (315, ``mqadmin statsAll``): one named statistic of
  one key over the last minute, hour and day, by
  ``triomq.broker.admin.core.stats_items``'s rules, sampled by ``sample``
  on a monotonic clock. A statistic not kept, or a key that counted nothing
  lately, is SYSTEM_ERROR, as RocketMQ answers a key it has no item for.

This reads the broker's topics, offsets, online consumers and commit log
when asked. A missing header field is INVALID_PARAMETER naming it (RocketMQ
would fail the decoding with SYSTEM_ERROR); a store that cannot be read is
SYSTEM_ERROR, its own words staying in the broker's log.
"""

from __future__ import annotations

import errno
import logging
import math
from collections.abc import Collection

import trio

from triomq.broker.admin.core.consume_stats import (
    broker_consume_stats,
    consume_stats,
    consume_stats_list,
    parse_stats_header,
    topics_to_collect,
)
from triomq.broker.admin.core.minute_counts import MinuteCounts, stats_key
from triomq.broker.admin.core.stats_items import KEPT
from triomq.broker.admin.core.store_stats import StoreStats
from triomq.broker.admin.core.topic_stats import topic_stats
from triomq.broker.components import ComponentView
from triomq.broker.consume.clients import ClientService
from triomq.broker.consume.core.connection_bodies import group_list
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import HeaderError
from triomq.broker.metadata.topics import TopicService
from triomq.protocol.header_fields import HeaderFieldError, HeaderFields
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer
from triomq.store import CommitLog, StoreError

__all__ = ["ConsumeStatsService"]

log = logging.getLogger("triomq.broker")


class ConsumeStatsService:
    """Answers the stats requests from the broker's state when asked.

    ``broker``: its confirm offset bounds the queues' ends;
    ``store_stats``: the broker's message counters; ``broker_addr``: the
    broker's ``host:port`` as clients reach it.
    """

    def __init__(self, *, log: CommitLog, broker_name: str, topics: TopicService,
                 offsets: ConsumerOffsetService, clients: ClientService,
                 broker: ComponentView, store_stats: StoreStats,
                 broker_addr: str = "") -> None:
        self.log = log
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.broker = broker
        self.store_stats = store_stats
        #: Messages FOUND pulls returned, by ``topic@group`` (RocketMQ's GROUP_GET_NUMS).
        self.group_get_nums = MinuteCounts()

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.GET_CONSUME_STATS, self.get_consume_stats, inline=True)
        server.register(RequestCode.GET_TOPIC_STATS_INFO, self.get_topic_stats, inline=True)
        server.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.query_consumed_by,
                        inline=True)
        server.register(RequestCode.GET_BROKER_CONSUME_STATS, self.get_broker_consume_stats,
                        inline=True)
        server.register(RequestCode.VIEW_BROKER_STATS_DATA, self.view_broker_stats,
                        inline=True)

    async def sample(self) -> None:
        """Sample the named statistics when due, until cancelled."""
        items = self.store_stats.items
        while True:
            # Rounded up: woken at a deadline, the clock's milliseconds reach it.
            due_ms = items.tick(math.ceil(trio.current_time() * 1000))
            await trio.sleep_until(due_ms / 1000)

    def got(self, group: str, topic: str, count: int) -> None:
        """A pull returned ``count`` messages of ``topic`` to ``group``."""
        self.group_get_nums.add(stats_key(topic, group), count, trio.current_time())

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
                offsets=self.offsets.table, confirm_offset=self.broker.confirm_offset,
                got=self.group_get_nums, now=trio.current_time())
        except (StoreError, OSError) as exc:
            log.error("consume stats of group %s failed: %s", group, exc)
            return _store_failure(exc)
        return RemotingCommand.response(body=stats.encode())

    async def get_topic_stats(self, request: RemotingCommand, peer: RpcConnection
                              ) -> RemotingCommand:
        try:
            topic = HeaderFields(request.ext_fields, "GET_TOPIC_STATS_INFO").string("topic")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        config = self.topics.table.get(topic)
        if config is None:
            return RemotingCommand.response(ResponseCode.TOPIC_NOT_EXIST,
                                            remark=f"topic[{topic[:200]}] not exist")
        try:
            table = topic_stats(config, broker_name=self.broker_name, store=self.log,
                                confirm_offset=self.broker.confirm_offset,
                                put_tps=self.store_stats.topic_put_tps(
                                    topic, trio.current_time()))
        except (StoreError, OSError) as exc:
            log.error("topic stats of %s failed: %s", topic, exc)
            return _store_failure(exc)
        return RemotingCommand.response(body=table.encode())

    async def get_broker_consume_stats(self, request: RemotingCommand, peer: RpcConnection
                                       ) -> RemotingCommand:
        try:
            order_only = HeaderFields(request.ext_fields, "GET_BROKER_CONSUME_STATS").boolean(
                "isOrder")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))

        def subscribed(group: str) -> Collection[str]:
            online = self.clients.table.consumer_group(group)
            return online.subscriptions.keys() if online is not None else ()

        try:
            stats = broker_consume_stats(
                self.clients.groups.configs(), held=self.topics.table.configs(),
                subscribed=subscribed, order_only=order_only, broker_name=self.broker_name,
                store=self.log, offsets=self.offsets.table,
                confirm_offset=self.broker.confirm_offset,
                got=self.group_get_nums, now=trio.current_time())
        except (StoreError, OSError) as exc:
            log.error("consume stats of the broker failed: %s", exc)
            return _store_failure(exc)
        return RemotingCommand.response(body=consume_stats_list(self.broker_addr, stats))

    async def query_consumed_by(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        try:
            topic = HeaderFields(request.ext_fields, "QUERY_TOPIC_CONSUME_BY_WHO").string("topic")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        groups = self.clients.table.groups_subscribing(topic) | self.offsets.table.groups_of(topic)
        return RemotingCommand.response(body=group_list(groups))

    async def view_broker_stats(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        fields = HeaderFields(request.ext_fields, "VIEW_BROKER_STATS_DATA")
        try:
            name, key = fields.string("statsName"), fields.string("statsKey")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if name not in KEPT:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"The stats <{name[:80]}> are not kept by this broker "
                       f"(it keeps {', '.join(KEPT)})")
        data = self.store_stats.items.view(name, key)
        if data is None:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, remark=f"The stats <{name}> <{key[:200]}> not exist")
        return RemotingCommand.response(body=data.encode())


def _store_failure(exc: StoreError | OSError) -> RemotingCommand:
    reason = errno.errorcode.get(getattr(exc, "errno", 0) or 0, type(exc).__name__)
    return RemotingCommand.response(
        ResponseCode.SYSTEM_ERROR,
        remark=f"the store could not be read ({reason}); see the broker's log")
