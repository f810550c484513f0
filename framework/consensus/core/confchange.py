"""Membership configurations and the joint-consensus ``Changer``.

Modelled on etcd-io/raft's ``confchange`` package and seed 001. A
``Configuration`` holds the voters as a ``JointConfig`` (``incoming`` is the
new voter set, ``outgoing`` the old one while joint), the learners, and
``learners_next``: voters demoted to learners while joint, who stay voters in
``outgoing`` until the joint config is left.

``Changer`` computes the next configuration without mutating anything:

- ``simple(changes)``: at most one voter may change; refused while joint.
- ``enter_joint(auto_leave, changes)``: ``outgoing := incoming``, then the
  changes apply to ``incoming``; refused when already joint or when there
  are no voters.
- ``leave_joint()``: ``outgoing`` is emptied and ``learners_next`` become
  learners; refused when not joint.

Node id 0 means "no node" and a change naming it is skipped, as in etcd
(a host may blank out a change it decided not to apply).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence

import attrs

from triomq.consensus.core.quorum import JointConfig, MajorityConfig
from triomq.errors import TriomqError


class ConfChangeError(TriomqError, ValueError):
    """A configuration change cannot be applied; the message says why."""


class ConfChangeType(enum.IntEnum):
    """What a single change does to one node."""

    ADD_NODE = 0
    ADD_LEARNER_NODE = 1
    REMOVE_NODE = 2
    UPDATE_NODE = 3


class ConfChangeTransition(enum.IntEnum):
    """How a ``ConfChangeV2`` uses joint consensus.

    AUTO: simple when possible (one change), else joint, left automatically.
    IMPLICIT: always joint, left automatically. EXPLICIT: always joint, left
    only by an explicit empty ``ConfChangeV2``.
    """

    AUTO = 0
    IMPLICIT = 1
    EXPLICIT = 2


@attrs.frozen
class ConfChangeSingle:
    """One change: ``type`` applied to ``node_id``."""

    type: ConfChangeType = attrs.field(converter=ConfChangeType)
    node_id: int


def _changes(value: Iterable[ConfChangeSingle]) -> tuple[ConfChangeSingle, ...]:
    return tuple(value)


_HEADER = struct.Struct(">BH")
_CHANGE = struct.Struct(">BQ")


@attrs.frozen
class ConfChangeV2:
    """A batch of changes proposed as one log entry.

    An empty ``ConfChangeV2`` with the AUTO transition is the request to
    leave a joint configuration.
    """

    changes: tuple[ConfChangeSingle, ...] = attrs.field(default=(), converter=_changes)
    transition: ConfChangeTransition = attrs.field(
        default=ConfChangeTransition.AUTO, converter=ConfChangeTransition
    )

    def leave_joint(self) -> bool:
        """True if this is the (empty) request to leave a joint configuration."""
        return not self.changes and self.transition is ConfChangeTransition.AUTO

    def enter_joint(self) -> tuple[bool, bool]:
        """``(auto_leave, uses_joint)``: whether and how this change goes joint."""
        if self.transition is ConfChangeTransition.AUTO and len(self.changes) <= 1:
            return False, False
        return self.transition is not ConfChangeTransition.EXPLICIT, True

    def encode(self) -> bytes:
        """``transition:1 | count:2 | count x (type:1 | node_id:8)``, big-endian."""
        parts = [_HEADER.pack(self.transition, len(self.changes))]
        parts.extend(_CHANGE.pack(c.type, c.node_id) for c in self.changes)
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes) -> ConfChangeV2:
        """Parse ``encode``'s output; raise ConfChangeError on any malformation."""
        if len(data) < _HEADER.size:
            raise ConfChangeError(f"conf change: {len(data)} bytes, header needs {_HEADER.size}")
        transition, count = _HEADER.unpack_from(data)
        expected = _HEADER.size + count * _CHANGE.size
        if len(data) != expected:
            raise ConfChangeError(
                f"conf change: {len(data)} bytes, {count} changes need {expected}"
            )
        if transition not in ConfChangeTransition._value2member_map_:
            raise ConfChangeError(f"conf change: unknown transition {transition}")
        changes = []
        for i in range(count):
            kind, node_id = _CHANGE.unpack_from(data, _HEADER.size + i * _CHANGE.size)
            if kind not in ConfChangeType._value2member_map_:
                raise ConfChangeError(f"conf change #{i}: unknown type {kind}")
            changes.append(ConfChangeSingle(kind, node_id))
        return cls(changes, transition)


