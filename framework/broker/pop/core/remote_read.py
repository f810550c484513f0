"""Reading a popped message that another broker group holds, for its revive. Pure.

A slave acting for its absent master (seed 003) serves pops but writes
nothing to its own log: their checkpoints and acks go through its escape
bridge into another master's revive topic, and that master revives what
is not acked in time. The message itself is in the acting slave's group
only, so the reviving master reads it from there, as RocketMQ's
``EscapeBridge.getMessageFromRemote`` does: a PULL_MESSAGE of one message
at the checkpoint's offset, from the group's replicas as the topic's route
names them (broker id 0 first: the master, or the slave acting for it),
under RocketMQ's ``InnerConsumerGroup_<brokerName>_<brokerId>``, sending
its subscription (``*``) and committing nothing.

``answer`` reads one replica's answer: the record, ``GONE`` when the queue
no longer holds that offset (its messages were deleted), or ``NOT_HERE``
when this replica cannot tell (it lags, or refused): the next one is asked,
and when none can tell the revive waits and asks again.
"""

from __future__ import annotations

import enum
import struct

from triomq.broker.consume.core.pull import FLAG_SUBSCRIPTION
from triomq.broker.core.codes import ResponseCode
from triomq.broker.pop.core.revive import ReadMessage
from triomq.protocol.message import MessageRecord, RecordError, decode
from triomq.protocol.route import TopicRouteData

__all__ = ["Unread", "answer", "inner_consumer_group", "pull_fields", "replica_addresses"]


class Unread(enum.Enum):
    """Why a replica's answer holds no record."""

    #: The queue no longer holds the offset: nothing to revive.
    GONE = "gone"
    #: This replica cannot tell: ask the next.
    NOT_HERE = "not here"


def inner_consumer_group(broker_name: str, broker_id: int) -> str:
    """The group a broker's own reads of other brokers go under (RocketMQ's)."""
    return f"InnerConsumerGroup_{broker_name}_{broker_id}"


def replica_addresses(route: TopicRouteData, broker_name: str) -> list[str]:
    """Where the route says group ``broker_name``'s replicas are, by broker id."""
    for broker in route.broker_datas:
        if broker.broker_name == broker_name:
            return [address for _, address in sorted(broker.broker_addrs.items())]
    return []


def pull_fields(read: ReadMessage, group: str) -> dict[str, str]:
    """PULL_MESSAGE's header for the one message ``read`` names."""
    return {"consumerGroup": group, "topic": read.topic, "queueId": str(read.queue_id),
            "queueOffset": str(read.offset), "maxMsgNums": "1",
            "sysFlag": str(FLAG_SUBSCRIPTION), "commitOffset": "0",
            "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
            "expressionType": "TAG", "bname": read.broker_name}


def answer(read: ReadMessage, code: int, fields: dict[str, str], body: bytes
           ) -> MessageRecord | Unread:
    """What one replica's answer to ``pull_fields(read, ...)`` says of the message."""
    if code == ResponseCode.SUCCESS:
        try:
            record, _ = decode(body)
        except (RecordError, ValueError, struct.error):
            return Unread.NOT_HERE
        if (record.topic, record.queue_id, record.queue_offset) \
                == (read.topic, read.queue_id, read.offset):
            return record
        return Unread.GONE if record.queue_offset > read.offset else Unread.NOT_HERE
    if code == ResponseCode.PULL_OFFSET_MOVED:
        try:
            queue_min = int(fields.get("minOffset", ""))
        except ValueError:
            return Unread.NOT_HERE
        return Unread.GONE if read.offset < queue_min else Unread.NOT_HERE
    return Unread.NOT_HERE
