"""What a consumer answers GET_CONSUMER_RUNNING_INFO with: RocketMQ's ``ConsumerRunningInfo``. Pure.

``mqadmin consumerStatus`` asks a consumer through a broker it heartbeats
to (the broker passes the request on, header ``consumerGroup``,
``clientId``, ``jstackEnable``). A consumer of another group answers
SYSTEM_ERROR, ``The Consumer Group <G> not exist in this consumer``, as
RocketMQ's client does; the consumer of the group answers with the body
fastjson writes for the Java client's ``ConsumerRunningInfo``::

    {"mqPopTable":{},"mqTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{...}},
     "properties":{...},"statusTable":{"t":{...}},"subscriptionSet":[{...}],
     "userConsumerInfo":{}}

- ``properties``: the consumer's settings under RocketMQ's names, and the
  ``PROP_`` keys the admin tool reads (``PROP_CONSUMER_START_TIMESTAMP``
  is parsed by its analysis; ``PROP_CONSUME_TYPE`` and
  ``PROP_CONSUMEORDERLY`` say which checks apply);
- ``subscriptionSet``: the subscriptions, as the heartbeat carries them;
- ``mqTable``: each queue held, keyed by its ``MessageQueue`` object (not
  JSON: fastjson's object keys), as a ``ProcessQueueInfo``: the offset
  the consumer would commit, the messages held (orderly: those being
  consumed as the "transaction" ones), the lock, and when the queue was
  last pulled, consumed and locked (ms since the epoch);
- ``statusTable``: each subscribed topic's ``ConsumeStatus``. triomq's
  client keeps no pull or consume rates, so they read 0, as a Java
  consumer's do before it has seen a message;
- ``mqPopTable`` and ``userConsumerInfo``: empty (no POP consumption, no
  user data).

A Java client adds its thread dump as ``jstack`` when asked; triomq's
leaves it out (the admin tool then prints none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.process_queue import ProcessQueue
from triomq.client.core.pull import PullThresholds
from triomq.client.core.wire import ConsumeType
from triomq.protocol.consume_stats import queue_map
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.remoting import LANGUAGE, ROCKETMQ_VERSION_DESC
from triomq.protocol.route import dumps

__all__ = ["PROP_CLIENT_VERSION", "PROP_CONSUMEORDERLY", "PROP_CONSUMER_START_TIMESTAMP",
           "PROP_CONSUME_TYPE", "PROP_NAMESERVER_ADDR", "PROP_THREADPOOL_CORE_SIZE",
           "ConsumerSettings", "ProcessQueueInfo", "consumer_properties", "group_not_here",
           "process_queue_info", "running_info_body"]

#: ``ConsumerRunningInfo``'s property names.
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUMEORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"

_MIB = 1024 * 1024


class ConsumerSettings(Protocol):
    """What ``consumer_properties`` reads of a consumer (``ConsumerBase``)."""

    group: str
    namesrv_addr: list[str]
    consume_from_where: ConsumeFromWhere
    consume_type: ConsumeType
    client_ip: str
    instance_name: str
    pull_batch_size: int
    pull_thresholds: PullThresholds
    heartbeat_broker_interval: float
    poll_name_server_interval: float
    persist_consumer_offset_interval: float
    pull_delay_on_exception: float
    broker_suspend_max_ms: int


@attrs.frozen
class ProcessQueueInfo:
    """One queue held, as RocketMQ's ``ProcessQueueInfo`` describes it."""

    commit_offset: int
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    dropped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        # "droped": RocketMQ's spelling of the field.
        return {"cachedMsgCount": self.cached_msg_count,
                "cachedMsgMaxOffset": self.cached_msg_max_offset,
                "cachedMsgMinOffset": self.cached_msg_min_offset,
                "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
                "commitOffset": self.commit_offset, "droped": self.dropped,
                "lastConsumeTimestamp": self.last_consume_timestamp,
                "lastLockTimestamp": self.last_lock_timestamp,
                "lastPullTimestamp": self.last_pull_timestamp, "locked": self.locked,
                "transactionMsgCount": self.transaction_msg_count,
                "transactionMsgMaxOffset": self.transaction_msg_max_offset,
                "transactionMsgMinOffset": self.transaction_msg_min_offset,
                "tryUnlockTimes": self.try_unlock_times}


