"""The HA frames a RocketMQ 5.3.3 broker writes, built field by field as its
``AutoSwitchHAClient`` (the slave's handshake and acks) and
``AutoSwitchHAConnection`` (the master's handshake answer and transfers) put
them into their buffers, against triomq's codec: the same bytes, the same
values, in any chunking.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.protocol.ha import (
    NO_OFFSET,
    Ack,
    EpochStart,
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

# HAConnectionState ordinals, as Java's enum numbers them.
HANDSHAKE, TRANSFER = 1, 2
EPOCH_ENTRY_SIZE = 12  # AutoSwitchHAConnection.EPOCH_ENTRY_SIZE


class JavaBuffer:
    """What a Java ``ByteBuffer`` writes: big-endian, two's complement."""

    def __init__(self) -> None:
        self.data = bytearray()

    def put_short(self, value: int) -> JavaBuffer:
        self.data += value.to_bytes(2, "big", signed=True)
        return self

    def put_int(self, value: int) -> JavaBuffer:
        self.data += value.to_bytes(4, "big", signed=True)
        return self

    def put_long(self, value: int) -> JavaBuffer:
        self.data += value.to_bytes(8, "big", signed=True)
        return self

    def put(self, raw: bytes) -> JavaBuffer:
        self.data += raw
        return self


def rocketmq_slave_handshake(broker_id: int, sync_from_last_file: bool = False,
                             async_learner: bool = False) -> bytes:
    """A slave's opening frame (``sendHandshakeHeader``): its state, two flags as
    shorts, and the broker id the controller gave it."""
    return bytes(JavaBuffer().put_int(HANDSHAKE).put_short(int(sync_from_last_file))
                 .put_short(int(async_learner)).put_long(broker_id).data)


def rocketmq_ack(offset: int) -> bytes:
    """A slave's report of its max offset (``reportSlaveOffset``)."""
    return bytes(JavaBuffer().put_int(TRANSFER).put_long(offset).data)


def rocketmq_master_handshake(max_offset: int, last_epoch: int,
                              entries: list[tuple[int, int]]) -> bytes:
    """A master's answer to a handshake (``buildHandshakeBuffer``): the header,
    then the epoch entries."""
    buffer = (JavaBuffer().put_int(HANDSHAKE).put_int(len(entries) * EPOCH_ENTRY_SIZE)
              .put_long(max_offset).put_int(last_epoch))
    for epoch, start in entries:
        buffer.put_int(epoch).put_long(start)
    return bytes(buffer.data)


def rocketmq_transfer(offset: int, epoch: int, epoch_start: int, confirm: int,
                      body: bytes = b"") -> bytes:
    """A batch or, without a body, a heartbeat (``buildTransferHeaderBuffer``)."""
    return bytes(JavaBuffer().put_int(TRANSFER).put_int(len(body)).put_long(offset)
                 .put_int(epoch).put_long(epoch_start).put_long(confirm).put(body).data)


def master_events(data: bytes, cuts: Sequence[int] = ()) -> list:
    """What a slave's decoder makes of ``data`` cut at ``cuts``: bodies joined per
    transfer."""
    decoder = MasterFrameDecoder(max_body_size=4096)
    events: list = []
    for chunk in chunks(data, cuts):
        for event in decoder.feed(chunk):
            if isinstance(event, TransferBody) and isinstance(events[-1], TransferBody):
                events[-1] = TransferBody(memoryview(bytes(events[-1].data) + event.data))
            else:
                events.append(TransferBody(memoryview(bytes(event.data)))
                              if isinstance(event, TransferBody) else event)
    assert decoder.buffered == decoder.body_remaining == 0
    return events


