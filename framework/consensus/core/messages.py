"""The messages Raft peers exchange (DLedger's RPCs, as plain values).

Every message names its sender ``src``, its receiver ``dst`` and the
sender's ``term``. Replication follows DLedger's push protocol: the leader
sends ``PushRequest`` of type COMPARE, TRUNCATE, APPEND or COMMIT and the
follower answers ``PushResponse`` with a ``DLedgerCode``. The wire
encoding (DLedger request codes 51001 VOTE, 51002 HEART_BEAT, 51004 PUSH,
51005 LEADERSHIP_TRANSFER, 51006 INSTALL_SNAPSHOT) belongs to the driver.
"""

from __future__ import annotations

import enum
import functools

import attrs

from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.log import Entry, EntryKind, Snapshot


class PushType(enum.IntEnum):
    """The four kinds of DLedger push."""

    COMPARE = 0
    TRUNCATE = 1
    APPEND = 2
    COMMIT = 3


class DLedgerCode(enum.IntEnum):
    """DLedger's response codes, for pushes and for proposals."""

    SUCCESS = 200
    INCONSISTENT_STATE = 403
    REPEATED_PUSH = 418
    TERM_CHANGED = 412
    WAIT_QUORUM_ACK_TIMEOUT = 1003
    NOT_LEADER = 402
    LEADER_TRANSFERRING = 1006
    UNEXPECTED_ARGUMENT = 410


@attrs.frozen(kw_only=True)
class VoteRequest:
    """Ask for a vote (``pre_vote``: a dry run that changes no term).

    ``force`` marks an election started by a leadership transfer, which
    voters grant even while they still follow a live leader.
    """

    src: int
    dst: int
    term: int
    last_index: int
    last_term: int
    pre_vote: bool = False
    force: bool = False


@attrs.frozen(kw_only=True)
class VoteResponse:
    """A vote granted or refused; ``term`` is the request's term when granted."""

    src: int
    dst: int
    term: int
    granted: bool
    pre_vote: bool = False


@attrs.frozen(kw_only=True)
class HeartbeatRequest:
    """The leader's heartbeat, carrying its commit index (as far as the peer
    matches) and that entry's term, which lets a restarted follower prove the
    match and commit again, and the number of its latest read-index request."""

    src: int
    dst: int
    term: int
    commit_index: int
    commit_term: int = 0
    read_seq: int = 0


@attrs.frozen(kw_only=True)
class HeartbeatResponse:
    """A heartbeat answer (also sent to a stale leader, to bring it up to date).

    ``read_seq`` echoes the heartbeat's: it vouches for the leader's reads.
    """

    src: int
    dst: int
    term: int
    read_seq: int = 0


@attrs.frozen(kw_only=True)
class PushRequest:
    """One DLedger push.

    COMPARE: is the entry at ``index`` of term ``entry_term``? TRUNCATE: the
    entry at ``index`` matches; drop the suffix after it if the follower's
    next entry has ``conflict_term``. APPEND: ``entries`` (consecutive, the
    first at ``index``) follow an entry of ``prev_term``: DLedger's batch
    push, a batch of one being its plain push. COMMIT: the commit index,
    with ``index`` / ``entry_term`` naming the committed entry. Every push
    carries the leader's commit index.
    """

    src: int
    dst: int
    term: int
    type: PushType
    index: int
    commit_index: int
    entry_term: int = 0
    prev_term: int = 0
    conflict_term: int = 0
    entries: tuple[Entry, ...] = ()


@attrs.frozen(kw_only=True)
class PushResponse:
    """The follower's answer to a push, with its log bounds (DLedger style).

    ``next_term`` (COMPARE only) is the term of the follower's entry after
    ``index`` (0 if none): the leader names it when it asks for a truncation.
    """

    src: int
    dst: int
    term: int
    type: PushType
    code: DLedgerCode
    index: int
    begin_index: int
    end_index: int
    next_term: int = 0


@attrs.frozen(kw_only=True)
class InstallSnapshotRequest:
    """The leader's snapshot, for a follower missing compacted entries."""

    src: int
    dst: int
    term: int
    snapshot: Snapshot


@attrs.frozen(kw_only=True)
class InstallSnapshotResponse:
    """The follower holds everything up to ``index``."""

    src: int
    dst: int
    term: int
    index: int
    code: DLedgerCode = DLedgerCode.SUCCESS


