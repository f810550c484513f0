"""The ``container`` escape bridge: a put on a master running in the same process.

triomq is embeddable, so one host may run several brokers (RocketMQ's
BrokerContainer). A slave acting for its absent master must not write its
own log; this bridge puts its secondary messages' output on a master of the
same cluster in the same process instead, through that master's own put
flow (the local bridge's: its checks, append, flush and replication
waits), with no RPC. Of several such masters it takes the first by node
name that holds the message's topic (so its consumers find the message
there), else the first by node name (the system topics no topic table
holds), so that every put of an acting term lands on the same one while
the set of masters holds (a pop's checkpoint and its ack must meet on one
master to cancel each other). With no master in the process it refuses
with SERVICE_NOT_AVAILABLE, and the caller tries its next bridge or
retries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult, LocalEscapeBridge
from triomq.broker.service import Broker, broker_of, running_brokers

if TYPE_CHECKING:
    from triomq.runtime import Node

__all__ = ["ContainerEscapeBridge"]


class ContainerEscapeBridge:
    """Puts on the first master of the cluster running in this process, other than this
    node's broker."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def master(self, topic: str) -> Broker | None:
        """The master a put to ``topic`` goes to now (None: none runs in this process)."""
        own = broker_of(self.node)
        masters = [broker for broker in running_brokers()
                   if broker is not own and broker.replicas.is_master
                   and broker.config.cluster_name == own.config.cluster_name]
        holding = [broker for broker in masters if broker.topics.table.get(topic) is not None]
        chosen = holding or masters
        return chosen[0] if chosen else None

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        master = self.master(message.topic)
        if master is None:
            own = broker_of(self.node).config
            return EscapeResult(ResponseCode.SERVICE_NOT_AVAILABLE, (
                f"no master of cluster {own.cluster_name} runs in this process to escape to"))
        return await LocalEscapeBridge(master.processor.put_own).put_message(message)
