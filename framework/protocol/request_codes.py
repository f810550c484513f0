"""RocketMQ's request codes: one table for every role.

A remoting frame's ``code`` names its request the same whoever sends it (a
client, a broker, an admin) and whoever serves it (a broker, a name server,
a controller), so the numbers and names live here once, as RocketMQ's
``RequestCode`` has them (the controller's own requests keep its
``CONTROLLER_`` prefix). Beside it, ``response_codes`` is the table of
answers. Each role's ``codes`` module re-exports both; their docstrings say
which requests that role serves. A code listed here is one triomq sends or
serves; anything else a peer sends is answered REQUEST_CODE_NOT_SUPPORTED.
One is triomq's own (``GET_PENDING_MESSAGES``, docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import enum

__all__ = ["RequestCode"]


class RequestCode(enum.IntEnum):
    """RocketMQ's ``RequestCode`` numbers, the ones triomq sends or serves."""

    # Messages: sends, pulls, queries (a broker serves them).
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
    #: A producer's end of a transaction (oneway): commit, roll back or unknown, its
    #: own or its answer to a check.
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    #: Broker to producer (oneway): how did this half message's transaction end?
    CHECK_TRANSACTION_STATE = 39
    #: Broker to client (oneway): the group's members changed, rebalance now.
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    #: A slave's copy of its master's timer checkpoint.
    GET_TIMER_CHECK_POINT = 60
    # The name server's.
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    # Admin requests, to brokers and name servers.
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    #: Broker to client, passing on an admin's question: what the consumer runs.
    GET_CONSUMER_RUNNING_INFO = 307
    #: Broker to client, passing on an admin's message to consume once (queryMsgById -d).
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    VIEW_BROKER_STATS_DATA = 315
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_TOPIC_CONFIG = 351
    LITE_PULL_MESSAGE = 361
    # Slave acting master (RIP-32): member groups and lightweight heartbeats.
    GET_BROKER_MEMBER_GROUP = 901
    #: A broker's lightweight heartbeat with live info, to name servers and controllers.
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    #: A returning master tells its slaves where it is (or a broker is asked).
    EXCHANGE_BROKER_HA_INFO = 906
    #: A broker's HARuntimeInfo (``mqadmin haStatus``).
    GET_BROKER_HA_STATUS = 907
    # The controller's.
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # Pop consumption (RocketMQ 5).
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151
    # triomq's own, at a number RocketMQ's RequestCode leaves unused.
    #: An admin's view of the messages waiting in a broker's system topics: delayed and
    #: timer messages not yet delivered, open transactions, pops not yet acked.
    GET_PENDING_MESSAGES = 7001
