"""The master's side of one HA connection, sans-I/O.

One ``MasterConnection`` per slave. The driver feeds it the bytes the slave
sends (``receive_data``) and asks it what to send next (``poll_transfer``);
both take a ``MasterLog`` snapshot of the local commit log and the current
time as inputs, so the object never reads a clock or a file.

Order on the wire: the slave sends a handshake (after its credential, when
the nodes authenticate each other: the driver judges it at ``SlaveJoined``,
before anything counts for that slave); the master answers with its
max offset, epoch and epoch list; the slave truncates to the consistent
point and acks its max offset; that first ack sets where the transfer
starts; then batches of at most ``transfer_batch_size`` bytes flow, each
within one epoch, with heartbeats (empty batches) when idle.
"""

from __future__ import annotations

import attrs

from triomq.ha.core.epoch import EpochCache, EpochEntry
from triomq.ha.core.errors import HAProtocolError
from triomq.ha.core.flow_monitor import FlowMonitor
from triomq.protocol.ha import (
    Ack,
    Credential,
    HAConnectionState,
    MasterHandshake,
    SlaveFrameDecoder,
    SlaveHandshake,
    encode,
    encode_transfer_headers,
    transfer_frames,
)

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_TRANSFER_BATCH_SIZE",
    "MasterConnection",
    "MasterLog",
    "MasterOutput",
    "SendToSlave",
    "SlaveAcked",
    "SlaveJoined",
    "TransferPlan",
]

DEFAULT_TRANSFER_BATCH_SIZE = 32 * 1024
DEFAULT_HEARTBEAT_INTERVAL_MS = 1000


@attrs.frozen
class MasterLog:
    """What the master knows about its own commit log at one instant.

    ``last_segment_start`` is the start offset of the segment holding
    ``max_offset``: where a slave asking ``isSyncFromLastFile`` begins.
    """

    max_offset: int
    min_offset: int
    epochs: EpochCache
    confirm_offset: int
    last_segment_start: int = 0


@attrs.frozen
class SendToSlave:
    """Bytes to write to the slave, in order with other sends."""

    data: bytes


@attrs.frozen
class SlaveJoined:
    """The slave introduced itself (its handshake), with the credential it sent first."""

    handshake: SlaveHandshake
    credential: dict[str, str] | None = None


@attrs.frozen
class SlaveAcked:
    """The slave ``broker_id`` reported its max offset; feed it to the SyncStateSet
    tracker."""

    broker_id: int
    ack_offset: int
    last_caught_up_time_ms: int


MasterOutput = SendToSlave | SlaveJoined | SlaveAcked


@attrs.frozen
class TransferPlan:
    """What to send next: read up to ``max_size`` bytes at ``offset``.

    ``max_size`` 0 is a heartbeat. The bytes stay inside epoch ``epoch``;
    they go out as batches of at most ``transfer_batch_size`` each.
    """

    offset: int
    max_size: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    master_max_offset: int


