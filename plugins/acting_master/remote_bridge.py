"""The ``remote`` escape bridge: a send to a master of another group of the cluster.

With ``enable_remote_escape`` (RocketMQ's), a slave acting for its absent
master sends its secondary messages' output as a producer would: it pumps
``RemoteEscape`` (``broker.core.remote_escape``), asking its name servers
for the topic's route (in turn, until one answers) and sending
SEND_MESSAGE_V2 to the masters of other groups the flow names. The
producer group is RocketMQ's ``InnerProducerGroup_<brokerName>_<brokerId>``.
The born host is this broker's connection, as over any send; the rest of
the message is kept.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.core.remote_escape import Escaped, QueryRoute, RemoteEscape
from triomq.broker.registration.namesrv_client import query_route, rpc_address
from triomq.clock import epoch_ms
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.rpc import RpcError

if TYPE_CHECKING:
    from triomq.runtime import Node

__all__ = ["RemoteEscapeBridge"]

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
        flow = RemoteEscape(message, enabled=self.config.enable_remote_escape,
                            own_group=self.config.broker_name,
                            cluster=self.config.cluster_name, producer_group=self.producer_group,
                            unique_id=self._ids.next_id(epoch_ms()))
        step = flow.start()
        while not isinstance(step, Escaped):
            if isinstance(step, QueryRoute):
                route = await query_route(self.node.rpc, self.config.namesrv_addr, step.topic,
                                          timeout=TIMEOUT)
                step = flow.routed(route, epoch_ms())
                continue
            try:
                answer = await self.node.rpc.invoke(
                    rpc_address(step.target.address), RequestCode.SEND_MESSAGE_V2,
                    dict(step.fields), message.body, timeout=TIMEOUT)
            except RpcError as exc:
                step = flow.failed(str(exc), epoch_ms())
                continue
            step = flow.answered(EscapeResult.of_response(answer), epoch_ms())
        return step.result
