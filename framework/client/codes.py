"""The request and response codes a client speaks, with RocketMQ's numbers.

The client keeps its own list rather than the broker's: it names every
request it sends to name servers and brokers (some of which another
server may serve) and every answer it reads, as RocketMQ's ``RequestCode``
and ``ResponseCode`` number them.
"""

from __future__ import annotations

import enum

__all__ = ["ClientRequestCode", "ClientResponseCode"]


class ClientRequestCode(enum.IntEnum):
    """Requests a client sends, and the ones a broker sends it."""

    PULL_MESSAGE = 11
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    GET_CONSUMER_LIST_BY_GROUP = 38
    #: Broker to client (oneway): the group's members changed, rebalance now.
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ROUTEINFO_BY_TOPIC = 105
    #: Broker to client, passing on an admin's question: what the consumer runs.
    GET_CONSUMER_RUNNING_INFO = 307
    #: Broker to client, passing on an admin's message to consume once (queryMsgById -d).
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320


class ClientResponseCode(enum.IntEnum):
    """Answers a client tells apart."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205


def code_name(code: int) -> str:
    """``NAME (n)`` for a known response code, the number otherwise."""
    try:
        return f"{ClientResponseCode(code).name} ({code})"
    except ValueError:
        return str(code)
