"""The slave's side of an HA connection, sans-I/O.

READY -> HANDSHAKE: ``start`` returns the handshake to send.
HANDSHAKE -> TRANSFER: the master's answer arrives; the slave compares the
master's epochs with its own (``find_consistent_point``), truncates its
commit log and epoch cache there and acks the resulting max offset.
TRANSFER: each batch must start exactly where the local log ends (a gap or
an overlap is a protocol error, never written; an empty log takes RocketMQ's
heartbeat at ``NO_OFFSET`` as no position, and a confirmOffset of
``NO_OFFSET`` leaves its own); a new epoch in a header is
recorded before its bytes; a batch's bytes are written as they arrive (the
header is checked first, so the rest of a body may be received straight
into the log: ``body_remaining``); each ``receive_data`` that brought
transfer bytes ends with one ack, and ``poll`` acks periodically.

The object reads the local log once, at the handshake (a ``SlaveLog``
snapshot); afterwards it tracks the max offset and epoch cache itself from
the actions it emitted. The driver must perform the actions in order, each
durably before the next, and only then send the ack that follows them:

- ``Truncate``: cut the commit log at ``offset``, then save ``epochs``.
  Log first: a crash in between leaves epochs that still cover the cut log,
  whereas cutting the epoch file first would attribute the stale tail to an
  older epoch and move the next consistent point past it.
- ``RecordEpoch``: save ``epochs`` before writing any byte of the new epoch,
  so no byte is ever attributed to the previous epoch after a crash.
- ``WriteAt``: append ``data`` at ``offset`` (on an empty log this sets the
  log's start, e.g. when syncing from the master's last segment).
- ``SendToMaster``: bytes for the master.

``poll``'s periodic ack reports the max offset after every action emitted
so far; the driver must not send it while actions are still being applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import attrs

from triomq.ha.core.epoch import EpochCache, find_consistent_point
from triomq.ha.core.errors import EpochError, HAProtocolError, NoConsistentPoint
from triomq.ha.core.flow_monitor import FlowMonitor
from triomq.protocol.ha import (
    DEFAULT_MAX_BODY_SIZE,
    NO_OFFSET,
    TRANSFER_HEADER_SIZE,
    Ack,
    Credential,
    HAConnectionState,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveHandshake,
    TransferBody,
    TransferHeader,
    TransferRun,
    encode,
)

__all__ = [
    "DEFAULT_ACK_INTERVAL_MS",
    "RecordEpoch",
    "SendToMaster",
    "SlaveAction",
    "SlaveConnection",
    "SlaveLog",
    "Truncate",
    "WriteAt",
]

DEFAULT_ACK_INTERVAL_MS = 1000


@attrs.frozen
class SlaveLog:
    """The slave's commit log and epoch cache at the time of the handshake."""

    max_offset: int
    min_offset: int
    epochs: EpochCache


@attrs.frozen
class Truncate:
    """Cut the commit log at ``offset``, then save ``epochs`` as the epoch cache."""

    offset: int
    epochs: EpochCache


@attrs.frozen
class RecordEpoch:
    """Save ``epochs`` (it gained ``epoch`` starting at ``start_offset``)."""

    epoch: int
    start_offset: int
    epochs: EpochCache


class WriteAt(NamedTuple):
    """Write ``data`` to the commit log at ``offset`` (its current end).

    ``data`` is a read-only ``memoryview`` of the received bytes. A tuple:
    one is built per batch.
    """

    offset: int
    data: bytes | memoryview


@attrs.frozen
class SendToMaster:
    """Bytes for the master."""

    data: bytes


SlaveAction = Truncate | RecordEpoch | WriteAt | SendToMaster


