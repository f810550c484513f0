"""AutoSwitch HA frames: the wire codec between a master and its slaves.

Sans-I/O: encoders turn frame values into bytes; two incremental decoders
turn bytes, fed in any chunking, back into frames (a transfer into a header
and its body as it arrives). All integers are big-endian and signed, as
Java writes them.

Frames (DESIGN.md, "AutoSwitch HA frames")::

    slave -> master  handshake  state:4 | isSyncFromLastFile:2 | isAsyncLearner:2
                                | slaveBrokerId:8
    slave -> master  credential state:4 (100) | bodySize:4 | body (JSON, triomq's own:
                                sent before the handshake when nodes authenticate each other)
    slave -> master  ack        state:4 | maxOffset:8
    master -> slave  handshake  state:4 | bodySize:4 | maxOffset:8 | epoch:4
                                | body = N x (epoch:4 | startOffset:8)
    master -> slave  transfer   state:4 | bodySize:4 | offset:8 | epoch:4
                                | epochStartOffset:8 | confirmOffset:8 | body

The ``state`` field carries the sender's ``HAConnectionState`` and tells the
two frames of one direction apart: HANDSHAKE or TRANSFER. Any other state,
a negative or over-limit body size, a negative broker id, a flag other
than 0/1, or a negative offset or epoch raises ``HAFrameError``, but
for RocketMQ's ``NO_OFFSET`` (-1) where a RocketMQ master writes it: the
offset of a heartbeat (bodySize 0) while its log has no file, and a
confirmOffset it has not counted yet.
A decoder that raised stays failed: the connection must be closed.

The codec's parts, whose public names this module gathers: the states,
sizes and frame values (``ha_layout``), the encoders (``ha_encode``), the
transfer headers in bulk with their optional C versions (``ha_transfers``;
``SPEEDUPS`` says whether they run) and the incremental decoders
(``ha_decode``).
"""

from __future__ import annotations

from triomq.protocol.ha_decode import MasterFrameDecoder, SlaveFrameDecoder
from triomq.protocol.ha_encode import encode, encode_transfer_header
from triomq.protocol.ha_layout import (
    ACK_SIZE,
    CREDENTIAL_STATE,
    DEFAULT_MAX_BODY_SIZE,
    EPOCH_ENTRY_SIZE,
    MASTER_HANDSHAKE_HEADER_SIZE,
    MAX_CREDENTIAL_SIZE,
    NO_OFFSET,
    SLAVE_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    Ack,
    Credential,
    EpochStart,
    HAConnectionState,
    HAFrameError,
    MasterEvent,
    MasterFrame,
    MasterHandshake,
    SlaveFrame,
    SlaveHandshake,
    Transfer,
    TransferBody,
    TransferHeader,
    TransferRun,
)

# ``X as X``: re-exported, not in ``__all__`` (as before the split).
from triomq.protocol.ha_transfers import SPEEDUPS as SPEEDUPS
from triomq.protocol.ha_transfers import (
    encode_transfer_headers,
    transfer_frames,
    transfer_run,
)

__all__ = [
    "ACK_SIZE",
    "CREDENTIAL_STATE",
    "DEFAULT_MAX_BODY_SIZE",
    "EPOCH_ENTRY_SIZE",
    "MASTER_HANDSHAKE_HEADER_SIZE",
    "MAX_CREDENTIAL_SIZE",
    "NO_OFFSET",
    "SLAVE_HANDSHAKE_SIZE",
    "TRANSFER_HEADER_SIZE",
    "Ack",
    "Credential",
    "EpochStart",
    "HAConnectionState",
    "HAFrameError",
    "MasterEvent",
    "MasterFrame",
    "MasterFrameDecoder",
    "MasterHandshake",
    "SlaveFrame",
    "SlaveFrameDecoder",
    "SlaveHandshake",
    "Transfer",
    "TransferBody",
    "TransferHeader",
    "TransferRun",
    "encode",
    "encode_transfer_header",
    "encode_transfer_headers",
    "transfer_frames",
    "transfer_run",
]
