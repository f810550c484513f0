"""The bodies of a consumer's group requests, as RocketMQ's JSON beans. Pure.

- ``heartbeat_body``: HEART_BEAT's ``HeartbeatData`` (client id, producer
  groups, consumer groups with their subscriptions).
- ``lock_body`` / ``read_locked``: LOCK_BATCH_MQ's ``LockBatchRequestBody``
  and the ``lockOKMQSet`` of its answer; UNLOCK_BATCH_MQ takes the same
  body.
- ``read_consumer_ids``: GET_CONSUMER_LIST_BY_GROUP's ``consumerIdList``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.message import MessageQueue
from triomq.client.core.subscription import SubscriptionData
from triomq.protocol.route import RouteDataError, dumps, loads

__all__ = [
    "ConsumeType",
    "ConsumerData",
    "heartbeat_body",
    "lock_body",
    "read_consumer_ids",
    "read_locked",
]


class ConsumeType(enum.Enum):
    #: The broker pushes (a push consumer's long polls).
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"
    #: The application pulls (a lite pull consumer).
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"


@attrs.frozen
class ConsumerData:
    """One consumer group as a heartbeat declares it (clustering mode)."""

    group: str
    consume_type: ConsumeType
    consume_from_where: ConsumeFromWhere
    subscriptions: tuple[SubscriptionData, ...]

    def to_json(self) -> dict[str, object]:
        return {"consumeFromWhere": self.consume_from_where.value,
                "consumeType": self.consume_type.value, "groupName": self.group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
                "unitMode": False}


def heartbeat_body(client_id: str, producer_groups: Iterable[str],
                   consumers: Iterable[ConsumerData]) -> bytes:
    """HEART_BEAT's body."""
    return dumps({"clientID": client_id,
                  "consumerDataSet": [c.to_json() for c in consumers],
                  "heartbeatFingerprint": 0, "isWithoutSub": False,
                  "producerDataSet": [{"groupName": g} for g in producer_groups]})


def lock_body(group: str, client_id: str, queues: Iterable[MessageQueue]) -> bytes:
    """LOCK_BATCH_MQ's (and UNLOCK_BATCH_MQ's) body."""
    return dumps({"clientId": client_id, "consumerGroup": group,
                  "mqSet": [q.to_json() for q in sorted(queues)], "onlyThisBroker": False})


def read_locked(body: bytes) -> frozenset[MessageQueue]:
    """The queues a LOCK_BATCH_MQ answer says are locked for us."""
    value = loads(body, "LockBatchResponseBody")
    try:
        return frozenset(MessageQueue.from_json(q) for q in value.get("lockOKMQSet") or ())
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise RouteDataError(f"LockBatchResponseBody.lockOKMQSet: {exc!r}") from None


def read_consumer_ids(body: bytes) -> Sequence[str]:
    """The client ids of a GET_CONSUMER_LIST_BY_GROUP answer, sorted."""
    value = loads(body, "GetConsumerListByGroupResponseBody")
    ids = value.get("consumerIdList") if isinstance(value, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise RouteDataError("GetConsumerListByGroupResponseBody.consumerIdList: "
                             "expected a list of strings")
    return sorted(ids)
