"""What the Raft state machine hands its driver after ticks and steps.

A ``Ready`` is carried out in this order:

1. ``writes``, in order, made durable (fsync) before anything else;
2. ``messages`` sent (they may depend on the writes: a vote, an ack);
3. ``snapshot`` restored into the application state machine, if any;
4. ``committed_entries`` applied in index order;
5. ``results`` delivered to the proposers waiting for them, and
   ``read_states`` to the readers (serve each once applied up to its index).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import attrs

from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.log import Entry, HardState, Snapshot
from triomq.consensus.core.messages import DLedgerCode, Message
from triomq.consensus.core.readindex import ReadState


class Role(enum.Enum):
    """A node's role in its current term."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@attrs.frozen
class PersistHardState:
    """Store the term and vote."""

    hard_state: HardState


@attrs.frozen
class TruncateSuffix:
    """Delete every entry with an index >= ``index``."""

    index: int


@attrs.frozen
class AppendEntries:
    """Append these entries (they follow the log's last entry)."""

    entries: tuple[Entry, ...]


@attrs.frozen
class SaveSnapshot:
    """Store the snapshot, then drop entries up to its index: the log then
    starts at ``snapshot.index + 1`` even if it held fewer entries (an
    ``EntryLog``'s ``compact_prefix(snapshot.index + 1, snapshot.term)``)."""

    snapshot: Snapshot


Write = PersistHardState | TruncateSuffix | AppendEntries | SaveSnapshot


class ProposalResult(NamedTuple):
    """The fate of a proposal: SUCCESS once committed, TERM_CHANGED if the
    leader lost its term (or leadership) first, WAIT_QUORUM_ACK_TIMEOUT if a
    quorum did not acknowledge it in time (it may still commit later).

    A named tuple, as ``log.Entry``: one is made per committed command."""

    index: int
    term: int
    code: DLedgerCode


@attrs.frozen
class SoftState:
    """Volatile facts worth reporting: role, known leader (0 = none), term."""

    role: Role
    leader_id: int
    term: int


@attrs.frozen
class Ready:
    """Outputs accumulated since the last ``Raft.ready()``."""

    writes: tuple[Write, ...] = ()
    messages: tuple[Message, ...] = ()
    snapshot: Snapshot | None = None
    committed_entries: tuple[Entry, ...] = ()
    results: tuple[ProposalResult, ...] = ()
    read_states: tuple[ReadState, ...] = ()
    soft_state: SoftState | None = None
    conf_state: ConfState | None = None

    def __bool__(self) -> bool:
        return bool(
            self.writes
            or self.messages
            or self.snapshot
            or self.committed_entries
            or self.results
            or self.read_states
            or self.soft_state
            or self.conf_state
        )


def coalesce(writes: list[Write | list[Entry]]) -> tuple[Write, ...]:
    """Merge adjacent appends, and keep only the last of adjacent hard states.

    A plain list of entries counts as an ``AppendEntries`` of them.
    """
    out: list[Write] = []
    appended: list[Entry] = []
    for write in writes:
        if type(write) is list:
            appended.extend(write)
            continue
        if isinstance(write, AppendEntries):
            appended.extend(write.entries)
            continue
        if appended:
            out.append(AppendEntries(tuple(appended)))
            appended = []
        if isinstance(write, PersistHardState) and out and isinstance(out[-1], PersistHardState):
            out[-1] = write
        else:
            out.append(write)
    if appended:
        out.append(AppendEntries(tuple(appended)))
    return tuple(out)
