"""CONSUMER_SEND_MSG_BACK 36: a consumer's failed message back to its group's retry topic.

The driver of ``triomq.broker.secondary.core.send_back`` (the rules, refusals and the copy
are there): it finds the group (created as a heartbeat would create it),
creates the retry or dead-letter topic in the broker's table when missing,
reads the record at the header's ``offset`` from the commit log and puts
the copy through the broker's escape bridge, never into the log itself.
A stored copy is SUCCESS, even when its flush or replication timed out
(RocketMQ puts the copy without waiting for either); a refused put is
SYSTEM_ERROR with the put's remark.

Only a master takes a send-back: a slave answers SYSTEM_ERROR ``no master
available along with <ip>``, as a RocketMQ slave without an acting master
does; the consumer then retries the message itself.
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Callable

from triomq.broker.components import ComponentView
from triomq.broker.consume.core.subscription_groups import SubscriptionGroupConfig
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapeBridge
from triomq.broker.core.headers import HeaderError
from triomq.broker.metadata.core.topic_table import TopicRefused
from triomq.broker.metadata.topics import TopicService
from triomq.broker.secondary.core.send_back import (
    Refused,
    dlq_topic_config,
    group_refusal,
    no_record,
    parse_send_back_header,
    retry_topic_config,
    send_back,
    topic_refusal,
)
from triomq.clock import now_ms
from triomq.protocol.message import RecordError, decode
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.retry import PROPERTY_ORIGIN_MESSAGE_ID
from triomq.protocol.route import TopicConfig
from triomq.rpc import RpcConnection, RpcServer

__all__ = ["SendBackService"]

log = logging.getLogger("triomq.broker")


def _answer(refused: Refused) -> RemotingCommand:
    return RemotingCommand.response(refused.code, remark=refused.remark)


class SendBackService:
    """Serves CONSUMER_SEND_MSG_BACK on a master."""

    def __init__(self, *, find_group: Callable[[str], SubscriptionGroupConfig | None],
                 topics: TopicService, record_at: Callable[[int], bytes | None],
                 bridge: EscapeBridge, broker: ComponentView, broker_ip: str) -> None:
        self.find_group = find_group
        self.topics = topics
        self.record_at = record_at
        self.bridge = bridge
        self.broker = broker
        self.broker_ip = broker_ip

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.consumer_send_msg_back)

    def _topic(self, config: TopicConfig) -> TopicConfig | None:
        """The topic as held, created as ``config`` if missing (None: it cannot be)."""
        held = self.topics.table.get(config.topic_name)
        if held is not None:
            return held
        try:
            self.topics.table.update(config, now_ms(), system=True)
        except TopicRefused as exc:
            log.warning("topic %s not created for a send-back: %s", config.topic_name,
                        exc.remark)
            return None
        self.topics.changed()
        return config

    async def consumer_send_msg_back(self, request: RemotingCommand, peer: RpcConnection
                                     ) -> RemotingCommand:
        if not self.broker.is_master:
            return RemotingCommand.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"no master available along with {self.broker_ip}")
        try:
            header = parse_send_back_header(request.ext_fields)
        except HeaderError as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"CONSUMER_SEND_MSG_BACK: {exc}")
        group = self.find_group(header.group)
        refused = group_refusal(header, group)
        if refused is not None:
            return _answer(refused)
        assert group is not None  # group_refusal refuses an unknown group
        retry = retry_topic_config(header, group)
        refused = topic_refusal(retry.topic_name, self._topic(retry))
        if refused is not None:
            return _answer(refused)
        data = self.record_at(header.offset)
        try:
            record = decode(data, verify_crc=False)[0] if data is not None else None
        except (RecordError, struct.error):
            record = None
        if record is None:
            return _answer(no_record(header.offset))
        plan = send_back(header, record, group, request_version=request.version,
                         pick_queue=random.randrange)
        if plan.dead:
            dlq = dlq_topic_config(header)
            refused = topic_refusal(dlq.topic_name, self._topic(dlq))
            if refused is not None:
                return _answer(refused)
        result = await self.bridge.put_message(plan.message)
        if not result.stored:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, remark=result.remark)
        if plan.dead:
            log.info("message %s of group %s to its dead-letter queue after %d retries",
                     plan.message.properties.get(PROPERTY_ORIGIN_MESSAGE_ID), header.group,
                     record.reconsume_times)
        return RemotingCommand.response()