def _ids(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(value)))


@attrs.frozen
class ConfState:
    """A configuration as plain sorted id lists (no duplicates), as persisted in snapshots."""

    voters: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    learners: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    voters_outgoing: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    learners_next: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    auto_leave: bool = False


def _frozen(value: Iterable[int]) -> frozenset[int]:
    return frozenset(value)


def _joint(value: JointConfig | Iterable[int]) -> JointConfig:
    return value if isinstance(value, JointConfig) else JointConfig(value)


@attrs.frozen
class Configuration:
    """Voters (possibly joint), learners, learners_next and auto_leave.

    ``Configuration()`` is the empty configuration. ``voters`` also accepts a
    plain iterable of ids, meaning a non-joint voter set.
    """

    voters: JointConfig = attrs.field(factory=JointConfig, converter=_joint)
    learners: frozenset[int] = attrs.field(factory=frozenset, converter=_frozen)
    learners_next: frozenset[int] = attrs.field(factory=frozenset, converter=_frozen)
    auto_leave: bool = False

    @property
    def is_joint(self) -> bool:
        """True while the voters are a joint configuration."""
        return self.voters.is_joint

    def ids(self) -> frozenset[int]:
        """Every node the configuration knows: voters and learners."""
        return self.voters.ids() | self.learners | self.learners_next

    def is_voter(self, node_id: int) -> bool:
        """True if ``node_id`` votes in either half."""
        return node_id in self.voters

    def to_conf_state(self) -> ConfState:
        """This configuration as a ``ConfState``."""
        return ConfState(
            voters=self.voters.incoming.voters,
            learners=self.learners,
            voters_outgoing=self.voters.outgoing.voters,
            learners_next=self.learners_next,
            auto_leave=self.auto_leave,
        )

    @classmethod
    def from_conf_state(cls, state: ConfState) -> Configuration:
        """Rebuild a configuration from a ``ConfState``; ConfChangeError if inconsistent."""
        config = cls(
            voters=JointConfig(state.voters, state.voters_outgoing),
            learners=state.learners,
            learners_next=state.learners_next,
            auto_leave=state.auto_leave,
        )
        _check_invariants(config)
        return config


def _check_invariants(config: Configuration) -> None:
    voters = config.voters.ids()
    both = voters & config.learners
    if both:
        raise ConfChangeError(f"nodes {sorted(both)} are both voters and learners")
    for node_id in config.learners_next:
        if node_id not in config.voters.outgoing:
            raise ConfChangeError(f"node {node_id} is in learners_next but not an outgoing voter")
        if node_id in config.learners:
            raise ConfChangeError(f"node {node_id} is in learners_next and already a learner")
    if not config.is_joint:
        if config.learners_next:
            raise ConfChangeError("learners_next must be empty outside a joint configuration")
        if config.auto_leave:
            raise ConfChangeError("auto_leave must be false outside a joint configuration")


