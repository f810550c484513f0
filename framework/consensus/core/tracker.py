"""The leader's view of each peer: DLedger's EntryDispatcher state.

A peer's ``Progress`` is in one of four states. COMPARE walks back from the
leader's last index to find where the peer's log matches; TRUNCATE asks the
peer to drop its divergent suffix; SNAPSHOT sends the leader's snapshot
when the match point was compacted away; APPEND pipelines entries, at most
``max_pending_size`` unacknowledged at once. ``match_index`` is the peer's
watermark in the current term: every entry up to it is known to be on the
peer and equal to the leader's.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from triomq.consensus.core.confchange import Configuration
from triomq.consensus.core.quorum import VoteResult


class ProgressState(enum.Enum):
    """Where the leader's dispatcher for one peer stands."""

    COMPARE = "compare"
    TRUNCATE = "truncate"
    SNAPSHOT = "snapshot"
    APPEND = "append"


@attrs.define
class Progress:
    """Replication state of one peer, owned by the leader."""

    state: ProgressState = ProgressState.COMPARE
    match_index: int = 0
    #: COMPARE: the index being compared (-1: start from the last index).
    compare_index: int = -1
    #: APPEND: the next index to send.
    write_index: int = 0
    #: index -> tick sent, for APPEND pushes not acknowledged yet.
    pending: dict[int, int] = attrs.field(factory=dict)
    #: tick the outstanding COMPARE / TRUNCATE / snapshot was sent (-1: none).
    probe_sent_at: int = -1
    #: TRUNCATE: the term of the peer's first divergent entry.
    conflict_term: int = 0
    bytes_this_tick: int = 0
    commit_sent: int = 0
    recent_active: bool = False

    def become_compare(self) -> None:
        """Start (again) looking for the match point."""
        self.state = ProgressState.COMPARE
        self.compare_index = -1
        self.pending.clear()
        self.probe_sent_at = -1

    def become_append(self, match_index: int) -> None:
        """The peer matches up to ``match_index``: pipeline from the next one."""
        self.state = ProgressState.APPEND
        self.match_index = max(self.match_index, match_index)
        self.write_index = match_index + 1
        self.compare_index = -1
        self.pending.clear()
        self.probe_sent_at = -1

    def acknowledge(self, index: int) -> None:
        """An APPEND up to ``index`` was acknowledged."""
        self.pending.pop(index, None)
        if index > self.match_index:
            self.match_index = index
            # pending is filled in index order, so the acknowledged ones lead.
            while self.pending:
                first = next(iter(self.pending))
                if first > index:
                    break
                del self.pending[first]


class ProgressTracker:
    """Progress of every peer in the configuration, and the votes of an election."""

    def __init__(self, self_id: int, configuration: Configuration) -> None:
        self.self_id = self_id
        self.configuration = configuration
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}
        self.update(configuration)

    def update(self, configuration: Configuration) -> None:
        """Follow a new configuration: track new peers, forget removed ones."""
        self.configuration = configuration
        ids = configuration.ids() - {self.self_id}
        for gone in set(self.progress) - ids:
            del self.progress[gone]
        for new in ids - set(self.progress):
            self.progress[new] = Progress()

    def reset(self) -> None:
        """Fresh progress for every peer (a new leader knows nothing yet)."""
        self.progress = {i: Progress() for i in self.progress}

    def peers(self) -> list[tuple[int, Progress]]:
        """Peers in id order (determinism matters to the simulation)."""
        return sorted(self.progress.items())

    def voters_except_self(self) -> list[int]:
        """Every voter of either half but this node, in id order."""
        return sorted(self.configuration.voters.ids() - {self.self_id})

    def committed(self, self_index: int) -> int:
        """The quorum of watermarks, counting this node at ``self_index``."""
        acked: dict[int, int] = {i: p.match_index for i, p in self.progress.items()}
        acked[self.self_id] = self_index
        return self.configuration.voters.committed_index(acked)

    def record_vote(self, node_id: int, granted: bool) -> None:
        """Remember the first answer of ``node_id`` in this election."""
        self.votes.setdefault(node_id, granted)

    def tally(self) -> VoteResult:
        """The election's result under the (possibly joint) configuration."""
        return self.configuration.voters.vote_result(self.votes)

    def quorum_active(self) -> bool:
        """Did a quorum (this node included) talk to us since the last check?"""
        active: Mapping[int, bool] = {i: p.recent_active for i, p in self.progress.items()}
        result = self.configuration.voters.vote_result({**active, self.self_id: True})
        return result is VoteResult.WON
