"""Queue locks by quorum (RocketMQ's ``lockInStrictMode``, seed 003's lock quorum). Pure.

While a slave acts for its absent master, orderly consumers lock queues on
it; when the master returns, a consumer locking there must not get a queue
another still holds on the slave. In strict mode a broker asked to lock
queues (not ``onlyThisBroker``) locks them itself and asks each other
replica of its group to lock them for the same client (``onlyThisBroker``
set, so they ask no further); a queue is the client's only if a majority
of the group's ``total_replicas`` granted it. An unlock goes to every
replica the same way. Without strict mode, or with ``total_replicas``
under three (a majority of one or two is everyone reachable, as RocketMQ
counts it), a broker answers from its own locks alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from triomq.broker.consume.core.lock_body import LockBatchBody
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import dumps

__all__ = ["lock_quorum", "peer_request_body", "quorum_locked", "wants_quorum"]


def lock_quorum(total_replicas: int) -> int:
    """Grants a queue needs: a majority of the group's replicas."""
    return total_replicas // 2 + 1


def wants_quorum(body: LockBatchBody, *, strict: bool, total_replicas: int) -> bool:
    """Whether the lock (or unlock) goes to the group's other replicas too."""
    return strict and not body.only_this_broker and lock_quorum(total_replicas) > 1


def peer_request_body(body: LockBatchBody) -> bytes:
    """The same request for another replica: its own locks only."""
    return dumps({"consumerGroup": body.consumer_group, "clientId": body.client_id,
                  "onlyThisBroker": True, "mqSet": [mq.to_json() for mq in body.mqs]})


def quorum_locked(requested: Sequence[MessageQueue], grants: Iterable[Iterable[MessageQueue]],
                  quorum: int) -> list[MessageQueue]:
    """The queues of ``requested`` that at least ``quorum`` replicas granted (``grants``:
    this broker's and each answering replica's), in the order asked."""
    counts = Counter(mq for grant in grants for mq in set(grant))
    return [mq for mq in requested if counts[mq] >= quorum]
