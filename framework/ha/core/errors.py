"""Errors raised by the HA state machines; each closes the connection it concerns."""

from __future__ import annotations

from triomq.errors import TriomqError


class HAProtocolError(TriomqError):
    """A peer broke the replication protocol (wrong order, gap, offset out of range).

    The connection must be closed; ``peer`` names the other side when known.
    """

    def __init__(self, message: str, peer: str = "") -> None:
        self.peer = peer
        super().__init__(f"HA peer {peer}: {message}" if peer else f"HA peer: {message}")


class HandshakeRefused(HAProtocolError):
    """The master's HA port admits no more slaves of this kind (``triomq.ha.core.admission``)."""


class NoConsistentPoint(HAProtocolError):
    """The slave shares no epoch with the master, so it cannot tell what to keep."""


class EpochError(TriomqError, ValueError):
    """An epoch entry would break the cache's order (epochs and start offsets increase)."""


class CheckpointError(TriomqError):
    """Neither the epoch checkpoint file nor its ``.bak`` holds a valid version."""
