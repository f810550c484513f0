"""One role change of a broker replica, as a state machine (sans-I/O).

A replica changes role (``ToMaster`` or ``ToSlave``) in one order, whoever
drives it (the ``ReplicasManager`` over trio, the cluster simulation's
broker inline):

1. ``EndTerm``: the current term ends (its tasks cancelled, its pending
   puts failed); then ``term_ended``;
2. ``TruncateTornTail``: a partial last record is dropped (a crash can
   leave one); then ``truncated`` with the log's end and first offset;
3. ``LoadEpochs``: the epoch file is read; then ``loaded``. Entries that
   start past the log's end are forgotten (a crash can lose unflushed bytes
   whose epoch entry was already saved). A master records
   <epoch, startOffset = the log's end>, unless it continues the epoch it
   recorded last; a log with bytes but no epoch recorded (a store written
   before HA: a classic RocketMQ master, or a log filled offline) is
   adopted whole into the epoch, from its first byte, so slaves can copy
   it. ``EpochError`` if the epoch is older than the last recorded one;
4. ``SaveEpochs`` when the cache changed; then ``saved``;
5. ``StartTerm``: the new term's role, epoch, epoch cache and, for a
   master, its first confirm offset: what the previous term confirmed
   still holds (capped at the log's end), else the log's start
   (``carried_confirm_offset``).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from triomq.ha.core.epoch import EpochCache
from triomq.ha.core.errors import EpochError
from triomq.ha.core.master_term import carried_confirm_offset

__all__ = [
    "EndTerm",
    "LoadEpochs",
    "RoleChange",
    "RoleChangeAction",
    "SaveEpochs",
    "StartTerm",
    "TermLog",
    "ToMaster",
    "ToSlave",
    "TruncateTornTail",
]


class TermLog(Protocol):
    """The commit-log calls a role change's driver makes (``triomq.store.CommitLog``)."""

    @property
    def min_offset(self) -> int: ...

    def truncate_to_last_whole_record(self) -> int:
        """Drop a partial last record; the end of the last whole one."""
        ...


@attrs.frozen
class ToMaster:
    """Serve as master of ``epoch``, as broker ``broker_id`` of the group, with
    ``sync_state_set`` (broker ids)."""

    epoch: int
    broker_id: int
    sync_state_set: frozenset[int] = frozenset()


@attrs.frozen
class ToSlave:
    """Follow the master at ``master_ha_address`` (of ``epoch``, for the record) as broker
    ``broker_id`` of the group (what the handshake names)."""

    master_ha_address: str
    epoch: int
    broker_id: int


@attrs.frozen
class EndTerm:
    """End the current term; then ``term_ended``."""


@attrs.frozen
class TruncateTornTail:
    """Drop a partial last record from the log; then ``truncated``."""


@attrs.frozen
class LoadEpochs:
    """Read the epoch file; then ``loaded``."""


@attrs.frozen
class SaveEpochs:
    """Write ``epochs`` durably to the epoch file; then ``saved``."""

    epochs: EpochCache


@attrs.frozen
class StartTerm:
    """Start the new term: ``target``'s role with ``epochs``; a master's first
    ``confirm_offset`` (-1 for a slave, which learns it from its master)."""

    target: ToMaster | ToSlave
    epochs: EpochCache
    confirm_offset: int = -1


RoleChangeAction = EndTerm | TruncateTornTail | LoadEpochs | SaveEpochs | StartTerm


class RoleChange:
    """One change to ``target``; ``confirmed`` is what the ending term confirmed
    (-1: none, e.g. at start-up)."""

    def __init__(self, target: ToMaster | ToSlave, *, confirmed: int) -> None:
        self.target = target
        self._confirmed = confirmed
        self._end = 0
        self._min_offset = 0
        self._epochs = EpochCache()

    def start(self) -> EndTerm:
        """The change's first action."""
        return EndTerm()

    def term_ended(self) -> TruncateTornTail:
        """The previous term is over."""
        return TruncateTornTail()

    def truncated(self, end: int, min_offset: int) -> LoadEpochs:
        """The log ends at ``end`` (its last whole record's end) and starts at
        ``min_offset``."""
        self._end, self._min_offset = end, min_offset
        return LoadEpochs()

    def loaded(self, saved: EpochCache) -> SaveEpochs | StartTerm:
        """The epoch file holds ``saved``. ``EpochError`` if a master's epoch is older
        than the last one recorded."""
        # An entry past the log's end claims bytes the log does not hold.
        epochs = saved.truncate_suffix(self._end + 1)
        target = self.target
        if isinstance(target, ToMaster) and epochs.last_epoch != target.epoch:
            if epochs.last_epoch is not None and target.epoch < epochs.last_epoch:
                raise EpochError(f"master epoch {target.epoch} is older than the recorded "
                                 f"{epochs.last_epoch}")
            epochs = epochs.append(target.epoch,
                                   self._end if epochs.last is not None else self._min_offset)
        self._epochs = epochs
        if epochs != saved:
            return SaveEpochs(epochs)
        return self._start()

    def saved(self) -> StartTerm:
        """The epoch file holds the new cache."""
        return self._start()

    def _start(self) -> StartTerm:
        if isinstance(self.target, ToSlave):
            return StartTerm(self.target, self._epochs)
        return StartTerm(self.target, self._epochs,
                         carried_confirm_offset(self._confirmed, self._end, self._min_offset))
