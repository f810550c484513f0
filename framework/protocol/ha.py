"""AutoSwitch HA frames: the wire codec between a master and its slaves.

Sans-I/O: encoders turn frame values into bytes; two incremental decoders
turn bytes, fed in any chunking, back into frames (a transfer into a header
and its body as it arrives). All integers are big-endian and signed, as
Java writes them.

Frames (DESIGN.md, "AutoSwitch HA frames")::

    slave -> master  handshake  state:4 | isSyncFromLastFile:2 | isAsyncLearner:2
                                | addressLength:4 | address:50 (UTF-8, zero padded)
    slave -> master  ack        state:4 | maxOffset:8
    master -> slave  handshake  state:4 | bodySize:4 | maxOffset:8 | epoch:4
                                | body = N x (epoch:4 | startOffset:8)
    master -> slave  transfer   state:4 | bodySize:4 | offset:8 | epoch:4
                                | epochStartOffset:8 | confirmOffset:8 | body

The ``state`` field carries the sender's ``HAConnectionState`` and tells the
two frames of one direction apart: HANDSHAKE or TRANSFER. Any other state,
a negative or over-limit body size, an address longer than 50 bytes, a flag
other than 0/1, or a negative offset or epoch raises ``HAFrameError``.
A decoder that raised stays failed: the connection must be closed.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

import attrs

from triomq.errors import TriomqError
from triomq.protocol.extensions import optional_extension

__all__ = [
    "ACK_SIZE",
    "ADDRESS_FIELD_SIZE",
    "DEFAULT_MAX_BODY_SIZE",
    "EPOCH_ENTRY_SIZE",
    "MASTER_HANDSHAKE_HEADER_SIZE",
    "SLAVE_HANDSHAKE_SIZE",
    "TRANSFER_HEADER_SIZE",
    "Ack",
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

_speedups = optional_extension("_ha_speedups")  # None: the pure-Python versions below

#: Whether the HA drivers' per-frame work (headers here, reads and writes in
#: ``triomq.ha.streams``) runs the optional C versions
#: (``framework/protocol/_ha_speedups.c``); set ``TRIOMQ_NO_SPEEDUPS=1`` to disable.
SPEEDUPS = _speedups is not None


class HAConnectionState(enum.IntEnum):
    """The state of an HA connection; its ordinal is the frames' ``state`` field."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class HAFrameError(TriomqError, ValueError):
    """A frame is malformed; ``where`` names the frame and field at fault."""

    def __init__(self, message: str, where: str) -> None:
        self.where = where
        super().__init__(f"HA frame {where}: {message}")


ADDRESS_FIELD_SIZE = 50
SLAVE_HANDSHAKE_SIZE = 4 + 2 + 2 + 4 + ADDRESS_FIELD_SIZE
ACK_SIZE = 4 + 8
MASTER_HANDSHAKE_HEADER_SIZE = 4 + 4 + 8 + 4
TRANSFER_HEADER_SIZE = 4 + 4 + 8 + 4 + 8 + 8
EPOCH_ENTRY_SIZE = 4 + 8
#: Default bound on a master frame's body; callers usually pass their own
#: (a few transfer batches).
DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

_SLAVE_HANDSHAKE = struct.Struct(f">ihhi{ADDRESS_FIELD_SIZE}s")
_ACK = struct.Struct(">iq")
_MASTER_HANDSHAKE_HEADER = struct.Struct(">iiqi")
_TRANSFER_HEADER = struct.Struct(">iiqiqq")
_EPOCH_ENTRY = struct.Struct(">iq")
_STATE = struct.Struct(">i")
_TRANSFER = int(HAConnectionState.TRANSFER)
_new_tuple = tuple.__new__


def _check_range(value: int, high: int, where: str, name: str) -> None:
    if not 0 <= value <= high:
        raise HAFrameError(f"{name} {value} out of range [0, {high}]", where)


@attrs.frozen
class SlaveHandshake:
    """The slave's opening frame: who it is and how it wants to sync."""

    address: str
    is_sync_from_last_file: bool = False
    is_async_learner: bool = False


@attrs.frozen
class Ack:
    """The slave's report of its commit log's max offset."""

    max_offset: int


@attrs.frozen
class EpochStart:
    """One entry of the master's epoch list: an epoch and where it starts."""

    epoch: int
    start_offset: int


@attrs.frozen
class MasterHandshake:
    """The master's answer to a handshake: its max offset, epoch and epoch list."""

    max_offset: int
    epoch: int
    epochs: tuple[EpochStart, ...]


