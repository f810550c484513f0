"""The leader side of DLedger replication (EntryDispatcher, QuorumAckChecker).

A mixin of ``Raft``, with its proposal API (``propose``, ``propose_many``,
``propose_conf_change``). Per peer the leader COMPAREs from its last index
backwards until the peer's entry matches, TRUNCATEs the peer's divergent
suffix, or sends its snapshot when the match point was compacted; then it
pipelines APPENDs (at most ``max_pending_size`` unacknowledged and
``push_quota_bytes`` per tick), retries those unacknowledged after
``push_timeout_ticks`` and pushes COMMIT to caught-up peers. Proposals
made between two ``ready()`` calls share one commit check and one APPEND
per peer. The commit index is the quorum of this term's watermarks under
the (possibly joint) configuration, for an entry of this term only (Raft's
figure 8). Proposals are answered SUCCESS when committed,
WAIT_QUORUM_ACK_TIMEOUT when not acknowledged in time, TERM_CHANGED when
leadership is lost.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from triomq.consensus.core.confchange import (
    Changer,
    ConfChangeError,
    ConfChangeV2,
)
from triomq.consensus.core.log import Entry, EntryKind
from triomq.consensus.core.messages import (
    DLedgerCode,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    Message,
    PushRequest,
    PushResponse,
    PushType,
    TimeoutNow,
)
from triomq.consensus.core.ready import (
    ProposalResult,
    Role,
)
from triomq.consensus.core.tracker import Progress, ProgressState
from triomq.errors import TriomqError


class ProposalRejected(TriomqError):
    """A proposal or request was refused at once; ``code`` says why.

    ``leader_id`` is the leader this node knows of (0 if none), so a client
    can retry there.
    """

    def __init__(self, code: DLedgerCode, reason: str, leader_id: int = 0) -> None:
        self.code = code
        self.leader_id = leader_id
        super().__init__(f"{code.name}: {reason}")


_DATA = operator.attrgetter("data")
_ENTRY_OVERHEAD = Entry(0, 0).size  # what an entry counts for in quotas beyond its data


def _command_bytes(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"proposal data must be bytes, got {type(data).__name__}")
    return bytes(data)


class EntryPusher:
    """Leader-side replication and commit, mixed into ``Raft`` (uses its state)."""

    def propose(self, data: bytes) -> int:
        """Append an application command; return its index.

        Its fate arrives later as a ``ProposalResult`` in ``ready().results``.
        Raises ProposalRejected when not leader or while transferring.
        """
        return self.propose_many([_command_bytes(data)])

    def propose_many(self, commands: Sequence[bytes]) -> int:
        """Append application commands, in order; return the index of the first.

        The same as ``propose`` of each in turn (each gets its own
        ``ProposalResult``), in one go. All or none are appended.
        """
        self.check_can_propose()
        datas = [d if type(d) is bytes else _command_bytes(d) for d in commands]
        if not datas:
            return self.log.last_index + 1
        term, first = self.term, self.log.last_index + 1
        normal = EntryKind.NORMAL
        self._extend([Entry(i, term, d, normal) for i, d in enumerate(datas, first)])
        pending, proposed = self._pending, (term, self.now)
        for index in range(first, first + len(datas)):
            pending[index] = proposed
        self._dispatch_due = True
        return first

    def propose_conf_change(self, change: ConfChangeV2) -> int:
        """Append a membership change; return its index.

        Refused (ProposalRejected) while an earlier change is uncommitted
        (pendingConfIndex), while joint unless this is the empty change that
        leaves, when asked to leave a non-joint configuration, or when the
        Changer refuses it.
        """
        self.check_can_propose()
        config = self.configuration
        code = DLedgerCode.UNEXPECTED_ARGUMENT
        if self._pending_conf_index > self.commit_index:
            raise ProposalRejected(
                code, f"conf change at {self._pending_conf_index} is not committed yet"
            )
        if config.is_joint and not change.leave_joint():
            raise ProposalRejected(code, "configuration is joint: leave it first")
        if not config.is_joint and change.leave_joint():
            raise ProposalRejected(code, "configuration is not joint: nothing to leave")
        try:
            Changer(config).apply(change)
        except ConfChangeError as error:
            raise ProposalRejected(code, str(error)) from error
        index = self._append_as_leader(EntryKind.CONF_CHANGE, change.encode(), track=True)
        self._pending_conf_index = index
        return index

    def check_can_propose(self) -> None:
        """Raise ProposalRejected if a proposal made now would be refused."""
        if self.role is not Role.LEADER:
            raise ProposalRejected(DLedgerCode.NOT_LEADER, "not the leader", self.leader_id)
        if self._transferee:
            raise ProposalRejected(
                DLedgerCode.LEADER_TRANSFERRING,
                f"leadership is moving to {self._transferee}",
                self.id,
            )

    def _release_early_reads(self) -> None:
        # The commit index is only known to be current once an entry of this
        # term is committed (the leader's no-op); reads wait for that.
        if not self._early_reads or self.log.term_at(self.commit_index) != self.term:
            return
        for context in self._early_reads:
            self._reads.add(self.commit_index, context)
        self._early_reads.clear()
        self._read_states.extend(self._reads.confirmed(self.configuration.voters, self.id))
        if len(self._reads):
            self._broadcast_heartbeat()

    def _append_as_leader(self, kind: EntryKind, data: bytes, track: bool) -> int:
        entry = Entry(self.log.last_index + 1, self.term, data, kind)
        self._append(entry)
        if track:
            self._pending[entry.index] = (self.term, self.now)
        # The commit check and the APPENDs wait for the next ready():
        # proposals made in between share them.
        self._dispatch_due = True
        return entry.index

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self.config.election_ticks:
            self._election_elapsed = 0
            if self.config.check_quorum and not self.tracker.quorum_active():
                self._become_follower(self.term, 0)
                return
            for _, progress in self.tracker.peers():
                progress.recent_active = False
            self._transferee = 0  # a transfer that did not happen in time is abandoned
        if self._heartbeat_elapsed >= self.config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat()
        for peer, progress in self.tracker.peers():
            progress.bytes_this_tick = 0
            self._dispatch(peer, progress, retry=True)
        self._expire_proposals()

    def _expire_proposals(self) -> None:
        # Pending proposals are kept in index order, which is also time order.
        deadline = self.now - self.config.max_wait_ack_ticks
        while self._pending:
            index = next(iter(self._pending))
            term, at = self._pending[index]
            if at > deadline:
                break
            del self._pending[index]
            self._results.append(ProposalResult(index, term, DLedgerCode.WAIT_QUORUM_ACK_TIMEOUT))

    def _broadcast_heartbeat(self) -> None:
        for peer, progress in self.tracker.peers():
            commit = min(self.commit_index, progress.match_index)
            self._send(
                HeartbeatRequest(
                    src=self.id,
                    dst=peer,
                    term=self.term,
                    commit_index=commit,
                    commit_term=self.log.term_at(commit) or 0,
                    read_seq=self._reads.seq,
                )
            )

    def _dispatch_all(self) -> None:
        for peer, progress in self.tracker.peers():
            self._dispatch(peer, progress, retry=False)

    def _push(self, peer: int, push_type: PushType, index: int, **fields: object) -> None:
        self._send(
            PushRequest(
                src=self.id,
                dst=peer,
                term=self.term,
                type=push_type,
                index=index,
                commit_index=self.commit_index,
                **fields,
            )
        )

    def _probe_due(self, progress: Progress) -> bool:
        sent = progress.probe_sent_at
        return sent < 0 or self.now - sent >= self.config.push_timeout_ticks

    def _dispatch(self, peer: int, progress: Progress, retry: bool) -> None:
        """DLedger's EntryDispatcher.doWork for one peer."""
        state = progress.state
        if state is ProgressState.APPEND:
            self._dispatch_append(peer, progress, retry)
            return
        if not self._probe_due(progress):
            return
        if state is ProgressState.COMPARE:
            index = progress.compare_index
            if index < self.log.snapshot.index or index > self.log.last_index:
                index = self.log.last_index
            progress.compare_index = index
            term = self.log.term_at(index)
            assert term is not None
            self._push(peer, PushType.COMPARE, index, entry_term=term)
        elif state is ProgressState.TRUNCATE:
            term = self.log.term_at(progress.compare_index)
            if term is None:  # compacted meanwhile
                progress.state = ProgressState.SNAPSHOT
                self._dispatch(peer, progress, retry)
                return
            self._push(
                peer,
                PushType.TRUNCATE,
                progress.compare_index,
                entry_term=term,
                conflict_term=progress.conflict_term,
            )
        else:
            self._send(
                InstallSnapshotRequest(
                    src=self.id, dst=peer, term=self.term, snapshot=self.log.snapshot
                )
            )
        progress.probe_sent_at = self.now

    def _dispatch_append(self, peer: int, progress: Progress, retry: bool) -> None:
        batch = self.config.max_batch_entries
        if retry:
            timeout = self.config.push_timeout_ticks
            due = [i for i in sorted(progress.pending) if self.now - progress.pending[i] >= timeout]
            done = 0
            while done < len(due):
                first, count = due[done], 1
                while done + count < len(due) and due[done + count] == first + count:
                    count += 1
                count = min(count, batch)
                sent = self._push_entries(peer, progress, first, count)
                if sent < count:
                    return
                done += sent
        while (
            progress.write_index <= self.log.last_index
            and len(progress.pending) < self.config.max_pending_size
        ):
            count = min(
                self.log.last_index - progress.write_index + 1,
                self.config.max_pending_size - len(progress.pending),
                batch,
            )
            sent = self._push_entries(peer, progress, progress.write_index, count)
            progress.write_index += sent
            if sent < count:
                return
        caught_up = progress.write_index > self.log.last_index
        if retry and caught_up and progress.commit_sent < self.commit_index:
            commit = self.commit_index
            self._push(peer, PushType.COMMIT, commit, entry_term=self.log.term_at(commit) or 0)
            progress.commit_sent = self.commit_index

    def _push_entries(self, peer: int, progress: Progress, first: int, count: int) -> int:
        """Send up to ``count`` entries from ``first`` in one APPEND; return how many went.

        Fewer go when the byte quota runs out (at least one per tick goes
        anyway); none when ``first`` was compacted, and the peer then gets
        the snapshot instead.
        """
        if self.log.get(first) is None:
            progress.state = ProgressState.SNAPSHOT
            progress.pending.clear()
            progress.probe_sent_at = -1
            self._dispatch(peer, progress, retry=False)
            return 0
        used = progress.bytes_this_tick
        quota = self.config.push_quota_bytes
        batch = self.log.slice(first, first + count - 1)
        whole = sum(map(len, map(_DATA, batch))) + _ENTRY_OVERHEAD * len(batch)
        if used + whole <= quota:
            used += whole  # the usual case: all of it, without a step per entry
        else:
            fitting: list[Entry] = []
            for entry in batch:
                if used and used + entry.size > quota:
                    break
                used += entry.size
                fitting.append(entry)
            batch = fitting
        if not batch:
            return 0
        progress.bytes_this_tick = used
        prev_term = self.log.term_at(first - 1)
        assert prev_term is not None
        entries = tuple(batch)
        if entries == self._last_pushed:  # compared by identity first: cheap when equal
            entries = self._last_pushed  # the same tuple, so the codec packs it once
        self._last_pushed = entries
        self._push(peer, PushType.APPEND, first, entries=entries, prev_term=prev_term)
        progress.pending.update(dict.fromkeys(range(first, first + len(batch)), self.now))
        progress.commit_sent = self.commit_index
        return len(batch)

    def _on_leader_response(self, m: Message) -> None:
        progress = self.tracker.progress.get(m.src)
        if progress is None:
            return  # not a peer of ours (removed, or unknown)
        progress.recent_active = True
        if isinstance(m, HeartbeatResponse) and m.read_seq:
            voters = self.configuration.voters
            self._read_states.extend(self._reads.acknowledge(m.src, m.read_seq, voters, self.id))
        elif isinstance(m, PushResponse):
            if m.index > self.log.last_index:
                return  # about an entry we never had
            self._on_push_response(m.src, progress, m)
        elif isinstance(m, InstallSnapshotResponse) and (
            progress.state is ProgressState.SNAPSHOT
            and m.code is DLedgerCode.SUCCESS
            and m.index <= self.log.last_index
        ):
            progress.become_append(m.index)
            self._dispatch(m.src, progress, retry=False)

    def _on_push_response(self, peer: int, progress: Progress, m: PushResponse) -> None:
        if m.type is PushType.APPEND:
            if m.code is DLedgerCode.SUCCESS:
                progress.acknowledge(m.index)
                self._maybe_commit()
                self._maybe_send_timeout_now(peer)
            elif m.code is DLedgerCode.INCONSISTENT_STATE and progress.state is (
                ProgressState.APPEND
            ):
                progress.become_compare()
        elif m.type is PushType.COMPARE:
            if progress.state is not ProgressState.COMPARE or m.index != progress.compare_index:
                return  # an answer to an earlier compare
            progress.probe_sent_at = -1
            if m.code is DLedgerCode.SUCCESS:
                if m.index >= m.end_index:
                    progress.become_append(m.index)
                elif self.log.term_at(m.index + 1) == m.next_term:
                    # The peer's next entry is ours too: the match goes further.
                    progress.compare_index = min(m.end_index, self.log.last_index)
                else:
                    progress.state = ProgressState.TRUNCATE
                    progress.conflict_term = m.next_term
            else:
                index = progress.compare_index
                index = m.end_index if index > m.end_index else index - 1
                if index < self.log.snapshot.index:
                    progress.state = ProgressState.SNAPSHOT
                else:
                    progress.compare_index = index
        elif m.type is PushType.TRUNCATE:
            if progress.state is not ProgressState.TRUNCATE or m.index != progress.compare_index:
                return
            progress.probe_sent_at = -1
            if m.code is DLedgerCode.SUCCESS:
                progress.become_append(m.index)
            else:
                progress.become_compare()
        else:
            return
        self._dispatch(peer, progress, retry=False)

    def _maybe_send_timeout_now(self, peer: int) -> None:
        if self._transferee == peer:
            progress = self.tracker.progress.get(peer)
            if progress is not None and progress.match_index == self.log.last_index:
                self._send(TimeoutNow(src=self.id, dst=peer, term=self.term))

    def _maybe_commit(self) -> None:
        candidate = min(self.tracker.committed(self.log.last_index), self.log.last_index)
        # Figure 8: only an entry of the current term is committed by counting.
        if candidate <= self.commit_index or self.log.term_at(candidate) != self.term:
            return
        self.commit_index = candidate
        self._release_early_reads()
        while self._pending:
            index = next(iter(self._pending))
            if index > candidate:
                break
            term, _ = self._pending.pop(index)
            self._results.append(ProposalResult(index, term, DLedgerCode.SUCCESS))
        if candidate >= self.log.configuration_index:
            if not self.configuration.is_voter(self.id):
                self._step_down_removed()
            else:
                self._maybe_auto_leave()

    def _maybe_auto_leave(self) -> None:
        config = self.configuration
        if (
            config.is_joint
            and config.auto_leave
            and self._pending_conf_index <= self.commit_index
            and not self._transferee
        ):
            leave = ConfChangeV2()
            index = self._append_as_leader(EntryKind.CONF_CHANGE, leave.encode(), track=False)
            self._pending_conf_index = index

    def _step_down_removed(self) -> None:
        """The committed configuration no longer has us: hand over and step down."""
        voters = [
            (progress.match_index, peer)
            for peer, progress in self.tracker.peers()
            if self.configuration.is_voter(peer)
        ]
        if voters:
            match, best = max(voters)
            if match == self.log.last_index:
                self._send(TimeoutNow(src=self.id, dst=best, term=self.term))
        self._become_follower(self.term, 0)
