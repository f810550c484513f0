"""The ``remote`` escape bridge: a send to a master of another group of the cluster.

With ``enable_remote_escape`` (RocketMQ's), a slave acting for its absent
master sends its secondary messages' output as a producer would: it asks
its name servers for the topic's route (in turn, until one answers) and
sends SEND_MESSAGE_V2 to the first master of another group that takes the
topic's writes (``core.remote_escape``), then to the next ones if that
fails, up to ``RETRIES`` masters. The producer group is RocketMQ's
``InnerProducerGroup_<brokerName>_<brokerId>``. The born host is this
broker's connection, as over any send; the rest of the message is kept.
Without ``enable_remote_escape``, or with no master to send to, it refuses
with SERVICE_NOT_AVAILABLE and a remark saying why, and the caller retries.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.registration.namesrv_client import query_route, rpc_address
from triomq.clock import epoch_ms
from triomq.plugins.acting_master.core.remote_escape import escape_targets, send_fields
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.rpc import RpcError

if TYPE_CHECKING:
    from triomq.runtime import Node

__all__ = ["RemoteEscapeBridge"]

#: Masters a put is tried on before it is refused (the caller retries later).
RETRIES = 3
#: Seconds a route query or a send waits for its answer (RocketMQ's SEND_TIMEOUT).
TIMEOUT = 3.0


class RemoteEscapeBridge:
    """Sends to a master of another group of the cluster (``enable_remote_escape``)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.config = node.config.broker
        self.producer_group = (f"InnerProducerGroup_{self.config.broker_name}_"
                               f"{self.config.broker_id}")
        self._ids = UniqueIdGenerator("127.0.0.1", os.getpid(), random.getrandbits(32))

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        if not self.config.enable_remote_escape:
            return _refused("enable_remote_escape is off: no escape to another group's master")
        route = await query_route(self.node.rpc, self.config.namesrv_addr, message.topic,
                                  timeout=TIMEOUT)
        if route is None:
            return _refused(f"no name server routes topic {message.topic}")
        targets = escape_targets(route, own_group=self.config.broker_name,
                                 cluster=self.config.cluster_name, queue_id=message.queue_id)
        if not targets:
            return _refused(f"no master of another group of cluster {self.config.cluster_name} "
                            f"takes topic {message.topic}")
        unique_id = self._ids.next_id(epoch_ms())
        result = _refused("not sent")
        for target in targets[:RETRIES]:
            fields = send_fields(message, producer_group=self.producer_group,
                                 queue_id=target.queue_id, unique_id=unique_id, now_ms=epoch_ms())
            try:
                answer = await self.node.rpc.invoke(
                    rpc_address(target.address), RequestCode.SEND_MESSAGE_V2, dict(fields),
                    message.body, timeout=TIMEOUT)
            except RpcError as exc:
                result = _refused(f"{target.broker_name} ({target.address}): {exc}")
                continue
            result = EscapeResult.of_response(answer)
            if result.stored:
                return result
        return result


def _refused(remark: str) -> EscapeResult:
    return EscapeResult(ResponseCode.SERVICE_NOT_AVAILABLE, remark)
