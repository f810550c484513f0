"""Bytes for Raft messages: a sans-I/O codec for the driver's RPC frames.

``encode(message)`` gives the body of a remoting frame and
``request_code(message)`` the DLedger request code it travels under (51001
VOTE, 51002 HEART_BEAT, 51004 PUSH, 51005 LEADERSHIP_TRANSFER, 51006
INSTALL_SNAPSHOT); ``decode(body)`` turns a body back into a message or
raises ``RaftCodecError`` saying what is wrong and at which offset.

Layout, big-endian: ``kind:1 | src:8 | dst:8 | term:8`` then the fields of
that kind in declaration order (booleans packed into one flags byte;
entries, byte strings and id lists behind a 4-byte count). Decoding checks
structure only; ``messages.problem`` and the state machine judge content.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.log import Entry, EntryKind, Snapshot
from triomq.consensus.core.messages import (
    DLedgerCode,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    Message,
    PushRequest,
    PushResponse,
    PushType,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from triomq.errors import TriomqError

VOTE = 51001
HEART_BEAT = 51002
PUSH = 51004
LEADERSHIP_TRANSFER = 51005
INSTALL_SNAPSHOT = 51006

#: kind byte -> (message class, DLedger request code)
_KINDS: dict[int, tuple[type, int]] = {
    1: (VoteRequest, VOTE),
    2: (VoteResponse, VOTE),
    3: (HeartbeatRequest, HEART_BEAT),
    4: (HeartbeatResponse, HEART_BEAT),
    5: (PushRequest, PUSH),
    6: (PushResponse, PUSH),
    7: (InstallSnapshotRequest, INSTALL_SNAPSHOT),
    8: (InstallSnapshotResponse, INSTALL_SNAPSHOT),
    9: (TimeoutNow, LEADERSHIP_TRANSFER),
}
_KIND_OF = {cls: kind for kind, (cls, _) in _KINDS.items()}
_HEADER = struct.Struct(">BQQQ")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
#: An entry's fixed part: index, term, kind and the data length.
_ENTRY_HEAD = struct.Struct(">QQBI")
#: The smallest encoded entry: index, term, kind and an empty data length.
_ENTRY_MIN = 8 + 8 + 1 + 4
#: Cap on one snapshot or entry payload (a frame bigger than this is corrupt).
MAX_BLOB = 1 << 30


class RaftCodecError(TriomqError, ValueError):
    """A Raft message body cannot be encoded or decoded."""


def request_code(message: Message) -> int:
    """The DLedger request code ``message`` travels under."""
    try:
        return _KINDS[_KIND_OF[type(message)]][1]
    except KeyError:
        raise RaftCodecError(f"not a Raft message: {type(message).__name__}") from None


# ---------------------------------------------------------------- encoding


def _u64(value: int, what: str) -> bytes:
    try:
        return _U64.pack(value)
    except struct.error:
        raise RaftCodecError(f"{what}={value!r} does not fit 8 unsigned bytes") from None


def _blob(data: bytes, what: str) -> bytes:
    if len(data) > MAX_BLOB:
        raise RaftCodecError(f"{what}: {len(data)} bytes is over {MAX_BLOB}")
    return _U32.pack(len(data)) + data


def _ids(ids: tuple[int, ...], what: str) -> bytes:
    return _U32.pack(len(ids)) + b"".join(_u64(i, what) for i in ids)


class _LastEntries:
    """The entries encoded last, by identity: a leader pushes the same tuple to
    every caught-up peer (``EntryPusher`` shares it), so it is packed once."""

    entries: tuple[Entry, ...] | None = None
    encoded = b""


def _entries(entries: tuple[Entry, ...]) -> bytes:
    if entries is _LastEntries.entries:
        return _LastEntries.encoded
    encoded = _pack_entries(entries)
    _LastEntries.entries, _LastEntries.encoded = entries, encoded
    return encoded


def _pack_entries(entries: tuple[Entry, ...]) -> bytes:
    # One pack per entry: an APPEND carries many, and this is the hot path.
    pack = _ENTRY_HEAD.pack
    parts = [_U32.pack(len(entries))]
    try:
        for e in entries:
            data = e.data
            if len(data) > MAX_BLOB:
                raise RaftCodecError(f"entry.data: {len(data)} bytes is over {MAX_BLOB}")
            parts.append(pack(e.index, e.term, e.kind, len(data)))
            parts.append(data)
    except struct.error:
        raise RaftCodecError(f"entry {e.index!r} of term {e.term!r}: index or term does "
                             f"not fit 8 unsigned bytes") from None
    return b"".join(parts)


def _snapshot(snapshot: Snapshot) -> bytes:
    state = snapshot.conf_state
    return b"".join(
        [
            _u64(snapshot.index, "snapshot.index"),
            _u64(snapshot.term, "snapshot.term"),
            _ids(state.voters, "voters"),
            _ids(state.learners, "learners"),
            _ids(state.voters_outgoing, "voters_outgoing"),
            _ids(state.learners_next, "learners_next"),
            _U8.pack(1 if state.auto_leave else 0),
            _blob(snapshot.data, "snapshot.data"),
        ]
    )


def _fields(m: Message) -> bytes:
    if isinstance(m, VoteRequest):
        flags = (1 if m.pre_vote else 0) | (2 if m.force else 0)
        return _u64(m.last_index, "last_index") + _u64(m.last_term, "last_term") + _U8.pack(flags)
    if isinstance(m, VoteResponse):
        return _U8.pack((1 if m.granted else 0) | (2 if m.pre_vote else 0))
    if isinstance(m, HeartbeatRequest):
        return b"".join(
            [
                _u64(m.commit_index, "commit_index"),
                _u64(m.commit_term, "commit_term"),
                _u64(m.read_seq, "read_seq"),
            ]
        )
    if isinstance(m, HeartbeatResponse):
        return _u64(m.read_seq, "read_seq")
    if isinstance(m, PushRequest):
        head = b"".join(
            [
                _U8.pack(m.type),
                _u64(m.index, "index"),
                _u64(m.commit_index, "commit_index"),
                _u64(m.entry_term, "entry_term"),
                _u64(m.prev_term, "prev_term"),
                _u64(m.conflict_term, "conflict_term"),
            ]
        )
        return head + _entries(m.entries)
    if isinstance(m, PushResponse):
        return b"".join(
            [
                _U8.pack(m.type),
                _U16.pack(m.code),
                _u64(m.index, "index"),
                _u64(m.begin_index, "begin_index"),
                _u64(m.end_index, "end_index"),
                _u64(m.next_term, "next_term"),
            ]
        )
    if isinstance(m, InstallSnapshotRequest):
        return _snapshot(m.snapshot)
    if isinstance(m, InstallSnapshotResponse):
        return _u64(m.index, "index") + _U16.pack(m.code)
    return b""  # TimeoutNow


def encode(message: Message) -> bytes:
    """The frame body for ``message``; RaftCodecError if it cannot be encoded."""
    kind = _KIND_OF.get(type(message))
    if kind is None:
        raise RaftCodecError(f"not a Raft message: {type(message).__name__}")
    try:
        header = _HEADER.pack(kind, message.src, message.dst, message.term)
    except struct.error:
        raise RaftCodecError(f"{type(message).__name__}: src, dst or term out of range") from None
    return header + _fields(message)


# ---------------------------------------------------------------- decoding


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, size: int, what: str) -> bytes:
        end = self.offset + size
        if end > len(self.data):
            raise RaftCodecError(
                f"truncated at offset {self.offset}: {what} needs {size} bytes, "
                f"{len(self.data) - self.offset} left"
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u16(self, what: str) -> int:
        return _U16.unpack(self.take(2, what))[0]

    def u64(self, what: str) -> int:
        return _U64.unpack(self.take(8, what))[0]

    def blob(self, what: str) -> bytes:
        size = _U32.unpack(self.take(4, what))[0]
        if size > MAX_BLOB:
            raise RaftCodecError(f"{what} at offset {self.offset - 4}: {size} bytes is too big")
        return bytes(self.take(size, what))

    def ids(self, what: str) -> tuple[int, ...]:
        count = _U32.unpack(self.take(4, what))[0]
        if count * 8 > len(self.data) - self.offset:
            raise RaftCodecError(f"{what} at offset {self.offset - 4}: {count} ids do not fit")
        ids = tuple(self.u64(what) for _ in range(count))
        if any(a >= b for a, b in itertools.pairwise(ids)):
            raise RaftCodecError(f"{what} before offset {self.offset}: ids not strictly increasing")
        return ids

    def flags(self, allowed: int, what: str) -> int:
        value = self.u8(what)
        if value & ~allowed:
            raise RaftCodecError(f"{what} at offset {self.offset - 1}: unknown bits in {value:#x}")
        return value

    def enum(self, cls: type, value: int, what: str) -> Any:
        try:
            return cls(value)
        except ValueError:
            raise RaftCodecError(f"{what}: unknown value {value}") from None


_ENTRY_KINDS = {kind.value: kind for kind in EntryKind}


def _read_entries(r: _Reader, count: int) -> tuple[Entry, ...]:
    # The fast path of an APPEND: one unpack per entry, errors located as
    # precisely as the field-by-field reads of the other messages.
    data, offset, end = r.data, r.offset, len(r.data)
    unpack = _ENTRY_HEAD.unpack_from
    head = _ENTRY_HEAD.size
    kinds = _ENTRY_KINDS
    entries = []
    for _ in range(count):
        if offset + head > end:
            r.offset = offset
            r.take(head, "entry")  # raises, saying where
        index, term, kind, size = unpack(data, offset)
        offset += head
        if kind not in kinds:
            raise RaftCodecError(f"entry.kind: unknown value {kind}")
        if size > MAX_BLOB:
            raise RaftCodecError(f"entry.data at offset {offset - 4}: {size} bytes is too big")
        if offset + size > end:
            r.offset = offset
            r.take(size, "entry.data")  # raises, saying where
        entries.append(Entry(index, term, data[offset : offset + size], kinds[kind]))
        offset += size
    r.offset = offset
    return tuple(entries)


def _read_snapshot(r: _Reader) -> Snapshot:
    index, term = r.u64("snapshot.index"), r.u64("snapshot.term")
    state = ConfState(
        voters=r.ids("voters"),
        learners=r.ids("learners"),
        voters_outgoing=r.ids("voters_outgoing"),
        learners_next=r.ids("learners_next"),
        auto_leave=bool(r.flags(1, "auto_leave")),
    )
    return Snapshot(index, term, state, r.blob("snapshot.data"))


def decode(body: bytes) -> Message:
    """Parse a frame body made by ``encode``."""
    r = _Reader(bytes(body))
    kind = r.u8("kind")
    if kind not in _KINDS:
        raise RaftCodecError(f"unknown message kind {kind} at offset 0")
    cls = _KINDS[kind][0]
    src, dst, term = r.u64("src"), r.u64("dst"), r.u64("term")
    base = {"src": src, "dst": dst, "term": term}
    if cls is VoteRequest:
        last_index, last_term = r.u64("last_index"), r.u64("last_term")
        flags = r.flags(3, "flags")
        message: Message = VoteRequest(
            **base,
            last_index=last_index,
            last_term=last_term,
            pre_vote=bool(flags & 1),
            force=bool(flags & 2),
        )
    elif cls is VoteResponse:
        flags = r.flags(3, "flags")
        message = VoteResponse(**base, granted=bool(flags & 1), pre_vote=bool(flags & 2))
    elif cls is HeartbeatRequest:
        commit, commit_term = r.u64("commit_index"), r.u64("commit_term")
        message = HeartbeatRequest(
            **base, commit_index=commit, commit_term=commit_term, read_seq=r.u64("read_seq")
        )
    elif cls is HeartbeatResponse:
        message = HeartbeatResponse(**base, read_seq=r.u64("read_seq"))
    elif cls is PushRequest:
        push_type = r.enum(PushType, r.u8("type"), "push type")
        numbers = [r.u64(name) for name in ("index", "commit", "entry_term", "prev", "conflict")]
        count = _U32.unpack(r.take(4, "entry count"))[0]
        if count * _ENTRY_MIN > len(r.data) - r.offset:
            raise RaftCodecError(f"entry count at offset {r.offset - 4}: {count} do not fit")
        entries = _read_entries(r, count)
        index, commit, entry_term, prev_term, conflict_term = numbers
        message = PushRequest(
            **base,
            type=push_type,
            index=index,
            commit_index=commit,
            entry_term=entry_term,
            prev_term=prev_term,
            conflict_term=conflict_term,
            entries=entries,
        )
    elif cls is PushResponse:
        push_type = r.enum(PushType, r.u8("type"), "push type")
        code = r.enum(DLedgerCode, r.u16("code"), "response code")
        index, begin, end, next_term = (r.u64(n) for n in ("index", "begin", "end", "next"))
        message = PushResponse(
            **base,
            type=push_type,
            code=code,
            index=index,
            begin_index=begin,
            end_index=end,
            next_term=next_term,
        )
    elif cls is InstallSnapshotRequest:
        message = InstallSnapshotRequest(**base, snapshot=_read_snapshot(r))
    elif cls is InstallSnapshotResponse:
        index = r.u64("index")
        code = r.enum(DLedgerCode, r.u16("code"), "response code")
        message = InstallSnapshotResponse(**base, index=index, code=code)
    else:
        message = cls(**base)
    if r.offset != len(r.data):
        raise RaftCodecError(f"{len(r.data) - r.offset} trailing bytes at offset {r.offset}")
    return message
