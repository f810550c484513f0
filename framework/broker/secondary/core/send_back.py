"""CONSUMER_SEND_MSG_BACK's rules: where a message a consumer failed goes, and as what. Pure.

A consumer that failed a message (its listener answered ``RECONSUME_LATER``)
sends it back: header ``ConsumerSendMsgBackRequestHeader`` with ``offset``
(the failed record's commit-log offset), ``group``, ``delayLevel``,
``originMsgId``, ``originTopic``, ``unitMode``, ``maxReconsumeTimes``.
RocketMQ's ``consumerSendMsgBack`` rules, in its order:

- the group must be known (SUBSCRIPTION_GROUP_NOT_EXIST); a group with no
  retry queue (``retryQueueNums`` 0) drops the message: SUCCESS, nothing stored;
- the retry topic ``%RETRY%<group>`` is created if missing, with the
  group's ``retryQueueNums`` queues, read and write (``unitMode``: the
  unit-subscription topic flag); one that cannot be is SYSTEM_ERROR
  ``topic[...] not exist``, one not writeable NO_PERMISSION;
- no record at ``offset`` is SYSTEM_ERROR ``look message by offset failed, N``;
- the copy goes to the dead-letter topic ``%DLQ%<group>`` (created with
  ``DLQ_NUMS_PER_GROUP`` queue, read and write, as RocketMQ 4.8+ creates it)
  with delay level 0 when the record was already reconsumed
  ``maxReconsumeTimes`` times (the header's, from clients of 3.4.9 on, else
  the group's ``retryMaxTimes``) or ``delayLevel`` is negative; else to a
  random queue of the retry topic with delay level ``delayLevel``, or
  ``3 + reconsumeTimes`` when that is 0 (the ``DELAY`` property: the put
  schedules it);
- the copy keeps the record's body, flag, properties, sysFlag, born time and
  host, with ``RETRY_TOPIC`` = the record's topic unless set already,
  ``ORIGIN_MESSAGE_ID`` = the first failed record's offset message id (kept
  from its first copy), ``WAIT`` false and reconsume times one higher.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from triomq.broker.consume.core.subscription_groups import SubscriptionGroupConfig
from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.core.headers import HeaderError, java_integer, offset_msg_id
from triomq.protocol.message import PROPERTY_DELAY, PROPERTY_WAIT, MessageRecord
from triomq.protocol.retry import (
    DLQ_NUMS_PER_GROUP,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    dlq_topic,
    retry_topic,
)
from triomq.protocol.route import PERM_READ, PERM_WRITE, TopicConfig

__all__ = [
    "MAX_RECONSUME_TIMES_VERSION",
    "Refused",
    "SendBack",
    "SendBackHeader",
    "dlq_topic_config",
    "group_refusal",
    "no_record",
    "parse_send_back_header",
    "retry_topic_config",
    "send_back",
    "topic_refusal",
]

#: RocketMQ 3.4.9's version ordinal: from it on the header's maxReconsumeTimes counts.
MAX_RECONSUME_TIMES_VERSION = 121
#: TopicSysFlag's unit-subscription bit (``buildSysFlag(false, true)``).
_FLAG_UNIT_SUB = 0x2
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


@attrs.frozen
class SendBackHeader:
    """``ConsumerSendMsgBackRequestHeader``."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None

    def to_fields(self) -> dict[str, str]:
        """The header's ``extFields``, as a Java client writes them."""
        fields = {"offset": str(self.offset), "group": self.group,
                  "delayLevel": str(self.delay_level),
                  "unitMode": "true" if self.unit_mode else "false"}
        for key, value in (("originMsgId", self.origin_msg_id),
                           ("originTopic", self.origin_topic),
                           ("maxReconsumeTimes", self.max_reconsume_times)):
            if value is not None:
                fields[key] = str(value)
        return fields


@attrs.frozen
class Refused:
    """An answer that stores nothing: RocketMQ's code and remark."""

    code: int
    remark: str | None = None


@attrs.frozen
class SendBack:
    """The copy to put, and whether it is a dead letter."""

    message: EscapedMessage
    dead: bool


