"""The HA frames' incremental decoders: bytes, fed in any chunking, back into frames.

``SlaveFrameDecoder`` reads what a slave sends (on the master's side),
``MasterFrameDecoder`` what a master sends (on the slave's side), a
transfer as a header and then its body as it arrives. A malformed frame
raises ``HAFrameError``; a decoder that raised stays failed: the connection
must be closed.
"""

from __future__ import annotations

import json
import struct

from triomq.protocol.ha_layout import (
    _ACK,
    _CREDENTIAL_HEADER,
    _EPOCH_ENTRY,
    _LONG_MAX,
    _MASTER_HANDSHAKE_HEADER,
    _SLAVE_HANDSHAKE,
    _TRANSFER_HEADER,
    ACK_SIZE,
    CREDENTIAL_HEADER_SIZE,
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
    MasterHandshake,
    SlaveFrame,
    SlaveHandshake,
    TransferBody,
    TransferHeader,
    TransferRun,
)
from triomq.protocol.ha_transfers import _valid_transfer, transfer_run

_STATE = struct.Struct(">i")
_new_tuple = tuple.__new__


class _Decoder:
    """The slave frames' buffering; a decoder that failed stays failed."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._failure: HAFrameError | None = None

    def _fail(self, error: HAFrameError) -> HAFrameError:
        self._failure = error
        return error

    def _take(self, size: int) -> bytes:
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        return chunk

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buffer)


class SlaveFrameDecoder(_Decoder):
    """Decodes what a slave sends; runs on the master side of a connection."""

    def feed(self, data: bytes) -> list[SlaveFrame]:
        """Buffer ``data`` and return every frame it completes, in order."""
        if self._failure is not None:
            raise self._failure
        self._buffer += data
        frames: list[SlaveFrame] = []
        while len(self._buffer) >= _STATE.size:
            (state,) = _STATE.unpack_from(self._buffer)
            if state == HAConnectionState.HANDSHAKE:
                if len(self._buffer) < SLAVE_HANDSHAKE_SIZE:
                    break
                frames.append(self._slave_handshake(self._take(SLAVE_HANDSHAKE_SIZE)))
            elif state == CREDENTIAL_STATE:
                credential = self._credential()
                if credential is None:
                    break
                frames.append(credential)
            elif state == HAConnectionState.TRANSFER:
                if len(self._buffer) < ACK_SIZE:
                    break
                _, max_offset = _ACK.unpack(self._take(ACK_SIZE))
                if max_offset < 0:
                    raise self._fail(HAFrameError(f"negative maxOffset {max_offset}", "ack"))
                frames.append(Ack(max_offset))
            else:
                raise self._fail(
                    HAFrameError(
                        f"state {state} is neither HANDSHAKE (1), TRANSFER (2) nor "
                        f"CREDENTIAL ({CREDENTIAL_STATE})",
                        "slave frame, state",
                    )
                )
        return frames

    def _credential(self) -> Credential | None:
        """The credential frame at the buffer's start, or None while incomplete."""
        if len(self._buffer) < CREDENTIAL_HEADER_SIZE:
            return None
        _, size = _CREDENTIAL_HEADER.unpack_from(self._buffer)
        if not 0 < size <= MAX_CREDENTIAL_SIZE:
            raise self._fail(HAFrameError(
                f"bodySize {size} out of range [1, {MAX_CREDENTIAL_SIZE}]", "credential"))
        if len(self._buffer) < CREDENTIAL_HEADER_SIZE + size:
            return None
        body = self._take(CREDENTIAL_HEADER_SIZE + size)[CREDENTIAL_HEADER_SIZE:]
        try:
            fields = json.loads(body)
        except ValueError as exc:  # bad UTF-8 included
            raise self._fail(HAFrameError(f"not JSON ({exc})", "credential, body")) from None
        if not (isinstance(fields, dict)
                and all(isinstance(v, str) for v in fields.values())):
            raise self._fail(HAFrameError("not a JSON object of strings", "credential, body"))
        return Credential(tuple(sorted(fields.items())))

    def _slave_handshake(self, raw: bytes) -> SlaveHandshake:
        _, sync_from_last_file, async_learner, broker_id = _SLAVE_HANDSHAKE.unpack(raw)
        for name, flag in (
            ("isSyncFromLastFile", sync_from_last_file),
            ("isAsyncLearner", async_learner),
        ):
            if flag not in (0, 1):
                raise self._fail(
                    HAFrameError(f"flag is {flag}, not 0 or 1", f"slave handshake, {name}")
                )
        if broker_id < 0:
            raise self._fail(
                HAFrameError(f"negative broker id {broker_id}", "slave handshake, slaveBrokerId"))
        return SlaveHandshake(broker_id, bool(sync_from_last_file), bool(async_learner))