@attrs.define
class _Draft:
    """The mutable working copy a change is applied to."""

    incoming: set[int]
    outgoing: set[int]
    learners: set[int]
    learners_next: set[int]

    @classmethod
    def of(cls, config: Configuration) -> _Draft:
        return cls(
            set(config.voters.incoming.voters),
            set(config.voters.outgoing.voters),
            set(config.learners),
            set(config.learners_next),
        )

    def build(self, auto_leave: bool) -> Configuration:
        return Configuration(
            voters=JointConfig(MajorityConfig(self.incoming), MajorityConfig(self.outgoing)),
            learners=self.learners,
            learners_next=self.learners_next,
            auto_leave=auto_leave,
        )

    def apply(self, changes: Sequence[ConfChangeSingle]) -> None:
        for change in changes:
            if change.node_id < 0:
                raise ConfChangeError(f"{change.type.name}: node id {change.node_id} is negative")
            if change.node_id == 0:
                continue
            if change.type is ConfChangeType.ADD_NODE:
                self._make_voter(change.node_id)
            elif change.type is ConfChangeType.ADD_LEARNER_NODE:
                self._make_learner(change.node_id)
            elif change.type is ConfChangeType.REMOVE_NODE:
                self._remove(change.node_id)
        if not self.incoming:
            raise ConfChangeError("removed all voters")

    def _make_voter(self, node_id: int) -> None:
        self.learners.discard(node_id)
        self.learners_next.discard(node_id)
        self.incoming.add(node_id)

    def _make_learner(self, node_id: int) -> None:
        if node_id in self.learners:
            return
        self._remove(node_id)
        # A demoted voter still votes in the outgoing half until the joint
        # config is left, so it cannot be a learner yet.
        if node_id in self.outgoing:
            self.learners_next.add(node_id)
        else:
            self.learners.add(node_id)

    def _remove(self, node_id: int) -> None:
        self.incoming.discard(node_id)
        self.learners.discard(node_id)
        self.learners_next.discard(node_id)


@attrs.frozen
class Changer:
    """Computes configurations following ``configuration`` (never mutates it)."""

    configuration: Configuration = attrs.field(factory=Configuration)

    def enter_joint(self, auto_leave: bool, changes: Sequence[ConfChangeSingle]) -> Configuration:
        """Enter a joint config: the old voters go outgoing, changes apply to incoming."""
        _check_invariants(self.configuration)
        if self.configuration.is_joint:
            raise ConfChangeError("configuration is already joint")
        if not self.configuration.voters.incoming.voters:
            raise ConfChangeError("cannot make a zero-voter configuration joint")
        draft = _Draft.of(self.configuration)
        draft.outgoing = set(draft.incoming)
        draft.apply(changes)
        result = draft.build(auto_leave)
        _check_invariants(result)
        return result

    def leave_joint(self) -> Configuration:
        """Leave the joint config: drop outgoing, learners_next become learners."""
        _check_invariants(self.configuration)
        if not self.configuration.is_joint:
            raise ConfChangeError("cannot leave a non-joint configuration")
        draft = _Draft.of(self.configuration)
        draft.learners |= draft.learners_next
        draft.learners_next = set()
        draft.outgoing = set()
        result = draft.build(auto_leave=False)
        _check_invariants(result)
        return result

    def simple(self, changes: Sequence[ConfChangeSingle]) -> Configuration:
        """Apply changes that alter at most one voter, without joint consensus."""
        _check_invariants(self.configuration)
        if self.configuration.is_joint:
            raise ConfChangeError("cannot apply a simple config change in a joint configuration")
        draft = _Draft.of(self.configuration)
        draft.apply(changes)
        changed = draft.incoming ^ set(self.configuration.voters.incoming.voters)
        if len(changed) > 1:
            raise ConfChangeError(
                f"more than one voter changed without entering joint config: {sorted(changed)}"
            )
        result = draft.build(auto_leave=False)
        _check_invariants(result)
        return result

    def apply(self, change: ConfChangeV2) -> Configuration:
        """Apply a ``ConfChangeV2`` the way a committed entry is applied."""
        if change.leave_joint():
            return self.leave_joint()
        auto_leave, joint = change.enter_joint()
        if joint:
            return self.enter_joint(auto_leave, change.changes)
        return self.simple(change.changes)
