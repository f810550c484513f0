"""The application side of a ``Ready``: apply it, then tell proposers and readers (pure).

Every driver of ``raft.Raft`` (the trio ``node`` and the cluster
simulation) carries out a Ready's writes and messages its own way, then
hands the Ready to an ``Applier``, which does steps 3 to 5 of ``ready``'s
order: restore the snapshot, apply the committed entries to the state
machine, and settle the operations the driver registered:

- a proposal, registered with ``expect(index, term, ticket)`` once Raft
  appended it, settles with ``apply``'s result when its entry is applied,
  or fails with ``ProposalFailed`` when another entry (another term's, or a
  snapshot) took its index, or when Raft reports it did not commit;
- a read, registered with ``expect_read(context, ticket)``, settles once
  Raft confirmed it and the state machine has applied up to its index, or
  fails when this node stopped leading first.

Tickets are the driver's own objects, handed back to ``on_proposal(ticket,
result, error)`` and ``on_read(ticket, confirmed)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from triomq.consensus.core.log import Entry, EntryKind, Snapshot
from triomq.consensus.core.messages import DLedgerCode
from triomq.consensus.core.ready import Ready
from triomq.errors import TriomqError

__all__ = ["Applier", "ProposalFailed", "StateMachine"]


class StateMachine(Protocol):
    """The application state a Raft group replicates.

    ``apply`` must be deterministic: every member applies the same entries
    in the same order. Keep it quick: drivers call it inline.
    """

    def apply(self, index: int, data: bytes) -> Any:
        """Apply the committed command at ``index``; the result goes to its proposer here."""

    def snapshot(self) -> bytes:
        """The whole state, as of the last applied entry."""

    def restore(self, data: bytes) -> None:
        """Replace the whole state by a ``snapshot()`` taken elsewhere or earlier."""


class ProposalFailed(TriomqError):
    """A proposal did not commit here: ``code`` (a ``DLedgerCode``: TERM_CHANGED,
    WAIT_QUORUM_ACK_TIMEOUT, LEADER_TRANSFERRING, UNEXPECTED_ARGUMENT) and ``message``.

    After TERM_CHANGED or WAIT_QUORUM_ACK_TIMEOUT the command may still
    commit later (under a new leader): make commands idempotent or check.
    """

    def __init__(self, code: DLedgerCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code.name}: {message}")


ProposalSettled = Callable[[Any, Any, BaseException | None], None]
ReadSettled = Callable[[Any, bool], None]


class Applier:
    """Applies Readys to ``state_machine`` and settles registered proposals and reads."""

    def __init__(self, state_machine: StateMachine, applied_index: int, *,
                 on_proposal: ProposalSettled, on_read: ReadSettled,
                 log: logging.Logger) -> None:
        self.state_machine = state_machine
        #: The index of the last entry applied to the state machine.
        self.applied_index = applied_index
        self._on_proposal = on_proposal
        self._on_read = on_read
        self._log = log
        self._proposals: dict[int, tuple[int, Any]] = {}  # index -> (term, ticket)
        self._reads: dict[bytes, Any] = {}  # context -> ticket, until Raft answers
        self._confirmed: list[tuple[int, bytes, Any]] = []  # (index, context, ticket)

    # -- registering ---------------------------------------------------------------

    def expect(self, index: int, term: int, ticket: Any) -> None:
        """A proposal was appended at ``index`` in ``term``."""
        self._proposals[index] = (term, ticket)

    def forget(self, index: int, ticket: Any) -> None:
        """Stop tracking ``ticket``'s proposal (its caller gave up)."""
        pending = self._proposals.get(index)
        if pending is not None and pending[1] is ticket:
            del self._proposals[index]

    def expect_read(self, context: bytes, ticket: Any) -> None:
        """A read was asked of Raft under ``context``."""
        self._reads[context] = ticket

    def forget_read(self, context: bytes) -> None:
        """Stop tracking the read under ``context`` (its caller gave up)."""
        self._reads.pop(context, None)
        self._confirmed = [c for c in self._confirmed if c[1] != context]

    def take_all(self) -> list[Any]:
        """Every ticket still tracked, forgotten (the driver is closing)."""
        tickets = [t for _, t in self._proposals.values()]
        tickets += list(self._reads.values()) + [t for _, _, t in self._confirmed]
        self._proposals.clear()
        self._reads.clear()
        self._confirmed = []
        return tickets

    # -- carrying out -----------------------------------------------------------------

    def carry_out(self, ready: Ready) -> None:
        """Steps 3 to 5 of a Ready, once its writes are durable and its messages sent."""
        if ready.snapshot is not None:
            self._restore(ready.snapshot)
        if ready.committed_entries:
            self._apply(ready.committed_entries)
        for result in ready.results:
            if result.code is DLedgerCode.SUCCESS:
                continue  # settled when the entry is applied
            pending = self._proposals.get(result.index)
            if pending is not None and pending[0] == result.term:
                del self._proposals[result.index]
                self._on_proposal(pending[1], None, ProposalFailed(
                    result.code, f"entry {result.index} of term {result.term} did not commit "
                                 "here"))
        for state in ready.read_states:
            ticket = self._reads.pop(state.context, None)
            if ticket is None:
                continue
            if state.code is DLedgerCode.SUCCESS:
                self._confirmed.append((state.index, state.context, ticket))
            else:
                self._on_read(ticket, False)
        if self._confirmed:
            self._serve_reads()

    def _serve_reads(self) -> None:
        applied = self.applied_index
        ready = [c for c in self._confirmed if c[0] <= applied]
        if ready:
            self._confirmed = [c for c in self._confirmed if c[0] > applied]
            for _, _, ticket in ready:
                self._on_read(ticket, True)

    def _restore(self, snapshot: Snapshot) -> None:
        self.state_machine.restore(snapshot.data)
        self.applied_index = snapshot.index
        for index in [i for i in self._proposals if i <= snapshot.index]:
            self._on_proposal(self._proposals.pop(index)[1], None, ProposalFailed(
                DLedgerCode.TERM_CHANGED, f"entry {index} was replaced by a snapshot"))

    def _apply(self, entries: tuple[Entry, ...]) -> None:
        # Once per committed entry on every node: locals, no call per entry
        # beyond the state machine's and the proposer's.
        apply, proposals, normal = self.state_machine.apply, self._proposals, EntryKind.NORMAL
        settle = self._on_proposal
        for entry in entries:
            index = entry.index
            result: Any = None
            error: BaseException | None = None
            if entry.kind is normal:
                try:
                    result = apply(index, entry.data)
                except Exception as exc:
                    self._log.exception("state machine failed to apply entry %d", index)
                    error = exc
            self.applied_index = index
            pending = proposals.pop(index, None)
            if pending is None:
                continue
            term, ticket = pending
            if term == entry.term:
                settle(ticket, result, error)
            else:
                settle(ticket, None, ProposalFailed(
                    DLedgerCode.TERM_CHANGED,
                    f"entry {index} of term {term} was replaced in term {entry.term}"))