class SlaveConnection:
    """State of a slave's connection to its master."""

    def __init__(
        self,
        *,
        broker_id: int,
        now_ms: int,
        is_sync_from_last_file: bool = False,
        is_async_learner: bool = False,
        ack_interval_ms: int = DEFAULT_ACK_INTERVAL_MS,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    ) -> None:
        self.handshake = SlaveHandshake(broker_id, is_sync_from_last_file, is_async_learner)
        encode(self.handshake)  # refuse an id the frame cannot carry, now
        self.ack_interval_ms = ack_interval_ms
        self.state = HAConnectionState.READY
        self.master_epoch = -1
        self.confirm_offset = -1
        self.epochs = EpochCache()
        self.max_offset = -1
        self._log_empty = True
        self._last_ack_ms = now_ms
        #: When bytes last came from the master and an ack last went to it (-1: none
        #: yet), and the bytes received per second (``mqadmin haStatus``).
        self.last_read_ms = -1
        self.last_write_ms = -1
        self.received = FlowMonitor()
        self._decoder = MasterFrameDecoder(max_body_size)
        #: Where the current batch's next bytes go, and its confirmOffset.
        self._write_at = -1
        self._frame_confirm_offset = -1
        self._largest_body = 0

    def start(self, credential: Mapping[str, str] | None = None) -> bytes:
        """Leave READY: the handshake to send to the master, after ``credential``'s
        frame if given (``triomq.node_auth``: it proves the handshake is ours)."""
        if self.state != HAConnectionState.READY:
            raise ValueError(f"start() in state {self.state.name}")
        self.state = HAConnectionState.HANDSHAKE
        if credential is None:
            return encode(self.handshake)
        return encode(Credential(tuple(sorted(credential.items())))) + encode(self.handshake)

    def receive_data(
        self, data: bytes | bytearray | memoryview, log: SlaveLog, now_ms: int
    ) -> list[SlaveAction]:
        """Handle bytes from the master; raises ``HAProtocolError`` / ``HAFrameError``.

        ``WriteAt`` data are views of ``data``: perform the actions before
        changing ``data`` (e.g. receiving into it again). ``log`` is read
        only when the master's handshake arrives. After an
        error, close the connection and drop this object: the actions of the
        failing call are not returned, and the next connection's handshake
        starts again from the log as it is.
        """
        self._read(len(data), now_ms)
        actions: list[SlaveAction] = []
        events = self._decoder.feed(data)
        transferred = False
        for event in events:
            if isinstance(event, TransferBody):
                self._on_body(event.data, actions)
            elif isinstance(event, TransferHeader):
                self._on_transfer(event, actions)
            else:
                actions += self._on_handshake(event, log)
                continue
            transferred = True
        if events:
            self._acked_after(transferred, actions, now_ms)
        return actions

    def receive_laid_out(
        self, bodies: memoryview, headers: bytes | bytearray | memoryview, log: SlaveLog,
        now_ms: int,
    ) -> list[SlaveAction]:
        """``receive_data`` for a read whose bodies and headers landed apart (a
        scattered read): ``bodies`` holds every body byte of it in order (the
        rest of the current body first), ``headers`` the bytes between them:
        the frame headers, one after another, in order (the last may be cut
        short, with nothing after it). The read starts in a body or at a
        frame's start. The same as the bytes in the order they came, but with
        one ``WriteAt`` per run of contiguous bodies of one epoch: a view of
        ``bodies``, which must hold no byte past the bodies the headers say.
        """
        actions: list[SlaveAction] = []
        decoder = self._decoder
        if decoder.buffered:
            raise ValueError("a laid-out read starts inside a frame's header")
        self._read(len(bodies) + len(headers), now_ms)
        at = self._take_body(bodies, 0)
        run, run_offset = 0, self._write_at - at
        transferred = at > 0
        pos = 0
        while pos < len(headers):
            last = self.epochs.last
            if (last is not None and self._write_at == self.max_offset
                    and self.state == HAConnectionState.TRANSFER):
                # The bulk of a replication: batches that go on with the run.
                taken = decoder.take_run(headers, pos, self._write_at, last.epoch,
                                         last.start_offset, len(bodies) - at)
                if taken.count:
                    self._took(taken, last.epoch)
                    pos, at, transferred = taken.pos, at + taken.taken, True
                    continue
            header = headers[pos:pos + TRANSFER_HEADER_SIZE]
            pos += len(header)
            for event in decoder.feed(header):
                if not isinstance(event, TransferHeader):
                    actions += self._on_handshake(event, log)  # refused in TRANSFER
                    continue
                last = self.epochs.last
                if event.offset != run_offset + at - run or last is None or (
                        event.epoch != last.epoch):
                    # A new run: after the bytes before it (and before a new
                    # epoch's RecordEpoch, which must come before its bytes).
                    if at > run:
                        actions.append(WriteAt(run_offset, bodies[run:at]))
                    run, run_offset = at, event.offset
                self._on_transfer(event, actions)
                transferred = True
            at = self._take_body(bodies, at)
        if at != len(bodies):
            raise ValueError(f"{len(bodies) - at} bytes of bodies past the headers' bodies")
        if at > run:
            actions.append(WriteAt(run_offset, bodies[run:at]))
        if transferred:
            self._acked_after(True, actions, now_ms)
        return actions

    def _take_body(self, bodies: memoryview, at: int) -> int:
        """Take what ``bodies`` holds of the current body from ``at`` on; the end."""
        size = min(self._decoder.body_remaining, len(bodies) - at)
        if size:
            self._decoder.take_body(size)
            self._advance(size)
        return at + size

    def _read(self, size: int, now_ms: int) -> None:
        self.last_read_ms = now_ms
        self.received.add(size, now_ms)

    def _acked_after(self, transferred: bool, actions: list[SlaveAction], now_ms: int) -> None:
        self._last_ack_ms = now_ms
        if transferred:
            # One ack after the last bytes: it carries the max offset, so it
            # acks every batch before it too (RocketMQ acks once per read).
            self.last_write_ms = now_ms
            actions.append(SendToMaster(encode(Ack(self.max_offset))))

    @property
    def body_remaining(self) -> int:
        """Bytes of the current batch's body still to come, for the log at ``body_offset``."""
        return self._decoder.body_remaining

    @property
    def mid_frame(self) -> bool:
        """Whether the bytes so far end inside a frame (more of it is on its way)."""
        return bool(self._decoder.body_remaining or self._decoder.buffered)

    @property
    def body_offset(self) -> int:
        """Where the current batch's next bytes go in the log (after a batch, its
        end: where the next one's go); -1 before the first batch."""
        return self._write_at

    @property
    def likely_body_size(self) -> int:
        """The largest batch body so far on this connection (0 before the first):
        a master sends full batches of its haTransferBatchSize but at the end of
        what it has, so the next bodies most likely have this size."""
        return self._largest_body

    def poll(self, now_ms: int) -> bytes | None:
        """A periodic ack when one is due, else None."""
        if self.state != HAConnectionState.TRANSFER or now_ms < self.ack_due_ms():
            return None
        self._last_ack_ms = self.last_write_ms = now_ms
        return encode(Ack(self.max_offset))

    def ack_due_ms(self) -> int:
        """When the next periodic ack is due."""
        return self._last_ack_ms + self.ack_interval_ms

    def _on_handshake(self, frame: MasterHandshake, log: SlaveLog) -> list[SlaveAction]:
        if self.state != HAConnectionState.HANDSHAKE:
            raise HAProtocolError(f"master handshake in state {self.state.name}", "master")
        master = self._master_epochs(frame)
        if len(log.epochs) == 0:
            # Bytes no epoch vouches for cannot be checked against the master.
            point = log.min_offset
        else:
            point = find_consistent_point(
                log.epochs.entries(log.max_offset), master.entries(frame.max_offset)
            )
            if point is None:
                raise NoConsistentPoint(
                    f"no shared epoch: local {list(log.epochs)}, master {list(master)}", "master"
                )
        self.epochs = log.epochs.truncate_suffix(point)
        self.max_offset = point
        self._log_empty = point <= log.min_offset
        self.master_epoch = frame.epoch
        self.state = HAConnectionState.TRANSFER
        actions: list[SlaveAction] = []
        if point < log.max_offset or self.epochs != log.epochs:
            actions.append(Truncate(point, self.epochs))
        actions.append(SendToMaster(encode(Ack(point))))
        return actions

    def _master_epochs(self, frame: MasterHandshake) -> EpochCache:
        try:
            master = EpochCache(frame.epochs)
        except EpochError as exc:
            raise HAProtocolError(f"bad epoch list: {exc}", "master") from None
        last = master.last
        if last is None or last.epoch != frame.epoch or last.start_offset > frame.max_offset:
            raise HAProtocolError(
                f"epoch list {list(master)} does not end with epoch {frame.epoch}"
                f" starting at or before max offset {frame.max_offset}",
                "master",
            )
        return master

    def _on_transfer(self, frame: TransferHeader, actions: list[SlaveAction]) -> None:
        if self.state != HAConnectionState.TRANSFER:
            raise HAProtocolError(f"transfer in state {self.state.name}", "master")
        if frame.offset == NO_OFFSET and self._log_empty:
            # A RocketMQ master's heartbeat while its log has no file: nothing to
            # place, and its epoch fields are not the transfer's yet. To a slave
            # holding bytes it is a gap (_check_position).
            return
        self._check_position(frame)
        record = self._epoch_change(frame)
        if record is not None:
            self.epochs = record.epochs
            actions.append(record)
        self._write_at = frame.offset
        self._frame_confirm_offset = frame.confirm_offset
        self._largest_body = max(self._largest_body, frame.body_size)
        self.master_epoch = max(self.master_epoch, frame.epoch)
        self._confirm()

    def _took(self, run: TransferRun, epoch: int) -> None:
        """What ``_on_transfer`` and ``_advance`` do for the batches of ``run``,
        which continue the current run of bytes in ``epoch``."""
        if run.taken:
            self._log_empty = False
        self._write_at = self.max_offset = self._write_at + run.taken
        self._frame_confirm_offset = run.last_confirm_offset
        self._largest_body = max(self._largest_body, run.largest_body)
        self.master_epoch = max(self.master_epoch, epoch)
        self.confirm_offset = max(self.confirm_offset, run.confirm_offset)

    def _on_body(self, data: memoryview, actions: list[SlaveAction]) -> None:
        actions.append(WriteAt(self._write_at, data))
        self._advance(len(data))

    def _advance(self, size: int) -> None:
        """``size`` more bytes of the current body are written."""
        self._write_at += size
        self.max_offset = self._write_at
        self._log_empty = False
        if self.confirm_offset < self._frame_confirm_offset:
            self._confirm()

    def _confirm(self) -> None:
        # Never past the local max offset.
        confirm = min(self._frame_confirm_offset, self.max_offset)
        self.confirm_offset = max(self.confirm_offset, confirm)

    def _check_position(self, frame: TransferHeader) -> None:
        if frame.offset == self.max_offset:
            return
        # An empty log may start anywhere ahead (the master's last segment or
        # its min offset); anything else would leave a gap or an overlap.
        if not (self._log_empty and frame.offset > self.max_offset):
            raise HAProtocolError(
                f"transfer at {frame.offset} is not contiguous with the local max offset"
                f" {self.max_offset}",
                "master",
            )

    def _epoch_change(self, frame: TransferHeader) -> RecordEpoch | None:
        last = self.epochs.last
        if last is not None and frame.epoch == last.epoch:
            if frame.epoch_start_offset != last.start_offset:
                raise HAProtocolError(
                    f"epoch {frame.epoch} starts at {frame.epoch_start_offset},"
                    f" locally at {last.start_offset}",
                    "master",
                )
            return None
        if last is not None and frame.epoch < last.epoch:
            raise HAProtocolError(f"epoch went back from {last.epoch} to {frame.epoch}", "master")
        # A new epoch: on a non-empty log it starts exactly where the log ends
        # (a master never lets a batch cross an epoch boundary).
        start = frame.epoch_start_offset
        if start > frame.offset or (not self._log_empty and start != frame.offset):
            raise HAProtocolError(
                f"new epoch {frame.epoch} starts at {start}, batch at {frame.offset},"
                f" local max offset {self.max_offset}",
                "master",
            )
        try:
            epochs = self.epochs.append(frame.epoch, start)
        except EpochError as exc:
            raise HAProtocolError(str(exc), "master") from None
        return RecordEpoch(frame.epoch, start, epochs)
