"""Messages as a RocketMQ client knows them: sent, received, and where they go.

- ``Message``: what a producer sends (topic, body, tags, keys, user
  properties, delay level, flag). Tags, keys, the delay level and
  ``wait_store_msg_ok`` travel as RocketMQ's properties (``TAGS``, ``KEYS``
  space-separated, ``DELAY``, ``WAIT``); ``wire_properties`` builds them.
- ``MessageExt``: a message as a consumer receives it, with where and when
  it was stored.
- ``MessageQueue``: one queue of a topic on one broker group, ordered as
  RocketMQ's (topic, broker name, queue id).
- ``SendStatus`` / ``SendResult``: what a send answered.
- ``decode_messages``: a PULL_MESSAGE body (stored records back to back)
  into ``MessageExt``; ``encode_batch``: RocketMQ's SEND_BATCH_MESSAGE body.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping, Sequence

import attrs

from triomq.errors import TriomqError
from triomq.protocol.inflate import DEFAULT_MAX_BODY_SIZE, InflateError, producer_body
from triomq.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageRecord,
    RecordError,
    decode,
    pack_ip,
    properties_to_bytes,
)
from triomq.protocol.message_queue import MessageQueue

__all__ = [
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_MAX_OFFSET",
    "PROPERTY_MIN_OFFSET",
    "PROPERTY_TAGS",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "Message",
    "MessageDecodeError",
    "MessageExt",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "decode_messages",
    "encode_batch",
]

#: RocketMQ 5's absolute delivery time of a timer message (``Message.setDeliverTimeMs``).
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
_SYSTEM_PROPERTIES = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_DELAY, PROPERTY_WAIT,
                                PROPERTY_TIMER_DELIVER_MS})


class MessageDecodeError(TriomqError, ValueError):
    """A pulled body holds something that is not a message this client can read."""


def _keys(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    return tuple(value)


@attrs.define
class Message:
    """A message to send. ``keys`` may be one string (space-separated) or several.

    ``properties`` are the user's own; a name RocketMQ reserves (``TAGS``,
    ``KEYS``, ``DELAY``, ``WAIT``, ``TIMER_DELIVER_MS``) is set through the
    matching field. ``delay_time_level`` is sent as RocketMQ's ``DELAY``
    property: the broker holds the message back for that level's delay (its
    ``message_delay_level``, by default 1..18: 1s 5s 10s 30s 1m ... 2h; a
    higher level is the highest) and then delivers it to ``topic``; 0 sends
    it at once. ``deliver_time_ms`` (epoch ms, RocketMQ 5's
    ``setDeliverTimeMs``) is sent as ``TIMER_DELIVER_MS``: a timer message,
    which the broker's timer wheel delivers at or after that time (within its
    ``timer_precision_ms``), at most its ``timer_max_delay_sec`` (3 days by
    default) ahead; a time already past is delivered at once; 0: none. A
    delay level wins over it, as in RocketMQ.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    properties: dict[str, str] = attrs.field(factory=dict, converter=dict)
    delay_time_level: int = 0
    deliver_time_ms: int = 0
    flag: int = 0
    wait_store_msg_ok: bool = True

    def __attrs_post_init__(self) -> None:
        reserved = _SYSTEM_PROPERTIES & self.properties.keys()
        if reserved:
            raise ValueError(f"properties {sorted(reserved)} are set through Message's fields")

    def wire_properties(self) -> dict[str, str]:
        """Every property as it travels: the user's, then tags, keys, delay, delivery
        time, wait."""
        props = dict(self.properties)
        if self.tags is not None:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = " ".join(self.keys)
        if self.delay_time_level > 0:
            props[PROPERTY_DELAY] = str(self.delay_time_level)
        if self.deliver_time_ms > 0:
            props[PROPERTY_TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        if not self.wait_store_msg_ok:
            props[PROPERTY_WAIT] = "false"
        return props


@attrs.frozen
class MessageExt:
    """A received message: the sent fields, and where and when it was stored.

    ``msg_id`` is the producer's ``UNIQ_KEY`` when it set one (RocketMQ's
    ``MessageClientExt.getMsgId``), else ``offset_msg_id``, the store host
    and commit-log offset in hex. ``properties`` holds every property as
    stored, tags and keys included.
    """

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    offset_msg_id: str
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int = 0
    flag: int = 0
    sys_flag: int = 0
    broker_name: str = ""
    properties: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        return _keys(self.properties.get(PROPERTY_KEYS))

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


class SendStatus(enum.Enum):
    """How a stored message stands (RocketMQ's ``SendStatus``)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@attrs.frozen
class SendResult:
    """A stored message: its ids, queue and offset. For a batch, the ids are
    the messages' ids joined by commas and ``queue_offset`` is the first's."""

    send_status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int


def _offset_msg_id(host: tuple[str, int], physical_offset: int) -> str:
    return (pack_ip(host[0]) + struct.pack(">iq", host[1], physical_offset)).hex().upper()


def _body(record: MessageRecord, pos: int, max_body_size: int) -> bytes:
    where = (f"message at {pos} (topic {record.topic}, queue {record.queue_id}, offset "
             f"{record.queue_offset})")
    try:
        return producer_body(record.body, record.sys_flag, max_body_size, where)
    except InflateError as exc:
        raise MessageDecodeError(str(exc)) from None


def decode_messages(body: bytes, broker_name: str = "",
                    extra_properties: Mapping[str, str] | None = None, *,
                    max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> list[MessageExt]:
    """The messages of a PULL_MESSAGE body: stored records back to back, each with
    ``extra_properties`` added to its own.

    Compressed bodies (zlib, as RocketMQ's producers send bodies over 4 KiB)
    are inflated, to at most ``max_body_size`` bytes: a larger one raises
    ``MessageDecodeError`` naming the message, with no more of it inflated.
    Raises ``MessageDecodeError`` for anything else too.
    """
    out = []
    pos = 0
    view = memoryview(body)
    while pos < len(view):
        try:
            record, size = decode(view, pos, verify_crc=False)
        except RecordError as exc:
            raise MessageDecodeError(str(exc)) from None
        offset_id = _offset_msg_id(record.store_host, record.physical_offset)
        props = dict(record.properties)
        if extra_properties:
            props.update(extra_properties)
        out.append(MessageExt(
            topic=record.topic,
            body=_body(record, pos, max_body_size),
            queue_id=record.queue_id, queue_offset=record.queue_offset,
            commit_log_offset=record.physical_offset,
            msg_id=props.get(PROPERTY_UNIQ_KEY, offset_id), offset_msg_id=offset_id,
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            store_timestamp=record.store_timestamp, store_host=record.store_host,
            reconsume_times=record.reconsume_times, flag=record.flag,
            sys_flag=record.sys_flag, broker_name=broker_name, properties=props))
        pos += size
    return out


_BATCH_HEAD = struct.Struct(">iiiii")


def encode_batch(messages: Sequence[Message], unique_ids: Sequence[str]) -> bytes:
    """RocketMQ's batch body: per message ``totalSize | magic 0 | bodyCRC 0 | flag
    | bodyLength body | propertiesLength:2 properties``, each with its ``UNIQ_KEY``."""
    out = bytearray()
    for message, unique_id in zip(messages, unique_ids, strict=True):
        props = properties_to_bytes({**message.wire_properties(), PROPERTY_UNIQ_KEY: unique_id})
        size = _BATCH_HEAD.size + len(message.body) + 2 + len(props)
        out += _BATCH_HEAD.pack(size, 0, 0, message.flag, len(message.body))
        out += message.body
        out += struct.pack(">H", len(props))
        out += props
    return bytes(out)
