"""The slave's HA driver: a thin trio shell around ``triomq.ha.core.slave``.

``HASlave`` connects to a master, replicates, and reconnects with backoff
after an error; cancelling it (a role change) stops it cleanly. Over TCP it
scatters its reads (``triomq.ha.streams``): batch bodies land straight in
its log's mapped space at their places (``CommitLog.append_buffer``), so the
kernel's copy out of the socket is the only copy of those bytes.
"""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import Awaitable, Callable, Mapping

import attrs
import trio

from triomq.clock import now_ms
from triomq.ha.core.epoch import EpochCache, EpochStore
from triomq.ha.core.reconnect import Reconnect
from triomq.ha.core.slave import (
    RecordEpoch,
    SlaveAction,
    SlaveConnection,
    SlaveLog,
    Truncate,
    WriteAt,
)
from triomq.ha.core.slave import SendToMaster as SlaveSend
from triomq.ha.driver import CONNECTION_ERRORS, Offload, ReplicaLog, describe, logger
from triomq.ha.streams import RECEIVE_SIZE, read_nowait, read_scattered
from triomq.protocol.ha import TRANSFER_HEADER_SIZE, HAConnectionState
from triomq.store import OffsetMismatch, StoreCorruption

__all__ = ["HASlave", "HASlaveConfig"]

#: Header slots of a slave's scattered read: up to twice as many buffers
#: (Linux's IOV_MAX is 1024).
_SCATTER_FRAMES = 256
#: No bytes received in the log's space.
_NOWHERE = (0, 0)
#: A slave acks at the latest after reading this many bytes without a pause,
#: as RocketMQ's slave acks once per read of up to 4 MiB. Acks are not free:
#: one per 1 MiB instead made replication about 20% slower.
_ACK_AFTER = 4 * 1024 * 1024
#: Bytes a slave receives in place before it appends them, in several reads
#: while the master keeps sending (it appends at the latest before it acks):
#: fewer appends, each checking and indexing more records. 1 MiB, about the
#: most a core's cache holds between the kernel's copy and the check.
_APPEND_AFTER = 1024 * 1024
#: What a scattered read's bytes left out of place in a log's space are zeroed with.
_ZEROS = memoryview(bytes(RECEIVE_SIZE))
#: A slave also drops a master whose bytes its log refuses (not records, or
#: an empty log asked to start off a segment boundary).
_SLAVE_CONNECTION_ERRORS = (*CONNECTION_ERRORS, StoreCorruption, OffsetMismatch)


@attrs.frozen
class HASlaveConfig:
    """Slave-side settings, times in ms.

    The slave acks at least every ``ha_send_heartbeat_interval``; after an
    error it reconnects with backoff doubling from ``reconnect_min`` to
    ``reconnect_max``. ``max_body_size`` bounds one master frame's body.
    ``receive_buffer_size`` is the socket receive buffer of a TCP
    connection to the master (``SO_RCVBUF``; 0 leaves it to the kernel's
    autotuning, which can settle on a window of a few frames while each
    read costs the slave a whole pass through its driver: the transfer then
    runs in ~90 KiB reads at half the speed).
    """

    is_sync_from_last_file: bool = False
    is_async_learner: bool = False
    ha_send_heartbeat_interval: int = 200
    max_body_size: int = 64 * 1024 * 1024
    reconnect_min: int = 100
    reconnect_max: int = 5000
    receive_buffer_size: int = 4 * 1024 * 1024


