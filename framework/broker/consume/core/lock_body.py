"""The bodies of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ, sans-I/O.

RocketMQ's ``LockBatchRequestBody`` / ``UnlockBatchRequestBody`` (the same
fields) and ``LockBatchResponseBody``::

    {"consumerGroup": "cg", "clientId": "10.0.0.5@4242", "onlyThisBroker": false,
     "mqSet": [{"topic": "orders", "brokerName": "broker-a", "queueId": 0}]}
    {"lockOKMQSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "orders"}]}

``parse_lock_batch`` raises ``BodyError`` naming the field at fault.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from triomq.broker.consume.core.lock_table import MessageQueue
from triomq.protocol.heartbeat import MAX_TEXT, BodyError, parse_json_body
from triomq.protocol.route import dumps
from triomq.protocol.topic_rules import IllegalName, check_group, check_topic

__all__ = ["MAX_MQS", "LockBatchBody", "encode_lock_ok", "parse_lock_batch"]

#: Queues one request may name: every queue of many topics, and a bound on the work.
MAX_MQS = 16384


@attrs.frozen
class LockBatchBody:
    """Who locks (or unlocks) which queues."""

    consumer_group: str
    client_id: str
    mqs: tuple[MessageQueue, ...]
    only_this_broker: bool = False


def _string(obj: dict[str, Any], key: str, where: str = "") -> str:
    value = obj.get(key)
    if value is None or value == "":
        raise BodyError(where + key, "missing")
    if not isinstance(value, str):
        raise BodyError(where + key, f"expected a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT:
        raise BodyError(where + key, f"{len(value)} characters, at most {MAX_TEXT}")
    return value


def _queue(value: Any, where: str) -> MessageQueue:
    if not isinstance(value, dict):
        raise BodyError(where.rstrip("."), f"expected an object, got {type(value).__name__}")
    topic = _string(value, "topic", where)
    try:
        check_topic(topic)
    except IllegalName as exc:
        raise BodyError(where + "topic", str(exc)) from None
    queue_id = value.get("queueId")
    if type(queue_id) is not int or not 0 <= queue_id < 2**31:
        raise BodyError(where + "queueId", f"expected a queue id (0 to 2^31-1), got "
                                           f"{str(queue_id)[:40]}")
    return MessageQueue(topic, _string(value, "brokerName", where), queue_id)


def parse_lock_batch(body: bytes) -> LockBatchBody:
    """The ``LockBatchRequestBody`` (or unlock body) in ``body``; ``BodyError`` if bad."""
    obj = dict(parse_json_body(body))
    group = _string(obj, "consumerGroup")
    try:
        check_group(group)
    except IllegalName as exc:
        raise BodyError("consumerGroup", str(exc)) from None
    client_id = _string(obj, "clientId")
    only = obj.get("onlyThisBroker", False)
    if not isinstance(only, bool):
        raise BodyError("onlyThisBroker", f"expected a boolean, got {type(only).__name__}")
    mq_set = obj.get("mqSet")
    if mq_set is None:
        mq_set = []
    if not isinstance(mq_set, list):
        raise BodyError("mqSet", f"expected an array, got {type(mq_set).__name__}")
    if len(mq_set) > MAX_MQS:
        raise BodyError("mqSet", f"{len(mq_set)} queues, at most {MAX_MQS}")
    mqs = tuple(_queue(item, f"mqSet[{i}].") for i, item in enumerate(mq_set))
    return LockBatchBody(group, client_id, mqs, only)


def encode_lock_ok(mqs: Iterable[MessageQueue]) -> bytes:
    """A ``LockBatchResponseBody``."""
    return dumps({"lockOKMQSet": [mq.to_json() for mq in mqs]})
