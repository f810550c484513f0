"""Where a producer sends: a topic's writable queues, queue selection, retries. Pure.

- ``publish_info(topic, route)``: RocketMQ's ``TopicPublishInfo`` from a
  route: for each broker group with write permission and a master (id 0),
  its write queues, groups in name order. A group without a master (in
  the middle of a failover) has no queues to send to until a route names
  its new master.
- ``publish_info(topic, default_route, queue_nums=...)``: for a topic no
  name server knows, the queues of the default topic ``TBW102`` (at most
  ``queue_nums`` per group, RocketMQ's defaultTopicQueueNums 4); a broker
  with ``auto_create_topic_enable`` creates the topic on the first send.
- ``QueueSelector``: round robin over those queues, skipping the group the
  last attempt failed on when another group has queues (``MQFaultStrategy``
  with its latency fault tolerance off, RocketMQ's default).
- ``retriable`` / ``refreshes_route`` / ``send_status``: what an answer
  means for the send: RocketMQ's ``retryResponseCodes`` are tried again on
  another group; an answer that says the route is stale (the broker is no
  longer master, the topic or permission is gone) or no answer at all
  fetches the route again before the next attempt.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.message import MessageQueue, SendStatus
from triomq.protocol.route import MASTER_ID, PERM_WRITE, TopicRouteData

__all__ = [
    "AUTO_CREATE_TOPIC",
    "RETRIABLE_CODES",
    "QueueSelector",
    "TopicPublishInfo",
    "publish_info",
    "refreshes_route",
    "retriable",
    "send_status",
]

#: The topic whose route stands in for an unknown one (TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC).
AUTO_CREATE_TOPIC = "TBW102"
#: ``DefaultMQProducer.retryResponseCodes``.
RETRIABLE_CODES = frozenset({Code.TOPIC_NOT_EXIST, Code.SERVICE_NOT_AVAILABLE, Code.SYSTEM_ERROR,
                             Code.SYSTEM_BUSY, Code.NO_PERMISSION, Code.NO_BUYER_ID,
                             Code.NOT_IN_CURRENT_UNIT})
# Answers meaning the route the producer holds is out of date.
_STALE_ROUTE_CODES = frozenset({Code.SERVICE_NOT_AVAILABLE, Code.TOPIC_NOT_EXIST,
                                Code.NO_PERMISSION})
# Stored, but not as safely as asked: a result, not an error (the message is in the log).
_STORED_CODES: Mapping[int, SendStatus] = {
    Code.SUCCESS: SendStatus.SEND_OK,
    Code.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    Code.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    Code.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@attrs.frozen
class TopicPublishInfo:
    """A topic's queues a producer may write, and each group's master address."""

    message_queues: tuple[MessageQueue, ...]
    masters: Mapping[str, str]

    @property
    def ok(self) -> bool:
        """Whether there is any queue to send to."""
        return bool(self.message_queues)


def publish_info(topic: str, route: TopicRouteData,
                 queue_nums: int | None = None) -> TopicPublishInfo:
    """The writable queues of ``topic`` on groups whose master the route names.

    ``queue_nums``: ``route`` is the default topic's, standing in for
    ``topic``; each group offers at most that many queues.
    """
    masters = {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas
               if MASTER_ID in b.broker_addrs}
    queues = [MessageQueue(topic, q.broker_name, i)
              for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
              if q.perm & PERM_WRITE and q.broker_name in masters
              for i in range(q.write_queue_nums if queue_nums is None
                             else min(queue_nums, q.write_queue_nums))]
    return TopicPublishInfo(tuple(queues), masters)


class QueueSelector:
    """Round robin over a topic's queues (RocketMQ's ``sendWhichQueue``).

    ``start`` is the first index; RocketMQ starts each producer at a random
    one so that producers do not all begin on the same queue.
    """

    def __init__(self, start: int = 0) -> None:
        self._index = start

    def select(self, info: TopicPublishInfo, last_broker: str | None = None) -> MessageQueue:
        """The next queue, on another group than ``last_broker`` if one has queues."""
        queues = info.message_queues
        if not queues:
            raise ValueError("no queue to select from")
        if last_broker is not None:
            for _ in range(len(queues)):
                queue = queues[self._next() % len(queues)]
                if queue.broker_name != last_broker:
                    return queue
        return queues[self._next() % len(queues)]

    def _next(self) -> int:
        index = self._index
        self._index = (index + 1) & 0x7FFFFFFF
        return index


def retriable(code: int | None) -> bool:
    """Whether a send that got ``code`` (``None``: no answer) is tried again."""
    return code is None or code in RETRIABLE_CODES


def refreshes_route(code: int | None) -> bool:
    """Whether ``code`` (``None``: no answer) calls for the topic's route again."""
    return code is None or code in _STALE_ROUTE_CODES


def send_status(code: int) -> SendStatus | None:
    """The status of a message a broker answered ``code`` for; ``None`` if not stored."""
    return _STORED_CODES.get(code)