@attrs.frozen(kw_only=True)
class TimeoutNow:
    """Leadership transfer: start an election at once (DLedger LEADERSHIP_TRANSFER)."""

    src: int
    dst: int
    term: int


Message = (
    VoteRequest
    | VoteResponse
    | HeartbeatRequest
    | HeartbeatResponse
    | PushRequest
    | PushResponse
    | InstallSnapshotRequest
    | InstallSnapshotResponse
    | TimeoutNow
)

MESSAGE_TYPES = (
    VoteRequest,
    VoteResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    TimeoutNow,
)

_INT_FIELDS = (
    "src",
    "dst",
    "term",
    "last_index",
    "last_term",
    "commit_index",
    "commit_term",
    "read_seq",
    "index",
    "entry_term",
    "prev_term",
    "conflict_term",
    "begin_index",
    "end_index",
    "next_term",
)
#: Indexes and terms above this are impossible (no log gets near it), so a
#: message carrying one is malformed rather than merely surprising.
MAX_INDEX = 2**62 - 1


@functools.cache
def _int_fields(cls: type) -> tuple[str, ...]:
    names = {f.name for f in attrs.fields(cls)}
    return tuple(name for name in _INT_FIELDS if name in names)


def _is_index(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_INDEX


def _append_problem(message: PushRequest) -> str | None:
    entries = message.entries
    if not isinstance(entries, tuple) or not entries:
        return "PushRequest APPEND without entries"
    if not _is_index(message.index + len(entries) - 1):
        return "PushRequest APPEND entries go past the largest index"
    # The message's index and terms are valid indexes (checked before), so an
    # entry whose index is in sequence and whose int term is between them is
    # too: per entry only types and order are left to check (hundreds each).
    previous, last, index = message.prev_term, message.term, message.index
    for offset, entry in enumerate(entries):
        if (
            type(entry) is not Entry
            or type(entry.index) is not int
            or entry.index != index + offset
            or type(entry.term) is not int
            or not isinstance(entry.data, bytes)
            or type(entry.kind) is not EntryKind
        ):
            return f"PushRequest APPEND entry #{offset} is invalid or out of sequence"
        if not previous <= entry.term <= last:
            return f"PushRequest APPEND entry #{offset} has term {entry.term} out of order"
        previous = entry.term
    return None


def _valid_snapshot(snapshot: object) -> bool:
    if not (
        isinstance(snapshot, Snapshot)
        and _is_index(snapshot.index)
        and _is_index(snapshot.term)
        and isinstance(snapshot.data, bytes)
        and isinstance(snapshot.conf_state, ConfState)
    ):
        return False
    state = snapshot.conf_state
    ids = (*state.voters, *state.learners, *state.voters_outgoing, *state.learners_next)
    return all(_is_index(i) for i in ids) and type(state.auto_leave) is bool


def problem(message: object) -> str | None:
    """Why ``message`` is malformed, or None if it is well formed.

    Checks types and ranges only (an attrs class does not); whether the
    content makes sense is the state machine's business.
    """
    if not isinstance(message, MESSAGE_TYPES):
        return f"unknown message type {type(message).__name__}"
    # A plain ``type``: mypy does not count a union of attrs classes as hashable.
    cls: type = type(message)
    for name in _int_fields(cls):
        value = getattr(message, name)
        if not _is_index(value):
            return f"{type(message).__name__}.{name}={value!r} is not an index"
    if isinstance(message, PushRequest):
        if not isinstance(message.type, PushType):
            return f"PushRequest.type={message.type!r}"
        if message.type is PushType.APPEND:
            return _append_problem(message)
    if isinstance(message, PushResponse) and not (
        isinstance(message.type, PushType) and isinstance(message.code, DLedgerCode)
    ):
        return "PushResponse with an unknown type or code"
    if isinstance(message, InstallSnapshotRequest) and not _valid_snapshot(message.snapshot):
        return "InstallSnapshotRequest without a valid snapshot"
    if isinstance(message, InstallSnapshotResponse) and not isinstance(message.code, DLedgerCode):
        return "InstallSnapshotResponse with an unknown code"
    for name in ("pre_vote", "force", "granted"):
        if type(getattr(message, name, False)) is not bool:
            return f"{type(message).__name__}.{name} is not a bool"
    return None
