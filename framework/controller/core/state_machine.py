"""The replicas-info state machine as Raft replicates it.

Adapts ``triomq.controller.ReplicasInfoManager`` to the
``triomq.consensus.core.applier.StateMachine`` protocol: a committed entry is one
encoded controller event (``encode_event``); applying it returns whether it
changed the state (an event computed for epochs that no longer hold is
ignored, identically on every controller). Snapshots are the manager's.
"""

from __future__ import annotations

import logging

from triomq.controller import EventDecodeError, ReplicasInfoManager, decode_event

__all__ = ["ReplicasStateMachine"]

logger = logging.getLogger("triomq.controller")


class ReplicasStateMachine:
    """Applies committed controller events to a ``ReplicasInfoManager``."""

    def __init__(self, manager: ReplicasInfoManager | None = None) -> None:
        self.manager = manager if manager is not None else ReplicasInfoManager()
        #: How many entries were ignored because they were not controller events.
        self.undecodable_entries = 0

    def apply(self, index: int, data: bytes) -> bool:
        """Apply the event committed at ``index``; whether it changed the state.

        An entry that is not a controller event changes nothing (on every
        controller alike) and is logged.
        """
        try:
            event = decode_event(data)
        except EventDecodeError as exc:
            self.undecodable_entries += 1
            logger.error("Raft entry %d is not a controller event, ignored: %s", index, exc)
            return False
        return self.manager.apply(event)

    def snapshot(self) -> bytes:
        """The replicas info of every group."""
        return self.manager.snapshot()

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot (``SnapshotError`` leaves it untouched)."""
        self.manager.restore(data)
