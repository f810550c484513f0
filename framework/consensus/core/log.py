"""Raft log records and the in-memory mirror of a node's durable log.

``RaftLog`` mirrors what a driver keeps in its ``EntryLog``: a snapshot (the
compacted prefix, with the configuration in force at its index) followed by
the entries after it. Indexes start at 1; index 0 with term 0 is the empty
prefix every log shares. The configuration in force is the latest one in the
log, as in the Raft paper: a conf-change entry takes effect when appended and
is undone if truncated.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import attrs

from triomq.consensus.core.confchange import (
    Changer,
    ConfChangeError,
    ConfChangeSingle,
    ConfChangeType,
    ConfChangeV2,
    Configuration,
    ConfState,
)
from triomq.errors import ConfigError, TriomqError


class LogError(TriomqError, ValueError):
    """A log operation was asked for an index it cannot serve."""


class EntryKind(enum.IntEnum):
    """What an entry's ``data`` holds."""

    NORMAL = 0  # application command
    CONF_CHANGE = 1  # an encoded ConfChangeV2
    NOOP = 2  # a leader's first entry of its term (commits the earlier ones)


_KIND_BYTES = {kind: bytes([kind]) for kind in EntryKind}


class Entry(NamedTuple):
    """One log entry.

    A named tuple rather than an attrs class: entries are made for every
    command on every node (proposed, decoded, loaded), and a tuple is made
    in half the time of a frozen attrs instance. Pass ``kind`` as an
    ``EntryKind`` member.
    """

    index: int  # type: ignore[assignment]  # a field, not tuple.index
    term: int
    data: bytes = b""
    kind: EntryKind = EntryKind.NORMAL

    @property
    def size(self) -> int:
        """Bytes this entry counts for in push quotas."""
        return len(self.data) + 24

    def conf_change(self) -> ConfChangeV2:
        """Decode a CONF_CHANGE entry's data (ConfChangeError if malformed)."""
        if self.kind is not EntryKind.CONF_CHANGE:
            raise ConfChangeError(f"entry {self.index} is {self.kind.name}, not CONF_CHANGE")
        return ConfChangeV2.decode(self.data)

    def to_record(self) -> bytes:
        """``kind:1 | data``: the payload a driver stores in an EntryLog."""
        return _KIND_BYTES[self.kind] + self.data

    @classmethod
    def from_record(cls, index: int, term: int, record: bytes) -> Entry:
        """Inverse of ``to_record``; LogError on an empty or unknown record."""
        if not record or record[0] not in EntryKind._value2member_map_:
            raise LogError(f"entry {index}: record has no valid kind byte")
        return cls(index, term, bytes(record[1:]), EntryKind(record[0]))


@attrs.frozen
class HardState:
    """What must be durable before dependent messages leave: term and vote (0 = none)."""

    term: int = 0
    vote: int = 0


@attrs.frozen
class Snapshot:
    """A state-machine snapshot covering entries up to ``index`` (of ``term``)."""

    index: int = 0
    term: int = 0
    conf_state: ConfState = attrs.field(factory=ConfState)
    data: bytes = b""


def _next_configuration(config: Configuration, entry: Entry) -> Configuration:
    """The configuration after ``entry``; a change that cannot apply changes nothing."""
    try:
        return Changer(config).apply(entry.conf_change())
    except ConfChangeError:
        return config


