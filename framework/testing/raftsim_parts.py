"""Pieces of the Raft simulation: a node's disk, its state machine, the network.

Kept apart from ``raftsim`` (the scenario driver and invariant checks) so
each stays small. Everything is deterministic given the ``random.Random``
it is handed.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import struct

import attrs

from triomq.consensus.core import codec
from triomq.consensus.core.log import Entry, HardState, Snapshot
from triomq.consensus.core.messages import Message
from triomq.consensus.core.ready import (
    AppendEntries,
    PersistHardState,
    SaveSnapshot,
    TruncateSuffix,
    Write,
)


class Disk:
    """What a node has made durable: hard state, snapshot, entries after it."""

    def __init__(
        self,
        hard_state: HardState | None = None,
        entries: tuple[Entry, ...] = (),
    ) -> None:
        self.hard_state = hard_state or HardState()
        self.snapshot = Snapshot()
        self.entries: list[Entry] = list(entries)

    @property
    def last_index(self) -> int:
        return self.snapshot.index + len(self.entries)

    def term_at(self, index: int) -> int | None:
        if index == self.snapshot.index:
            return self.snapshot.term
        if self.snapshot.index < index <= self.last_index:
            return self.entries[index - self.snapshot.index - 1].term
        return None

    def apply(self, write: Write) -> list[tuple[Entry, int | None]]:
        """Carry out one write; return the appended entries with their previous term."""
        appended: list[tuple[Entry, int | None]] = []
        if isinstance(write, PersistHardState):
            self.hard_state = write.hard_state
        elif isinstance(write, TruncateSuffix):
            keep = max(0, write.index - self.snapshot.index - 1)
            del self.entries[keep:]
        elif isinstance(write, AppendEntries):
            for entry in write.entries:
                if entry.index != self.last_index + 1:
                    raise AssertionError(f"disk append of {entry.index} after {self.last_index}")
                appended.append((entry, self.term_at(entry.index - 1)))
                self.entries.append(entry)
        elif isinstance(write, SaveSnapshot):
            snapshot = write.snapshot
            drop = snapshot.index - self.snapshot.index
            self.entries = self.entries[drop:] if drop <= len(self.entries) else []
            self.snapshot = snapshot
        return appended


_SNAP = struct.Struct(">Q16s")


class HashChain:
    """A hash chain over applied entries: equal digests mean equal histories."""

    def __init__(self) -> None:
        self.index = 0
        self.digest = bytes(16)

    def apply(self, entry: Entry) -> None:
        if entry.index != self.index + 1:
            raise AssertionError(f"applied {entry.index} after {self.index}")
        h = hashlib.blake2b(self.digest, digest_size=16)
        h.update(struct.pack(">QQB", entry.index, entry.term, entry.kind))
        h.update(entry.data)
        self.digest = h.digest()
        self.index = entry.index

    def snapshot_data(self) -> bytes:
        return _SNAP.pack(self.index, self.digest)

    def restore(self, snapshot: Snapshot) -> None:
        self.index, self.digest = _SNAP.unpack(snapshot.data)
        if self.index != snapshot.index:
            raise AssertionError(f"snapshot data for {self.index} at {snapshot.index}")


@attrs.define
class Faults:
    """Network fault rates for one seed (all zero once the network heals)."""

    drop: float = 0.0
    duplicate: float = 0.0
    max_delay: int = 0


class RaftNetwork:
    """Messages in flight (through the byte codec), delivered by time then send order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.faults = Faults()
        self.blocked: set[tuple[int, int]] = set()  # (src, dst) pairs cut
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.sent = 0

    def send(self, message: Message, now: int) -> None:
        self.sent += 1
        if (message.src, message.dst) in self.blocked:
            return
        if self.faults.drop and self.rng.random() < self.faults.drop:
            return
        # Every message crosses the wire format, as it would between hosts.
        message = codec.decode(codec.encode(message))
        copies = 2 if self.faults.duplicate and self.rng.random() < self.faults.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(0, self.faults.max_delay) if self.faults.max_delay else 0
            self.inject(message, now + delay)

    def inject(self, message: object, at: int) -> None:
        """Queue anything (the fuzzer queues malformed objects too)."""
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, message))  # type: ignore[arg-type]

    def due(self, now: int) -> list[Message]:
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[2])
        return out

    def partition(self, group: set[int], everyone: set[int], one_way: bool) -> None:
        """Cut ``group`` from the rest (only group -> rest when ``one_way``)."""
        for a in group:
            for b in everyone - group:
                self.blocked.add((a, b))
                if not one_way:
                    self.blocked.add((b, a))

    def heal(self) -> None:
        self.blocked.clear()
