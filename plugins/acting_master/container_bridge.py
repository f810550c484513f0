"""The ``container`` escape bridge: a put on a master running in the same process.

A slave acting for its absent master must not write its own log; this
bridge puts its secondary messages' output on a master of another group of
its cluster in the same process instead (the one ``broker.core.container_escape``
chooses), through that master's own put flow (the local bridge's: its
checks, append, flush and replication waits), with no RPC. With no master
in the process it refuses with SERVICE_NOT_AVAILABLE, and the caller tries
its next bridge or retries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triomq.broker.core.container_escape import Candidate, container_master, no_master
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult, LocalEscapeBridge
from triomq.broker.service import Broker, broker_of, running_brokers

if TYPE_CHECKING:
    from triomq.runtime import Node

__all__ = ["ContainerEscapeBridge"]


class ContainerEscapeBridge:
    """Puts on a master of another group of the cluster running in this process."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def master(self, topic: str) -> Broker | None:
        """The master a put to ``topic`` goes to now (None: none runs in this process)."""
        own = broker_of(self.node)
        others = {broker.node.name: broker for broker in running_brokers() if broker is not own}
        chosen = container_master(
            [Candidate(name, broker.config.cluster_name, broker.config.broker_name,
                       broker.replicas.is_master, broker.topics.table.get(topic) is not None)
             for name, broker in others.items()],
            cluster=own.config.cluster_name, own_group=own.config.broker_name)
        return None if chosen is None else others[chosen]

    async def put_message(self, message: EscapedMessage) -> EscapeResult:
        master = self.master(message.topic)
        if master is None:
            return no_master(broker_of(self.node).config.cluster_name)
        return await LocalEscapeBridge(master.processor.put_own).put_message(message)