class RaftLog:
    """The snapshot plus the entries after it, and the configurations they imply."""

    def __init__(self, snapshot: Snapshot, entries: Iterable[Entry] = ()) -> None:
        self.snapshot = snapshot
        self.entries: list[Entry] = []
        # (index, configuration) for the snapshot and each conf-change entry.
        self._configs: list[tuple[int, Configuration]] = [
            (snapshot.index, Configuration.from_conf_state(snapshot.conf_state))
        ]
        self._known: tuple[tuple[int, ...], frozenset[int]] = ((), frozenset())
        for entry in entries:
            # A crash between saving a snapshot and compacting the store can
            # leave entries the snapshot already covers: skip them.
            if entry.index > snapshot.index:
                self.append(entry)

    @property
    def first_index(self) -> int:
        """The first index still held as an entry (``snapshot.index + 1``)."""
        return self.snapshot.index + 1

    @property
    def last_index(self) -> int:
        """The index of the last entry (the snapshot's index when there is none)."""
        return self.snapshot.index + len(self.entries)

    @property
    def last_term(self) -> int:
        """The term of the last entry."""
        return self.entries[-1].term if self.entries else self.snapshot.term

    @property
    def configuration(self) -> Configuration:
        """The configuration in force: the latest in the log."""
        return self._configs[-1][1]

    @property
    def configuration_index(self) -> int:
        """The index of the entry (or snapshot) that set ``configuration``."""
        return self._configs[-1][0]

    def configuration_at(self, index: int) -> Configuration:
        """The configuration in force at ``index`` (not before the snapshot)."""
        found = self._configs[0][1]
        for at, config in self._configs:
            if at > index:
                break
            found = config
        return found

    def known_ids(self) -> frozenset[int]:
        """Every node any configuration in the snapshot or the log names."""
        key = tuple(at for at, _ in self._configs)
        if self._known[0] != key:
            known: frozenset[int] = frozenset()
            for _, config in self._configs:
                known |= config.ids()
            self._known = (key, known)
        return self._known[1]

    def configurations_since(self, index: int) -> list[Configuration]:
        """The configuration in force at ``index`` and every later one in the log."""
        return [self.configuration_at(index)] + [c for at, c in self._configs if at > index]

    def term_at(self, index: int) -> int | None:
        """The term of ``index``, or None if compacted away or beyond the end."""
        if index == self.snapshot.index:
            return self.snapshot.term
        if self.snapshot.index < index <= self.last_index:
            return self.entries[index - self.first_index].term
        return None

    def get(self, index: int) -> Entry | None:
        """The entry at ``index``, or None if not held."""
        if self.snapshot.index < index <= self.last_index:
            return self.entries[index - self.first_index]
        return None

    def slice(self, low: int, high: int) -> list[Entry]:
        """Entries with ``low <= index <= high`` that are held."""
        low = max(low, self.first_index)
        high = min(high, self.last_index)
        if low > high:
            return []
        return self.entries[low - self.first_index : high - self.first_index + 1]

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's election restriction: is a log ending there at least as recent as ours?"""
        if last_term != self.last_term:
            return last_term > self.last_term
        return last_index >= self.last_index

    def append(self, entry: Entry) -> None:
        """Append the next entry."""
        self.extend((entry,))

    def extend(self, entries: Sequence[Entry]) -> None:
        """Append consecutive entries of non-decreasing terms that follow the last one,
        in one pass (an APPEND carries hundreds)."""
        if not entries:
            return
        first = entries[0]
        if first.index != self.last_index + 1:
            raise LogError(f"entry {first.index} does not follow {self.last_index}")
        if first.term < self.last_term:
            raise LogError(f"entry {first.index} term {first.term} < {self.last_term}")
        term, index, changes = first.term, first.index, []
        for entry in entries:
            if entry.term < term or entry.index != index:
                raise LogError(f"entry {entry.index} of term {entry.term} is out of order")
            if entry.kind is EntryKind.CONF_CHANGE:
                changes.append(entry)
            term, index = entry.term, index + 1
        self.entries.extend(entries)
        for entry in changes:
            self._configs.append((entry.index, _next_configuration(self.configuration, entry)))

    def truncate_after(self, index: int) -> None:
        """Drop every entry after ``index`` (which must not be before the snapshot)."""
        if index < self.snapshot.index:
            raise LogError(f"truncate: {index} is inside the snapshot ({self.snapshot.index})")
        del self.entries[index - self.snapshot.index :]
        while len(self._configs) > 1 and self._configs[-1][0] > index:
            self._configs.pop()

    def compact(self, snapshot: Snapshot) -> None:
        """Replace the prefix up to ``snapshot.index`` by the snapshot.

        Entries after it are kept if the log holds ``snapshot.index`` with the
        snapshot's term; otherwise the whole log is replaced.
        """
        keep: list[Entry] = []
        if self.term_at(snapshot.index) == snapshot.term:
            keep = self.entries[max(0, snapshot.index - self.snapshot.index) :]
        later = [(i, c) for i, c in self._configs if i > snapshot.index] if keep else []
        self.snapshot = snapshot
        self.entries = keep
        self._configs = [(snapshot.index, Configuration.from_conf_state(snapshot.conf_state))]
        self._configs.extend(later)


def bootstrap_entries(voters: Iterable[int]) -> tuple[HardState, tuple[Entry, ...]]:
    """The hard state and log every founding member of a new cluster starts with.

    One ADD_NODE entry per voter at term 1 (as etcd bootstraps), so that a
    node joining later learns the configuration by replication.
    """
    given = list(voters)
    if not given or any(type(i) is not int or i < 1 for i in given):
        raise ConfigError(f"voters must be positive integer ids, got {given!r}", "voters")
    ids = sorted(set(given))
    entries = tuple(
        Entry(
            index,
            1,
            ConfChangeV2([ConfChangeSingle(ConfChangeType.ADD_NODE, node_id)]).encode(),
            EntryKind.CONF_CHANGE,
        )
        for index, node_id in enumerate(ids, start=1)
    )
    return HardState(term=1, vote=0), entries
