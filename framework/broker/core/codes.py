"""The broker's request and response codes (RocketMQ's tables) and the send header's keys.

The numbers are RocketMQ's ``RequestCode`` / ``ResponseCode``, so a frame
captured from a RocketMQ broker reads the same here; both are the tables
every role shares (``triomq.protocol.request_codes``, ``response_codes``).

A put the master stored but could not replicate in time answers
FLUSH_SLAVE_TIMEOUT (the message is in the master's log and may still
reach the slaves). A slave asked to store a message answers
SERVICE_NOT_AVAILABLE, as RocketMQ's store does for a slave
(``PutMessageStatus.SERVICE_NOT_AVAILABLE``); IN_SYNC_REPLICAS_NOT_ENOUGH
answers SYSTEM_ERROR with a remark saying so, as RocketMQ does.
"""

from __future__ import annotations

from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode

__all__ = ["SEND_V2_FIELDS", "RequestCode", "ResponseCode"]




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