def process_queue_info(process: ProcessQueue, *, commit_offset: int | None, locked: bool,
                       moments: tuple[float, float, float], now: float,
                       wall_ms: int) -> ProcessQueueInfo:
    """The info of a queue whose messages ``process`` holds.

    ``commit_offset`` None: the offset the queue would commit now (-1 when it
    never held a message). ``moments``: when the queue was last locked, pulled
    and consumed, on the clock that reads ``now`` when the wall clock reads
    ``wall_ms``.
    """
    last_lock_ms, last_pull_ms, last_consume_ms = (
        wall_ms - round((now - moment) * 1000) for moment in moments)
    if commit_offset is None:
        committable = process.committable()
        commit_offset = -1 if committable is None else committable
    waiting, taken = process.waiting_offsets(), process.taken_offsets()
    return ProcessQueueInfo(
        commit_offset,
        cached_msg_min_offset=waiting[0] if waiting else 0,
        cached_msg_max_offset=waiting[-1] if waiting else 0,
        cached_msg_count=len(waiting), cached_msg_size_in_mib=process.size // _MIB,
        transaction_msg_min_offset=taken[0] if taken else 0,
        transaction_msg_max_offset=taken[-1] if taken else 0,
        transaction_msg_count=len(taken), locked=locked, last_lock_timestamp=last_lock_ms,
        dropped=process.dropped, last_pull_timestamp=last_pull_ms,
        last_consume_timestamp=last_consume_ms)


def consumer_properties(consumer: ConsumerSettings, *, started_ms: int) -> dict[str, str]:
    """The properties every consumer has: its settings under RocketMQ's names and the
    ``PROP_`` keys RocketMQ's ``MQClientInstance`` adds; ``started_ms``: when it started."""
    thresholds = consumer.pull_thresholds
    return {
        "consumerGroup": consumer.group, "messageModel": "CLUSTERING",
        "consumeFromWhere": consumer.consume_from_where.value,
        "clientIP": consumer.client_ip, "instanceName": consumer.instance_name,
        "namesrvAddr": ";".join(consumer.namesrv_addr), "language": LANGUAGE,
        "pullBatchSize": str(consumer.pull_batch_size),
        "pullThresholdForQueue": str(thresholds.messages),
        "pullThresholdSizeForQueue": str(thresholds.size_mib),
        "consumeConcurrentlyMaxSpan": str(thresholds.max_span),
        "heartbeatBrokerInterval": _ms(consumer.heartbeat_broker_interval),
        "pollNameServerInterval": _ms(consumer.poll_name_server_interval),
        "persistConsumerOffsetInterval": _ms(consumer.persist_consumer_offset_interval),
        "pullTimeDelayMillsWhenException": _ms(consumer.pull_delay_on_exception),
        "brokerSuspendMaxTimeMillis": str(consumer.broker_suspend_max_ms),
        # Each name server followed by ";", as MQClientInstance writes them.
        PROP_NAMESERVER_ADDR: "".join(f"{a};" for a in consumer.namesrv_addr),
        PROP_CONSUME_TYPE: consumer.consume_type.value,
        PROP_CLIENT_VERSION: ROCKETMQ_VERSION_DESC,
        PROP_CONSUMER_START_TIMESTAMP: str(started_ms)}


def _ms(seconds: float) -> str:
    return str(round(seconds * 1000))


def running_info_body(*, properties: Mapping[str, str],
                      subscriptions: Iterable[SubscriptionData],
                      queues: Mapping[MessageQueue, ProcessQueueInfo]) -> bytes:
    """The ``ConsumerRunningInfo`` body (see the module)."""
    # A TreeSet in the Java client, ordered by "topic@subString".
    subs = sorted(subscriptions, key=lambda s: f"{s.topic}@{s.sub_string}")
    status = {s.topic: {"consumeFailedMsgs": 0, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0,
                        "consumeRT": 0.0, "pullRT": 0.0, "pullTPS": 0.0} for s in subs}
    return (b'{"mqPopTable":{},"mqTable":'
            + queue_map({q: info.to_json() for q, info in queues.items()})
            + b',"properties":' + dumps(dict(properties))
            + b',"statusTable":' + dumps(status)
            + b',"subscriptionSet":' + dumps([s.to_json() for s in subs])
            + b',"userConsumerInfo":{}}')


def group_not_here(group: str) -> str:
    """The remark of a consumer asked about a group it is not in."""
    return f"The Consumer Group <{group[:200]}> not exist in this consumer"
