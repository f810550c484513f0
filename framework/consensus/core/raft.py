"""The Raft state machine: elections, DLedger push replication, membership.

``Raft`` is pure: no clock, no I/O, no trio. A driver calls ``tick()`` at a
fixed interval, ``step(message)`` for every message received, and the
``propose*`` / ``transfer_leadership`` / ``compact`` methods for its users;
then it takes ``ready()`` and carries it out in the order ``Ready``
documents (persist, then send, then apply). Randomness (election timeouts)
comes from a seeded ``random.Random``, so a run is reproducible.

Replication follows DLedger (seed 004): per peer, the leader COMPAREs
entries walking back from its last index, TRUNCATEs the peer's divergent
suffix, then pipelines APPENDs (at most ``max_pending_size`` in flight and
``push_quota_bytes`` per tick), retrying those not acknowledged within
``push_timeout_ticks``. Followers buffer out-of-order APPENDs, answer
REPEATED_PUSH for duplicates and INCONSISTENT_STATE when an entry does not
fit, and the fast-forward check answers INCONSISTENT_STATE for a buffered
push that waited too long behind a gap. The commit index is the quorum of
the current term's watermarks under the (possibly joint) configuration,
and only an entry of the current term is committed directly (Raft's
figure 8). Configurations take effect when their entry is appended (Raft
paper), which keeps joint consensus safe across restarts.

Driver contract with a ``triomq.store.EntryLog``: on start, ``Raft(
node_id, config, hard_state=HardState(term, vote), snapshot=stored_snapshot,
entries=[Entry.from_record(e.index, e.term, e.data) for e in entry_log])``;
a new cluster's founders start from ``log.bootstrap_entries``. Each write of
a ``Ready``, in order: ``PersistHardState`` -> ``set_hard_state``;
``TruncateSuffix(i)`` -> ``truncate_suffix(i)``; ``AppendEntries`` ->
``append_records`` of each ``(e.index, e.term, e.to_record())``; ``SaveSnapshot(s)`` ->
store ``s`` (data and conf state) durably, then ``compact_prefix(s.index +
1, s.term)``. Then ``sync()``, send ``Ready.messages``, and apply.

The leader side, proposals included, lives in ``pusher``
(``EntryPusher``), the follower side in ``handler`` (``EntryHandler``); both
are mixins of ``Raft`` sharing its state. This module keeps the rest of the
public API, roles, elections and ``Ready``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import attrs

from triomq.consensus.core.confchange import (
    Configuration,
)
from triomq.consensus.core.handler import EntryHandler, merge_acks
from triomq.consensus.core.log import (
    Entry,
    EntryKind,
    HardState,
    LogError,
    RaftLog,
    Snapshot,
    bootstrap_entries,
)
from triomq.consensus.core.messages import (
    DLedgerCode,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallSnapshotRequest,
    Message,
    PushRequest,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    problem,
)
from triomq.consensus.core.pusher import EntryPusher, ProposalRejected
from triomq.consensus.core.quorum import VoteResult
from triomq.consensus.core.readindex import ReadQueue, ReadState
from triomq.consensus.core.ready import (
    PersistHardState,
    ProposalResult,
    Ready,
    Role,
    SaveSnapshot,
    SoftState,
    TruncateSuffix,
    Write,
    coalesce,
)
from triomq.consensus.core.tracker import ProgressTracker
from triomq.errors import ConfigError

__all__ = ["ProposalRejected", "Raft", "RaftSettings", "bootstrap_entries"]

_LEADER_MESSAGES = (HeartbeatRequest, PushRequest, InstallSnapshotRequest, TimeoutNow)


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if type(value) is not int or value < 1:
        raise ConfigError(f"must be a positive integer, got {value!r}", attribute.name)


@attrs.frozen(kw_only=True)
class RaftSettings:
    """Timing and flow-control settings, in ticks and bytes.

    With a 100 ms tick the defaults give heartbeats every 100 ms, elections
    after 1-2 s of silence, push retries after 500 ms and proposals timed out
    after 2.5 s (DLedger's maxWaitAckTimeMs). An APPEND carries up to
    ``max_batch_entries`` entries (DLedger's batch push).
    """

    election_ticks: int = attrs.field(default=10, validator=_positive)
    heartbeat_ticks: int = attrs.field(default=1, validator=_positive)
    pre_vote: bool = True
    check_quorum: bool = True
    max_pending_size: int = attrs.field(default=1000, validator=_positive)
    max_batch_entries: int = attrs.field(default=64, validator=_positive)
    push_quota_bytes: int = attrs.field(default=2 * 1024 * 1024, validator=_positive)
    push_timeout_ticks: int = attrs.field(default=5, validator=_positive)
    max_wait_ack_ticks: int = attrs.field(default=25, validator=_positive)
    max_buffered_pushes: int = attrs.field(default=1000, validator=_positive)
    fast_forward_ticks: int = attrs.field(default=5, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_ticks >= self.election_ticks:
            raise ConfigError("must be smaller than election_ticks", "heartbeat_ticks")


class Raft(EntryPusher, EntryHandler):
    """One node's Raft state machine."""

    def __init__(
        self,
        node_id: int,
        config: RaftSettings | None = None,
        *,
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
        entries: Iterable[Entry] = (),
        rng: random.Random | None = None,
    ) -> None:
        if type(node_id) is not int or node_id < 1:
            raise ConfigError(f"must be a positive integer, got {node_id!r}", "node_id")
        self.id = node_id
        self.config = config or RaftSettings()
        hard_state = hard_state or HardState()
        self.log = RaftLog(snapshot or Snapshot(), entries)
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.role = Role.FOLLOWER
        self.leader_id = 0
        self.commit_index = self.log.snapshot.index
        self.applied_index = self.log.snapshot.index
        self.tracker = ProgressTracker(node_id, self.log.configuration)
        self.now = 0
        #: Messages refused as malformed, for observability.
        self.dropped_messages = 0
        self._rng = rng or random.Random(node_id)
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self.config.election_ticks
        self._pending: dict[int, tuple[int, int]] = {}  # index -> (term, tick proposed)
        self._pending_conf_index = 0
        self._dispatch_due = False  # new entries wait for ready() to go out
        self._last_pushed: tuple[Entry, ...] = ()  # the entries of the last APPEND made
        self._reads = ReadQueue()
        self._early_reads: list[bytes] = []  # asked before this term's first commit
        self._read_states: list[ReadState] = []
        self._transferee = 0
        # Follower side (DLedger's EntryHandler).
        self._buffer: dict[int, tuple[PushRequest, int]] = {}  # writeRequestMap
        self._matched = 0  # highest index known equal to the current leader's log
        self._fast_forward_elapsed = 0
        # Outputs gathered for the next ready().
        self._writes: list[Write | list[Entry]] = []
        self._messages: list[Message] = []
        self._results: list[ProposalResult] = []
        self._restore: Snapshot | None = None
        self._soft = self._soft_state()
        self._conf_changed = False
        self._reset_election_timer()

    # ------------------------------------------------------------------ API

    @property
    def configuration(self) -> Configuration:
        """The configuration in force (the latest in the log)."""
        return self.log.configuration

    @property
    def hard_state(self) -> HardState:
        """The current term and vote."""
        return HardState(self.term, self.vote)

    @property
    def transferee(self) -> int:
        """The node leadership is being handed to (0 if none)."""
        return self._transferee

    def tick(self) -> None:
        """Advance logical time by one tick."""
        self.now += 1
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def campaign(self) -> None:
        """Start an election now (with pre-vote if configured)."""
        if self.role is not Role.LEADER:
            self._campaign(transfer=False)

    def step(self, message: Message) -> None:
        """Handle one received message.

        Malformed and misaddressed messages are dropped. The leader of the
        current term is followed whatever this node's configuration says: a
        lagging member's configuration may predate the leader joining (as in
        etcd raft, only the term decides who leads).
        """
        if problem(message) is not None or message.dst != self.id or message.src == self.id:
            self.dropped_messages += 1
            return
        if not self._step_term(message):
            return
        if isinstance(message, VoteRequest):
            self._on_vote_request(message)
        elif isinstance(message, VoteResponse):
            self._on_vote_response(message)
        elif isinstance(message, HeartbeatRequest):
            self._on_heartbeat(message)
        elif isinstance(message, PushRequest):
            self._on_push(message)
        elif isinstance(message, InstallSnapshotRequest):
            self._on_install_snapshot(message)
        elif isinstance(message, TimeoutNow):
            self._on_timeout_now(message)
        elif self.role is Role.LEADER:
            self._on_leader_response(message)

    def read_index(self, context: bytes) -> None:
        """Ask for a linearizable read point, answered by a ``ReadState``.

        The answer (in ``ready().read_states``, carrying ``context``) comes
        once a quorum has confirmed this node still leads; serve the read
        when the application has applied up to its index. Raises
        ProposalRejected (NOT_LEADER) on a follower.
        """
        if self.role is not Role.LEADER:
            raise ProposalRejected(DLedgerCode.NOT_LEADER, "not the leader", self.leader_id)
        self._early_reads.append(bytes(context))
        self._release_early_reads()

    def transfer_leadership(self, target: int) -> None:
        """Hand leadership to voter ``target`` once it has caught up.

        Proposals are refused (LEADER_TRANSFERRING) until it happens or an
        election timeout passes.
        """
        if self.role is not Role.LEADER:
            raise ProposalRejected(DLedgerCode.NOT_LEADER, "not the leader", self.leader_id)
        if target == self.id:
            return
        if target not in self.tracker.progress or not self.configuration.is_voter(target):
            raise ProposalRejected(
                DLedgerCode.UNEXPECTED_ARGUMENT, f"node {target} is not a voter", self.id
            )
        self._transferee = target
        self._election_elapsed = 0
        self._maybe_send_timeout_now(target)

    def compact(self, index: int, data: bytes) -> None:
        """Record the application's snapshot ``data`` taken at applied ``index``.

        Entries up to ``index`` are dropped from the log (a ``SaveSnapshot``
        write). Raises LogError if ``index`` is not applied yet.
        """
        if index > self.applied_index:
            raise LogError(f"compact: {index} is beyond the applied index {self.applied_index}")
        if index <= self.log.snapshot.index:
            return
        term = self.log.term_at(index)
        if term is None:
            raise LogError(f"compact: no entry at {index}")
        snapshot = Snapshot(index, term, self.log.configuration_at(index).to_conf_state(), data)
        self.log.compact(snapshot)
        self._writes.append(SaveSnapshot(snapshot))

    def has_ready(self) -> bool:
        """Is there anything for the driver to do?"""
        return bool(
            self._writes
            or self._messages
            or self._results
            or self._read_states
            or self._restore
            or self.commit_index > self.applied_index
            or self._conf_changed
            or self._soft_state() != self._soft
        )

    def ready(self) -> Ready:
        """Take everything produced since the last call (see ``Ready``)."""
        if self._dispatch_due:
            self._dispatch_due = False
            if self.role is Role.LEADER:
                self._maybe_commit()
            if self.role is Role.LEADER:  # a removed leader steps down on commit
                self._dispatch_all()
        committed: tuple[Entry, ...] = ()
        if self.commit_index > self.applied_index:
            committed = tuple(self.log.slice(self.applied_index + 1, self.commit_index))
            self.applied_index = self.commit_index
        soft = self._soft_state()
        ready = Ready(
            writes=coalesce(self._writes),
            messages=tuple(
                self._messages if self.role is Role.LEADER else merge_acks(self._messages)
            ),
            snapshot=self._restore,
            committed_entries=committed,
            results=tuple(self._results),
            read_states=tuple(self._read_states),
            soft_state=soft if soft != self._soft else None,
            conf_state=self.configuration.to_conf_state() if self._conf_changed else None,
        )
        self._soft = soft
        self._writes, self._messages, self._results = [], [], []
        self._read_states = []
        self._restore = None
        self._conf_changed = False
        return ready

    # ------------------------------------------------------------ internals

    def _soft_state(self) -> SoftState:
        return SoftState(self.role, self.leader_id, self.term)

    def _send(self, message: Message) -> None:
        self._messages.append(message)

    def _set_hard_state(self, term: int, vote: int) -> None:
        if (term, vote) != (self.term, self.vote):
            self.term, self.vote = term, vote
            self._writes.append(PersistHardState(HardState(term, vote)))

    def _reset_election_timer(self) -> None:
        self._election_elapsed = 0
        low = self.config.election_ticks
        self._randomized_timeout = self._rng.randint(low, 2 * low - 1)

    def _promotable(self) -> bool:
        # A node dropped by an uncommitted configuration may still be needed
        # to commit it (Raft dissertation, 4.2.2), so it keeps campaigning.
        if self.configuration.is_voter(self.id):
            return True
        configs = self.log.configurations_since(self.commit_index)
        return any(c.is_voter(self.id) for c in configs)

    def _in_lease(self) -> bool:
        return (
            self.config.check_quorum
            and self.leader_id != 0
            and self._election_elapsed < self.config.election_ticks
        )

    def _config_changed(self) -> None:
        self.tracker.update(self.configuration)
        self._conf_changed = True

    def _append(self, entry: Entry) -> None:
        self._extend((entry,))

    def _extend(self, entries: Sequence[Entry]) -> None:
        """``_append`` of each of ``entries``, in one go."""
        before = self.log.configuration
        self.log.extend(entries)
        writes = self._writes
        # Consecutive appends gather in one list, which coalesce() turns
        # into a single AppendEntries.
        if writes and type(writes[-1]) is list:
            writes[-1].extend(entries)
        else:
            writes.append(list(entries))
        if self.log.configuration is not before:
            self._config_changed()

    def _truncate_after(self, index: int) -> None:
        before = self.configuration
        self.log.truncate_after(index)
        self._writes.append(TruncateSuffix(index + 1))
        if self.configuration is not before:
            self._config_changed()

    def _fail_pending(self, code: DLedgerCode) -> None:
        for index, (term, _) in self._pending.items():
            self._results.append(ProposalResult(index, term, code))
        self._pending.clear()

    # --------------------------------------------------------- role changes

    def _become_follower(self, term: int, leader_id: int) -> None:
        if self.role is Role.LEADER or term > self.term:
            self._fail_pending(DLedgerCode.TERM_CHANGED)
        if self.role is Role.LEADER:
            self._read_states.extend(self._reads.fail_all())
            lost = DLedgerCode.TERM_CHANGED
            self._read_states.extend(ReadState(c, 0, lost) for c in self._early_reads)
            self._early_reads.clear()
        if term > self.term:
            self._set_hard_state(term, 0)
            self._matched = 0
        if leader_id != self.leader_id:
            self._matched = 0
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self._transferee = 0
        self._buffer.clear()
        self._reset_election_timer()

    def _campaign(self, transfer: bool) -> None:
        if not self._promotable():
            return
        if self.config.pre_vote and not transfer:
            self._become_pre_candidate()
        else:
            self._become_candidate(force=transfer)

    def _start_election(self, role: Role) -> None:
        self.role = role
        self.leader_id = 0
        self._buffer.clear()
        self._reset_election_timer()
        self.tracker.votes = {}
        self.tracker.record_vote(self.id, True)

    def _become_pre_candidate(self) -> None:
        self._start_election(Role.PRE_CANDIDATE)
        if self.tracker.tally() is VoteResult.WON:
            self._become_candidate(force=False)
            return
        self._request_votes(self.term + 1, pre_vote=True, force=False)

    def _become_candidate(self, force: bool) -> None:
        self._set_hard_state(self.term + 1, self.id)
        self._matched = 0
        self._start_election(Role.CANDIDATE)
        if self.tracker.tally() is VoteResult.WON:
            self._become_leader()
            return
        self._request_votes(self.term, pre_vote=False, force=force)

    def _request_votes(self, term: int, pre_vote: bool, force: bool) -> None:
        for voter in self.tracker.voters_except_self():
            self._send(
                VoteRequest(
                    src=self.id,
                    dst=voter,
                    term=term,
                    last_index=self.log.last_index,
                    last_term=self.log.last_term,
                    pre_vote=pre_vote,
                    force=force,
                )
            )

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id
        self._buffer.clear()
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._transferee = 0
        self.tracker.reset()
        self._reads = ReadQueue()
        # Any conf change in the uncommitted tail must commit before the next.
        self._pending_conf_index = self.log.last_index
        self._append(Entry(self.log.last_index + 1, self.term, b"", EntryKind.NOOP))
        self._broadcast_heartbeat()
        self._maybe_commit()
        self._dispatch_all()

    # ------------------------------------------------------------ elections

    def _step_term(self, m: Message) -> bool:
        """Apply the term rules; False if the message needs no further handling."""
        if m.term > self.term:
            if isinstance(m, VoteRequest):
                if not m.force and self._in_lease():
                    return False  # we still follow a live leader
                if not m.pre_vote:
                    self._become_follower(m.term, 0)
            elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                pass  # granted pre-votes carry our future term
            else:
                self._become_follower(m.term, m.src if isinstance(m, _LEADER_MESSAGES) else 0)
            return True
        if m.term < self.term:
            if isinstance(m, HeartbeatRequest | PushRequest | InstallSnapshotRequest):
                # Tell a stale leader about the newer term so it steps down.
                self._send(HeartbeatResponse(src=self.id, dst=m.src, term=self.term))
            elif isinstance(m, VoteRequest) and m.pre_vote:
                self._send(
                    VoteResponse(
                        src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=True
                    )
                )
            return False
        return True

    def _on_vote_request(self, m: VoteRequest) -> None:
        can_vote = (
            self.vote == m.src
            or (self.vote == 0 and self.leader_id == 0)
            or (m.pre_vote and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.last_index, m.last_term):
            if not m.pre_vote:
                self._set_hard_state(self.term, m.src)
                self._reset_election_timer()
            self._send(
                VoteResponse(src=self.id, dst=m.src, term=m.term, granted=True, pre_vote=m.pre_vote)
            )
        else:
            self._send(
                VoteResponse(
                    src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=m.pre_vote
                )
            )

    def _on_vote_response(self, m: VoteResponse) -> None:
        expected = Role.PRE_CANDIDATE if m.pre_vote else Role.CANDIDATE
        if self.role is not expected:
            return
        if m.pre_vote and m.granted and m.term != self.term + 1:
            return  # a grant from another pre-campaign
        self.tracker.record_vote(m.src, m.granted)
        result = self.tracker.tally()
        if result is VoteResult.WON:
            if m.pre_vote:
                self._become_candidate(force=False)
            else:
                self._become_leader()
        elif result is VoteResult.LOST:
            self._become_follower(self.term, 0)

    def _on_timeout_now(self, m: TimeoutNow) -> None:
        if self.role is not Role.LEADER:
            self._campaign(transfer=True)

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self.role is Role.FOLLOWER:
            self._check_abnormal_pushes()
        if self._promotable() and self._election_elapsed >= self._randomized_timeout:
            self._campaign(transfer=False)