class MasterConnection:
    """State of the master's connection to one slave.

    ``current_transfer_epoch`` / ``current_transfer_epoch_end_offset`` are the
    seed's variables: the epoch the next transfer belongs to and where it
    ends (-1 when it is the master's current epoch, unbounded).
    ``last_caught_up_time_ms`` follows the seed's rule: each transfer records
    the master's max offset and the time; an ack at or past that offset
    moves the caught-up time to that transfer's time, and an ack of the
    master's whole log to the ack's own time, as RocketMQ 5.3's master does.
    """

    def __init__(
        self,
        *,
        now_ms: int,
        transfer_batch_size: int = DEFAULT_TRANSFER_BATCH_SIZE,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> None:
        if transfer_batch_size <= 0:
            raise ValueError(f"transfer_batch_size must be > 0, got {transfer_batch_size}")
        if heartbeat_interval_ms <= 0:
            raise ValueError(f"heartbeat_interval_ms must be > 0, got {heartbeat_interval_ms}")
        self.transfer_batch_size = transfer_batch_size
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.state = HAConnectionState.READY
        self.slave: SlaveHandshake | None = None
        self._credential: Credential | None = None
        self.slave_ack_offset = -1
        self.next_transfer_from = -1
        self.current_transfer_epoch = -1
        self.current_transfer_epoch_end_offset = -1
        self.last_caught_up_time_ms = now_ms
        self._last_master_max_offset = -1
        self._last_transfer_time_ms = now_ms
        self._last_send_ms = now_ms
        #: The log's bytes sent per second (``mqadmin haStatus``).
        self.transferred = FlowMonitor()
        self._decoder = SlaveFrameDecoder()
        self._entry: EpochEntry | None = None
        self._entry_of: EpochCache | None = None

    @property
    def peer(self) -> str:
        """The slave once known, for errors and logs."""
        return f"slave {self.slave.broker_id}" if self.slave else "?"

    def receive_data(self, data: bytes, log: MasterLog, now_ms: int) -> list[MasterOutput]:
        """Handle bytes from the slave; raises ``HAProtocolError`` / ``HAFrameError``."""
        outputs: list[MasterOutput] = []
        for frame in self._decoder.feed(data):
            if isinstance(frame, SlaveHandshake):
                outputs += self._on_handshake(frame, log, now_ms)
            elif isinstance(frame, Credential):
                # One, before the handshake: what it proves is judged with the handshake.
                if self.state != HAConnectionState.READY or self._credential is not None:
                    raise HAProtocolError("a credential frame after the first one or the "
                                          "handshake", self.peer)
                self._credential = frame
            else:
                outputs.append(self._on_ack(frame, log, now_ms))
        return outputs

    def _on_handshake(
        self, frame: SlaveHandshake, log: MasterLog, now_ms: int
    ) -> list[MasterOutput]:
        if self.state != HAConnectionState.READY:
            raise HAProtocolError(f"second handshake in state {self.state.name}", self.peer)
        if log.epochs.last_epoch is None:
            raise ValueError("the master has no epoch; it must record one before serving")
        self.slave = frame
        reply = MasterHandshake(log.max_offset, log.epochs.last_epoch, log.epochs.starts)
        self._recorded_transfer(log.max_offset, now_ms)
        # The reply goes out before anything else, so the master side passes
        # HANDSHAKE at once; in TRANSFER it waits for the first ack to start.
        self.state = HAConnectionState.TRANSFER
        credential = None if self._credential is None else self._credential.mapping()
        return [SlaveJoined(frame, credential), SendToSlave(encode(reply))]

    def _on_ack(self, frame: Ack, log: MasterLog, now_ms: int) -> SlaveAcked:
        ack = frame.max_offset
        if self.state != HAConnectionState.TRANSFER:
            raise HAProtocolError(f"ack {ack} before the handshake", self.peer)
        if ack > log.max_offset:
            raise HAProtocolError(
                f"ack {ack} beyond the master's max offset {log.max_offset}", self.peer
            )
        if 0 <= self.next_transfer_from < ack:
            raise HAProtocolError(
                f"ack {ack} beyond the bytes sent, which end at {self.next_transfer_from}",
                self.peer,
            )
        if ack < self.slave_ack_offset:
            raise HAProtocolError(f"ack went back from {self.slave_ack_offset} to {ack}", self.peer)
        if self.next_transfer_from < 0:
            self.next_transfer_from = self._start_offset(ack, log)
        self.slave_ack_offset = ack
        if ack >= self._last_master_max_offset:
            caught_up = now_ms if ack == log.max_offset else self._last_transfer_time_ms
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, caught_up)
        assert self.slave is not None  # set with TRANSFER
        return SlaveAcked(self.slave.broker_id, ack, self.last_caught_up_time_ms)

    def _start_offset(self, ack: int, log: MasterLog) -> int:
        # An empty slave (ack 0) starts at a segment start: the last segment
        # if it asked for it, else the oldest byte the master still has.
        assert self.slave is not None
        if ack == 0:
            return log.last_segment_start if self.slave.is_sync_from_last_file else log.min_offset
        if ack < log.min_offset:
            raise HAProtocolError(
                f"slave offset {ack} is below the master's min offset {log.min_offset};"
                " its next bytes are deleted",
                self.peer,
            )
        return ack

    def poll_transfer(
        self, log: MasterLog, now_ms: int, max_size: int | None = None
    ) -> TransferPlan | None:
        """The next batch or heartbeat to send, or None when nothing is due.

        ``max_size`` (default: one batch) plans up to that many bytes at once,
        as consecutive batches of the same epoch (``build_transfer_headers``).
        """
        if self.state != HAConnectionState.TRANSFER or self.next_transfer_from < 0:
            return None
        offset = self.next_transfer_from
        if offset < log.min_offset:
            raise HAProtocolError(
                f"slave at {offset} fell behind the master's min offset {log.min_offset}",
                self.peer,
            )
        entry = self._entry
        if (
            entry is None
            or log.epochs is not self._entry_of
            or offset < entry.start_offset
            or (entry.end_offset is not None and offset >= entry.end_offset)
        ):
            entry = log.epochs.entry_at(offset)
            if entry is None:
                raise HAProtocolError(
                    f"offset {offset} precedes the master's first epoch", self.peer
                )
            # Batches follow each other inside one epoch: looked up once per epoch.
            self._entry, self._entry_of = entry, log.epochs
        end = entry.end_offset
        self.current_transfer_epoch = entry.epoch
        self.current_transfer_epoch_end_offset = -1 if end is None else end
        limit = log.max_offset if end is None else min(end, log.max_offset)
        if offset < limit:
            size = min(max_size or self.transfer_batch_size, limit - offset)
        elif now_ms - self._last_send_ms >= self.heartbeat_interval_ms:
            size = 0
        else:
            return None
        return TransferPlan(
            offset, size, entry.epoch, entry.start_offset, log.confirm_offset, log.max_offset
        )

    def build_transfer(self, plan: TransferPlan, body: bytes, now_ms: int) -> bytes:
        """Record that ``body`` (read for ``plan``) is sent and return its frames' bytes.

        ``body`` may be shorter than ``plan.max_size`` (a read stops at a
        segment end); the next plan continues after it.
        """
        headers = self.build_transfer_headers(plan, len(body), now_ms)
        return b"".join(transfer_frames(headers, body, self.transfer_batch_size))

    def build_transfer_headers(self, plan: TransferPlan, body_size: int, now_ms: int) -> bytes:
        """Like ``build_transfer`` for ``body_size`` bytes: the headers of its
        batches of ``transfer_batch_size`` (``encode_transfer_headers``).

        The caller sends each header followed by its batch
        (``transfer_frames``), so a batch is never copied into its frame.
        """
        if plan.offset != self.next_transfer_from:
            raise ValueError(f"stale plan at {plan.offset}, next is {self.next_transfer_from}")
        if body_size > plan.max_size:
            raise ValueError(f"body of {body_size} bytes exceeds the plan's {plan.max_size}")
        headers = encode_transfer_headers(plan.offset, plan.epoch, plan.epoch_start_offset,
                                          plan.confirm_offset, body_size,
                                          self.transfer_batch_size)
        self.next_transfer_from = plan.offset + body_size
        self._last_send_ms = now_ms
        self.transferred.add(body_size, now_ms)
        self._recorded_transfer(plan.master_max_offset, now_ms)
        return headers

    def heartbeat_due_ms(self) -> int:
        """When a heartbeat is due if nothing is sent before."""
        return self._last_send_ms + self.heartbeat_interval_ms

    def _recorded_transfer(self, master_max_offset: int, now_ms: int) -> None:
        self._last_master_max_offset = master_max_offset
        self._last_transfer_time_ms = now_ms
