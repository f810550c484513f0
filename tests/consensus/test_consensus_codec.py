"""The Raft message codec: round trips, DLedger codes and fuzzed bodies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.consensus.core import codec
from triomq.consensus.core import messages as msg
from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.log import Entry, EntryKind, Snapshot

U64 = st.integers(min_value=0, max_value=2**64 - 1)
ids = st.lists(U64, max_size=4)
entries = st.builds(
    Entry, index=U64, term=U64, data=st.binary(max_size=32), kind=st.sampled_from(EntryKind)
)
snapshots = st.builds(
    Snapshot,
    index=U64,
    term=U64,
    conf_state=st.builds(
        ConfState,
        voters=ids,
        learners=ids,
        voters_outgoing=ids,
        learners_next=ids,
        auto_leave=st.booleans(),
    ),
    data=st.binary(max_size=32),
)


def _strategy(cls):
    fields = {}
    for field in cls.__attrs_attrs__:
        if field.name in ("pre_vote", "force", "granted"):
            fields[field.name] = st.booleans()
        elif field.name == "type":
            fields[field.name] = st.sampled_from(msg.PushType)
        elif field.name == "code":
            fields[field.name] = st.sampled_from(msg.DLedgerCode)
        elif field.name == "entries":
            fields[field.name] = st.lists(entries, max_size=3).map(tuple)
        elif field.name == "snapshot":
            fields[field.name] = snapshots
        else:
            fields[field.name] = U64
    return st.builds(cls, **fields)


any_message = st.one_of([_strategy(cls) for cls in msg.MESSAGE_TYPES])


@given(any_message)
def test_round_trip(message):
    assert codec.decode(codec.encode(message)) == message


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (msg.VoteRequest(src=1, dst=2, term=3, last_index=4, last_term=2), 51001),
        (msg.HeartbeatResponse(src=1, dst=2, term=3), 51002),
        (msg.TimeoutNow(src=1, dst=2, term=3), 51005),
        (msg.InstallSnapshotResponse(src=1, dst=2, term=3, index=9), 51006),
    ],
)
def test_request_codes(message, code):
    assert codec.request_code(message) == code


def test_push_codes_and_layout():
    request = msg.PushRequest(
        src=1, dst=2, term=3, type=msg.PushType.COMMIT, index=5, commit_index=5
    )
    assert codec.request_code(request) == codec.PUSH
    body = codec.encode(request)
    assert body[:25] == bytes([5]) + (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + (3).to_bytes(
        8, "big"
    )
    assert len(body) == 25 + 1 + 5 * 8 + 4


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "truncated at offset 0"),
        (b"\x63" + bytes(24), "unknown message kind 99"),
        (codec.encode(msg.TimeoutNow(src=1, dst=2, term=3)) + b"x", "1 trailing bytes"),
        (codec.encode(msg.VoteResponse(src=1, dst=2, term=3, granted=True))[:-1], "flags"),
        (
            bytes([6]) + bytes(24) + b"\x00" + (999).to_bytes(2, "big") + bytes(32),
            "response code: unknown value 999",
        ),
        (bytes([5]) + bytes(24) + b"\x07" + bytes(41), "push type: unknown value 7"),
        (bytes([5]) + bytes(24) + b"\x02" + bytes(40) + b"\xff" * 4, "entry count at offset 66"),
        (bytes([2]) + bytes(24) + b"\x04", "unknown bits in 0x4"),
        (
            bytes([7]) + bytes(40) + (2).to_bytes(4, "big") + (5).to_bytes(8, "big") * 2,
            "voters before offset 61: ids not strictly increasing",
        ),
    ],
)
def test_decode_errors_say_what_and_where(body, message):
    with pytest.raises(codec.RaftCodecError, match=message):
        codec.decode(body)


def test_encode_rejects_non_messages_and_out_of_range():
    with pytest.raises(codec.RaftCodecError, match="not a Raft message"):
        codec.encode("hello")
    with pytest.raises(codec.RaftCodecError, match="not a Raft message"):
        codec.request_code(42)
    with pytest.raises(codec.RaftCodecError, match="out of range"):
        codec.encode(msg.TimeoutNow(src=-1, dst=2, term=3))
    with pytest.raises(codec.RaftCodecError, match="last_index"):
        codec.encode(msg.VoteRequest(src=1, dst=2, term=3, last_index=2**64, last_term=1))


@given(st.binary(max_size=200))
def test_decode_fuzz_random_bytes(body):
    try:
        message = codec.decode(body)
    except codec.RaftCodecError:
        return
    assert codec.encode(message) == body


@given(any_message, st.data())
def test_decode_fuzz_mutated_bodies(message, data):
    body = bytearray(codec.encode(message))
    position = data.draw(st.integers(0, len(body) - 1))
    body[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    mutated = bytes(body[:cut])
    try:
        decoded = codec.decode(mutated)
    except codec.RaftCodecError:
        return
    assert codec.encode(decoded) == mutated  # a body decodes to one message only


def _append(entries: tuple, index: int = 5, prev_term: int = 2, term: int = 4) -> msg.PushRequest:
    return msg.PushRequest(src=1, dst=2, term=term, type=msg.PushType.APPEND, index=index,
                           prev_term=prev_term, commit_index=0, entries=entries)


@given(st.lists(st.integers(2, 4), min_size=1, max_size=6).map(sorted), st.data())
def test_append_validation_finds_any_bad_entry(terms, data):
    entries = [Entry(5 + i, term, b"d%d" % i, EntryKind.NORMAL) for i, term in enumerate(terms)]
    assert msg.problem(_append(tuple(entries))) is None
    at = data.draw(st.integers(0, len(entries) - 1))
    field, value = data.draw(st.sampled_from([
        ("index", float(entries[at].index)),
        ("index", entries[at].index + 1),
        ("term", True if entries[at].term == 1 else float(entries[at].term)),
        ("term", 5),
        ("term", 1),
        ("data", "text"),
        ("kind", 0),
        ("entry", (entries[at].index, entries[at].term, b"", EntryKind.NORMAL)),
    ]))
    if field == "entry":
        entries[at] = value
    else:
        entries[at] = entries[at]._replace(**{field: value})
    assert msg.problem(_append(tuple(entries))) is not None


def test_append_validation_refuses_indexes_past_the_largest():
    last = msg.MAX_INDEX
    assert msg.problem(_append((Entry(last, 3),), index=last)) is None
    assert msg.problem(_append((Entry(last, 3), Entry(last + 1, 3)), index=last)) is not None
