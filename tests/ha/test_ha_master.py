"""The master's connection state machine, spoken to in raw bytes by a hand-written slave."""

from __future__ import annotations

import struct

import pytest

from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import HAProtocolError
from triomq.ha.core.master import MasterConnection, MasterLog, SendToSlave, SlaveAcked, SlaveJoined
from triomq.protocol.ha import (
    TRANSFER_HEADER_SIZE,
    HAConnectionState,
    HAFrameError,
    SlaveHandshake,
)

EPOCHS = EpochCache([EpochStart(1, 0), EpochStart(2, 100), EpochStart(3, 100), EpochStart(4, 250)])
LOG = MasterLog(max_offset=300, min_offset=0, epochs=EPOCHS, confirm_offset=90)


def handshake_bytes(broker_id=2, sync_from_last_file=0, learner=0):
    # RocketMQ 5.3's AutoSwitchHAClient: state | isSyncFromLastFile | isAsyncLearner
    # | slaveBrokerId.
    return struct.pack(">ihhq", 1, sync_from_last_file, learner, broker_id)


def ack_bytes(offset):
    return struct.pack(">iq", 2, offset)


def transfer_header(raw):
    return struct.unpack(">iiqiqq", raw[:36])


def connected(now=0, log=LOG, batch=64, **flags):
    conn = MasterConnection(now_ms=now, transfer_batch_size=batch, heartbeat_interval_ms=1000)
    outputs = conn.receive_data(handshake_bytes(**flags), log, now)
    return conn, outputs


def test_handshake_reply_bytes():
    conn, outputs = connected()
    assert outputs[0] == SlaveJoined(SlaveHandshake(2))
    assert outputs[1] == SendToSlave(
        struct.pack(">iiqi", 1, 48, 300, 4)
        + struct.pack(">iq", 1, 0)
        + struct.pack(">iq", 2, 100)
        + struct.pack(">iq", 3, 100)
        + struct.pack(">iq", 4, 250)
    )
    assert conn.state == HAConnectionState.TRANSFER
    assert conn.poll_transfer(LOG, 0) is None  # waits for the first ack


def test_transfer_batches_stop_at_epoch_boundaries():
    conn, _ = connected()
    (acked,) = conn.receive_data(ack_bytes(40), LOG, 5)
    assert acked == SlaveAcked(2, 40, 0)
    sent = []
    while (plan := conn.poll_transfer(LOG, 5)) is not None:
        raw = conn.build_transfer(plan, b"x" * plan.max_size, 5)
        state, size, offset, epoch, epoch_start, confirm = transfer_header(raw)
        assert (state, confirm, len(raw)) == (2, 90, 36 + size)
        sent.append((offset, size, epoch, epoch_start))
    # Epoch 1 ends at 100; epochs 2 and 3 are empty (3 owns 100..250); 4 is open.
    assert sent == [
        (40, 60, 1, 0),
        (100, 64, 3, 100),
        (164, 64, 3, 100),
        (228, 22, 3, 100),
        (250, 50, 4, 250),
    ]
    assert conn.current_transfer_epoch == 4
    assert conn.current_transfer_epoch_end_offset == -1


def test_several_batches_planned_at_once_keep_to_the_batch_size_and_the_epoch():
    conn, _ = connected()
    conn.receive_data(ack_bytes(40), LOG, 5)
    plan = conn.poll_transfer(LOG, 5, max_size=1000)
    assert (plan.offset, plan.max_size, plan.epoch) == (40, 60, 1)  # epoch 1 ends at 100
    conn.build_transfer_headers(plan, 60, 5)
    plan = conn.poll_transfer(LOG, 5, max_size=1000)
    assert (plan.offset, plan.max_size, plan.epoch) == (100, 150, 3)
    headers = conn.build_transfer_headers(plan, 140, 5)  # a read stopped short
    assert [transfer_header(headers[at:at + TRANSFER_HEADER_SIZE])[1:4]
            for at in range(0, len(headers), TRANSFER_HEADER_SIZE)] == [
        (64, 100, 3), (64, 164, 3), (12, 228, 3)]
    for offset, size, epoch in [(240, 10, 3), (250, 50, 4)]:
        plan = conn.poll_transfer(LOG, 5, max_size=1000)
        assert (plan.offset, plan.max_size, plan.epoch) == (offset, size, epoch)
        conn.build_transfer_headers(plan, size, 5)
    heartbeat = conn.poll_transfer(LOG, 2000, max_size=1000)
    headers = conn.build_transfer_headers(heartbeat, 0, 2000)
    assert len(headers) == TRANSFER_HEADER_SIZE and transfer_header(headers)[1] == 0


def test_current_transfer_epoch_end_inside_an_old_epoch():
    conn, _ = connected()
    conn.receive_data(ack_bytes(10), LOG, 0)
    plan = conn.poll_transfer(LOG, 0)
    assert (plan.offset, plan.max_size, plan.epoch) == (10, 64, 1)
    assert conn.current_transfer_epoch == 1
    assert conn.current_transfer_epoch_end_offset == 100


def test_short_read_continues_where_it_stopped():
    conn, _ = connected()
    conn.receive_data(ack_bytes(0), LOG, 0)
    plan = conn.poll_transfer(LOG, 0)
    conn.build_transfer(plan, b"y" * 7, 0)
    assert conn.poll_transfer(LOG, 0).offset == 7
    with pytest.raises(ValueError, match="stale plan"):
        conn.build_transfer(plan, b"", 0)
    with pytest.raises(ValueError, match="exceeds"):
        conn.build_transfer(conn.poll_transfer(LOG, 0), b"z" * 65, 0)


