"""Linearizable reads by read index (Raft dissertation 6.4, etcd's ReadIndex).

A read asks the leader for its commit index, then waits until a quorum has
confirmed, by answering a heartbeat sent after the request, that this node
was still the leader. The answer is a ``ReadState``: once the application
has applied up to ``index`` it may serve the read. Reads are numbered; a
heartbeat carries the highest number issued, and a peer's answer to it
vouches for every read up to that number.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.consensus.core.messages import DLedgerCode
from triomq.consensus.core.quorum import JointConfig, VoteResult


@attrs.frozen
class ReadState:
    """The answer to ``Raft.read_index(context)``.

    SUCCESS: serve the read once applied up to ``index``. TERM_CHANGED: this
    node stopped leading before it could confirm; retry at the new leader.
    """

    context: bytes
    index: int
    code: DLedgerCode = DLedgerCode.SUCCESS


@attrs.define
class _Read:
    seq: int
    index: int
    context: bytes


class ReadQueue:
    """The leader's reads waiting for a quorum of heartbeat answers."""

    def __init__(self) -> None:
        self.seq = 0
        self._reads: list[_Read] = []
        self._acked: dict[int, int] = {}  # peer -> highest read seq it vouched for

    def __len__(self) -> int:
        return len(self._reads)

    def add(self, index: int, context: bytes) -> int:
        """Queue a read at commit ``index``; return its number."""
        self.seq += 1
        self._reads.append(_Read(self.seq, index, context))
        return self.seq

    def acknowledge(
        self, peer: int, seq: int, voters: JointConfig, self_id: int
    ) -> list[ReadState]:
        """``peer`` answered a heartbeat carrying ``seq``: return the reads now confirmed."""
        if seq <= self._acked.get(peer, 0):
            return []
        self._acked[peer] = min(seq, self.seq)
        return self.confirmed(voters, self_id)

    def confirmed(self, voters: JointConfig, self_id: int) -> list[ReadState]:
        """Pop the reads a quorum (this node included) has vouched for."""
        done: list[ReadState] = []
        while self._reads:
            read = self._reads[0]
            votes: Mapping[int, bool] = {
                peer: acked >= read.seq for peer, acked in self._acked.items()
            }
            if voters.vote_result({**votes, self_id: True}) is not VoteResult.WON:
                break
            self._reads.pop(0)
            done.append(ReadState(read.context, read.index))
        return done

    def fail_all(self) -> list[ReadState]:
        """Leadership is lost: every waiting read fails."""
        failed = [ReadState(r.context, r.index, DLedgerCode.TERM_CHANGED) for r in self._reads]
        self._reads.clear()
        self._acked.clear()
        return failed
