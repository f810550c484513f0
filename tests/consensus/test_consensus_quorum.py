"""Quorum rules, checked exhaustively on small configurations."""

from __future__ import annotations

import itertools

import pytest

from triomq.consensus.core.quorum import (
    UNBOUNDED_INDEX,
    JointConfig,
    MajorityConfig,
    VoteResult,
)

IDS = (1, 2, 3, 4, 5)


def _brute_committed(voters, acked):
    """The largest index a majority has reached, by trying every candidate."""
    best = 0
    for index in {acked.get(v, 0) for v in voters}:
        if sum(1 for v in voters if acked.get(v, 0) >= index) > len(voters) // 2:
            best = max(best, index)
    return best


def _brute_vote(voters, votes):
    yes = sum(1 for v in voters if votes.get(v) is True)
    no = sum(1 for v in voters if votes.get(v) is False)
    if yes > len(voters) // 2:
        return VoteResult.WON
    if no >= len(voters) - len(voters) // 2:
        return VoteResult.LOST
    return VoteResult.PENDING


def _subsets(ids):
    for n in range(len(ids) + 1):
        yield from itertools.combinations(ids, n)


def test_empty_majority_is_unbounded_and_wins():
    assert MajorityConfig().committed_index({1: 5}) == UNBOUNDED_INDEX
    assert MajorityConfig().vote_result({}) is VoteResult.WON


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_majority_committed_index_exhaustive(size):
    voters = IDS[:size]
    config = MajorityConfig(voters)
    # Each voter acked 0..3 or is missing (None), plus one non-voter id.
    for acks in itertools.product([None, 0, 1, 2, 3], repeat=size):
        acked = {v: a for v, a in zip(voters, acks, strict=True) if a is not None}
        acked[99] = 10
        assert config.committed_index(acked) == _brute_committed(voters, acked), acked


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_majority_vote_result_exhaustive(size):
    voters = IDS[:size]
    config = MajorityConfig(voters)
    for choice in itertools.product([None, True, False], repeat=size):
        votes = {v: c for v, c in zip(voters, choice, strict=True) if c is not None}
        votes[99] = True  # a non-voter's vote never counts
        assert config.vote_result(votes) is _brute_vote(voters, votes), votes


def test_joint_committed_is_min_of_halves_exhaustive():
    acked = {1: 5, 2: 4, 3: 3, 4: 2, 5: 1}
    for incoming in _subsets(IDS[:4]):
        for outgoing in _subsets(IDS[1:]):
            joint = JointConfig(incoming, outgoing)
            expected = min(
                MajorityConfig(incoming).committed_index(acked),
                MajorityConfig(outgoing).committed_index(acked),
            )
            assert joint.committed_index(acked) == expected


def test_joint_vote_result_exhaustive():
    incoming, outgoing = (1, 2, 3), (3, 4, 5)
    joint = JointConfig(incoming, outgoing)
    for choice in itertools.product([None, True, False], repeat=5):
        votes = {v: c for v, c in zip(IDS, choice, strict=True) if c is not None}
        a = MajorityConfig(incoming).vote_result(votes)
        b = MajorityConfig(outgoing).vote_result(votes)
        result = joint.vote_result(votes)
        if a is VoteResult.WON and b is VoteResult.WON:
            assert result is VoteResult.WON
        elif VoteResult.LOST in (a, b):
            assert result is VoteResult.LOST
        else:
            assert result is VoteResult.PENDING


def test_non_joint_config_behaves_like_its_incoming_half():
    joint = JointConfig([1, 2, 3])
    assert not joint.is_joint
    assert joint.committed_index({1: 7, 2: 6}) == 6
    assert joint.vote_result({1: True, 2: True}) is VoteResult.WON
    assert joint.vote_result({1: False, 2: False}) is VoteResult.LOST
    assert joint.vote_result({1: True}) is VoteResult.PENDING
    assert JointConfig().committed_index({}) == UNBOUNDED_INDEX
    assert joint.ids() == {1, 2, 3}
    assert 2 in joint and 9 not in joint