class HASlave:
    """A slave's HA client: connect, handshake, replicate; reconnect after errors.

    ``connect`` opens a new stream to the master (e.g. a transport's
    ``connect`` bound to the master's HA address). ``offload`` runs the
    blocking store calls (truncate, epoch file); by default in a thread.
    """

    def __init__(
        self,
        *,
        log: ReplicaLog,
        epoch_store: EpochStore,
        broker_id: int,
        connect: Callable[[], Awaitable[trio.abc.Stream]],
        config: HASlaveConfig | None = None,
        offload: Offload = trio.to_thread.run_sync,
        on_appended: Callable[[], None] = lambda: None,
        on_truncated: Callable[[], None] = lambda: None,
        credential: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.log = log
        #: A fresh credential for each connection's handshake, when nodes authenticate.
        self.credential = credential
        #: Called after replicated bytes are appended or the confirm offset rose
        #: (the broker's held pulls look).
        self.on_appended = on_appended
        #: Called after the log was cut back to the master's (its queues with it).
        self.on_truncated = on_truncated
        self.offload = offload
        self.epoch_store = epoch_store
        #: What this slave's handshakes name it: its broker id in the group.
        self.broker_id = broker_id
        self.connect = connect
        self.config = config or HASlaveConfig()
        self.epochs = EpochCache()
        self.confirm_offset = -1
        self.connections = 0
        self.last_error: BaseException | None = None
        #: Reads from a TCP master that brought bytes, and those of them held to be
        #: appended with later ones (``_hold``).
        self.reads = 0
        self.reads_held = 0
        #: The connection replicating now, if one is (``mqadmin haStatus`` reads it).
        self.connection: SlaveConnection | None = None
        #: The log's range received in place and not yet appended (``_hold``).
        self._held: tuple[int, int] | None = None
        self._reconnect = Reconnect(self.config.reconnect_min, self.config.reconnect_max)
        #: Set when the master announces itself during a connection or a wait.
        self._announced = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replicate until cancelled, reconnecting with exponential backoff."""
        self.epochs = await self.offload(self.epoch_store.load)
        task_status.started()
        reconnect = self._reconnect
        said: str | None = None  # the failure last logged as a warning
        while True:
            self._announced = trio.Event()
            handshook = False
            try:
                stream = await self.connect()
                self.connections += 1
                async with stream:
                    handshook = await self.run_connection(stream)
            except* _SLAVE_CONNECTION_ERRORS as group:
                _clear_frames(group)
                self.last_error = group.exceptions[0]
                reason = describe(group)
                # A master that is gone fails every reconnection the same way until
                # the controller elects another: one warning, then debug lines.
                logger.log(logging.DEBUG if reason == said else logging.WARNING,
                           "HA connection to master failed: %s", reason)
                said = reason
            if handshook:
                said = None
            if not self._announced.is_set():
                with trio.move_on_after(reconnect.delay_after(handshook=handshook) / 1000):
                    await self._announced.wait()

    def master_announced(self) -> None:
        """The master said it is back (EXCHANGE_BROKER_HA_INFO): a slave waiting to
        reconnect tries now."""
        self._reconnect.announced()
        self._announced.set()

    async def run_connection(self, stream: trio.abc.Stream) -> bool:
        """Replicate over one stream until it closes; True if the handshake completed.

        Raises on a protocol error; the stream is left to the caller to close.
        """
        conn = SlaveConnection(
            broker_id=self.broker_id,
            now_ms=now_ms(),
            is_sync_from_last_file=self.config.is_sync_from_last_file,
            is_async_learner=self.config.is_async_learner,
            ack_interval_ms=self.config.ha_send_heartbeat_interval,
            max_body_size=self.config.max_body_size,
        )
        # Held while received bytes are applied: a periodic ack reports the
        # state machine's max offset, which counts actions not yet applied.
        lock = trio.Lock()
        self._held = None
        if isinstance(stream, trio.SocketStream) and self.config.receive_buffer_size:
            # The kernel caps it at net.core.rmem_max.
            stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                              self.config.receive_buffer_size)
        await stream.send_all(conn.start(
            None if self.credential is None else self.credential()))
        self.connection = conn
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ack_loop, stream, conn, lock)
                if isinstance(stream, trio.SocketStream):
                    await self._replicate_from_socket(stream, conn, lock)
                else:
                    await self._replicate_from_stream(stream, conn, lock)
                nursery.cancel_scope.cancel()
        finally:
            self.connection = None
        return conn.max_offset >= 0

    async def _replicate_from_stream(
        self, stream: trio.abc.Stream, conn: SlaveConnection, lock: trio.Lock
    ) -> None:
        while data := await stream.receive_some(RECEIVE_SIZE):
            async with lock:
                ack = await self._apply(conn, data)
                if ack:
                    await stream.send_all(ack)

    async def _replicate_from_socket(
        self, stream: trio.SocketStream, conn: SlaveConnection, lock: trio.Lock
    ) -> None:
        """Receive with non-blocking reads, the bodies into the log's space at their
        places once a batch was seen (``_receive_nowait``); ack once the socket is
        drained between two frames (or every ``_ACK_AFTER`` bytes). Reads that only
        brought bodies in place are appended together (``_hold``)."""
        sock = stream.socket
        headers = memoryview(bytearray(TRANSFER_HEADER_SIZE * _SCATTER_FRAMES))
        buffer = memoryview(bytearray(RECEIVE_SIZE + len(headers)))
        ack = b""
        unacked = 0
        while True:
            # Acquiring the lock is a checkpoint: the master, when it runs in this
            # thread too, sends more before the next read.
            async with lock:
                n, actions, in_place = self._receive_nowait(sock, conn, buffer, headers)
                if n == 0:
                    self._append_held()
                    return
                if n is not None:
                    unacked += n
                    self.reads += 1
                    sent = self._hold(actions, in_place)
                    if sent is None:
                        self._append_held()
                        sent = await self._apply_actions(actions, in_place)
                    ack = sent or ack
                # Inside a frame more bytes are on their way: the ack waits for them.
                if ack and ((n is None and not conn.mid_frame) or unacked >= _ACK_AFTER):
                    self._append_held()
                    await stream.send_all(ack)
                    ack, unacked = b"", 0
            if n is None:
                await trio.lowlevel.wait_readable(sock)

    def _receive_nowait(
        self, sock: trio.socket.SocketType, conn: SlaveConnection, buffer: memoryview,
        headers: memoryview,
    ) -> tuple[int | None, list[SlaveAction], tuple[int, int]]:
        """One non-blocking read and its actions: (bytes read or None if none are
        waiting, actions, the log's range received in place).

        Once a batch was seen, the read is scattered (``read_scattered``): the
        rest of the current body and the bodies after it land in the log's
        space at their places, their headers one after another in
        ``headers``, as if every next batch had the size of the largest so
        far (a master's are all of its haTransferBatchSize but at the end of
        what it has). A read whose headers say otherwise, and any read before
        the first batch or inside a header, is handled from ``buffer``
        (copied there in order), and ``_append`` copies its bodies. Bytes in
        the log's space are not in the log until ``_append`` takes them.
        """
        body_size = conn.likely_body_size
        if body_size and (conn.body_remaining or not conn.mid_frame):
            offset = conn.body_offset
            space = self._space(offset, len(buffer) - len(headers))
            try:
                got = read_scattered(sock, space, conn.body_remaining, body_size, headers,
                                     buffer)
                if got is None:
                    return None, [], _NOWHERE
                n, in_place = got
                if n == 0:
                    return 0, [], _NOWHERE
                if in_place >= 0:
                    with space[:in_place] as bodies, headers[:n - in_place] as read:
                        actions = conn.receive_laid_out(bodies, read, self._view(), now_ms())
                    self._confirmed(conn.confirm_offset)
                    return n, actions, (offset, offset + in_place)
                # Not laid out as sent: handled from ``buffer``. Bytes of it landed
                # in the log's space out of place (e.g. the frame after a short
                # batch, shifted by a header); the appends copy back those that
                # belong there, and no other may stay in the mapped file.
                touched = min(n, len(space))
                space[:touched] = _ZEROS[:touched]
            finally:
                space.release()
        else:
            n = read_nowait(sock, (buffer,))
            if not n:
                return n, [], _NOWHERE
        return n, self._receive_data(conn, buffer[:n]), _NOWHERE

    def _space(self, offset: int, size: int) -> memoryview:
        """The log's space for up to ``size`` bytes at ``offset``: right after the
        bytes held (lent again with them), or, at the end of their segment,
        after appending them."""
        if self._held is not None:
            lo, hi = self._held
            with self.log.append_buffer(lo, hi - lo + size) as lent:
                if len(lent) > hi - lo:
                    return lent[hi - lo:]
            self._append_held()
        return self.log.append_buffer(offset, size)

    def _hold(self, actions: list[SlaveAction], in_place: tuple[int, int]) -> bytes | None:
        """Hold the bytes of a read that only brought bodies in place, right after
        those held already: their append waits for more (up to
        ``_APPEND_AFTER``) or for the ack. Returns the read's ack (b"" if
        none), or None if its actions must be applied (``_apply_actions``)."""
        lo, hi = in_place
        if lo == hi or (self._held is not None and self._held[1] != lo):
            return None
        ack = b""
        for action in actions:
            if isinstance(action, SlaveSend):
                ack = action.data
            elif not (isinstance(action, WriteAt) and lo <= action.offset
                      and action.offset + len(action.data) <= hi):
                return None
        _release_writes(actions)
        self.reads_held += 1
        self._held = (lo if self._held is None else self._held[0], hi)
        if hi - self._held[0] >= _APPEND_AFTER:
            self._append_held()
        return ack

    def _append_held(self) -> None:
        """Append the bytes held (``_hold``): before an ack reports them, and
        before any other action."""
        if self._held is not None:
            lo, hi = self._held
            self._held = None
            self.log.append_written(lo, hi - lo)
            self.on_appended()

    def _confirmed(self, offset: int) -> None:
        # A newer confirm offset lets consumers read further (held pulls wake).
        rose = offset > self.confirm_offset
        self.confirm_offset = offset
        if rose:
            self.on_appended()

    def _view(self) -> SlaveLog:
        return SlaveLog(self.log.max_offset, self.log.min_offset, self.epochs)

    def _receive_data(self, conn: SlaveConnection, data: bytes | memoryview) -> list[SlaveAction]:
        actions = conn.receive_data(data, self._view(), now_ms())
        self._confirmed(conn.confirm_offset)
        return actions

    async def _apply(self, conn: SlaveConnection, data: bytes | memoryview) -> bytes:
        return await self._apply_actions(self._receive_data(conn, data), _NOWHERE)

    async def _apply_actions(self, actions: list[SlaveAction], in_place: tuple[int, int]
                             ) -> bytes:
        """Perform ``actions`` in order, each durable before the next (see
        triomq.ha.core.slave); return the last ack among them (it carries the
        max offset, so it acks everything before it). The bytes of the log's
        range ``in_place`` were received in its space at their places.

        No view of that space lives across an await (the log could not be
        closed or truncated meanwhile, e.g. on cancellation): writes after an
        awaited action are copied out first, and every view is released once
        written.
        """
        writes: list[WriteAt] = []
        ack = b""
        try:
            for i, action in enumerate(actions):
                if isinstance(action, WriteAt):
                    if writes and action.offset != writes[-1].offset + len(writes[-1].data):
                        self._append(writes, in_place)
                    writes.append(action)
                elif isinstance(action, SlaveSend):
                    ack = action.data
                elif isinstance(action, Truncate | RecordEpoch):
                    # The writes after it are copied out first: appending may change
                    # the log's space past its end (the warmer punches pages there).
                    _detach_writes(actions, i + 1)
                    self._append(writes, in_place)
                    in_place = _NOWHERE
                    if isinstance(action, Truncate):
                        logger.info("truncating the commit log at %d", action.offset)
                        await self.offload(self.log.truncate, action.offset)
                        self.on_truncated()
                    await self._save_epochs(action.epochs)
            self._append(writes, in_place)
        finally:
            _release_writes(actions)
        return ack

    def _append(self, writes: list[WriteAt], in_place: tuple[int, int]) -> None:
        """Append contiguous writes: copied into the log's space, one append per
        segment touched, except the bytes received there at their places (the
        range ``in_place``)."""
        if not writes:
            return
        offset = writes[0].offset
        parts = [w.data for w in writes]
        writes.clear()
        lo, hi = in_place
        there = 0
        while parts and lo <= offset + there and offset + there + len(parts[0]) <= hi:
            there += len(parts.pop(0))
        while True:
            with self.log.append_buffer(offset, there + sum(map(len, parts))) as space:
                filled, parts = _fill(space, there, parts)
            offset = self.log.append_written(offset, filled)
            if not parts:
                self.on_appended()
                return
            there = 0

    async def _save_epochs(self, epochs: EpochCache) -> None:
        await self.offload(self.epoch_store.save, epochs)
        self.epochs = epochs

    async def _ack_loop(
        self, stream: trio.abc.Stream, conn: SlaveConnection, lock: trio.Lock
    ) -> None:
        while True:
            await trio.sleep_until(conn.ack_due_ms() / 1000)
            async with lock:
                ack = conn.poll(now_ms())
                if ack is not None:
                    self._append_held()
                    await stream.send_all(ack)
            if ack is None and conn.state != HAConnectionState.TRANSFER:
                await trio.sleep(self.config.ha_send_heartbeat_interval / 1000)


def _fill(space: memoryview, filled: int, parts: list[bytes | memoryview]
          ) -> tuple[int, list[bytes | memoryview]]:
    """Copy ``parts`` into ``space`` after its first ``filled`` bytes, as far as it
    holds them; return how far it is filled and the parts' rest."""
    for i, part in enumerate(parts):
        end = filled + len(part)
        if end > len(space):
            take = len(space) - filled
            space[filled:] = part[:take]
            return len(space), [part[take:], *parts[i + 1:]]
        space[filled:end] = part
        filled = end
    return filled, []


def _detach_writes(actions: list[SlaveAction], start: int) -> None:
    """Copy the bytes of the writes from ``actions[start]`` on out of the buffer
    they were received in."""
    for i in range(start, len(actions)):
        action = actions[i]
        if isinstance(action, WriteAt) and isinstance(action.data, memoryview):
            actions[i] = WriteAt(action.offset, action.data.tobytes())
            action.data.release()


def _release_writes(actions: list[SlaveAction]) -> None:
    for action in actions:
        if isinstance(action, WriteAt) and isinstance(action.data, memoryview):
            action.data.release()


def _clear_frames(error: BaseException | None) -> None:
    """Drop the locals of the frames ``error`` went through (causes included).

    A slave's locals hold views of its log's mapped space while it receives;
    kept by a traceback, they would keep the segment from being unmapped (a
    truncation after the reconnect would fail).
    """
    seen: set[int] = set()
    stack = [error]
    while stack:
        error = stack.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        stack += [error.__cause__, error.__context__]
        if isinstance(error, BaseExceptionGroup):
            stack += error.exceptions
