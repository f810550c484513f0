"""The HA frames' encoders: a frame value to bytes, or a transfer's header alone.

Each refuses, with ``HAFrameError``, a value the layout
(``triomq.protocol.ha_layout``) cannot carry. The headers of a whole send's
batches are ``triomq.protocol.ha_transfers.encode_transfer_headers``.
"""

from __future__ import annotations

import json

from triomq.protocol.ha_layout import (
    _ACK,
    _CREDENTIAL_HEADER,
    _EPOCH_ENTRY,
    _INT_MAX,
    _LONG_MAX,
    _MASTER_HANDSHAKE_HEADER,
    _SLAVE_HANDSHAKE,
    _TRANSFER,
    _TRANSFER_HEADER,
    CREDENTIAL_STATE,
    EPOCH_ENTRY_SIZE,
    MAX_CREDENTIAL_SIZE,
    NO_OFFSET,
    Ack,
    Credential,
    HAConnectionState,
    HAFrameError,
    MasterFrame,
    MasterHandshake,
    SlaveFrame,
    SlaveHandshake,
    Transfer,
)


def _check_range(value: int, high: int, where: str, name: str) -> None:
    if not 0 <= value <= high:
        raise HAFrameError(f"{name} {value} out of range [0, {high}]", where)


def encode(frame: SlaveFrame | MasterFrame) -> bytes:
    """Encode one frame; raises ``HAFrameError`` on a value the layout cannot carry."""
    if isinstance(frame, SlaveHandshake):
        return _encode_slave_handshake(frame)
    if isinstance(frame, Credential):
        body = json.dumps(dict(frame.fields), separators=(",", ":")).encode("utf-8")
        _check_range(len(body), MAX_CREDENTIAL_SIZE, "credential", "bodySize")
        return _CREDENTIAL_HEADER.pack(CREDENTIAL_STATE, len(body)) + body
    if isinstance(frame, Ack):
        _check_range(frame.max_offset, _LONG_MAX, "ack", "maxOffset")
        return _ACK.pack(HAConnectionState.TRANSFER, frame.max_offset)
    if isinstance(frame, MasterHandshake):
        return _encode_master_handshake(frame)
    if isinstance(frame, Transfer):
        return _encode_transfer(frame)
    raise TypeError(f"not an HA frame: {frame!r}")


def _encode_slave_handshake(frame: SlaveHandshake) -> bytes:
    _check_range(frame.broker_id, _LONG_MAX, "slave handshake", "slaveBrokerId")
    return _SLAVE_HANDSHAKE.pack(
        HAConnectionState.HANDSHAKE,
        int(frame.is_sync_from_last_file),
        int(frame.is_async_learner),
        frame.broker_id,
    )


def _encode_master_handshake(frame: MasterHandshake) -> bytes:
    where = "master handshake"
    _check_range(frame.max_offset, _LONG_MAX, where, "maxOffset")
    _check_range(frame.epoch, _INT_MAX, where, "epoch")
    parts = [b""]
    for entry in frame.epochs:
        _check_range(entry.epoch, _INT_MAX, where, "entry epoch")
        _check_range(entry.start_offset, _LONG_MAX, where, "entry startOffset")
        parts.append(_EPOCH_ENTRY.pack(entry.epoch, entry.start_offset))
    body_size = EPOCH_ENTRY_SIZE * len(frame.epochs)
    _check_range(body_size, _INT_MAX, where, "bodySize")
    parts[0] = _MASTER_HANDSHAKE_HEADER.pack(
        HAConnectionState.HANDSHAKE, body_size, frame.max_offset, frame.epoch
    )
    return b"".join(parts)


def _encode_transfer(frame: Transfer) -> bytes:
    header = encode_transfer_header(
        frame.offset, frame.epoch, frame.epoch_start_offset, frame.confirm_offset, len(frame.body)
    )
    return header + frame.body


def encode_transfer_header(
    offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int, body_size: int
) -> bytes:
    """The header of a transfer frame whose ``body_size`` bytes of body follow on the wire.

    Lets a sender write the body without copying it into the frame; raises
    ``HAFrameError`` like ``encode``. ``NO_OFFSET`` is taken where RocketMQ
    writes it (``Transfer``).
    """
    if not (
        0 <= offset <= _LONG_MAX
        and 0 <= epoch <= _INT_MAX
        and 0 <= epoch_start_offset <= _LONG_MAX
        and 0 <= confirm_offset <= _LONG_MAX
        and 0 <= body_size <= _INT_MAX
    ):
        where = "transfer"  # one of these raises, naming the field
        if not (offset == NO_OFFSET and body_size == 0):
            _check_range(offset, _LONG_MAX, where, "offset")
        _check_range(epoch, _INT_MAX, where, "epoch")
        _check_range(epoch_start_offset, _LONG_MAX, where, "epochStartOffset")
        if confirm_offset != NO_OFFSET:
            _check_range(confirm_offset, _LONG_MAX, where, "confirmOffset")
        _check_range(body_size, _INT_MAX, where, "bodySize")
    return _TRANSFER_HEADER.pack(
        _TRANSFER, body_size, offset, epoch, epoch_start_offset, confirm_offset
    )