def test_heartbeat_only_when_idle_past_the_interval():
    conn, _ = connected()
    conn.receive_data(ack_bytes(300), LOG, 0)
    assert conn.poll_transfer(LOG, 999) is None
    assert conn.heartbeat_due_ms() == 1000
    plan = conn.poll_transfer(LOG, 1000)
    assert plan.max_size == 0
    raw = conn.build_transfer(plan, b"", 1000)
    assert transfer_header(raw) == (2, 0, 300, 4, 250, 90)
    assert len(raw) == 36
    assert conn.poll_transfer(LOG, 1500) is None


def test_empty_slave_starts_at_the_min_offset_or_the_last_segment():
    log = MasterLog(300, 64, EPOCHS, 90, last_segment_start=256)
    conn, _ = connected(log=log)
    conn.receive_data(ack_bytes(0), log, 0)
    assert conn.next_transfer_from == 64
    conn, _ = connected(log=log, sync_from_last_file=1)
    conn.receive_data(ack_bytes(0), log, 0)
    assert conn.next_transfer_from == 256


def test_caught_up_time_follows_the_seed_rule():
    conn, _ = connected(now=0)  # the handshake records max offset 300 at t=0
    conn.receive_data(ack_bytes(0), LOG, 10)
    assert conn.last_caught_up_time_ms == 0
    plan = conn.poll_transfer(LOG, 20)
    conn.build_transfer(plan, b"x" * plan.max_size, 20)  # records 300 at t=20
    (acked,) = conn.receive_data(ack_bytes(64), LOG, 30)
    assert acked.last_caught_up_time_ms == 0  # 64 < 300: not caught up
    grown = MasterLog(400, 0, EPOCHS, 90)
    while (plan := conn.poll_transfer(LOG, 40)) is not None:
        conn.build_transfer(plan, b"x" * plan.max_size, 40)
    plan = conn.poll_transfer(grown, 50)  # records 400 at t=50
    conn.build_transfer(plan, b"x" * plan.max_size, 50)
    (acked,) = conn.receive_data(ack_bytes(300), grown, 60)
    assert acked.last_caught_up_time_ms == 0  # 300 < 400
    (acked,) = conn.receive_data(ack_bytes(364), grown, 70)
    assert acked.last_caught_up_time_ms == 0
    while (plan := conn.poll_transfer(grown, 80)) is not None:
        conn.build_transfer(plan, b"x" * plan.max_size, 80)
    bigger = MasterLog(500, 0, EPOCHS, 90)  # grew after the last transfer, at t=80
    (acked,) = conn.receive_data(ack_bytes(400), bigger, 90)
    assert acked.last_caught_up_time_ms == 80
    (acked,) = conn.receive_data(ack_bytes(400), grown, 100)
    assert acked.last_caught_up_time_ms == 100  # the whole log: caught up at the ack


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (ack_bytes(5), "before the handshake"),
        (handshake_bytes() + handshake_bytes(), "second handshake"),
        (handshake_bytes() + ack_bytes(301), "beyond the master's max offset 300"),
        (handshake_bytes() + ack_bytes(50) + ack_bytes(49), "went back from 50 to 49"),
        (
            handshake_bytes() + ack_bytes(50) + ack_bytes(51),
            "beyond the bytes sent, which end at 50",
        ),
    ],
)
def test_protocol_errors(raw, match):
    conn = MasterConnection(now_ms=0)
    with pytest.raises(HAProtocolError, match=match):
        conn.receive_data(raw, LOG, 0)


def test_ack_below_the_masters_min_offset():
    log = MasterLog(300, 128, EPOCHS, 90)
    conn, _ = connected(log=log)
    with pytest.raises(HAProtocolError, match="below the master's min offset 128"):
        conn.receive_data(ack_bytes(100), log, 0)


def test_frame_errors_surface():
    conn = MasterConnection(now_ms=0)
    with pytest.raises(HAFrameError, match="slaveBrokerId"):
        conn.receive_data(struct.pack(">ihhq", 1, 0, 0, -1), LOG, 0)
    conn = MasterConnection(now_ms=0)
    with pytest.raises(HAFrameError, match="state 0"):
        conn.receive_data(struct.pack(">iq", 0, 0), LOG, 0)


def test_master_without_epoch_cannot_serve():
    conn = MasterConnection(now_ms=0)
    with pytest.raises(ValueError, match="no epoch"):
        conn.receive_data(handshake_bytes(), MasterLog(0, 0, EpochCache(), 0), 0)


def test_bad_settings():
    with pytest.raises(ValueError, match="transfer_batch_size"):
        MasterConnection(now_ms=0, transfer_batch_size=0)
    with pytest.raises(ValueError, match="heartbeat_interval_ms"):
        MasterConnection(now_ms=0, heartbeat_interval_ms=0)


def test_slave_overtaken_by_retention():
    conn, _ = connected()
    conn.receive_data(ack_bytes(10), LOG, 0)
    with pytest.raises(HAProtocolError, match="fell behind the master's min offset 64"):
        conn.poll_transfer(MasterLog(300, 64, EPOCHS, 90), 0)
