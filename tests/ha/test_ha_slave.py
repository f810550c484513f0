"""The slave's connection state machine, fed raw bytes by a hand-written master."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import HAProtocolError, NoConsistentPoint
from triomq.ha.core.slave import (
    RecordEpoch,
    SendToMaster,
    SlaveConnection,
    SlaveLog,
    Truncate,
    WriteAt,
)
from triomq.protocol.ha import HAConnectionState, HAFrameError


def cache(*pairs):
    return EpochCache(EpochStart(e, s) for e, s in pairs)


def master_handshake(max_offset, epoch, *pairs):
    body = b"".join(struct.pack(">iq", e, s) for e, s in pairs)
    return struct.pack(">iiqi", 1, len(body), max_offset, epoch) + body


def transfer(offset, epoch, epoch_start, confirm, body=b""):
    return struct.pack(">iiqiqq", 2, len(body), offset, epoch, epoch_start, confirm) + body


def ack(offset):
    return SendToMaster(struct.pack(">iq", 2, offset))


def started(**kwargs):
    conn = SlaveConnection(broker_id=3, now_ms=0, **kwargs)
    flag = int(kwargs.get("is_sync_from_last_file", False))
    first = conn.start()
    assert first == struct.pack(">ihhq", 1, flag, 0, 3)
    assert conn.state == HAConnectionState.HANDSHAKE
    return conn


def test_handshake_truncates_the_unacked_tail_then_acks():
    conn = started()
    local = SlaveLog(max_offset=150, min_offset=0, epochs=cache((1, 0)))
    actions = conn.receive_data(master_handshake(200, 2, (1, 0), (2, 100)), local, 0)
    assert actions == [Truncate(100, cache((1, 0))), ack(100)]
    assert conn.state == HAConnectionState.TRANSFER
    assert conn.max_offset == 100


def test_handshake_drops_a_lost_epoch_even_without_cutting_bytes():
    conn = started()
    local = SlaveLog(100, 0, cache((1, 0), (2, 100)))
    actions = conn.receive_data(master_handshake(180, 3, (1, 0), (3, 100)), local, 0)
    assert actions == [Truncate(100, cache((1, 0))), ack(100)]


def test_handshake_without_divergence_only_acks():
    conn = started()
    local = SlaveLog(50, 0, cache((1, 0)))
    actions = conn.receive_data(master_handshake(400, 3, (1, 0), (2, 100), (3, 200)), local, 0)
    assert actions == [ack(50)]


def test_epochless_bytes_are_dropped():
    conn = started()
    actions = conn.receive_data(master_handshake(10, 1, (1, 0)), SlaveLog(70, 20, cache()), 0)
    assert actions == [Truncate(20, cache()), ack(20)]
    conn = started()
    actions = conn.receive_data(master_handshake(10, 1, (1, 0)), SlaveLog(0, 0, cache()), 0)
    assert actions == [ack(0)]


def test_no_consistent_point():
    conn = started()
    with pytest.raises(NoConsistentPoint, match="no shared epoch"):
        conn.receive_data(master_handshake(80, 2, (2, 0)), SlaveLog(50, 0, cache((1, 0))), 0)


@pytest.mark.parametrize(
    "raw",
    [
        master_handshake(10, 1),  # no epochs
        master_handshake(10, 2, (1, 0)),  # last epoch is not the header's
        master_handshake(10, 1, (1, 20)),  # starts past the max offset
        master_handshake(10, 2, (2, 0), (1, 5)),  # out of order
    ],
)
def test_bad_master_handshake(raw):
    conn = started()
    with pytest.raises(HAProtocolError):
        conn.receive_data(raw, SlaveLog(0, 0, cache()), 0)


def in_transfer(max_offset=100, epochs=((1, 0),), min_offset=0):
    conn = started()
    local = SlaveLog(max_offset, min_offset, cache(*epochs))
    last_epoch = epochs[-1][0] if epochs else 1
    conn.receive_data(master_handshake(max_offset, last_epoch, *(epochs or [(1, 0)])), local, 0)
    return conn, local


def test_contiguous_batches_are_written_and_acked():
    conn, local = in_transfer()
    actions = conn.receive_data(
        transfer(100, 1, 0, 60, b"abc") + transfer(103, 1, 0, 200, b"de"), local, 0
    )
    # One ack after the receive's last batch, covering both.
    assert actions == [WriteAt(100, b"abc"), WriteAt(103, b"de"), ack(105)]
    assert conn.confirm_offset == 105  # never past the local max offset
    assert conn.receive_data(transfer(105, 1, 0, 300), local, 0) == [ack(105)]  # heartbeat


def test_new_epoch_is_recorded_before_its_bytes():
    conn, local = in_transfer()
    actions = conn.receive_data(transfer(100, 4, 100, 0, b"zz"), local, 0)
    new = cache((1, 0), (4, 100))
    assert actions == [RecordEpoch(4, 100, new), WriteAt(100, b"zz"), ack(102)]
    assert conn.epochs == new


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (transfer(101, 1, 0, 0, b"x"), "not contiguous"),
        (transfer(99, 1, 0, 0, b"x"), "not contiguous"),
        (transfer(90, 1, 0, 0), "not contiguous"),
        (transfer(100, 1, 5, 0, b"x"), "epoch 1 starts at 5, locally at 0"),
        (transfer(100, 3, 90, 0, b"x"), "new epoch 3 starts at 90"),
        (transfer(100, 3, 101, 0, b"x"), "new epoch 3 starts at 101"),
        (master_handshake(0, 1, (1, 0)), "master handshake in state TRANSFER"),
    ],
)
def test_transfer_errors_write_nothing(raw, match):
    conn, local = in_transfer()
    with pytest.raises(HAProtocolError, match=match):
        conn.receive_data(raw, local, 0)
    assert conn.max_offset == 100
    assert conn.epochs == cache((1, 0))


def test_epoch_going_back():
    conn, local = in_transfer(epochs=((1, 0), (3, 50)))
    with pytest.raises(HAProtocolError, match="went back from 3 to 2"):
        conn.receive_data(transfer(100, 2, 60, 0, b"x"), local, 0)


def test_transfer_before_handshake():
    conn = started()
    with pytest.raises(HAProtocolError, match="transfer in state HANDSHAKE"):
        conn.receive_data(transfer(0, 1, 0, 0), SlaveLog(0, 0, cache()), 0)


def test_empty_log_may_start_ahead():
    conn = started(is_sync_from_last_file=True)
    local = SlaveLog(0, 0, cache())
    assert conn.receive_data(master_handshake(1000, 2, (1, 0), (2, 700)), local, 0) == [ack(0)]
    actions = conn.receive_data(transfer(768, 2, 700, 0, b"q"), local, 0)
    assert actions == [RecordEpoch(2, 700, cache((2, 700))), WriteAt(768, b"q"), ack(769)]
    with pytest.raises(HAProtocolError, match="not contiguous"):
        conn.receive_data(transfer(800, 2, 700, 0, b"q"), local, 0)


def test_an_empty_log_skips_the_heartbeats_of_a_master_with_no_log():
    # A RocketMQ master whose log has no file yet heartbeats at offset -1 (and its
    # first epoch), then sends its first bytes where they are.
    conn = started()
    local = SlaveLog(0, 0, cache())
    assert conn.receive_data(master_handshake(0, 2, (2, 0)), local, 0) == [ack(0)]
    assert conn.receive_data(transfer(-1, 2, 0, -1), local, 0) == [ack(0)]
    assert (conn.max_offset, conn.epochs, conn.confirm_offset) == (0, cache(), -1)
    actions = conn.receive_data(transfer(0, 2, 0, -1, b"ab"), local, 0)
    assert actions == [RecordEpoch(2, 0, cache((2, 0))), WriteAt(0, b"ab"), ack(2)]


def test_a_heartbeat_with_no_offset_is_a_gap_to_a_log_with_bytes():
    conn, local = in_transfer()
    with pytest.raises(HAProtocolError, match="transfer at -1 is not contiguous"):
        conn.receive_data(transfer(-1, 1, 0, 0), local, 0)


def test_no_confirm_offset_leaves_the_slaves_own():
    conn, local = in_transfer()
    conn.receive_data(transfer(100, 1, 0, 90, b"abc"), local, 0)
    assert conn.confirm_offset == 90
    assert conn.receive_data(transfer(103, 1, 0, -1, b"d"), local, 0) == [
        WriteAt(103, b"d"), ack(104)]
    assert conn.confirm_offset == 90


def test_periodic_ack():
    conn = SlaveConnection(broker_id=1, now_ms=0, ack_interval_ms=500)
    assert conn.poll(10_000) is None  # not in TRANSFER yet
    conn.start()
    conn.receive_data(master_handshake(5, 1, (1, 0)), SlaveLog(5, 0, cache((1, 0))), 100)
    assert conn.ack_due_ms() == 600
    assert conn.poll(599) is None
    assert conn.poll(600) == struct.pack(">iq", 2, 5)
    assert conn.poll(700) is None


def test_frame_errors_surface():
    conn = started(max_body_size=16)
    with pytest.raises(HAFrameError, match="bodySize"):
        conn.receive_data(transfer(0, 1, 0, 0, b"x" * 17), SlaveLog(0, 0, cache()), 0)


def test_bad_broker_id_and_double_start():
    with pytest.raises(HAFrameError, match="slaveBrokerId"):
        SlaveConnection(broker_id=-1, now_ms=0)
    conn = started()
    with pytest.raises(ValueError, match="start"):
        conn.start()


@given(
    bodies=st.lists(st.binary(max_size=60), max_size=8),
    new_epoch_at=st.integers(0, 8),
    start=st.integers(0, 700),
    end=st.integers(0, 700),
)
def test_a_read_laid_out_apart_is_handled_as_the_bytes_it_holds(bodies, new_epoch_at, start,
                                                                 end):
    """``receive_laid_out`` of a read whose bodies and headers landed apart does
    what ``receive_data`` does with the same bytes in order (writes merged).
    A scattered read starts in a body or at a frame's start, never inside a
    header."""
    wire, kinds, offset, epoch, epoch_start = [], [], 100, 1, 0
    for i, body in enumerate(bodies):
        if i == new_epoch_at:
            epoch, epoch_start = 2, offset
        frame = transfer(offset, epoch, epoch_start, 0, body)
        wire.append(frame)
        kinds += [i] * (len(frame) - len(body)) + [-1] * len(body)  # header i, or body
        offset += len(body)
    data = b"".join(wire)
    start, end = sorted((min(start, len(data)), min(end, len(data))))
    while 0 < start < len(data) and kinds[start] >= 0 and kinds[start - 1] == kinds[start]:
        start -= 1
    read = list(zip(data[start:end], kinds[start:end], strict=True))
    body_bytes = bytes(b for b, kind in read if kind < 0)
    headers = bytes(b for b, kind in read if kind >= 0)

    whole, local = in_transfer()
    apart, _ = in_transfer()
    for conn in (whole, apart):
        conn.receive_data(data[:start], local, 0)
    expected = whole.receive_data(data[start:end], local, 0)
    actual = apart.receive_laid_out(memoryview(body_bytes), headers, local, 0)

    def joined(actions):
        out = []
        for action in actions:
            if (isinstance(action, WriteAt) and out and isinstance(out[-1], WriteAt)
                    and out[-1].offset + len(out[-1].data) == action.offset):
                out[-1] = WriteAt(out[-1].offset, bytes(out[-1].data) + bytes(action.data))
            else:
                out.append(WriteAt(action.offset, bytes(action.data))
                           if isinstance(action, WriteAt) else action)
        return out

    assert joined(actual) == joined(expected)
    assert (apart.max_offset, apart.confirm_offset, apart.epochs, apart.mid_frame) == (
        whole.max_offset, whole.confirm_offset, whole.epochs, whole.mid_frame)
