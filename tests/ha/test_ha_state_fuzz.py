"""Hypothesis: the state machines fed arbitrary frames fail only with typed errors, never a gap."""

from __future__ import annotations

from ha_sim import Replica
from hypothesis import given
from hypothesis import strategies as st

from triomq.ha.core.epoch import EpochCache, EpochStart
from triomq.ha.core.errors import HAProtocolError
from triomq.ha.core.master import MasterConnection, MasterLog
from triomq.ha.core.slave import SendToMaster, SlaveConnection
from triomq.protocol.ha import (
    Ack,
    HAFrameError,
    MasterHandshake,
    SlaveHandshake,
    Transfer,
    encode,
)
from triomq.protocol.ha import (
    EpochStart as WireEpoch,
)

OFFSET = st.integers(0, 400)
EPOCH = st.integers(0, 12)

master_frames = st.one_of(
    st.builds(
        MasterHandshake,
        OFFSET,
        EPOCH,
        st.lists(st.builds(WireEpoch, EPOCH, OFFSET), max_size=4).map(tuple),
    ),
    st.builds(Transfer, OFFSET, EPOCH, OFFSET, OFFSET, st.binary(max_size=40)),
)


@st.composite
def master_handshakes(draw):
    epochs = sorted(draw(st.sets(EPOCH, min_size=1, max_size=4)))
    starts = sorted(draw(st.lists(OFFSET, min_size=len(epochs), max_size=len(epochs))))
    max_offset = draw(st.integers(starts[-1], 500))
    entries = tuple(WireEpoch(e, o) for e, o in zip(epochs, starts, strict=True))
    return MasterHandshake(max_offset, epochs[-1], entries)


@given(master_handshakes(), st.data())
def test_slave_never_writes_a_gap(handshake, data):
    # The slave shares a prefix of the master's history, then maybe a private tail.
    replica = Replica("s", 1)
    shared = data.draw(st.integers(0, len(handshake.epochs)))
    replica.epochs = EpochCache(
        EpochStart(e.epoch, e.start_offset) for e in handshake.epochs[:shared]
    )
    low = replica.epochs.last.start_offset if shared else 0
    replica.data = bytearray(data.draw(st.integers(low, low + 100)))
    conn = SlaveConnection(broker_id=1, now_ms=0)
    conn.start()
    frame = data.draw(st.one_of(st.just(handshake), st.just(handshake), master_frames))
    epochs = [e.epoch for e in handshake.epochs]
    try:
        for _ in range(12):
            for action in conn.receive_data(encode(frame), replica.slave_log(), 0):
                if not isinstance(action, SendToMaster):
                    replica.apply(action)  # asserts every write lands at the log's end
            # Next: mostly plausible transfers near the slave's end, sometimes anything.
            end = conn.max_offset
            near = st.builds(
                Transfer,
                st.sampled_from([end, end, end, end + 1, max(0, end - 1)]),
                st.sampled_from([*epochs, *epochs, 0, 13]),
                st.sampled_from([end, *(e.start_offset for e in handshake.epochs)]),
                OFFSET,
                st.binary(max_size=40),
            )
            frame = data.draw(st.one_of(near, near, near, master_frames))
    except (HAProtocolError, HAFrameError) as exc:
        assert str(exc)
    assert conn.max_offset in (-1, replica.max_offset)


slave_frames = st.one_of(
    st.builds(SlaveHandshake, st.integers(0, 2**63 - 1), st.booleans(), st.booleans()),
    st.builds(Ack, st.integers(0, 500)),
)


@given(st.lists(slave_frames, max_size=10), st.lists(st.integers(0, 3000), max_size=10))
def test_master_fails_only_with_typed_errors(frames, times):
    log = MasterLog(300, 20, EpochCache([EpochStart(1, 0), EpochStart(4, 200)]), 250, 256)
    conn = MasterConnection(now_ms=0, transfer_batch_size=50)
    sent_to = conn.next_transfer_from
    try:
        for frame, now in zip(frames, times + [0] * len(frames), strict=False):
            conn.receive_data(encode(frame), log, now)
            plan = conn.poll_transfer(log, now)
            if plan is not None:
                assert plan.offset + plan.max_size <= log.max_offset
                conn.build_transfer(plan, b"x" * plan.max_size, now)
                assert conn.next_transfer_from >= sent_to
                sent_to = conn.next_transfer_from
    except (HAProtocolError, HAFrameError) as exc:
        assert str(exc)
