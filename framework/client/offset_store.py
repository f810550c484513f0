"""A consumer group's offsets: kept in memory, stored on the queues' brokers.

RocketMQ's ``RemoteBrokerOffsetStore``: the consumer updates an offset in
memory as messages are consumed, and writes the offsets of its queues to
each queue's broker group (UPDATE_CONSUMER_OFFSET, to the master, else any
replica) every ``persistConsumerOffsetInterval`` and when it lets a queue go
or stops. A queue's stored offset is read with QUERY_CONSUMER_OFFSET when the
consumer takes the queue up (QUERY_NOT_FOUND: the group has none). The
writes here wait for their answers (RocketMQ sends the periodic ones
oneway), so a stop returns once the broker has them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from triomq.client.core.codes import RequestCode as Req
from triomq.client.core.codes import ResponseCode as Code
from triomq.client.core.errors import BrokerError, NoRouteError
from triomq.client.core.message import MessageQueue
from triomq.client.core.queue_pull import ConsumedOffsets
from triomq.client.instance import ClientInstance
from triomq.rpc import RpcError

__all__ = ["OffsetStore"]

log = logging.getLogger("triomq.client")


class OffsetStore(ConsumedOffsets):
    """Offsets of ``group``'s queues: in memory (``ConsumedOffsets``), and on the brokers."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    def _address(self, queue: MessageQueue) -> str:
        address = self.instance.subscribe_address(queue.broker_name)
        if address is None:
            raise NoRouteError(f"no address known for broker group {queue.broker_name}")
        return address

    def _fields(self, queue: MessageQueue) -> dict[str, str]:
        return {"consumerGroup": self.group, "topic": queue.topic,
                "queueId": str(queue.queue_id), "bname": queue.broker_name}

    async def fetch(self, queue: MessageQueue, *, zero_if_not_found: bool = True) -> int | None:
        """The offset the broker stores for the queue (``None``: the group has none).
        A queue's ``PullFlow`` keeps the one it starts from in memory.

        A broker answers a group without an offset 0 if the queue never lost a
        message, unless ``zero_if_not_found`` is off (``setZeroIfNotFound``).
        """
        address = self._address(queue)
        fields = self._fields(queue)
        if not zero_if_not_found:
            fields["setZeroIfNotFound"] = "false"
        answer = await self.instance.invoke(address, Req.QUERY_CONSUMER_OFFSET, fields)
        if answer.code == Code.QUERY_NOT_FOUND:
            return None
        if answer.code != Code.SUCCESS:
            raise BrokerError(address, answer.code, answer.remark)
        offset = int(answer.ext_fields.get("offset", "-1"))
        return None if offset < 0 else offset

    async def persist(self, queue: MessageQueue) -> None:
        """Write the queue's offset in memory to its broker."""
        offset = self.read(queue)
        if offset is None:
            return
        await self.instance.checked(self._address(queue), Req.UPDATE_CONSUMER_OFFSET,
                                    {**self._fields(queue), "commitOffset": str(offset)})

    async def persist_all(self, queues: Iterable[MessageQueue]) -> None:
        """Write every offset of ``queues``; a failure is logged, the others still go."""
        for queue in list(queues):
            try:
                await self.persist(queue)
            except (RpcError, BrokerError, NoRouteError) as exc:
                log.warning("offset of %s not stored: %s", queue, exc)

    async def max_offset(self, queue: MessageQueue) -> int:
        """GET_MAX_OFFSET: one past the queue's last message."""
        answer = await self.instance.checked(
            self._address(queue), Req.GET_MAX_OFFSET,
            {"topic": queue.topic, "queueId": str(queue.queue_id), "bname": queue.broker_name})
        return int(answer.ext_fields["offset"])

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first message stored at or after ``timestamp_ms``."""
        answer = await self.instance.checked(
            self._address(queue), Req.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": queue.topic, "queueId": str(queue.queue_id),
             "timestamp": str(timestamp_ms), "bname": queue.broker_name})
        return int(answer.ext_fields["offset"])
