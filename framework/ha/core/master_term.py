"""One master term's rules above the frames (sans-I/O): SyncStateSet changes and synchronous puts.

A ``MasterTerm`` lives from a replica's ``change_to_master`` to the end
of that role. Its pumps (``triomq.ha.master_driver.HAMaster`` over trio,
the cluster simulation over virtual time) feed it what the slave
connections report and the controller answers, and carry out what it
decides:

- **SyncStateSet.** Every ``check_sync_state_set_period`` (``check``)
  and on each ack, the tracker (``triomq.ha.core.sync_state``) may propose a
  shrink or an expand; proposals queue for the reporter
  (``next_proposal``), one answered before the next (``answered``). A
  proposal whose outcome is unknown is asked again at the next check.
- **Synchronous puts.** ``add_put`` registers a put ending at an offset;
  ``completed`` and ``expired`` say which puts ended how
  (``triomq.ha.core.sync_replication``).
- **Fencing.** Once the controller says a newer master exists (``fence``)
  pending puts fail and none completes any more.
- **Ending.** ``end`` abandons the pending puts: their callers hear that
  this replica is no longer master.

Its first confirm offset carries over what the previous term confirmed
(``carried_confirm_offset``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

import attrs

from triomq.ha.core.sync_replication import PutResult, ReplicationStatus, SyncReplication
from triomq.ha.core.sync_state import SyncStateTracker

__all__ = ["HAMasterConfig", "MasterTerm", "carried_confirm_offset"]


@attrs.frozen
class HAMasterConfig:
    """Master-side settings: RocketMQ's names in snake_case, times in ms.

    Defaults aim at a LAN and sub-second failover (RocketMQ's in brackets):
    heartbeat 200 (5000), a slave out of sync after 2000 without catching
    up (15000), SyncStateSet checked every 500 (5000); batch 32 KiB.

    What a peer of the HA port may hold is bounded: a connection closes if
    no slave handshake arrives within ``ha_handshake_timeout``, or if a
    send to its slave makes no progress for ``ha_write_timeout`` (a slave
    that stopped reading); the port serves at most ``ha_max_connections``
    at once.
    """

    ha_transfer_batch_size: int = 32 * 1024
    ha_send_heartbeat_interval: int = 200
    ha_max_time_slave_not_catchup: int = 2000
    check_sync_state_set_period: int = 500
    all_ack_in_sync_state_set: bool = False
    min_in_sync_replicas: int = 1
    ha_handshake_timeout: int = 3000
    ha_write_timeout: int = 3000
    ha_max_connections: int = 64


def carried_confirm_offset(confirmed: int, max_offset: int, min_offset: int) -> int:
    """A new master term's first confirm offset.

    What the previous term confirmed still holds (capped at the log's end);
    past it nothing is confirmed until this term's members ack. With no
    term before (``confirmed`` -1: a restart) nothing is known to be
    confirmed: the log's start.
    """
    return min(confirmed, max_offset) if confirmed >= 0 else min_offset


class MasterTerm:
    """The SyncStateSet, proposals and synchronous puts of one master term."""

    def __init__(self, *, broker_id: int, sync_state_set: frozenset[int], epoch_start_offset: int,
                 confirm_offset: int, now_ms: int, config: HAMasterConfig) -> None:
        self.config = config
        self.tracker = SyncStateTracker(
            master=broker_id,
            sync_state_set=sync_state_set | {broker_id},
            epoch_start_offset=epoch_start_offset,
            confirm_offset=confirm_offset,
            started_ms=now_ms,
            max_time_slave_not_catchup_ms=config.ha_max_time_slave_not_catchup,
        )
        self.puts = SyncReplication(
            all_ack_in_sync_state_set=config.all_ack_in_sync_state_set,
            min_in_sync_replicas=config.min_in_sync_replicas,
        )
        #: Set once the controller said a newer master was elected.
        self.fenced = False
        #: Whether a proposal is with the reporter (its outcome not yet known).
        self.reporting = False
        self._proposals: deque[frozenset[int]] = deque()

    def confirm_offset(self, max_offset: int) -> int:
        """Min ack over the effective SyncStateSet (never goes back)."""
        return self.tracker.confirm_offset(max_offset)

    # -- the SyncStateSet ---------------------------------------------------------

    def check(self, now_ms: int, max_offset: int) -> int | None:
        """The periodic check: shrink, expand, ask an unknown outcome again.

        Returns when to check next (None once fenced: no more changes).
        """
        if self.fenced:
            return None
        tracker = self.tracker
        if not self.reporting:
            # A proposal whose outcome is unknown is asked again.
            self._propose(tracker.pending)
        self._propose(tracker.maybe_shrink(now_ms, max_offset))
        for slave in sorted(tracker.slaves):
            self._propose(tracker.maybe_expand(slave, max_offset))
        return now_ms + self.config.check_sync_state_set_period

    def slave_joined(self, broker_id: int, *, is_async_learner: bool, now_ms: int) -> None:
        """The slave ``broker_id`` completed its handshake."""
        self.tracker.slave_connected(broker_id, is_async_learner=is_async_learner, now_ms=now_ms)

    def slave_acked(self, broker_id: int, ack_offset: int, last_caught_up_time_ms: int,
                    max_offset: int) -> None:
        """A slave acked: it may have caught up enough to join the set."""
        self.tracker.slave_acked(broker_id, ack_offset, last_caught_up_time_ms)
        self._propose(self.tracker.maybe_expand(broker_id, max_offset))

    def slave_left(self, broker_id: int) -> None:
        """One of a slave's connections closed: its last one takes it out of the set."""
        self._propose(self.tracker.slave_disconnected(broker_id))

    def _propose(self, proposal: frozenset[int] | None) -> None:
        if proposal is not None and not self.fenced:
            self.reporting = True
            self._proposals.append(proposal)

    @property
    def has_proposals(self) -> bool:
        """Whether a proposal waits for the reporter."""
        return bool(self._proposals)

    def next_proposal(self) -> frozenset[int] | None:
        """The next proposal for the reporter, if any."""
        return self._proposals.popleft() if self._proposals else None

    def answered(self, current: frozenset[int] | None) -> None:
        """The controller's set after a proposal (None: unknown, the proposal stays counted).

        A newer proposal waiting for the reporter stays counted: this answer
        is not its own, and the controller may still apply it.
        """
        if current is not None:
            if self._proposals:
                self.tracker.learn(current)
            else:
                self.tracker.apply(current)
        self.reporting = False

    def committed(self, sync_state_set: frozenset[int]) -> None:
        """The controller's SyncStateSet of this term, as a poll read it."""
        self.tracker.learn(sync_state_set)

    def fence(self) -> list[PutResult]:
        """A newer master exists: the pending puts fail, none completes any more."""
        self.fenced = True
        self._proposals.clear()
        return self.puts.abandon(ReplicationStatus.FLUSH_SLAVE_TIMEOUT)

    # -- synchronous puts --------------------------------------------------------------

    def add_put(self, waiter: Hashable, next_offset: int, deadline_ms: int
                ) -> ReplicationStatus | None:
        """Wait for the bytes before ``next_offset``; a status if the put fails at once."""
        if self.fenced:
            return ReplicationStatus.FLUSH_SLAVE_TIMEOUT
        failed = self.puts.add(waiter, next_offset, deadline_ms,
                               self.tracker.effective_sync_state_set)
        return failed.status if failed is not None else None

    def replicated(self, next_offset: int, max_offset: int) -> bool:
        """Whether the acks already cover the bytes before ``next_offset``: a put ending
        there is done without waiting (never once fenced)."""
        if self.fenced:
            return False
        members = self.tracker.effective_sync_state_set
        if len(members) < self.puts.min_in_sync_replicas:
            return False
        return next_offset <= self.puts.reached(self._acks(members, max_offset), members)

    def completed(self, max_offset: int) -> list[PutResult]:
        """The puts the acks now cover (none once fenced)."""
        if self.fenced:
            return []
        members = self.tracker.effective_sync_state_set
        return self.puts.update(self._acks(members, max_offset), members)

    def _acks(self, members: frozenset[int], max_offset: int) -> dict[int, int]:
        return {m: self.tracker.ack_offset(m, max_offset) for m in members}

    def expired(self, now_ms: int) -> list[PutResult]:
        """The puts whose deadline passed."""
        return self.puts.expire(now_ms)

    def withdraw(self, waiter: Hashable) -> None:
        """Forget a put whose caller stopped waiting."""
        self.puts.discard(waiter)

    def end(self) -> list[Hashable]:
        """The term ends: the waiters of the pending puts (this replica is no longer master)."""
        abandoned = self.puts.abandon(ReplicationStatus.FLUSH_SLAVE_TIMEOUT)
        return [result.waiter for result in abandoned]
