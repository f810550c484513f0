"""The follower side of DLedger replication (DLedger's EntryHandler).

A mixin of ``Raft``: it answers COMPARE, TRUNCATE, APPEND and COMMIT pushes
and installs snapshots. Out-of-order APPENDs wait in a bounded buffer
(DLedger's writeRequestMap) until the gap before them fills; duplicates are
answered REPEATED_PUSH; an APPEND that does not fit the log is answered
INCONSISTENT_STATE, which sends the leader back to COMPARE. The periodic
fast-forward check settles buffered pushes that can never proceed. The
APPEND acknowledgements of one ``ready()`` are merged into the highest
(``merge_acks``), which covers the others. A follower only commits
entries it knows equal the current leader's (``_matched``): a stale suffix
is never committed by a heartbeat.
"""

from __future__ import annotations

from triomq.consensus.core.confchange import (
    ConfChangeError,
    Configuration,
)
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
)
from triomq.consensus.core.ready import (
    Role,
    SaveSnapshot,
    TruncateSuffix,
)


def merge_acks(messages: list[Message]) -> list[Message]:
    """Drop the APPEND acknowledgements a later one of the same batch covers.

    A SUCCESS answer to an APPEND says the log matches the leader's up to
    its index, so only the highest per leader and term needs to go: fewer
    messages for both sides under load, the same information.
    """
    highest: dict[tuple[int, int], int] = {}
    for m in messages:
        if _is_ack(m):
            key = (m.dst, m.term)
            highest[key] = max(highest.get(key, 0), m.index)
    if sum(1 for m in messages if _is_ack(m)) == len(highest):
        return messages
    kept: list[Message] = []
    for m in messages:
        if _is_ack(m):
            key = (m.dst, m.term)
            if highest.get(key) != m.index:
                continue
            del highest[key]  # one of equal indexes goes
        kept.append(m)
    return kept


def _is_ack(m: Message) -> bool:
    return (
        type(m) is PushResponse and m.type is PushType.APPEND and m.code is DLedgerCode.SUCCESS
    )