class MasterFrameDecoder:
    """Decodes what a master sends; runs on the slave side of a connection.

    A transfer comes out as it arrives: a ``TransferHeader`` once its 36
    bytes are in, then its body as ``TransferBody`` events, each a
    read-only view of the fed chunk (valid as long as the caller leaves the
    chunk unchanged; a receive buffer may be reused once the events of one
    ``feed`` are handled). Commit-log bytes are never buffered or copied
    here, so a slave can write each piece where it belongs, or receive the
    rest of a body (``body_remaining``) straight into its log and feed it
    from there. Only headers and the master's handshake, whose body
    ``max_body_size`` bounds, are buffered until whole.
    """

    def __init__(self, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        if max_body_size < 0:
            raise ValueError(f"max_body_size must be >= 0, got {max_body_size}")
        self.max_body_size = max_body_size
        self._failure: HAFrameError | None = None
        self._head = bytearray()
        # Once the first 8 header bytes are in and valid: the frame's shape.
        self._state = 0
        self._header_size = 0
        self._body_size = -1
        self._partial = bytearray()
        #: Bytes of the current transfer's body still to come.
        self.body_remaining = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of an event."""
        return len(self._head) + len(self._partial)

    def _fail(self, error: HAFrameError) -> HAFrameError:
        self._failure = error
        return error

    def feed(self, data: bytes | bytearray | memoryview) -> list[MasterEvent]:
        """Take ``data`` and return every event it completes, in order."""
        if self._failure is not None:
            raise self._failure
        view = memoryview(data).toreadonly()
        size = len(view)
        pos = 0
        events: list[MasterEvent] = []
        while pos < size:
            if self.body_remaining:
                take = min(self.body_remaining, size - pos)
                events.append(TransferBody(view[pos : pos + take]))
                self.body_remaining -= take
                pos += take
                continue
            if self._body_size < 0 and not self._head and size - pos >= TRANSFER_HEADER_SIZE:
                # The bulk of a replication: a valid transfer header whole in this
                # chunk, read in one step. Anything else takes the general path
                # below, which also names what is wrong.
                whole = self._whole_transfer(view, pos)
                if whole is not None:
                    events.append(whole)
                    pos += TRANSFER_HEADER_SIZE
                    continue
            if self._body_size < 0:
                take = min(8 - len(self._head), size - pos)
                self._head += view[pos : pos + take]
                pos += take
                if len(self._head) < 8:
                    break
                self._shape()
            missing = self._header_size - len(self._head)
            if missing:
                take = min(missing, size - pos)
                self._head += view[pos : pos + take]
                pos += take
                if take < missing:
                    break
            header = bytes(self._head)
            if self._state == HAConnectionState.TRANSFER:
                self._head.clear()
                self._body_size = -1
                events.append(self._transfer(header))
                continue
            take = min(self._body_size - len(self._partial), size - pos)
            self._partial += view[pos : pos + take]
            pos += take
            if len(self._partial) < self._body_size:
                break
            body, self._partial = bytes(self._partial), bytearray()
            self._head.clear()
            self._body_size = -1
            events.append(self._master_handshake(header, body))
        return events

    def take_run(self, headers: bytes | bytearray | memoryview, pos: int, offset: int,
                 epoch: int, epoch_start: int, room: int) -> TransferRun:
        """``feed`` of the whole transfer headers at ``headers[pos:]`` as long as
        they continue a run (``transfer_run``), each with its body from ``room``
        bytes the caller holds (received where they belong), without events: a
        slave takes most of a replication's headers so. What follows is left
        to ``feed``; the last transfer's body is expected next
        (``body_remaining``), if not all at hand. At a frame's start only: else
        nothing is taken."""
        if self._failure is not None or self.body_remaining or self._head:
            return TransferRun(pos, 0, 0, 0, -1, -1, 0)
        run = _new_tuple(TransferRun, transfer_run(
            headers, pos, offset, epoch, epoch_start, self.max_body_size, room))
        self.body_remaining = run.body_remaining
        return run

    def _whole_transfer(self, view: bytes | bytearray | memoryview, pos: int
                        ) -> TransferHeader | None:
        """The valid transfer header at ``pos`` of ``view`` (taken: its body is
        expected next), or None (nothing taken)."""
        state, body_size, offset, epoch, epoch_start, confirm = (
            _TRANSFER_HEADER.unpack_from(view, pos)
        )
        if _valid_transfer(state, body_size, offset, epoch, epoch_start, confirm,
                           self.max_body_size):
            self.body_remaining = body_size
            # The tuple's own constructor: one per batch, without a Python frame.
            return _new_tuple(TransferHeader, (offset, epoch, epoch_start, confirm, body_size))
        return None

    def take_body(self, size: int) -> None:
        """``feed`` of ``size`` bytes of the current body that the caller holds
        itself (received where they belong), without events."""
        if not 0 <= size <= self.body_remaining:
            raise ValueError(f"{size} bytes of body taken, {self.body_remaining} remaining")
        self.body_remaining -= size

    def _shape(self) -> None:
        """Check a frame's state and bodySize as soon as they are in."""
        state, body_size = struct.unpack_from(">ii", self._head)
        if state == HAConnectionState.HANDSHAKE:
            where, header_size = "master handshake", MASTER_HANDSHAKE_HEADER_SIZE
        elif state == HAConnectionState.TRANSFER:
            where, header_size = "transfer", TRANSFER_HEADER_SIZE
        else:
            raise self._fail(
                HAFrameError(
                    f"state {state} is neither HANDSHAKE (1) nor TRANSFER (2)",
                    "master frame, state",
                )
            )
        if not 0 <= body_size <= self.max_body_size:
            raise self._fail(
                HAFrameError(
                    f"bodySize {body_size} out of range [0, {self.max_body_size}]",
                    f"{where}, bodySize",
                )
            )
        if state == HAConnectionState.HANDSHAKE and body_size % EPOCH_ENTRY_SIZE:
            raise self._fail(
                HAFrameError(
                    f"bodySize {body_size} is not a multiple of {EPOCH_ENTRY_SIZE}",
                    f"{where}, bodySize",
                )
            )
        self._state = state
        self._header_size, self._body_size = header_size, body_size

    def _master_handshake(self, header: bytes, body: bytes) -> MasterHandshake:
        where = "master handshake"
        _, _, max_offset, epoch = _MASTER_HANDSHAKE_HEADER.unpack(header)
        self._non_negative(where, maxOffset=max_offset, epoch=epoch)
        entries = []
        for index, (entry_epoch, start) in enumerate(_EPOCH_ENTRY.iter_unpack(body)):
            self._non_negative(f"{where}, entry {index}", epoch=entry_epoch, startOffset=start)
            entries.append(EpochStart(entry_epoch, start))
        return MasterHandshake(max_offset, epoch, tuple(entries))

    def _transfer(self, header: bytes) -> TransferHeader:
        _, body_size, offset, epoch, epoch_start, confirm = _TRANSFER_HEADER.unpack(header)
        # RocketMQ's NO_OFFSET passes where it writes it: a heartbeat's offset, confirmOffset.
        self._non_negative(
            "transfer",
            offset=0 if offset == NO_OFFSET and body_size == 0 else offset,
            epoch=epoch,
            epochStartOffset=epoch_start,
            confirmOffset=0 if confirm == NO_OFFSET else confirm,
        )
        if offset + body_size > _LONG_MAX:
            raise self._fail(
                HAFrameError(f"offset {offset} + bodySize {body_size} overflows", "transfer")
            )
        self.body_remaining = body_size
        return TransferHeader(offset, epoch, epoch_start, confirm, body_size)

    def _non_negative(self, where: str, **fields: int) -> None:
        for name, value in fields.items():
            if value < 0:
                raise self._fail(HAFrameError(f"negative {name} {value}", f"{where}, {name}"))