def chunks(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def test_the_slaves_handshake():
    raw = rocketmq_slave_handshake(3, async_learner=True)
    assert len(raw) == 16  # AutoSwitchHAClient.HANDSHAKE_HEADER_SIZE
    frame = SlaveHandshake(3, is_async_learner=True)
    assert encode(frame) == raw
    assert SlaveFrameDecoder().feed(raw) == [frame]


def test_the_ack():
    raw = rocketmq_ack(2**40 + 7)
    assert encode(Ack(2**40 + 7)) == raw
    assert SlaveFrameDecoder().feed(raw) == [Ack(2**40 + 7)]


def test_the_masters_handshake():
    raw = rocketmq_master_handshake(4096, 5, [(1, 0), (3, 1000), (5, 4000)])
    frame = MasterHandshake(4096, 5, (EpochStart(1, 0), EpochStart(3, 1000), EpochStart(5, 4000)))
    assert encode(frame) == raw
    assert MasterFrameDecoder().feed(raw) == [frame]


def test_a_transfer():
    raw = rocketmq_transfer(1000, 3, 1000, 990, b"commit log bytes")
    assert encode(Transfer(1000, 3, 1000, 990, b"commit log bytes")) == raw
    assert master_events(raw) == [TransferHeader(1000, 3, 1000, 990, 16),
                                  TransferBody(memoryview(b"commit log bytes"))]


def test_the_heartbeat_of_a_master_with_no_log():
    # Its log has no file (min offset -1): the offset is -1 and the epoch its first;
    # it has not counted a confirm offset either.
    raw = rocketmq_transfer(NO_OFFSET, 1, 0, NO_OFFSET)
    assert encode(Transfer(NO_OFFSET, 1, 0, NO_OFFSET)) == raw
    assert master_events(raw) == [TransferHeader(-1, 1, 0, -1, 0)]


@pytest.mark.parametrize(("raw", "where"), [
    (rocketmq_transfer(NO_OFFSET, 1, 0, 0, b"x"), "transfer, offset"),
    (rocketmq_transfer(-2, 1, 0, 0), "transfer, offset"),
    (rocketmq_transfer(0, 1, 0, -2), "transfer, confirmOffset"),
])
def test_no_offset_only_where_rocketmq_writes_it(raw, where):
    with pytest.raises(HAFrameError) as info:
        MasterFrameDecoder().feed(raw)
    assert info.value.where == where


def test_encode_takes_no_offset_only_where_rocketmq_writes_it():
    with pytest.raises(HAFrameError, match="offset"):
        encode(Transfer(NO_OFFSET, 1, 0, 0, b"x"))
    with pytest.raises(HAFrameError, match="confirmOffset"):
        encode(Transfer(0, 1, 0, -2))


def test_a_run_of_batches_stops_before_no_confirm_offset():
    # The fast path (C's too, when built) leaves such a header to feed.
    first = rocketmq_transfer(0, 1, 0, 0, b"ab")[:36]
    second = rocketmq_transfer(2, 1, 0, NO_OFFSET, b"c")[:36]
    decoder = MasterFrameDecoder()
    run = decoder.take_run(first + second, 0, 0, 1, 0, 3)
    assert (run.pos, run.count, run.taken, run.body_remaining) == (36, 1, 2, 0)
    assert decoder.feed(second) == [TransferHeader(2, 1, 0, -1, 1)]
    assert decoder.body_remaining == 1


LONG = st.integers(0, 2**62)
INT = st.integers(0, 2**31 - 1)

# One frame a RocketMQ master may send: its bytes and the events triomq makes of them.
handshakes = st.builds(
    lambda max_offset, epochs: (
        rocketmq_master_handshake(max_offset, epochs[-1][0] if epochs else 0, epochs),
        [MasterHandshake(max_offset, epochs[-1][0] if epochs else 0,
                         tuple(EpochStart(e, s) for e, s in epochs))]),
    LONG,
    st.lists(st.tuples(INT, LONG), max_size=4),
)
transfers = st.builds(
    lambda offset, epoch, start, confirm, body: (
        rocketmq_transfer(offset, epoch, start, confirm, body),
        [TransferHeader(offset, epoch, start, confirm, len(body))]
        + ([TransferBody(memoryview(body))] if body else [])),
    LONG, INT, LONG, st.one_of(st.just(NO_OFFSET), LONG), st.binary(max_size=200),
)
heartbeats_with_no_log = st.builds(
    lambda epoch, start: (rocketmq_transfer(NO_OFFSET, epoch, start, NO_OFFSET),
                          [TransferHeader(NO_OFFSET, epoch, start, NO_OFFSET, 0)]),
    INT, LONG,
)


@given(st.lists(st.one_of(handshakes, transfers, heartbeats_with_no_log), max_size=6),
       st.lists(st.integers(0, 2000), max_size=8))
def test_a_rocketmq_masters_frames_in_any_chunking(frames, cuts):
    data = b"".join(raw for raw, _ in frames)
    assert master_events(data, cuts) == [event for _, events in frames for event in events]
    for raw, events in frames:  # triomq writes the same bytes for the same values
        head = events[0]
        if isinstance(head, MasterHandshake):
            assert encode(head) == raw
        else:
            body = bytes(events[1].data) if len(events) > 1 else b""
            assert encode(Transfer(head.offset, head.epoch, head.epoch_start_offset,
                                   head.confirm_offset, body)) == raw


@given(LONG, st.booleans(), st.booleans(), st.lists(LONG, max_size=8),
       st.lists(st.integers(0, 200), max_size=6))
def test_a_rocketmq_slaves_handshake_and_acks_in_any_chunking(broker_id, sync_from_last_file,
                                                              async_learner, offsets, cuts):
    decoder = SlaveFrameDecoder()
    frames = []
    data = rocketmq_slave_handshake(broker_id, sync_from_last_file, async_learner) + b"".join(
        rocketmq_ack(o) for o in offsets)
    for chunk in chunks(data, cuts):
        frames += decoder.feed(chunk)
    assert frames == [SlaveHandshake(broker_id, sync_from_last_file, async_learner),
                      *(Ack(o) for o in offsets)]