class EntryHandler:
    """Follower-side push handling, mixed into ``Raft`` (uses its state)."""

    def _follow(self, leader_id: int) -> None:
        if self.role is not Role.FOLLOWER or self.leader_id != leader_id:
            self._become_follower(self.term, leader_id)
        self._election_elapsed = 0

    def _advance_follower_commit(self, leader_commit: int) -> None:
        # Only entries known to equal the leader's may be committed here.
        commit = min(leader_commit, self._matched, self.log.last_index)
        if commit > self.commit_index:
            self.commit_index = commit

    def _matches(self, index: int, term: int) -> bool:
        if index <= self.log.snapshot.index:
            return True  # compacted entries were committed, so equal everywhere
        return self.log.term_at(index) == term

    def _on_heartbeat(self, m: HeartbeatRequest) -> None:
        if self.role is Role.LEADER:
            return
        self._follow(m.src)
        self._note_match(m.commit_index, m.commit_term)
        self._advance_follower_commit(m.commit_index)
        self._send(HeartbeatResponse(src=self.id, dst=m.src, term=self.term, read_seq=m.read_seq))

    def _note_match(self, index: int, term: int) -> None:
        """The leader's entry at ``index`` has ``term``: if ours too, the logs match there."""
        if index <= self.log.last_index and self._matches(index, term):
            self._matched = max(self._matched, index)

    def _respond_push(
        self, m: PushRequest, code: DLedgerCode, next_term: int = 0, index: int | None = None
    ) -> None:
        self._send(
            PushResponse(
                src=self.id,
                dst=m.src,
                term=self.term,
                type=m.type,
                code=code,
                index=m.index if index is None else index,
                begin_index=self.log.first_index,
                end_index=self.log.last_index,
                next_term=next_term,
            )
        )

    def _on_push(self, m: PushRequest) -> None:
        if self.role is Role.LEADER:
            return
        self._follow(m.src)
        if m.type is PushType.COMPARE:
            self._buffer.clear()
            self._on_compare(m)
        elif m.type is PushType.TRUNCATE:
            self._buffer.clear()
            self._on_truncate(m)
        elif m.type is PushType.APPEND:
            self._on_append(m)
        else:
            self._note_match(m.index, m.entry_term)
        self._advance_follower_commit(m.commit_index)

    def _on_compare(self, m: PushRequest) -> None:
        if self._matches(m.index, m.entry_term):
            self._matched = max(self._matched, min(m.index, self.log.last_index))
            next_term = self.log.term_at(m.index + 1) or 0
            self._respond_push(m, DLedgerCode.SUCCESS, next_term)
        else:
            self._respond_push(m, DLedgerCode.INCONSISTENT_STATE)

    def _on_truncate(self, m: PushRequest) -> None:
        index = m.index
        if not self._matches(index, m.entry_term) or index > self.log.last_index:
            self._respond_push(m, DLedgerCode.INCONSISTENT_STATE)
            return
        # Drop the suffix only if it is still the one the leader saw: a stale
        # or duplicated TRUNCATE must not remove entries appended since.
        following = self.log.term_at(index + 1)
        if following is not None and following == m.conflict_term and self._matched <= index:
            if index < self.commit_index:
                self._respond_push(m, DLedgerCode.INCONSISTENT_STATE)
                return
            self._truncate_after(index)
        self._matched = max(self._matched, index)
        self._respond_push(m, DLedgerCode.SUCCESS)

    def _on_append(self, m: PushRequest) -> None:
        if m.index > self.log.last_index + 1:
            # Out of order: wait for the gap to fill (DLedger's writeRequestMap).
            if m.index in self._buffer:
                self._respond_push(m, DLedgerCode.REPEATED_PUSH)
            elif len(self._buffer) < self.config.max_buffered_pushes:
                self._buffer[m.index] = (m, self.now)
            return
        self._write_batch(m)
        while True:
            ready = [i for i in self._buffer if i <= self.log.last_index + 1]
            if not ready:
                return
            self._write_batch(self._buffer.pop(min(ready))[0])

    def _write_batch(self, m: PushRequest) -> None:
        """Check the entries we hold, append the rest, answer once for the batch.

        SUCCESS names the last entry now known equal to the leader's;
        INCONSISTENT_STATE names the first that does not fit.
        """
        entries = m.entries
        first = entries[0]
        if (
            first.index == self.log.last_index + 1
            and self._matches(first.index - 1, m.prev_term)
            and first.term >= self.log.last_term
        ):
            # All new and following ours: the common case, in one go. (The
            # message was checked: indexes consecutive, terms non-decreasing.)
            self._extend(entries)
            last = entries[-1].index
            self._matched = max(self._matched, last)
            self._respond_push(m, DLedgerCode.SUCCESS, index=last)
            return
        prev_term = m.prev_term
        for entry in entries:
            index = entry.index
            if index <= self.log.last_index:
                fits = self._matches(index, entry.term)
            else:
                fits = self._matches(index - 1, prev_term) and entry.term >= self.log.last_term
                if fits:
                    self._append(entry)
            if not fits:
                self._respond_push(m, DLedgerCode.INCONSISTENT_STATE, index=index)
                return
            prev_term = entry.term
        last = entries[-1].index
        self._matched = max(self._matched, min(last, self.log.last_index))
        self._respond_push(m, DLedgerCode.SUCCESS, index=last)

    def _check_abnormal_pushes(self) -> None:
        """DLedger's checkAbnormalFuture: settle buffered pushes that cannot proceed."""
        self._fast_forward_elapsed += 1
        if self._fast_forward_elapsed < self.config.fast_forward_ticks or not self._buffer:
            return
        self._fast_forward_elapsed = 0
        for index in sorted(self._buffer):
            if index <= self.log.last_index + 1:
                self._write_batch(self._buffer.pop(index)[0])
        overdue = [
            index
            for index, (_, at) in self._buffer.items()
            if self.now - at >= self.config.push_timeout_ticks
        ]
        if overdue:
            stuck, _ = self._buffer.pop(min(overdue))
            self._respond_push(stuck, DLedgerCode.INCONSISTENT_STATE)

    def _on_install_snapshot(self, m: InstallSnapshotRequest) -> None:
        if self.role is Role.LEADER:
            return
        self._follow(m.src)
        snapshot = m.snapshot
        try:
            Configuration.from_conf_state(snapshot.conf_state)
        except ConfChangeError:
            self._send_snapshot_response(m, DLedgerCode.UNEXPECTED_ARGUMENT)
            return
        if snapshot.index > self.commit_index:
            self._buffer.clear()
            if (
                self.log.last_index > snapshot.index
                and self.log.term_at(snapshot.index) != snapshot.term
            ):
                # A divergent suffix goes; the prefix is covered by the snapshot.
                self._writes.append(TruncateSuffix(snapshot.index + 1))
            self.log.compact(snapshot)
            self._writes.append(SaveSnapshot(snapshot))
            self._config_changed()
            self.commit_index = self.applied_index = snapshot.index
            self._restore = snapshot
        self._matched = max(self._matched, snapshot.index)
        self._send_snapshot_response(m, DLedgerCode.SUCCESS)

    def _send_snapshot_response(self, m: InstallSnapshotRequest, code: DLedgerCode) -> None:
        self._send(
            InstallSnapshotResponse(
                src=self.id, dst=m.src, term=self.term, index=m.snapshot.index, code=code
            )
        )