def _required(fields: Mapping[str, str], key: str, bounds: tuple[int, int]) -> int:
    value = java_integer(fields, key, bounds)
    if value is None:
        raise HeaderError(key, "missing")
    return value


def parse_send_back_header(fields: Mapping[str, str]) -> SendBackHeader:
    """The header in ``fields``; ``HeaderError`` names a missing or malformed field."""
    group = fields.get("group")
    if not group:
        raise HeaderError("group", "missing or empty")
    unit_mode = fields.get("unitMode", "false")
    if unit_mode.lower() not in ("true", "false"):
        raise HeaderError("unitMode", f"expected true or false, got {unit_mode[:40]!r}")
    return SendBackHeader(
        offset=_required(fields, "offset", _INT64), group=group,
        delay_level=_required(fields, "delayLevel", _INT32),
        origin_msg_id=fields.get("originMsgId"), origin_topic=fields.get("originTopic"),
        unit_mode=unit_mode.lower() == "true",
        max_reconsume_times=java_integer(fields, "maxReconsumeTimes", _INT32))


def group_refusal(header: SendBackHeader, config: SubscriptionGroupConfig | None
                  ) -> Refused | None:
    """Why the group takes nothing back (SUCCESS: it keeps no retry queue), or None."""
    if config is None:
        return Refused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                       f"subscription group not exist, {header.group[:200]}")
    if config.retry_queue_nums <= 0:
        return Refused(ResponseCode.SUCCESS)
    return None


def retry_topic_config(header: SendBackHeader, config: SubscriptionGroupConfig) -> TopicConfig:
    """The retry topic a send-back creates when it is missing."""
    nums = config.retry_queue_nums
    return TopicConfig(retry_topic(header.group), nums, nums, PERM_READ | PERM_WRITE,
                       topic_sys_flag=_FLAG_UNIT_SUB if header.unit_mode else 0)


def dlq_topic_config(header: SendBackHeader) -> TopicConfig:
    """The dead-letter topic a send-back creates when it is missing."""
    return TopicConfig(dlq_topic(header.group), DLQ_NUMS_PER_GROUP, DLQ_NUMS_PER_GROUP,
                       PERM_READ | PERM_WRITE)


def topic_refusal(topic: str, config: TopicConfig | None) -> Refused | None:
    """Why a copy cannot go to ``topic`` (held as ``config``, None: not created), or None."""
    if config is None:
        return Refused(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] not exist")
    if not config.perm & PERM_WRITE:
        return Refused(ResponseCode.NO_PERMISSION,
                       f"the topic[{topic}] sending message is forbidden")
    return None


def no_record(offset: int) -> Refused:
    return Refused(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")


def send_back(header: SendBackHeader, record: MessageRecord, config: SubscriptionGroupConfig,
              *, request_version: int, pick_queue: Callable[[int], int]) -> SendBack:
    """The copy of ``record`` the send-back puts; ``pick_queue(n)`` picks one of ``n`` queues."""
    max_times = config.retry_max_times
    if request_version >= MAX_RECONSUME_TIMES_VERSION and header.max_reconsume_times is not None:
        max_times = header.max_reconsume_times
    properties = dict(record.properties)
    properties.setdefault(PROPERTY_RETRY_TOPIC, record.topic)
    properties[PROPERTY_WAIT] = "false"
    dead = record.reconsume_times >= max_times or header.delay_level < 0
    if dead:
        topic, queue_id, delay_level = dlq_topic(header.group), pick_queue(DLQ_NUMS_PER_GROUP), 0
    else:
        topic, queue_id = retry_topic(header.group), pick_queue(config.retry_queue_nums)
        delay_level = header.delay_level or 3 + record.reconsume_times
    properties[PROPERTY_DELAY] = str(delay_level)
    if not properties.get(PROPERTY_ORIGIN_MESSAGE_ID, "").strip():
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = offset_msg_id(record.store_host,
                                                               record.physical_offset)
    return SendBack(EscapedMessage(
        topic=topic, queue_id=queue_id, body=record.body, properties=properties,
        flag=record.flag, sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
        born_host=record.born_host, reconsume_times=record.reconsume_times + 1), dead=dead)
