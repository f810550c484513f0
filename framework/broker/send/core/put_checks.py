"""What a put must pass before it is stored, and the records it stores (pure).

The rules of ``triomq.broker.send.core.put_flow``, each a refusal (a response with
RocketMQ's code and a remark naming the field, never a server path) or
None to go on:

- ``check_master``: only a master stores (SERVICE_NOT_AVAILABLE);
- ``check_size``: a body (or a whole batch) within ``max_message_size``
  (MESSAGE_ILLEGAL); ``inflates_too_large``: a zlib-compressed one
  inflating to no more;
- ``check_topic``: the topic as RocketMQ's send path checks it: a legal
  name (INVALID_PARAMETER), not one clients may not send to
  (NO_PERMISSION), known or created from the default topic
  (``auto_create_topic_enable``, while the broker holds fewer than
  ``auto_create_topic_limit`` topics; else TOPIC_NOT_EXIST), writable, and
  a queue id below its write queue count (MESSAGE_ILLEGAL);
- ``check_group``: a producer group, if named, by RocketMQ's group rules
  (INVALID_PARAMETER);
- ``check_in_sync``: a SyncStateSet at least ``min_in_sync_replicas``
  strong (SYSTEM_ERROR), checked before anything is stored so that a retry
  stores no duplicate.

``batch_records`` checks every message of a batch (its fields, its
properties with the header's added, its stored size within a commit-log
segment) before any is stored.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.headers import SendHeader
from triomq.broker.metadata.core.topic_table import TopicRefused, TopicTable
from triomq.broker.secondary.core.schedule_put import TimerSettings
from triomq.broker.send.core.batch import BatchError, decode_batch
from triomq.protocol import topic_rules
from triomq.protocol.inflate import InflateError, check_inflated_size
from triomq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    MIN_RECORD_SIZE,
    PROPERTY_CLUSTER,
    MessageRecord,
    RecordError,
    pack_ip,
    properties_to_bytes,
    zlib_compressed,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import PERM_WRITE
from triomq.protocol.topic_rules import AUTO_CREATE_TOPIC, NOT_ALLOWED_SEND_TOPICS, IllegalName

__all__ = [
    "UNKNOWN_HOST",
    "BrokerState",
    "PutSettings",
    "batch_records",
    "check_group",
    "check_in_sync",
    "check_master",
    "check_size",
    "check_topic",
    "host_port",
    "inflates_too_large",
]

UNKNOWN_HOST = ("0.0.0.0", 0)


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
        return UNKNOWN_HOST


@attrs.frozen
class PutSettings:
    """The broker's settings a put reads (``BrokerConfig``'s names; times in ms)."""

    broker_name: str
    cluster_name: str
    max_message_size: int
    min_in_sync_replicas: int
    auto_create_topic_enable: bool
    auto_create_topic_limit: int
    default_topic_queue_nums: int
    sync_flush_timeout: int
    #: The store's flush policy: ``"none"`` waits for no flush.
    flush_policy: str
    #: Where this broker stores: the records' store host and the offset ids' address.
    store_host: tuple[str, int]
    #: A commit-log segment's size: no record may be larger.
    segment_size: int
    #: Refuse half messages (rejectTransactionMessage).
    reject_transaction_message: bool = False
    #: How many levels ``message_delay_level`` has: a higher ``DELAY`` is the highest.
    max_delay_level: int = 18
    #: Timer messages: timer_wheel_enable, timer_max_delay_sec, timer_precision_ms.
    timer: TimerSettings = TimerSettings()


@attrs.frozen
class BrokerState:
    """The broker as a put sees it when it arrives."""

    #: This replica's id (the controllers' in controller mode), for refusals.
    broker_id: int
    #: ``BrokerRole``'s value (``"master"``, ``"slave"``...), for the refusal's remark.
    role: str
    is_master: bool
    #: How many replicas the master counts acks over (its effective SyncStateSet).
    in_sync_replicas: int
    #: A slave acting for its absent master (read-only, as its route says).
    acting: bool = False


def check_master(settings: PutSettings, broker: BrokerState) -> RemotingCommand | None:
    if broker.acting:
        return RemotingCommand.response(
            ResponseCode.NO_PERMISSION,
            remark=f"broker {settings.broker_name} id {broker.broker_id} acts read-only for "
                   f"its absent master: messages go to a group with a master")
    if not broker.is_master:
        return RemotingCommand.response(
            ResponseCode.SERVICE_NOT_AVAILABLE,
            remark=f"broker {settings.broker_name} id {broker.broker_id} is "
                   f"{broker.role}, not master: messages go to the master")
    return None


def check_size(settings: PutSettings, body_size: int) -> RemotingCommand | None:
    if body_size > settings.max_message_size:
        return RemotingCommand.response(
            ResponseCode.MESSAGE_ILLEGAL,
            remark=f"message body: {body_size} bytes exceed max_message_size "
                   f"{settings.max_message_size}")
    return None


def check_in_sync(settings: PutSettings, broker: BrokerState) -> RemotingCommand | None:
    if broker.in_sync_replicas < settings.min_in_sync_replicas:
        return RemotingCommand.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"in-sync replicas not enough: the SyncStateSet holds "
                   f"{broker.in_sync_replicas} of min_in_sync_replicas "
                   f"{settings.min_in_sync_replicas}; nothing was stored")
    return None


def check_group(producer_group: str) -> RemotingCommand | None:
    if producer_group:
        try:
            topic_rules.check_group(producer_group)
        except IllegalName as exc:
            return RemotingCommand.response(ResponseCode.INVALID_PARAMETER,
                                            remark=f"producerGroup: {exc}")
    return None


def check_topic(settings: PutSettings, table: TopicTable, topic: str, queue_id: int,
                fields: Mapping[str, str], now_ms: int) -> tuple[RemotingCommand | None, bool]:
    """RocketMQ's send-time topic checks: the refusal (or None to go on), and whether
    the topic was created from the default topic (the table changed)."""
    try:
        topic_rules.check_topic(topic)
    except IllegalName as exc:
        return RemotingCommand.response(ResponseCode.INVALID_PARAMETER, remark=str(exc)), False
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return RemotingCommand.response(
            ResponseCode.NO_PERMISSION,
            remark=f"Sending message to topic[{topic}] is forbidden."), False
    config = table.get(topic)
    created = False
    if config is None and settings.auto_create_topic_enable:
        if len(table) >= settings.auto_create_topic_limit:
            return RemotingCommand.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist and not created: the broker holds "
                       f"{len(table)} topics, its auto_create_topic_limit; apply first "
                       "please!"), False
        raw = fields.get("d", "")
        queue_nums = (int(raw) if raw.isdigit() and len(raw) < 6
                      else settings.default_topic_queue_nums)
        try:
            config = table.create_on_send(topic, fields.get("c") or AUTO_CREATE_TOPIC,
                                          queue_nums, now_ms)
        except TopicRefused as exc:
            return RemotingCommand.response(exc.code, remark=exc.remark), False
        created = config is not None
    if config is None:
        return RemotingCommand.response(
            ResponseCode.TOPIC_NOT_EXIST,
            remark=f"topic[{topic}] not exist, apply first please!"), created
    if not config.perm & PERM_WRITE:
        return RemotingCommand.response(
            ResponseCode.NO_PERMISSION,
            remark=f"the topic[{topic}] sending message is forbidden (perm {config.perm})"
        ), created
    if queue_id >= config.write_queue_nums:
        return RemotingCommand.response(
            ResponseCode.MESSAGE_ILLEGAL,
            remark=f"request queueId[{queue_id}] is illegal: topic {topic} has "
                   f"{config.write_queue_nums} write queues"), created
    return None, created


def inflates_too_large(settings: PutSettings, sys_flag: int, body: bytes) -> str | None:
    """Why a zlib-compressed body is refused: it inflates past ``max_message_size``
    (RocketMQ's producers check that size before they compress); None if it does
    not. A body too small to get there costs nothing; a larger one is inflated
    chunk by chunk, none of it kept, and no further than the limit."""
    if not zlib_compressed(sys_flag):
        return None
    try:
        check_inflated_size(body, settings.max_message_size, "the compressed message body")
    except InflateError as exc:
        return f"{exc} (max_message_size)"
    return None


def _stored_size(record: MessageRecord, properties: bytes) -> int:
    """The size of ``record`` in the commit log (``message.encode``'s arithmetic)."""
    topic = len(record.topic.encode())
    hosts = sum(12 for host in (record.born_host, record.store_host)
                if len(pack_ip(host[0])) == 16)
    return (MIN_RECORD_SIZE + hosts + len(record.body) + topic + (1 if topic > 127 else 0)
            + len(properties))


def batch_records(settings: PutSettings, header: SendHeader, body: bytes,
                  born_host: tuple[str, int], store_timestamp: int) -> list[MessageRecord]:
    """The records of a batch, every one checked; ``BatchError`` names a bad one.

    They take the header's topic, queue, sysFlag, born time and reconsume
    times, each its own flag, body and properties (the header's added, the
    message's own winning: a Java client puts the batch's UNIQ_KEY there,
    each message its own), and the cluster name as ``CLUSTER``.
    """
    records = []
    for index, message in enumerate(decode_batch(body)):
        properties = {**header.properties, **message.properties,
                      PROPERTY_CLUSTER: settings.cluster_name}
        record = MessageRecord(
            topic=header.topic, body=message.body, queue_id=header.queue_id,
            flag=message.flag, sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp, born_host=born_host,
            store_timestamp=store_timestamp, store_host=settings.store_host,
            reconsume_times=header.reconsume_times,
            properties=properties)  # type: ignore[arg-type]  # attrs types dict() as overloads
        too_large = inflates_too_large(settings, header.sys_flag, message.body)
        if too_large is not None:
            raise BatchError(index, message.position, "body", too_large)
        try:
            raw = properties_to_bytes(properties)
        except RecordError as exc:
            raise BatchError(index, message.position, "properties", exc.reason) from None
        if len(raw) > MAX_PROPERTIES_LENGTH:
            raise BatchError(index, message.position, "properties",
                             f"{len(raw)} bytes with the header's, at most "
                             f"{MAX_PROPERTIES_LENGTH}")
        size = _stored_size(record, raw)
        if size > settings.segment_size:
            raise BatchError(index, message.position, "body",
                             f"the stored message would take {size} bytes, more than a "
                             f"commit-log segment ({settings.segment_size})")
        records.append(record)
    return records
