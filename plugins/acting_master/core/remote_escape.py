"""Where the ``remote`` escape bridge sends a message, and the request it sends (pure).

An acting slave's remote escape (RocketMQ's ``EscapeBridge.putMessageToRemoteBroker``)
sends the message as a producer would, SEND_MESSAGE_V2 to a master of
another group of its cluster that routes the message's topic with write
permission. Those groups are tried in name order, so that the puts of an
acting term land on one master while the route holds; the queue is the
message's own where that group has it, else the message's queue modulo the
group's write queues.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.core.headers import SendHeader, encode_send_header
from triomq.protocol.message import PROPERTY_UNIQ_KEY
from triomq.protocol.route import TopicRouteData

__all__ = ["EscapeTarget", "escape_targets", "send_fields"]

MASTER_ID = 0
PERM_WRITE = 2


@attrs.frozen
class EscapeTarget:
    """A master to send an escaped message to, and the queue it goes to there."""

    broker_name: str
    address: str
    queue_id: int


def escape_targets(route: TopicRouteData, *, own_group: str, cluster: str,
                   queue_id: int) -> list[EscapeTarget]:
    """The masters of ``cluster`` other than ``own_group``'s that take writes of the
    route's topic, in group-name order."""
    queues = {q.broker_name: q for q in route.queue_datas
              if q.perm & PERM_WRITE and q.write_queue_nums > 0}
    targets = []
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        data = queues.get(broker.broker_name)
        address = broker.broker_addrs.get(MASTER_ID)
        if (data is None or address is None or broker.broker_name == own_group
                or broker.cluster != cluster):
            continue
        queue = queue_id if queue_id < data.write_queue_nums else queue_id % data.write_queue_nums
        targets.append(EscapeTarget(broker.broker_name, address, queue))
    return targets


def send_fields(message: EscapedMessage, *, producer_group: str, queue_id: int,
                unique_id: str, now_ms: int) -> Mapping[str, str]:
    """SEND_MESSAGE_V2's header for ``message`` to ``queue_id``; a message without a
    ``UNIQ_KEY`` gets ``unique_id``, as a producer gives each message one."""
    properties = dict(message.properties)
    properties.setdefault(PROPERTY_UNIQ_KEY, unique_id)
    return encode_send_header(SendHeader(
        topic=message.topic, producer_group=producer_group, queue_id=queue_id,
        sys_flag=message.sys_flag, born_timestamp=message.born_timestamp or now_ms,
        flag=message.flag, properties=properties, reconsume_times=message.reconsume_times))
