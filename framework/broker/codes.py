"""Broker request and response codes, with RocketMQ's numbers, and the send header's keys.

The numbers are RocketMQ's ``RequestCode`` / ``ResponseCode``, so a frame
captured from a RocketMQ broker reads the same here.
"""

from __future__ import annotations

import enum

__all__ = ["SEND_V2_FIELDS", "RequestCode", "ResponseCode"]


class RequestCode(enum.IntEnum):
    """Requests a broker serves."""

    SEND_MESSAGE = 10
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    SEND_MESSAGE_V2 = 310


class ResponseCode(enum.IntEnum):
    """Outcomes of broker requests.

    A put the master stored but could not replicate in time answers
    FLUSH_SLAVE_TIMEOUT (the message is in the master's log and may still
    reach the slaves). A slave asked to store a message answers
    SERVICE_NOT_AVAILABLE, as RocketMQ's store does for a slave
    (``PutMessageStatus.SERVICE_NOT_AVAILABLE``); IN_SYNC_REPLICAS_NOT_ENOUGH
    answers SYSTEM_ERROR with a remark saying so, as RocketMQ does.
    """

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14


#: ``SendMessageRequestHeaderV2``'s one-letter keys and the field each stands for.
SEND_V2_FIELDS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "consumeRetryTimes",
    "m": "batch",
    "n": "brokerName",
}
