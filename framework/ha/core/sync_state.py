"""The master's view of its replica group: acks, confirmOffset, SyncStateSet changes.

Pure: time comes in as ``now_ms``. One tracker per master term.

The SyncStateSet is owned by the controller. The master proposes changes
(shrink a slave whose last connection closed or that stopped catching up,
expand one that caught up) and a change takes effect when the controller
confirms it (``apply``).

The expand race (RocketMQ issue 5663): A is master with SyncStateSet {A};
B catches up and A proposes {A, B}. Until the controller's answer arrives,
a put acked by A alone would complete; if the controller did apply {A, B}
but its answer is lost and A dies, B may be elected without that put. So,
while a proposal is in flight, the *effective* set that acks and
confirmOffset are computed over is the union of the confirmed set and the
proposal: an expand counts the new member at once, a shrink only after it
is confirmed. A proposal whose outcome is unknown (no answer) stays counted
until the controller's set has been read back. Only one proposal is in
flight at a time, and an expand is decided on a fresh view: the slave's
ack is at least the confirmOffset of the effective set (it holds
everything any put may have been acked for) and at least the start of
this master's epoch (it has truncated against this master, so its bytes
are this term's bytes, not a stale tail). Until every member has acked in
this term the confirmOffset is only a floor (a restarted master's starts
at the log's start), so no slave joins before then.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import attrs

__all__ = ["SlaveProgress", "SyncStateTracker"]


@attrs.frozen
class SlaveProgress:
    """What the master knows of one slave in this term."""

    ack_offset: int = -1
    last_caught_up_time_ms: int = 0
    is_async_learner: bool = False
    connections: int = 0

    @property
    def connected(self) -> bool:
        """At least one connection is open (a reconnect may overlap the old one)."""
        return self.connections > 0


class SyncStateTracker:
    """SyncStateSet bookkeeping on the master.

    Members are broker ids, as the controller names them. ``master`` is the
    master's own (always a member; its ack is its own max offset).
    ``started_ms`` is when this term's tracking began: a member that has not
    connected yet is given until ``started_ms + max_time_slave_not_catchup_ms``
    before it is shrunk, so a master restart does not empty the set before
    slaves reconnect.
    """

    def __init__(
        self,
        *,
        master: int,
        sync_state_set: Iterable[int],
        epoch_start_offset: int,
        confirm_offset: int,
        started_ms: int,
        max_time_slave_not_catchup_ms: int,
    ) -> None:
        self.master = master
        self.sync_state_set = frozenset(sync_state_set) | {master}
        self.pending: frozenset[int] | None = None
        self.epoch_start_offset = epoch_start_offset
        self.max_time_slave_not_catchup_ms = max_time_slave_not_catchup_ms
        self.slaves: dict[int, SlaveProgress] = {}
        self._started_ms = started_ms
        self._confirm_offset = confirm_offset

    # -- inputs ----------------------------------------------------------------

    def slave_connected(self, broker_id: int, *, is_async_learner: bool, now_ms: int) -> None:
        """A slave completed its handshake.

        Its ack is unknown again until it acks on this connection: it may have
        restarted and lost bytes it had acked but not flushed.
        """
        old = self.slaves.get(broker_id)
        self.slaves[broker_id] = SlaveProgress(
            ack_offset=-1,
            last_caught_up_time_ms=old.last_caught_up_time_ms if old else self._started_ms,
            is_async_learner=is_async_learner,
            connections=(old.connections if old else 0) + 1,
        )

    def slave_disconnected(self, broker_id: int) -> frozenset[int] | None:
        """One of the slave's connections closed: a proposal without it once its last
        one did, if it is a member and no other proposal is in flight (else the periodic
        shrink takes it out once it has not caught up in time), or None.

        RocketMQ's master drops a slave from the set as its connection closes
        (``removeConnection``): puts that need every member's ack stop waiting on a
        slave that is gone. It rejoins as any slave does, once it has caught up.
        """
        old = self.slaves.get(broker_id)
        if old is None:
            return None
        progress = attrs.evolve(old, connections=max(0, old.connections - 1))
        self.slaves[broker_id] = progress
        if (progress.connected or self.pending is not None or broker_id == self.master
                or broker_id not in self.sync_state_set):
            return None
        return self._propose(self.sync_state_set - {broker_id})

    def slave_acked(self, broker_id: int, ack_offset: int, last_caught_up_time_ms: int) -> None:
        """Record a slave's ack and caught-up time (from its ``MasterConnection``)."""
        old = self.slaves.get(broker_id, SlaveProgress(connections=1))
        self.slaves[broker_id] = attrs.evolve(
            old,
            ack_offset=max(old.ack_offset, ack_offset),
            last_caught_up_time_ms=max(old.last_caught_up_time_ms, last_caught_up_time_ms),
        )

    def apply(self, sync_state_set: Iterable[int]) -> None:
        """The controller confirmed (or imposed) this SyncStateSet; it ends any proposal."""
        self.sync_state_set = frozenset(sync_state_set) | {self.master}
        self.pending = None

    def learn(self, sync_state_set: Iterable[int]) -> None:
        """The controller's set as read in a poll; an in-flight proposal stays counted.

        The proposal may still be committed after the poll was answered, so
        it ends only when the poll shows it applied.
        """
        self.sync_state_set = frozenset(sync_state_set) | {self.master}
        if self.pending == self.sync_state_set:
            self.pending = None

    # -- derived ---------------------------------------------------------------

    @property
    def effective_sync_state_set(self) -> frozenset[int]:
        """The members acks are counted over: confirmed plus in-flight (see module doc)."""
        return frozenset(self._effective_members())

    def _effective_members(self) -> Iterator[int]:
        members = self.sync_state_set | self.pending if self.pending else self.sync_state_set
        return (m for m in members if not self._is_learner(m))

    def ack_offset(self, member: int, master_max_offset: int) -> int:
        """A member's acked offset; the master's is its own max offset; -1 if unknown."""
        if member == self.master:
            return master_max_offset
        progress = self.slaves.get(member)
        return progress.ack_offset if progress else -1

    def confirm_offset(self, master_max_offset: int) -> int:
        """Min ack over the effective SyncStateSet; never goes back.

        While a member has not acked in this term the value holds (RocketMQ
        issue 6662): its log may be anywhere.
        """
        # Over the members, not a set of them: asked at every send and ack.
        low = min(self.ack_offset(m, master_max_offset) for m in self._effective_members())
        if low >= 0:
            self._confirm_offset = max(self._confirm_offset, low)
        return self._confirm_offset

    # -- decisions -------------------------------------------------------------

    def maybe_shrink(self, now_ms: int, master_max_offset: int) -> frozenset[int] | None:
        """A proposal without the members that did not catch up in time, or None.

        A connected slave whose ack is the master's whole log is caught up
        now, whenever it last acked: a RocketMQ slave with nothing new acks
        only every ``haSendHeartbeatInterval`` (5 s), and RocketMQ's master
        counts a slave with nothing left to send as caught up. Async
        learners found in the set are removed too: they never count.
        """
        for member, slave in self.slaves.items():
            if slave.connected and slave.ack_offset >= master_max_offset:
                self.slaves[member] = attrs.evolve(slave, last_caught_up_time_ms=now_ms)
        if self.pending is not None:
            return None
        keep = {self.master}
        for member in self.sync_state_set - {self.master}:
            progress = self.slaves.get(member)
            caught_up = progress.last_caught_up_time_ms if progress else self._started_ms
            lagging = now_ms - caught_up > self.max_time_slave_not_catchup_ms
            if not lagging and not self._is_learner(member):
                keep.add(member)
        return self._propose(frozenset(keep))

    def maybe_expand(self, broker_id: int, master_max_offset: int) -> frozenset[int] | None:
        """A proposal adding ``broker_id`` if it has caught up (see module doc), or None."""
        if self.pending is not None or broker_id in self.sync_state_set:
            return None
        progress = self.slaves.get(broker_id)
        if progress is None or not progress.connected or progress.is_async_learner:
            return None
        ack = progress.ack_offset
        if ack < self.epoch_start_offset or ack < self.confirm_offset(master_max_offset):
            return None
        if any(self.ack_offset(m, master_max_offset) < 0 for m in self._effective_members()):
            # A member has not acked in this term: the confirmOffset is only a floor
            # (after a restart, the log's start), not what puts were acked for.
            return None
        return self._propose(self.sync_state_set | {broker_id})

    def _propose(self, proposal: frozenset[int]) -> frozenset[int] | None:
        if proposal == self.sync_state_set:
            return None
        self.pending = proposal
        return proposal

    def _is_learner(self, member: int) -> bool:
        progress = self.slaves.get(member)
        return bool(progress and progress.is_async_learner)
