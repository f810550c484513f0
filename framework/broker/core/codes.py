"""Broker request and response codes, with RocketMQ's numbers, and the send header's keys.

The numbers are RocketMQ's ``RequestCode`` / ``ResponseCode``, so a frame
captured from a RocketMQ broker reads the same here; ``ResponseCode`` is
the one table every role shares (``triomq.protocol.response_codes``).

A put the master stored but could not replicate in time answers
FLUSH_SLAVE_TIMEOUT (the message is in the master's log and may still
reach the slaves). A slave asked to store a message answers
SERVICE_NOT_AVAILABLE, as RocketMQ's store does for a slave
(``PutMessageStatus.SERVICE_NOT_AVAILABLE``); IN_SYNC_REPLICAS_NOT_ENOUGH
answers SYSTEM_ERROR with a remark saying so, as RocketMQ does.
"""

from __future__ import annotations

import enum

from triomq.protocol.response_codes import ResponseCode

__all__ = ["SEND_V2_FIELDS", "RequestCode", "ResponseCode"]


class RequestCode(enum.IntEnum):
    """Requests a broker serves."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    #: A producer's end of a transaction (oneway): commit, roll back or unknown.
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    #: Broker to producer (oneway): how did this half message's transaction end?
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_BROKER_CONSUME_STATS = 317
    SEND_BATCH_MESSAGE = 320
    GET_TOPIC_CONFIG = 351
    LITE_PULL_MESSAGE = 361
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


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
