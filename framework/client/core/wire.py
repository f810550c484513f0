"""The bodies of a consumer's group requests, as RocketMQ's JSON beans. Pure.

- ``ConsumeType``: how a consumer's group is consumed, as its heartbeat
  (``triomq.protocol.heartbeat``) declares it.
- ``lock_body`` / ``read_locked``: LOCK_BATCH_MQ's ``LockBatchRequestBody``
  and the ``lockOKMQSet`` of its answer; UNLOCK_BATCH_MQ takes the same
  body.
- ``read_consumer_ids``: GET_CONSUMER_LIST_BY_GROUP's ``consumerIdList``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

from triomq.client.core.message import MessageQueue
from triomq.protocol.route import RouteDataError, dumps, loads

__all__ = [
    "ConsumeType",
    "lock_body",
    "read_consumer_ids",
    "read_locked",
]


class ConsumeType(enum.Enum):
    #: The broker pushes (a push consumer's long polls).
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"
    #: The application pulls (a lite pull consumer).
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"




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
