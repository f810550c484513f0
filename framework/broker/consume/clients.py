"""The broker's clients at run time: heartbeats, consumer lists, subscription groups.

``ClientService`` drives the pure ``ClientTable`` and
``SubscriptionGroupTable`` and serves:

- HEART_BEAT 34 (body ``HeartbeatData``): registers the client's producer
  and consumer groups on the connection it came by; a consumer group's
  config is found or created (``auto_create_subscription_group``, while the
  broker holds fewer than ``auto_create_subscription_group_limit`` groups) and, on
  the master, its retry topic ``%RETRY%<group>`` created (RocketMQ's
  ``createTopicInSendMessageBackMethod``);
- UNREGISTER_CLIENT 35 (``clientID``, ``producerGroup``, ``consumerGroup``);
- GET_CONSUMER_LIST_BY_GROUP 38 (``consumerGroup``): body
  ``{"consumerIdList": [...]}``, SYSTEM_ERROR "no consumer for this group"
  when none is connected, as RocketMQ answers;
- GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201: ``subscriptionGroup.json``;
- GET_CONSUMER_CONNECTION_LIST 203 (``consumerGroup``) and
  GET_PRODUCER_CONNECTION_LIST 204 (``producerGroup``): the group's
  connections (``triomq.broker.consume.core.connection_bodies``), with the address,
  language and version each client's heartbeat came with; a consumer group
  with no consumer connected is CONSUMER_NOT_ONLINE, a producer group with
  none SYSTEM_ERROR, as RocketMQ answers;
- GET_CONSUMER_RUNNING_INFO 307 (``consumerGroup``, ``clientId``): passed
  on to that client's connection, its answer relayed, by the rules of
  ``triomq.broker.consume.core.consumer_calls`` (``mqadmin consumerStatus``);
- CONSUME_MESSAGE_DIRECTLY 309 (``consumerGroup``, ``clientId``, ``msgId``):
  the same, with the stored message as the body (``mqadmin queryMsgById
  -g -d``); an admin request (the node's admin access guards it). No
  record at the id's offset is SYSTEM_ERROR "can not find message by the
  offset, N", as VIEW_MESSAGE_BY_ID answers;
- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200 (body: a
  ``SubscriptionGroupConfig``) and DELETE_SUBSCRIPTIONGROUP 207
  (``groupName``; ``cleanOffset``, or RocketMQ 4's ``removeOffset``, also
  drops the group's consumer offsets): admin requests (the node's admin
  access guards them), taken on any replica as RocketMQ's broker takes
  them (RocketMQ 5's admin tool may address any replica); a slave's change
  lasts until its next copy of its master's groups puts the master's table
  back, and the offsets it dropped come back with the master's.

When a consumer group's membership or subscriptions change (a heartbeat, an
unregistration, a closed connection, a client silent for
``channel_expired_timeout``, checked every ``SCAN_INTERVAL`` as RocketMQ's
``ClientHousekeepingService`` does) the group's connections get
NOTIFY_CONSUMER_IDS_CHANGED (oneway, header ``consumerGroup``) unless
``notify_consumer_ids_changed_enable`` or the group's own flag is off.
An expired client's connection is closed, as RocketMQ closes its channel.

``config/subscriptionGroup.json`` is written after every change (a
temporary file renamed into place, the previous one kept as ``.bak``); a
slave copies its master's table every ``slave_synchronize_period``.

A bad request body or header is INVALID_PARAMETER with a remark naming the
field (RocketMQ would fail the decoding with SYSTEM_ERROR); so is a group
config with an illegal name or attributes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

import trio

from triomq.broker.components import ComponentView
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.core.client_table import ClientOrigin, ClientTable
from triomq.broker.consume.core.connection_bodies import consumer_connection, producer_connection
from triomq.broker.consume.core.consumer_calls import (
    CALL_TIMEOUT,
    CallRefused,
    ConsumerCall,
    call_failed,
    call_timed_out,
    consumer_to_call,
    direct_consume_fields,
    parse_consumer_call,
)
from triomq.broker.consume.core.subscription_groups import (
    AttributeRefused,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
)
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import HeaderError, parse_offset_msg_id
from triomq.broker.metadata import config_files
from triomq.broker.metadata.core.topic_table import TopicRefused
from triomq.broker.metadata.topics import TopicService
from triomq.clock import now_ms
from triomq.protocol.header_fields import HeaderFieldError, HeaderFields
from triomq.protocol.heartbeat import (
    BodyError,
    HeartbeatData,
    SubscriptionData,
    parse_heartbeat,
    parse_json_body,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import PERM_READ, PERM_WRITE, RouteDataError, TopicConfig, dumps
from triomq.protocol.topic_rules import RETRY_GROUP_TOPIC_PREFIX, IllegalName, check_group
from triomq.rpc import RpcClient, RpcConnection, RpcError, RpcServer, RpcTimeout

__all__ = ["SCAN_INTERVAL", "SUBSCRIPTION_GROUP_FILE", "ClientService",
           "load_subscription_groups"]

log = logging.getLogger("triomq.broker")

SUBSCRIPTION_GROUP_FILE = os.path.join("config", "subscriptionGroup.json")
#: Seconds between scans for silent clients (RocketMQ's ClientHousekeepingService: 10 s).
SCAN_INTERVAL = 10.0
#: Seconds a notification may take to be written before it is given up.
NOTIFY_TIMEOUT = 3.0


def load_subscription_groups(root: str, now_ms: int) -> SubscriptionGroupTable:
    """The table in ``<root>/config/subscriptionGroup.json`` (or its ``.bak``), else a new one."""
    table = config_files.load(root, SUBSCRIPTION_GROUP_FILE, SubscriptionGroupTable.decode)
    return table if table is not None else SubscriptionGroupTable.with_system_groups(now_ms)


def _save(root: str, data: bytes) -> None:
    config_files.save(root, SUBSCRIPTION_GROUP_FILE, data)


class ClientService:
    """The broker's clients, its consumer-group configs and their requests."""

    def __init__(self, root: str, config: BrokerConfig, groups: SubscriptionGroupTable,
                 topics: TopicService, *, broker: ComponentView) -> None:
        self.root = root
        self.config = config
        self.groups = groups
        #: Heartbeats' groups not created for auto_create_subscription_group_limit so far.
        self.groups_refused = 0
        self.topics = topics
        self.broker = broker
        self.table = ClientTable(config.channel_expired_timeout)
        #: Drops a group's consumer offsets; whether it had any (set by the broker).
        self.remove_offsets: Callable[[str], bool] = lambda group: False
        #: The stored bytes of the record at a commit-log offset, None if no record
        #: starts there (set by the broker).
        self.record_at: Callable[[int], bytes | None] = lambda offset: None
        self._nursery: trio.Nursery | None = None
        self._dirty = config_files.Changes()
        self._saved = groups.encode()

    # -- what the pull handler reads ------------------------------------------

    def group_known(self, group: str) -> bool:
        """Whether a consumer of ``group`` is connected."""
        return self.table.group_known(group)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """``group``'s subscription to ``topic`` as its consumers declared it."""
        return self.table.subscription(group, topic)

    # -- wiring ----------------------------------------------------------------

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heart_beat, inline=True)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client, inline=True)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list,
                        inline=True)
        server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                        self.get_all_subscription_groups, inline=True)
        server.register(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                        self.get_consumer_connections, inline=True)
        server.register(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                        self.get_producer_connections, inline=True)
        # Not inline: it waits for the client's answer.
        server.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self.call_consumer)
        server.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_message_directly)
        server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                        self.update_subscription_group, inline=True)
        server.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_subscription_group,
                        inline=True)
        server.on_connection_closed.append(self.connection_closed)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Scan for silent clients, send notifications, save the groups."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._scan_loop)
            nursery.start_soon(self._persist_loop)
            task_status.started()

    # -- handlers ----------------------------------------------------------------

    async def heart_beat(self, request: RemotingCommand, peer: RpcConnection
                         ) -> RemotingCommand:
        try:
            heartbeat = parse_heartbeat(request.body)
        except BodyError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"HEART_BEAT: {exc}")
        self._configure_groups(heartbeat)
        origin = ClientOrigin(peer.peer, request.language, request.version)
        self._notify(self.table.heartbeat(peer, heartbeat, now_ms(), origin))
        return RemotingCommand.response()

    def may_create_group(self) -> bool:
        """Whether a consumer may create one more subscription group: with
        ``auto_create_subscription_group``, below ``auto_create_subscription_group_limit``."""
        return (self.config.auto_create_subscription_group
                and len(self.groups) < self.config.auto_create_subscription_group_limit)

    def find_group(self, group: str) -> SubscriptionGroupConfig | None:
        """``group``'s config, created with the defaults when a consumer may create one
        (RocketMQ's ``findSubscriptionGroupConfig``)."""
        config, created = self.groups.find(group, auto_create=self.may_create_group(),
                                           now=now_ms())
        if created:
            self._dirty.set()
        return config

    def _configure_groups(self, heartbeat: HeartbeatData) -> None:
        now = now_ms()
        for consumer in heartbeat.consumers:
            config, created = self.groups.find(
                consumer.group_name, auto_create=self.may_create_group(), now=now)
            if created:
                self._dirty.set()
            elif config is None and self.config.auto_create_subscription_group:
                self.groups_refused += 1
                if self.groups_refused & (self.groups_refused - 1) == 0:  # 1st, 2nd, 4th...
                    log.warning("consumer group %s not created: the broker holds %d groups, "
                                "its auto_create_subscription_group_limit (%d refused so far)",
                                consumer.group_name, len(self.groups), self.groups_refused)
            if config is not None and self.broker.is_master:
                retry = RETRY_GROUP_TOPIC_PREFIX + consumer.group_name
                if retry in self.topics.table:
                    continue
                nums = max(1, config.retry_queue_nums)
                try:
                    self.topics.table.update(TopicConfig(retry, nums, nums,
                                                         PERM_READ | PERM_WRITE),
                                             now, system=True)
                except TopicRefused as exc:
                    log.warning("retry topic of consumer group %s not created: %s",
                                consumer.group_name, exc.remark)
                    continue
                self.topics.changed()

    async def unregister_client(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        try:
            HeaderFields(request.ext_fields, "UNREGISTER_CLIENT").string("clientID")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        fields = request.ext_fields
        self._notify(self.table.unregister(peer, fields.get("producerGroup"),
                                           fields.get("consumerGroup")))
        return RemotingCommand.response()

    async def get_consumer_list(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        try:
            group = HeaderFields(request.ext_fields, "GET_CONSUMER_LIST_BY_GROUP").string(
                "consumerGroup")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        ids = self.table.consumer_ids(group)
        if not ids:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {group[:200]}")
        return RemotingCommand.response(body=dumps({"consumerIdList": ids}))

    async def get_all_subscription_groups(self, request: RemotingCommand, peer: RpcConnection
                                          ) -> RemotingCommand:
        return RemotingCommand.response(body=self.groups.encode())

    async def get_consumer_connections(self, request: RemotingCommand, peer: RpcConnection
                                       ) -> RemotingCommand:
        try:
            group = HeaderFields(request.ext_fields, "GET_CONSUMER_CONNECTION_LIST").string(
                "consumerGroup")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        info = self.table.consumer_group(group)
        if info is None:
            return RemotingCommand.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark=f"the consumer group[{group[:200]}] not online")
        return RemotingCommand.response(body=consumer_connection(info))

    async def get_producer_connections(self, request: RemotingCommand, peer: RpcConnection
                                       ) -> RemotingCommand:
        try:
            group = HeaderFields(request.ext_fields, "GET_PRODUCER_CONNECTION_LIST").string(
                "producerGroup")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        channels = self.table.producer_channels(group)
        if channels is None:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, remark=f"the producer group[{group[:200]}] not exist")
        return RemotingCommand.response(body=producer_connection(channels))

    async def call_consumer(self, request: RemotingCommand, peer: RpcConnection
                            ) -> RemotingCommand:
        """Pass the request on to the consumer it names and relay its answer."""
        try:
            call = parse_consumer_call(request.ext_fields, RequestCode(request.code).name)
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        return await self._relay(call, request.code, request.ext_fields, request.body)

    async def consume_message_directly(self, request: RemotingCommand, peer: RpcConnection
                                       ) -> RemotingCommand:
        """Have the consumer named consume the message named; relay its answer."""
        what = "CONSUME_MESSAGE_DIRECTLY"
        fields = request.ext_fields
        try:
            call = parse_consumer_call(fields, what)
            _, offset = parse_offset_msg_id(HeaderFields(fields, what).string("msgId"))
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"{what}: {exc}")
        record = self.record_at(offset)
        if record is None:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}")
        topic = self.topics.table.get(fields.get("topic") or "")
        group = self.groups.get(call.group)
        passed = direct_consume_fields(
            fields, broker_name=self.config.broker_name,
            topic_sys_flag=topic.topic_sys_flag if topic is not None else None,
            group_sys_flag=group.group_sys_flag if group is not None else None)
        return await self._relay(call, request.code, passed, record)

    async def _relay(self, call: ConsumerCall, code: int, fields: Mapping[str, str],
                     body: bytes) -> RemotingCommand:
        """Pass a request on to the consumer ``call`` names; its answer, or why none."""
        target = consumer_to_call(self.table, call)
        if isinstance(target, CallRefused):
            return RemotingCommand.response(target.code, remark=target.remark)
        assert isinstance(target, RpcConnection)  # heartbeats register their connection
        try:
            return await target.invoke(code, fields, body, timeout=CALL_TIMEOUT)
        except RpcTimeout as exc:
            refused = call_timed_out(call, str(exc))
        except RpcError as exc:
            refused = call_failed(call, str(exc))
        return RemotingCommand.response(refused.code, remark=refused.remark)

    async def update_subscription_group(self, request: RemotingCommand, peer: RpcConnection
                                        ) -> RemotingCommand:
        what = "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP"
        try:
            config = SubscriptionGroupConfig.from_json(parse_json_body(request.body), "body")
            check_group(config.group_name)
            stored = self.groups.update(config, now_ms())
        except (BodyError, RouteDataError, IllegalName, AttributeRefused) as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"{what}: {exc}")
        log.info("subscription group %s created or updated by %s", stored.group_name, peer.peer)
        self._dirty.set()
        return RemotingCommand.response()

    async def delete_subscription_group(self, request: RemotingCommand, peer: RpcConnection
                                        ) -> RemotingCommand:
        what = "DELETE_SUBSCRIPTIONGROUP"
        try:
            header = HeaderFields(request.ext_fields, what)
            group = header.string("groupName")
            clean = header.boolean("cleanOffset") or header.boolean("removeOffset")
        except HeaderFieldError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if self.groups.delete(group, now_ms()):
            log.info("subscription group %s deleted by %s", group, peer.peer)
            self._dirty.set()
        if clean and self.remove_offsets(group):
            log.info("consumer offsets of group %s removed by %s", group, peer.peer)
        return RemotingCommand.response()

    # -- membership changes ------------------------------------------------------

    def connection_closed(self, connection: RpcConnection) -> None:
        self._notify(self.table.connection_closed(connection))

    def _notify(self, groups: list[str]) -> None:
        """Tell each changed group's connections to rebalance."""
        if not groups or not self.config.notify_consumer_ids_changed_enable:
            return
        for group in groups:
            config = self.groups.get(group)
            if config is not None and not config.notify_consumer_ids_changed_enable:
                continue
            for channel in self.table.consumer_channels(group):
                if self._nursery is not None and isinstance(channel, RpcConnection):
                    self._nursery.start_soon(self._send_notification, channel, group)

    async def _send_notification(self, connection: RpcConnection, group: str) -> None:
        try:
            await connection.invoke_oneway(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                           {"consumerGroup": group}, timeout=NOTIFY_TIMEOUT)
        except RpcError as exc:
            log.info("notifying %s of a change in consumer group %s failed: %s",
                     connection.peer, group, exc)

    async def _scan_loop(self) -> None:
        while True:
            await trio.sleep(SCAN_INTERVAL)
            expired = self.table.expire(now_ms())
            for channel in expired.channels:
                log.warning("client connection %s sent no heartbeat for %d ms: closed",
                            getattr(channel, "peer", channel), self.config.channel_expired_timeout)
                if isinstance(channel, RpcConnection) and self._nursery is not None:
                    self._nursery.start_soon(channel.aclose)
            self._notify(expired.changed_groups)

    # -- subscriptionGroup.json -------------------------------------------------

    def save(self) -> None:
        """Write the table if it differs from what was last written (blocking)."""
        data = self.groups.encode()
        if data != self._saved:
            _save(self.root, data)
            self._saved = data

    async def _persist_loop(self) -> None:
        await self._dirty.write_each(self.save)

    async def copy_from_master(self, rpc: RpcClient) -> None:
        """A slave-term task: take the master's groups every ``slave_synchronize_period``."""

        def adopt(master: SubscriptionGroupTable) -> None:
            if self.groups.adopt(master):
                self._dirty.set()

        await config_files.copy_from_master(
            what="subscription groups", code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            decode=SubscriptionGroupTable.decode, adopt=adopt, rpc=rpc,
            broker=self.broker,
            period_ms=self.config.slave_synchronize_period)
