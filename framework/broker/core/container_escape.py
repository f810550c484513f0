"""Which master the ``container`` escape bridge puts on (pure).

triomq is embeddable, so one host may run several brokers (RocketMQ's
BrokerContainer). A slave acting for its absent master puts its secondary
messages' output on a master of another group of its cluster running in
the same process (never its own group's: a master there in its pre-online
would take the output into the log the slave copies, and the slave's next
round would find it and escape it again): the first by node name whose
topic table holds the message's topic (so its consumers find the message
there), else the first by node name (the system topics no topic table
holds), so that every put of an acting term lands on the same master while
the set of masters holds (a pop's checkpoint and its ack must meet on one
master to cancel each other). The ``container``
bridge and the acting-master simulation both choose so.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapeResult

__all__ = ["Candidate", "container_master", "no_master"]


@attrs.frozen
class Candidate:
    """A broker running in the escaping broker's process (not itself)."""

    name: str
    cluster: str
    group: str
    is_master: bool
    holds_topic: bool


def container_master(candidates: Sequence[Candidate], *, cluster: str,
                     own_group: str) -> str | None:
    """The node name of the master to put on (None: there is none)."""
    masters = [c for c in candidates
               if c.is_master and c.cluster == cluster and c.group != own_group]
    holding = sorted(c.name for c in masters if c.holds_topic)
    chosen = holding or sorted(c.name for c in masters)
    return chosen[0] if chosen else None


def no_master(cluster: str) -> EscapeResult:
    """The refusal when no master runs in the process: the caller tries its next bridge
    or retries."""
    return EscapeResult(ResponseCode.SERVICE_NOT_AVAILABLE,
                        f"no master of cluster {cluster} runs in this process to escape to")
