"""RocketMQ's ``MessageQueue``: one queue of a topic on one broker group. Pure.

Clients allocate, pull from and lock queues by it, and bodies carry it as
JSON (LOCK_BATCH_MQ's ``mqSet``, ConsumeStats' ``offsetTable`` keys), its
fields sorted as fastjson writes a bean's.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["MessageQueue"]


@attrs.frozen(order=True)
class MessageQueue:
    """Queue ``queue_id`` of ``topic`` on broker group ``broker_name``."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> MessageQueue:
        return cls(str(value["topic"]), str(value["brokerName"]), int(str(value["queueId"])))
