"""The request and response codes a client speaks, with RocketMQ's numbers.

The client keeps its own list of requests rather than the broker's: it
names every request it sends to name servers and brokers (some of which
another server may serve), as RocketMQ's ``RequestCode`` numbers them.
The answers it reads are RocketMQ's one ``ResponseCode`` table
(``triomq.protocol.response_codes``), shared by every role.
"""

from __future__ import annotations

import enum

from triomq.protocol.response_codes import ResponseCode

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
    CONSUMER_SEND_MSG_BACK = 36
    #: A transaction's end, oneway (the producer's own, or its answer to a check).
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    #: Broker to client (oneway): how did this half message's transaction end?
    CHECK_TRANSACTION_STATE = 39
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
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053


#: The client reads RocketMQ's one table of response codes.
ClientResponseCode = ResponseCode


def code_name(code: int) -> str:
    """``NAME (n)`` for a known response code, the number otherwise."""
    try:
        return f"{ClientResponseCode(code).name} ({code})"
    except ValueError:
        return str(code)