@attrs.frozen
class Transfer:
    """A batch of commit-log bytes starting at ``offset``, all in one epoch.

    An empty ``body`` is a heartbeat. What ``encode`` takes; decoding yields
    a ``TransferHeader`` and the body in ``TransferBody`` pieces instead.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: bytes | memoryview = b""


class TransferHeader(NamedTuple):
    """A transfer's header, as decoded: ``body_size`` bytes of body follow.

    A tuple, as ``TransferBody``: one of each is built per batch.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body_size: int


class TransferBody(NamedTuple):
    """The next bytes of the current transfer's body: a read-only view of the fed chunk."""

    data: memoryview


class TransferRun(NamedTuple):
    """Transfers that continue a run, taken at once (``transfer_run``)."""

    #: Where the headers' bytes go on after them.
    pos: int
    #: How many transfers.
    count: int  # type: ignore[assignment]  # a field, not tuple.count
    #: Their body bytes at hand (all but the last one's ``body_remaining``).
    taken: int
    #: The largest bodySize among them (0 if none).
    largest_body: int
    #: The highest confirmOffset among them, each capped at its body's end
    #: as far as taken (-1 if none).
    confirm_offset: int
    #: The last one's confirmOffset (-1 if none).
    last_confirm_offset: int
    #: Bytes of the last one's body not at hand: still to come.
    body_remaining: int


SlaveFrame = SlaveHandshake | Ack
MasterFrame = MasterHandshake | Transfer
#: What ``MasterFrameDecoder`` turns a master's bytes into.
MasterEvent = MasterHandshake | TransferHeader | TransferBody


def encode(frame: SlaveFrame | MasterFrame) -> bytes:
    """Encode one frame; raises ``HAFrameError`` on a value the layout cannot carry."""
    if isinstance(frame, SlaveHandshake):
        return _encode_slave_handshake(frame)
    if isinstance(frame, Ack):
        _check_range(frame.max_offset, _LONG_MAX, "ack", "maxOffset")
        return _ACK.pack(HAConnectionState.TRANSFER, frame.max_offset)
    if isinstance(frame, MasterHandshake):
        return _encode_master_handshake(frame)
    if isinstance(frame, Transfer):
        return _encode_transfer(frame)
    raise TypeError(f"not an HA frame: {frame!r}")


