"""AutoSwitch HA frame codec: byte-exact layouts, round trips, bad input, fuzzing."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.errors import TriomqError
from triomq.protocol.ha import (
    SLAVE_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    Ack,
    EpochStart,
    HAConnectionState,
    HAFrameError,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveFrameDecoder,
    SlaveHandshake,
    Transfer,
    TransferBody,
    TransferHeader,
    encode,
)

LONG = st.integers(0, 2**63 - 1)
INT = st.integers(0, 2**31 - 1)


def frames_of(events):
    """Whole frames from a master decoder's events: each transfer's body joined."""
    frames, body, header = [], None, None
    for event in events:
        if isinstance(event, TransferHeader):
            header, body = event, bytearray()
            frames.append(None)
        elif isinstance(event, TransferBody):
            body += event.data
        else:
            frames.append(event)
            continue
        if len(body) == header.body_size:
            frames[-1] = Transfer(header.offset, header.epoch, header.epoch_start_offset,
                                  header.confirm_offset, bytes(body))
    return frames


def test_state_ordinals():
    assert [s.value for s in HAConnectionState] == [0, 1, 2, 3, 4]
    assert [s.name for s in HAConnectionState] == [
        "READY",
        "HANDSHAKE",
        "TRANSFER",
        "SUSPEND",
        "SHUTDOWN",
    ]


# -- byte-exact layouts, written by hand --------------------------------------


def test_slave_handshake_layout():
    # RocketMQ 5.3's AutoSwitchHAClient: the slave names its broker id, not an address.
    raw = (
        b"\x00\x00\x00\x01"  # state HANDSHAKE
        b"\x00\x01"  # isSyncFromLastFile
        b"\x00\x00"  # isAsyncLearner
        b"\x00\x00\x00\x00\x00\x00\x00\x03"  # slaveBrokerId 3
    )
    assert len(raw) == SLAVE_HANDSHAKE_SIZE == 16
    frame = SlaveHandshake(3, is_sync_from_last_file=True)
    assert encode(frame) == raw
    assert SlaveFrameDecoder().feed(raw) == [frame]


def test_ack_layout():
    raw = b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01\x00\x00\x00\x05"
    assert encode(Ack(2**32 + 5)) == raw
    assert SlaveFrameDecoder().feed(raw) == [Ack(2**32 + 5)]


def test_master_handshake_layout():
    raw = (
        b"\x00\x00\x00\x01"  # state
        b"\x00\x00\x00\x18"  # bodySize 24
        b"\x00\x00\x00\x00\x00\x00\x01\x00"  # maxOffset 256
        b"\x00\x00\x00\x03"  # epoch 3
        b"\x00\x00\x00\x01"
        + b"\x00" * 8  # epoch 1 at 0
        + b"\x00\x00\x00\x03"
        + b"\x00\x00\x00\x00\x00\x00\x00\x80"  # epoch 3 at 128
    )
    frame = MasterHandshake(256, 3, (EpochStart(1, 0), EpochStart(3, 128)))
    assert encode(frame) == raw
    assert MasterFrameDecoder().feed(raw) == [frame]


def test_transfer_layout():
    header = (
        b"\x00\x00\x00\x02"  # state TRANSFER
        b"\x00\x00\x00\x03"  # bodySize
        b"\x00\x00\x00\x00\x00\x00\x00\x10"  # offset 16
        b"\x00\x00\x00\x07"  # epoch 7
        b"\x00\x00\x00\x00\x00\x00\x00\x08"  # epochStartOffset 8
        b"\x00\x00\x00\x00\x00\x00\x00\x0c"  # confirmOffset 12
    )
    assert len(header) == TRANSFER_HEADER_SIZE == 36
    frame = Transfer(16, 7, 8, 12, b"abc")
    assert encode(frame) == header + b"abc"
    assert MasterFrameDecoder().feed(header + b"abc") == [
        TransferHeader(16, 7, 8, 12, 3), TransferBody(memoryview(b"abc"))]


def test_heartbeat_is_an_empty_transfer():
    raw = encode(Transfer(5, 1, 0, 5))
    assert len(raw) == TRANSFER_HEADER_SIZE
    assert MasterFrameDecoder().feed(raw) == [TransferHeader(5, 1, 0, 5, 0)]


def test_partial_header_waits_for_the_rest():
    raw = encode(Transfer(0, 1, 0, 0, b"x" * 100))
    decoder = MasterFrameDecoder()
    assert decoder.feed(raw[:30]) == []
    assert decoder.buffered == 30
    assert decoder.feed(raw[30:40]) == [TransferHeader(0, 1, 0, 0, 100), TransferBody(b"x" * 4)]


def test_a_body_comes_out_as_it_arrives_never_buffered():
    raw = encode(Transfer(0, 1, 0, 0, b"abcdef"))
    decoder = MasterFrameDecoder()
    assert decoder.feed(raw[:37]) == [TransferHeader(0, 1, 0, 0, 6), TransferBody(b"a")]
    assert (decoder.body_remaining, decoder.buffered) == (5, 0)
    chunk = bytearray(b"bcdef")
    [body] = decoder.feed(chunk)
    assert body.data == b"bcdef" and body.data.readonly
    assert body.data.obj is chunk  # a view, not a copy
    assert decoder.body_remaining == 0


# -- bad input ----------------------------------------------------------------


def _slave_handshake_raw(state=1, flags=(0, 0), broker_id=1):
    return struct.pack(">ihhq", state, *flags, broker_id)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (struct.pack(">iq", 0, 1), "slave frame, state"),
        (struct.pack(">iq", 3, 1), "slave frame, state"),
        (struct.pack(">iq", -1, 1), "slave frame, state"),
        (struct.pack(">iq", 2, -1), "ack"),
        (_slave_handshake_raw(flags=(2, 0)), "slave handshake, isSyncFromLastFile"),
        (_slave_handshake_raw(flags=(0, -1)), "slave handshake, isAsyncLearner"),
        (_slave_handshake_raw(broker_id=-1), "slave handshake, slaveBrokerId"),
    ],
)
def test_slave_frame_errors(raw, where):
    decoder = SlaveFrameDecoder()
    with pytest.raises(HAFrameError) as info:
        decoder.feed(raw)
    assert info.value.where == where
    assert isinstance(info.value, TriomqError)
    with pytest.raises(HAFrameError):  # a failed decoder stays failed
        decoder.feed(encode(Ack(1)))


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (struct.pack(">ii", 0, 0), "master frame, state"),
        (struct.pack(">ii", 4, 0), "master frame, state"),
        (struct.pack(">ii", 2, -1), "transfer, bodySize"),
        (struct.pack(">ii", 2, 1025), "transfer, bodySize"),
        (struct.pack(">ii", 1, 2**31 - 1), "master handshake, bodySize"),
        (struct.pack(">ii", 1, 13), "master handshake, bodySize"),
        (struct.pack(">iiqiqq", 2, 0, -5, 1, 0, 0), "transfer, offset"),
        (struct.pack(">iiqiqq", 2, 0, 5, -1, 0, 0), "transfer, epoch"),
        (struct.pack(">iiqiqq", 2, 0, 5, 1, -1, 0), "transfer, epochStartOffset"),
        (struct.pack(">iiqiqq", 2, 0, 5, 1, 0, -2), "transfer, confirmOffset"),
        (struct.pack(">iiqiqq", 2, 1, -1, 1, 0, 0), "transfer, offset"),  # -1: heartbeats only
        (struct.pack(">iiqiqq", 2, 1, 2**63 - 1, 1, 0, 0) + b"x", "transfer"),
        (struct.pack(">iiqi", 1, 0, -1, 1), "master handshake, maxOffset"),
        (struct.pack(">iiqiiq", 1, 12, 0, 1, 1, -3), "master handshake, entry 0, startOffset"),
    ],
)
def test_master_frame_errors(raw, where):
    decoder = MasterFrameDecoder(max_body_size=1024)
    with pytest.raises(HAFrameError) as info:
        decoder.feed(raw)
    assert info.value.where == where
    with pytest.raises(HAFrameError):
        decoder.feed(b"")


def test_huge_body_size_is_refused_before_buffering():
    decoder = MasterFrameDecoder(max_body_size=64)
    with pytest.raises(HAFrameError, match="bodySize 65 out of range"):
        decoder.feed(struct.pack(">ii", 2, 65))


def test_encode_refuses_what_the_layout_cannot_carry():
    with pytest.raises(HAFrameError, match="slaveBrokerId"):
        encode(SlaveHandshake(-1))
    with pytest.raises(HAFrameError, match="maxOffset"):
        encode(Ack(-1))
    with pytest.raises(HAFrameError, match="epoch"):
        encode(Transfer(0, 2**31, 0, 0))
    with pytest.raises(HAFrameError, match="entry startOffset"):
        encode(MasterHandshake(0, 1, (EpochStart(1, -1),)))
    with pytest.raises(TypeError):
        encode("nope")  # type: ignore[arg-type]


# -- round trips and fuzzing ---------------------------------------------------

slave_frames = st.one_of(
    st.builds(
        SlaveHandshake,
        LONG,
        st.booleans(),
        st.booleans(),
    ),
    st.builds(Ack, LONG),
)
master_frames = st.one_of(
    st.builds(
        MasterHandshake,
        LONG,
        INT,
        st.lists(st.builds(EpochStart, INT, LONG), max_size=5).map(tuple),
    ),
    st.builds(
        Transfer,
        st.integers(0, 2**40),
        INT,
        LONG,
        LONG,
        st.binary(max_size=300),
    ),
)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@given(st.lists(slave_frames, max_size=6), st.lists(st.integers(0, 10_000), max_size=8))
def test_slave_frames_round_trip_in_any_chunking(frames, cuts):
    data = b"".join(encode(f) for f in frames)
    decoder = SlaveFrameDecoder()
    out = []
    for chunk in _chunks(data, cuts):
        out += decoder.feed(chunk)
    assert out == frames
    assert decoder.buffered == 0


@given(st.lists(master_frames, max_size=6), st.lists(st.integers(0, 10_000), max_size=8))
def test_master_frames_round_trip_in_any_chunking(frames, cuts):
    data = b"".join(encode(f) for f in frames)
    decoder = MasterFrameDecoder(max_body_size=4096)
    out = []
    for chunk in _chunks(data, cuts):
        out += decoder.feed(chunk)
    assert frames_of(out) == frames
    assert decoder.buffered == decoder.body_remaining == 0


@given(st.lists(master_frames, max_size=6), st.lists(st.integers(0, 10_000), max_size=8))
def test_master_frames_from_one_reused_receive_buffer(frames, cuts):
    """Fed through one buffer that each receive overwrites, as the slave driver does.

    The events of one feed are used before the next; nothing may keep a view
    of the buffer past its feed.
    """
    data = b"".join(encode(f) for f in frames)
    decoder = MasterFrameDecoder(max_body_size=4096)
    buffer = bytearray(max([len(c) for c in _chunks(data, cuts)], default=0))
    out = []
    for chunk in _chunks(data, cuts):
        buffer[: len(chunk)] = chunk
        out += [TransferBody(bytes(e.data)) if isinstance(e, TransferBody) else e
                for e in decoder.feed(memoryview(buffer)[: len(chunk)])]
        buffer[:] = b"\xee" * len(buffer)  # the next receive
    assert frames_of(out) == frames
    assert decoder.buffered == 0


@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=5))
def test_slave_decoder_fuzz(data, cuts):
    decoder = SlaveFrameDecoder()
    try:
        for chunk in _chunks(data, cuts):
            for frame in decoder.feed(chunk):
                assert isinstance(frame, SlaveHandshake | Ack)
                assert SlaveFrameDecoder().feed(encode(frame)) == [frame]
    except HAFrameError as exc:
        assert exc.where


@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=5))
def test_master_decoder_fuzz(data, cuts):
    decoder = MasterFrameDecoder(max_body_size=256)
    events = []
    try:
        for chunk in _chunks(data, cuts):
            events += decoder.feed(chunk)
    except HAFrameError as exc:
        assert exc.where
    for frame in frames_of(events):
        if frame is not None:  # a transfer cut short is None
            assert frames_of(MasterFrameDecoder(256).feed(encode(frame))) == [frame]
    assert decoder.buffered <= 20 + 256  # a handshake's header and body at most


@given(master_frames, st.integers(0, 2000), st.integers(0, 255))
def test_master_decoder_fuzz_mutations(frame, position, value):
    data = bytearray(encode(frame))
    data[position % len(data)] = value
    decoder = MasterFrameDecoder(max_body_size=4096)
    try:
        decoder.feed(bytes(data))
    except HAFrameError as exc:
        assert exc.where
