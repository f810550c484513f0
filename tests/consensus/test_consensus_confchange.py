"""The joint-consensus Changer: transitions and every rejection rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.consensus.core.confchange import (
    Changer,
    ConfChangeError,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
    Configuration,
    ConfState,
)
from triomq.consensus.core.quorum import JointConfig

ADD = ConfChangeType.ADD_NODE
LEARNER = ConfChangeType.ADD_LEARNER_NODE
REMOVE = ConfChangeType.REMOVE_NODE
UPDATE = ConfChangeType.UPDATE_NODE


def cc(*pairs):
    return [ConfChangeSingle(t, n) for t, n in pairs]


def conf(voters=(), outgoing=(), learners=(), learners_next=(), auto_leave=False):
    return Configuration(
        voters=JointConfig(voters, outgoing),
        learners=learners,
        learners_next=learners_next,
        auto_leave=auto_leave,
    )


def test_empty_configuration():
    empty = Configuration()
    assert empty.voters.incoming.voters == frozenset()
    assert empty.voters.outgoing.voters == frozenset()
    assert not empty.is_joint
    assert empty.to_conf_state() == ConfState()


@pytest.mark.parametrize(
    ("start", "changes", "expected"),
    [
        (conf(), cc((ADD, 1)), conf([1])),
        (conf([1]), cc((ADD, 2)), conf([1, 2])),
        (conf([1, 2]), cc((REMOVE, 2)), conf([1])),
        (conf([1]), cc((LEARNER, 2)), conf([1], learners=[2])),
        (conf([1], learners=[2]), cc((ADD, 2)), conf([1, 2])),
        (conf([1, 2]), cc((LEARNER, 2)), conf([1], learners=[2])),
        (conf([1], learners=[2]), cc((REMOVE, 2)), conf([1])),
        (conf([1], learners=[2]), cc((LEARNER, 2)), conf([1], learners=[2])),
        (conf([1]), cc((ADD, 1)), conf([1])),
        (conf([1]), cc((UPDATE, 1)), conf([1])),
        (conf([1]), cc((REMOVE, 7)), conf([1])),
        (conf([1]), cc((ADD, 0)), conf([1])),
        # any number of learner changes, one voter change
        (conf([1]), cc((ADD, 2), (LEARNER, 3), (LEARNER, 4)), conf([1, 2], learners=[3, 4])),
    ],
)
def test_simple_table(start, changes, expected):
    assert Changer(start).simple(changes) == expected


@pytest.mark.parametrize(
    ("start", "changes", "message"),
    [
        (conf([1]), cc((ADD, 2), (ADD, 3)), "more than one voter changed"),
        (conf([1, 2]), cc((REMOVE, 1), (ADD, 3)), "more than one voter changed"),
        (conf([1]), cc((REMOVE, 1)), "removed all voters"),
        (conf(), cc((LEARNER, 1)), "removed all voters"),
        (conf([1, 2], [1]), cc((ADD, 3)), "in a joint configuration"),
        (conf([1]), cc((ADD, -1)), "negative"),
    ],
)
def test_simple_rejections(start, changes, message):
    with pytest.raises(ConfChangeError, match=message):
        Changer(start).simple(changes)


def test_enter_joint_moves_incoming_to_outgoing():
    result = Changer(conf([1, 2, 3])).enter_joint(True, cc((ADD, 4), (REMOVE, 1)))
    assert result == conf([2, 3, 4], [1, 2, 3], auto_leave=True)
    assert result.is_joint


def test_demoted_voter_waits_in_learners_next():
    joint = Changer(conf([1, 2, 3])).enter_joint(False, cc((LEARNER, 3), (ADD, 4)))
    assert joint == conf([1, 2, 4], [1, 2, 3], learners_next=[3])
    left = Changer(joint).leave_joint()
    assert left == conf([1, 2, 4], learners=[3])


def test_new_learner_in_joint_goes_straight_to_learners():
    joint = Changer(conf([1, 2])).enter_joint(False, cc((LEARNER, 5)))
    assert joint == conf([1, 2], [1, 2], learners=[5])


def test_promoting_a_learners_next_node_back_to_voter():
    joint = Changer(conf([1, 2, 3])).enter_joint(False, cc((LEARNER, 3), (ADD, 3)))
    assert joint == conf([1, 2, 3], [1, 2, 3])


def test_leave_joint_drops_removed_voters():
    joint = Changer(conf([1, 2, 3])).enter_joint(True, cc((REMOVE, 1), (ADD, 4)))
    assert Changer(joint).leave_joint() == conf([2, 3, 4])


@pytest.mark.parametrize(
    ("start", "changes", "message"),
    [
        (conf([1, 2], [1]), cc((ADD, 3)), "already joint"),
        (conf(), cc((ADD, 1)), "zero-voter"),
        (conf(learners=[2]), cc((ADD, 3)), "zero-voter"),
        (conf([1, 2]), cc((REMOVE, 1), (REMOVE, 2)), "removed all voters"),
    ],
)
def test_enter_joint_rejections(start, changes, message):
    with pytest.raises(ConfChangeError, match=message):
        Changer(start).enter_joint(False, changes)


def test_leave_non_joint_is_refused():
    with pytest.raises(ConfChangeError, match="non-joint"):
        Changer(conf([1, 2])).leave_joint()


@pytest.mark.parametrize(
    "bad",
    [
        conf([1], learners=[1]),
        conf([1], learners_next=[2]),
        conf([1], [1, 2], learners=[2]),
        conf([1], [1, 2], learners=[3], learners_next=[3]),
        conf([1], auto_leave=True),
    ],
)
def test_inconsistent_configurations_are_refused(bad):
    with pytest.raises(ConfChangeError):
        Changer(bad).simple([])
    with pytest.raises(ConfChangeError):
        Configuration.from_conf_state(bad.to_conf_state())


def test_conf_state_round_trip():
    joint = Changer(conf([1, 2, 3], learners=[9])).enter_joint(True, cc((LEARNER, 3)))
    state = joint.to_conf_state()
    assert state == ConfState(
        voters=[1, 2], voters_outgoing=[1, 2, 3], learners=[9], learners_next=[3], auto_leave=True
    )
    assert Configuration.from_conf_state(state) == joint


@pytest.mark.parametrize(
    ("change", "leave", "enter"),
    [
        (ConfChangeV2(), True, (False, False)),
        (ConfChangeV2(cc((ADD, 2))), False, (False, False)),
        (ConfChangeV2(cc((ADD, 2), (ADD, 3))), False, (True, True)),
        (ConfChangeV2(cc((ADD, 2)), ConfChangeTransition.IMPLICIT), False, (True, True)),
        (ConfChangeV2(cc((ADD, 2)), ConfChangeTransition.EXPLICIT), False, (False, True)),
        (ConfChangeV2((), ConfChangeTransition.EXPLICIT), False, (False, True)),
    ],
)
def test_conf_change_v2_transitions(change, leave, enter):
    assert change.leave_joint() is leave
    assert change.enter_joint() == enter


def test_changer_apply_dispatches_on_the_transition():
    start = conf([1, 2, 3])
    simple = Changer(start).apply(ConfChangeV2(cc((ADD, 4))))
    assert simple == conf([1, 2, 3, 4])
    joint = Changer(start).apply(ConfChangeV2(cc((ADD, 4), (REMOVE, 1))))
    assert joint == conf([2, 3, 4], [1, 2, 3], auto_leave=True)
    explicit = Changer(start).apply(ConfChangeV2(cc((ADD, 4)), ConfChangeTransition.EXPLICIT))
    assert explicit == conf([1, 2, 3, 4], [1, 2, 3])
    assert Changer(joint).apply(ConfChangeV2()) == conf([2, 3, 4])


def test_encode_round_trip():
    change = ConfChangeV2(cc((ADD, 2), (LEARNER, 3), (REMOVE, 2**64 - 1)), 2)
    assert ConfChangeV2.decode(change.encode()) == change
    assert ConfChangeV2.decode(ConfChangeV2().encode()) == ConfChangeV2()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "header"),
        (b"\x00\x00\x01", "need"),
        (b"\x07\x00\x00", "transition"),
        (b"\x00\x00\x01\x09" + bytes(8), "unknown type"),
    ],
)
def test_decode_rejections(data, message):
    with pytest.raises(ConfChangeError, match=message):
        ConfChangeV2.decode(data)


@given(st.binary(max_size=64))
def test_decode_fuzz(data):
    try:
        change = ConfChangeV2.decode(data)
    except ConfChangeError:
        return
    assert change.encode() == data


changes_strategy = st.lists(
    st.builds(ConfChangeSingle, st.sampled_from(list(ConfChangeType)), st.integers(0, 5)),
    max_size=4,
)


@given(changes_strategy, changes_strategy, st.booleans())
def test_random_change_sequences_keep_invariants(first, second, auto_leave):
    config = conf([1, 2, 3])
    for changes in (first, second):
        for step in ("simple", "joint", "leave"):
            changer = Changer(config)
            try:
                if step == "simple":
                    config = changer.simple(changes)
                elif step == "joint":
                    config = changer.enter_joint(auto_leave, changes)
                else:
                    config = changer.leave_joint()
            except ConfChangeError:
                continue
            assert Configuration.from_conf_state(config.to_conf_state()) == config
            assert config.voters.incoming.voters