def _encode_slave_handshake(frame: SlaveHandshake) -> bytes:
    address = frame.address.encode("utf-8")
    if len(address) > ADDRESS_FIELD_SIZE:
        raise HAFrameError(
            f"address is {len(address)} bytes, at most {ADDRESS_FIELD_SIZE}",
            "slave handshake, address",
        )
    return _SLAVE_HANDSHAKE.pack(
        HAConnectionState.HANDSHAKE,
        int(frame.is_sync_from_last_file),
        int(frame.is_async_learner),
        len(address),
        address,
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
    ``HAFrameError`` like ``encode``.
    """
    if not (
        0 <= offset <= _LONG_MAX
        and 0 <= epoch <= _INT_MAX
        and 0 <= epoch_start_offset <= _LONG_MAX
        and 0 <= confirm_offset <= _LONG_MAX
        and 0 <= body_size <= _INT_MAX
    ):
        where = "transfer"  # one of these raises, naming the field
        _check_range(offset, _LONG_MAX, where, "offset")
        _check_range(epoch, _INT_MAX, where, "epoch")
        _check_range(epoch_start_offset, _LONG_MAX, where, "epochStartOffset")
        _check_range(confirm_offset, _LONG_MAX, where, "confirmOffset")
        _check_range(body_size, _INT_MAX, where, "bodySize")
    return _TRANSFER_HEADER.pack(
        _TRANSFER, body_size, offset, epoch, epoch_start_offset, confirm_offset
    )


def _valid_transfer(state: int, body_size: int, offset: int, epoch: int, epoch_start: int,
                    confirm: int, max_body_size: int) -> bool:
    """Whether a transfer header's fields pass every check of ``MasterFrameDecoder``
    (``_transfer`` names what is wrong)."""
    return (state == _TRANSFER and 0 <= body_size <= max_body_size
            and min(offset, epoch, epoch_start, confirm) >= 0
            and offset + body_size <= _LONG_MAX)


def encode_transfer_headers(
    offset: int, epoch: int, epoch_start_offset: int, confirm_offset: int, body_size: int,
    batch_size: int,
) -> bytes:
    """The headers of the transfers that carry ``body_size`` bytes from ``offset``
    on in batches of ``batch_size`` (the last one the rest; a heartbeat, one
    empty batch, for 0 bytes), one after another: ``transfer_frames`` puts
    each before its batch. Raises ``HAFrameError`` like ``encode``."""
    if _speedups is not None:
        headers = _speedups.encode_transfer_headers(
            offset, epoch, epoch_start_offset, confirm_offset, body_size, batch_size)
        if headers is not None:
            return headers
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    last_offset = offset + max(0, body_size - 1) // batch_size * batch_size
    # Only offset and bodySize vary, the first header has the largest bodySize
    # and the last the largest offset: checking these two checks them all.
    first = encode_transfer_header(offset, epoch, epoch_start_offset, confirm_offset,
                                   min(batch_size, body_size))
    if last_offset == offset:
        return first
    last = encode_transfer_header(last_offset, epoch, epoch_start_offset, confirm_offset,
                                  offset + body_size - last_offset)
    pack = _TRANSFER_HEADER.pack
    return b"".join([
        first,
        *[pack(_TRANSFER, batch_size, at, epoch, epoch_start_offset, confirm_offset)
          for at in range(offset + batch_size, last_offset, batch_size)],
        last,
    ])


def transfer_frames(headers: bytes, body: bytes | memoryview, batch_size: int
                    ) -> list[bytes | memoryview]:
    """The pieces of the frames of ``encode_transfer_headers`` in order: each
    header, then its batch of ``body``."""
    pieces: list[bytes | memoryview] = []
    for at in range(0, len(headers), TRANSFER_HEADER_SIZE):
        batch = at // TRANSFER_HEADER_SIZE * batch_size
        pieces += (headers[at:at + TRANSFER_HEADER_SIZE], body[batch:batch + batch_size])
    return pieces


def _transfer_run(headers: bytes | bytearray | memoryview, pos: int, offset: int, epoch: int,
                  epoch_start: int, max_body_size: int, room: int) -> tuple[int, ...]:
    count = taken = largest = body_remaining = 0
    confirm = last_confirm = -1
    while pos + TRANSFER_HEADER_SIZE <= len(headers):
        state, size, at, frame_epoch, start, frame_confirm = _TRANSFER_HEADER.unpack_from(
            headers, pos)
        if not (at == offset and frame_epoch == epoch and start == epoch_start
                and _valid_transfer(state, size, at, frame_epoch, start, frame_confirm,
                                    max_body_size)):
            break
        take = min(size, room)
        room -= take
        taken += take
        offset += take
        largest = max(largest, size)
        confirm = max(confirm, min(frame_confirm, offset))
        last_confirm = frame_confirm
        count += 1
        pos += TRANSFER_HEADER_SIZE
        if take < size:
            body_remaining = size - take
            break
    return pos, count, taken, largest, confirm, last_confirm, body_remaining


def transfer_run(headers: bytes | bytearray | memoryview, pos: int, offset: int, epoch: int,
                 epoch_start: int, max_body_size: int, room: int) -> tuple[int, ...]:
    """The whole transfer headers at ``headers[pos:]`` (one after another) that
    continue a run: each valid (as ``MasterFrameDecoder`` checks, with
    ``max_body_size``), of ``epoch`` starting at ``epoch_start``, at the
    ``offset`` where the last one's body ended (the first at ``offset``);
    their bodies come from ``room`` bytes. Stops before a header that does not
    continue it, or once a body is not all in ``room``. The fields of a
    ``TransferRun``, as a tuple. ``offset``, ``epoch`` and ``epoch_start``
    are non-negative."""
    run = _speedups.transfer_run if _speedups is not None else _transfer_run
    return run(headers, pos, offset, epoch, epoch_start, max_body_size, room)


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
                        f"state {state} is neither HANDSHAKE (1) nor TRANSFER (2)",
                        "slave frame, state",
                    )
                )
        return frames

    def _slave_handshake(self, raw: bytes) -> SlaveHandshake:
        _, sync_from_last_file, async_learner, length, field = _SLAVE_HANDSHAKE.unpack(raw)
        for name, flag in (
            ("isSyncFromLastFile", sync_from_last_file),
            ("isAsyncLearner", async_learner),
        ):
            if flag not in (0, 1):
                raise self._fail(
                    HAFrameError(f"flag is {flag}, not 0 or 1", f"slave handshake, {name}")
                )
        if not 0 <= length <= ADDRESS_FIELD_SIZE:
            raise self._fail(
                HAFrameError(
                    f"length {length} out of range [0, {ADDRESS_FIELD_SIZE}]",
                    "slave handshake, addressLength",
                )
            )
        if any(field[length:]):
            raise self._fail(
                HAFrameError("non-zero bytes after the address", "slave handshake, address")
            )
        try:
            address = field[:length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(
                HAFrameError(f"not UTF-8 ({exc.reason})", "slave handshake, address")
            ) from None
        return SlaveHandshake(address, bool(sync_from_last_file), bool(async_learner))


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
        self._non_negative(
            "transfer",
            offset=offset,
            epoch=epoch,
            epochStartOffset=epoch_start,
            confirmOffset=confirm,
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
