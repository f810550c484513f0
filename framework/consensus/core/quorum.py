"""Majority and joint quorums.

A ``MajorityConfig`` is a set of voters; a ``JointConfig`` is two of them
(``incoming`` and ``outgoing``) that must both agree while a membership
change is in flight. Outside a change ``outgoing`` is empty, and an empty
majority config agrees with everything, so the joint rules reduce to the
simple ones.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping

import attrs

#: The committed index of an empty configuration: larger than any real index,
#: so that it never lowers the minimum taken over a joint configuration. An
#: ``int`` (not ``math.inf``) keeps index arithmetic integral.
UNBOUNDED_INDEX = 2**63 - 1


class VoteResult(enum.Enum):
    """The outcome of counting votes."""

    PENDING = "pending"
    LOST = "lost"
    WON = "won"


def _voter_set(voters: Iterable[int]) -> frozenset[int]:
    return frozenset(voters)


@attrs.frozen
class MajorityConfig:
    """A set of voters deciding by simple majority."""

    voters: frozenset[int] = attrs.field(factory=frozenset, converter=_voter_set)

    def __len__(self) -> int:
        return len(self.voters)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.voters

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self.voters))

    def committed_index(self, acked: Mapping[int, int]) -> int:
        """The highest index acknowledged by a majority of the voters.

        Voters missing from ``acked`` count as having acknowledged 0. An
        empty configuration returns ``UNBOUNDED_INDEX``.
        """
        if not self.voters:
            return UNBOUNDED_INDEX
        indexes = sorted((acked.get(v, 0) for v in self.voters), reverse=True)
        return indexes[len(indexes) // 2]

    def vote_result(self, votes: Mapping[int, bool]) -> VoteResult:
        """WON with a majority of yes, LOST once a majority is impossible.

        Voters missing from ``votes`` have not voted yet. An empty
        configuration wins (it is the absent half of a joint config).
        """
        if not self.voters:
            return VoteResult.WON
        yes = sum(1 for v in self.voters if votes.get(v) is True)
        missing = sum(1 for v in self.voters if v not in votes)
        quorum = len(self.voters) // 2 + 1
        if yes >= quorum:
            return VoteResult.WON
        if yes + missing >= quorum:
            return VoteResult.PENDING
        return VoteResult.LOST


def _majority(value: MajorityConfig | Iterable[int]) -> MajorityConfig:
    return value if isinstance(value, MajorityConfig) else MajorityConfig(value)


@attrs.frozen
class JointConfig:
    """Two majority configs that must both agree (``outgoing`` empty when not joint)."""

    incoming: MajorityConfig = attrs.field(factory=MajorityConfig, converter=_majority)
    outgoing: MajorityConfig = attrs.field(factory=MajorityConfig, converter=_majority)

    @property
    def is_joint(self) -> bool:
        """True while a membership change is in flight."""
        return bool(self.outgoing.voters)

    def ids(self) -> frozenset[int]:
        """Every voter of either half."""
        return self.incoming.voters | self.outgoing.voters

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.incoming.voters or node_id in self.outgoing.voters

    def committed_index(self, acked: Mapping[int, int]) -> int:
        """The smaller of the two halves' committed indexes."""
        return min(self.incoming.committed_index(acked), self.outgoing.committed_index(acked))

    def vote_result(self, votes: Mapping[int, bool]) -> VoteResult:
        """WON if both halves won, LOST if either lost, else PENDING."""
        first = self.incoming.vote_result(votes)
        second = self.outgoing.vote_result(votes)
        if first is second:
            return first
        if VoteResult.LOST in (first, second):
            return VoteResult.LOST
        return VoteResult.PENDING
