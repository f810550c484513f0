"""Thin trio drivers for the HA state machines.

``HAMaster`` serves slave connections (any ``trio.abc.Stream``: the caller
accepts them from a transport listener and calls ``serve``), keeps the
replica group's SyncStateSet bookkeeping and completes synchronous puts.
``HASlave`` connects to a master, replicates, and reconnects with backoff
after an error; cancelling it (a role change) stops it cleanly. Over TCP a
slave reads what continues a batch's body straight into its log's mapped
space (``CommitLog.append_buffer``): the kernel's copy out of the socket is
the only copy of those bytes.

Both work on any commit log with the ``ReplicaLog`` subset of
``framework.store.CommitLog``. Time is ``trio.current_time()`` in ms, so
tests run under a mock clock.
"""

from __future__ import annotations

import logging
import math
import socket
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Protocol

import attrs
import trio

from framework.errors import TriomqError
from framework.ha.epoch import EpochCache
from framework.ha.errors import HAProtocolError
from framework.ha.master import MasterConnection, MasterLog, Send, SlaveAcked, SlaveJoined
from framework.ha.slave import (
    RecordEpoch,
    SlaveAction,
    SlaveConnection,
    SlaveLog,
    Truncate,
    WriteAt,
)
from framework.ha.slave import Send as SlaveSend
from framework.ha.streams import (
    RECEIVE_SIZE,
    bytes_waiting,
    laid_out_as_sent,
    read_nowait,
    scatter_layout,
    send_parts,
)
from framework.ha.sync_replication import PutResult, ReplicationStatus, SyncReplication
from framework.ha.sync_state import SyncStateTracker
from framework.protocol.ha import TRANSFER_HEADER_SIZE, HAConnectionState, HAFrameError
from framework.store import OffsetMismatch, StoreCorruption

__all__ = [
    "ApproveLocally",
    "EpochStore",
    "HAMaster",
    "HAMasterConfig",
    "HASlave",
    "HASlaveConfig",
    "MasterFenced",
    "Offload",
    "ReplicaLog",
    "SyncStateSetReporter",
]

logger = logging.getLogger("triomq.ha")

#: How many bytes of batches the master gathers into one send, in at most
#: ``_SEND_PARTS`` pieces (a header and a body each; Linux's IOV_MAX is 1024).
#: Sends of 1 MiB made replication about 10% slower: the socket's buffers
#: then cycle through more memory than a core's cache holds.
_SEND_SIZE = 256 * 1024
_SEND_PARTS = 512
#: Header slots of a slave's scattered read: up to twice as many buffers
#: (Linux's IOV_MAX is 1024).
_SCATTER_FRAMES = 256
#: No bytes received in the log's space.
_NOWHERE = (0, 0)
#: Bytes a master asks of one receive from a slave.
_SLAVE_FRAMES_RECEIVE_SIZE = 4096
#: A slave acks at the latest after reading this many bytes without a pause,
#: as RocketMQ's slave acks once per read of up to 4 MiB. Acks are not free:
#: one per 1 MiB instead made replication about 20% slower.
_ACK_AFTER = 4 * 1024 * 1024
#: Errors that end one connection; the service keeps running.
_CONNECTION_ERRORS = (
    HAProtocolError,
    HAFrameError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)
#: A slave also drops a master whose bytes its log refuses (not records, or
#: an empty log asked to start off a segment boundary).
_SLAVE_CONNECTION_ERRORS = (*_CONNECTION_ERRORS, StoreCorruption, OffsetMismatch)


class ReplicaLog(Protocol):
    """What replication needs of a commit log (a subset of ``framework.store.CommitLog``).

    ``append_buffer`` on an empty log must accept an offset past
    ``max_offset`` (the log then starts there: a slave syncing from the
    master's last segment); otherwise the offset must equal ``max_offset``.
    A log without mapped space to lend gets the two append calls from
    ``framework.store.ScratchAppend``.
    """

    segment_size: int

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def read_view(self, offset: int, scratch: bytearray | memoryview) -> memoryview: ...

    def append_buffer(self, offset: int, size: int) -> memoryview: ...

    def append_written(self, offset: int, size: int) -> int: ...

    def truncate(self, offset: int) -> None: ...


class EpochStore(Protocol):
    """Where a replica keeps its epoch cache (``framework.ha.checkpoint.EpochCheckpointFile``)."""

    def load(self) -> EpochCache: ...

    def save(self, cache: EpochCache) -> None: ...


class MasterFenced(TriomqError):
    """The controller elected a newer master: this term may no longer complete puts."""


class SyncStateSetReporter(Protocol):
    """Asks the controller to change the SyncStateSet (the controller client implements it)."""

    async def alter_sync_state_set(self, proposal: frozenset[str]) -> frozenset[str] | None:
        """The SyncStateSet the controller holds for this term once it has answered.

        That is ``proposal`` if applied, else the set it still holds (read
        back after a refusal). None if that is unknown (no answer: the
        change may have been committed all the same); the master then keeps
        counting the proposal and asks again. Raises ``MasterFenced`` if a
        newer master was elected.
        """


class ApproveLocally:
    """The reporter for static roles (no controller): every proposal is applied as is."""

    async def alter_sync_state_set(self, proposal: frozenset[str]) -> frozenset[str] | None:
        """Approve ``proposal``."""
        return proposal


#: Runs a blocking call without blocking trio (``trio.to_thread.run_sync``).
Offload = Callable[..., Awaitable[Any]]


def _now_ms() -> int:
    # Rounded, not floored: after sleep_until(t / 1000) the time reads t.
    return round(trio.current_time() * 1000)


@attrs.frozen
class HAMasterConfig:
    """Master-side settings: RocketMQ's names in snake_case, times in ms.

    Defaults aim at a LAN and sub-second failover (RocketMQ's in brackets):
    heartbeat 200 (5000), a slave out of sync after 2000 without catching
    up (15000), SyncStateSet checked every 500 (5000); batch 32 KiB.
    """

    ha_transfer_batch_size: int = 32 * 1024
    ha_send_heartbeat_interval: int = 200
    ha_max_time_slave_not_catchup: int = 2000
    check_sync_state_set_period: int = 500
    all_ack_in_sync_state_set: bool = False
    min_in_sync_replicas: int = 1


class HAMaster:
    """A master's HA service for one term (epoch).

    Run ``run`` in a nursery (SyncStateSet checks and reports), hand every
    accepted slave stream to ``serve``, call ``appended`` after local
    appends, and ``wait_replicated`` for synchronous puts.
    """

    def __init__(
        self,
        *,
        log: ReplicaLog,
        epochs: EpochCache,
        address: str,
        sync_state_set: frozenset[str],
        confirm_offset: int,
        reporter: SyncStateSetReporter,
        config: HAMasterConfig | None = None,
    ) -> None:
        if epochs.last is None:
            raise ValueError("a master needs its epoch recorded before serving")
        self.log = log
        self.epochs = epochs
        self.config = config or HAMasterConfig()
        self.reporter = reporter
        self.tracker = SyncStateTracker(
            master=address,
            sync_state_set=sync_state_set,
            epoch_start_offset=epochs.last.start_offset,
            confirm_offset=confirm_offset,
            started_ms=_now_ms(),
            max_time_slave_not_catchup_ms=self.config.ha_max_time_slave_not_catchup,
        )
        self.puts = SyncReplication(
            all_ack_in_sync_state_set=self.config.all_ack_in_sync_state_set,
            min_in_sync_replicas=self.config.min_in_sync_replicas,
        )
        self._waiters: dict[Hashable, tuple[trio.Event, list[ReplicationStatus]]] = {}
        #: Set once the controller said a newer master was elected (``MasterFenced``).
        self.fenced = False
        self._reporting = False
        self._changed = trio.Event()
        self._proposals_in, self._proposals_out = trio.open_memory_channel[frozenset[str]](math.inf)

    @property
    def confirm_offset(self) -> int:
        """Min ack over the effective SyncStateSet."""
        return self.tracker.confirm_offset(self.log.max_offset)

    def appended(self) -> None:
        """New local bytes: wake the connections and recheck pending puts."""
        self._update_puts()
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _view(self) -> MasterLog:
        max_offset = self.log.max_offset
        return MasterLog(
            max_offset=max_offset,
            min_offset=self.log.min_offset,
            epochs=self.epochs,
            confirm_offset=self.tracker.confirm_offset(max_offset),
            last_segment_start=max_offset - max_offset % self.log.segment_size,
        )

    # -- SyncStateSet and synchronous puts -------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check for shrink/expand periodically and report proposals, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._report_proposals)
            task_status.started()
            while not self.fenced:
                if not self._reporting:
                    # A proposal whose outcome is unknown is asked again.
                    self._propose(self.tracker.pending)
                self._propose(self.tracker.maybe_shrink(_now_ms()))
                for address in list(self.tracker.slaves):
                    self._propose(self.tracker.maybe_expand(address, self.log.max_offset))
                await trio.sleep(self.config.check_sync_state_set_period / 1000)
            await trio.sleep_forever()

    def _propose(self, proposal: frozenset[str] | None) -> None:
        if proposal is not None and not self.fenced:
            self._reporting = True
            self._proposals_in.send_nowait(proposal)

    async def _report_proposals(self) -> None:
        async for proposal in self._proposals_out:
            logger.info("proposing SyncStateSet %s", sorted(proposal))
            try:
                current = await self.reporter.alter_sync_state_set(proposal)
            except MasterFenced as exc:
                logger.warning("no more synchronous puts in this term: %s", exc)
                self.fence()
                return
            if current is None:
                logger.warning("SyncStateSet proposal %s: outcome unknown, still counted",
                               sorted(proposal))
            else:
                self.tracker.apply(current)
            self._reporting = False
            self._update_puts()

    def sync_state_set_committed(self, sync_state_set: frozenset[str]) -> None:
        """The controller's SyncStateSet of this term, as a poll read it."""
        self.tracker.learn(sync_state_set)
        self._update_puts()

    def fence(self) -> None:
        """A newer master exists: fail pending puts and complete no more."""
        self.fenced = True
        for waiter, (event, result) in self._waiters.items():
            if not result:
                self.puts.discard(waiter)
                result.append(ReplicationStatus.FLUSH_SLAVE_TIMEOUT)
                event.set()

    async def wait_replicated(self, next_offset: int, timeout_ms: int) -> ReplicationStatus:
        """Wait until enough replicas hold the bytes before ``next_offset``."""
        if self.fenced:
            return ReplicationStatus.FLUSH_SLAVE_TIMEOUT
        waiter = object()
        deadline_ms = _now_ms() + timeout_ms
        failed = self.puts.add(
            waiter, next_offset, deadline_ms, self.tracker.effective_sync_state_set
        )
        if failed is not None:
            return failed.status
        event, result = trio.Event(), []
        self._waiters[waiter] = (event, result)
        try:
            self._update_puts()
            with trio.move_on_at(deadline_ms / 1000):
                await event.wait()
            if not result:
                self._deliver(self.puts.expire(deadline_ms))
            return result[0]
        finally:
            self._waiters.pop(waiter, None)
            self.puts.discard(waiter)

    def _update_puts(self) -> None:
        if self.fenced:
            return
        members = self.tracker.effective_sync_state_set
        max_offset = self.log.max_offset
        acks = {m: self.tracker.ack_offset(m, max_offset) for m in members}
        self._deliver(self.puts.update(acks, members))

    def _deliver(self, results: list[PutResult]) -> None:
        for outcome in results:
            event, result = self._waiters[outcome.waiter]
            result.append(outcome.status)
            event.set()

    # -- connections -----------------------------------------------------------

    async def serve(self, stream: trio.abc.Stream) -> None:
        """Serve one slave until it disconnects or breaks the protocol; closes ``stream``."""
        conn = MasterConnection(
            now_ms=_now_ms(),
            transfer_batch_size=self.config.ha_transfer_batch_size,
            heartbeat_interval_ms=self.config.ha_send_heartbeat_interval,
        )
        outbox: deque[bytes] = deque()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, stream, conn, outbox,
                                   memoryview(bytearray(_SEND_SIZE)))
                await self._read_loop(stream, conn, outbox)
                nursery.cancel_scope.cancel()
        except* _CONNECTION_ERRORS as group:
            logger.warning("closing HA connection to %s: %s", conn.peer, _describe(group))
        finally:
            if conn.slave is not None:
                self.tracker.slave_disconnected(conn.slave.address)
            await trio.aclose_forcefully(stream)

    async def _read_loop(
        self, stream: trio.abc.Stream, conn: MasterConnection, outbox: deque[bytes]
    ) -> None:
        # A slave sends handshakes and 12-byte acks: a receive asks for little, as
        # a socket's receive allocates what it asks for.
        while data := await stream.receive_some(_SLAVE_FRAMES_RECEIVE_SIZE):
            for out in conn.receive_data(data, self._view(), _now_ms()):
                if isinstance(out, Send):
                    outbox.append(out.data)
                elif isinstance(out, SlaveJoined):
                    self.tracker.slave_connected(
                        out.handshake.address,
                        is_async_learner=out.handshake.is_async_learner,
                        now_ms=_now_ms(),
                    )
                elif isinstance(out, SlaveAcked):
                    self.tracker.slave_acked(
                        out.address, out.ack_offset, out.last_caught_up_time_ms
                    )
                    self._propose(self.tracker.maybe_expand(out.address, self.log.max_offset))
            self._update_puts()
            self._notify()

    async def _write_loop(
        self,
        stream: trio.abc.Stream,
        conn: MasterConnection,
        outbox: deque[bytes],
        scratch: memoryview,
    ) -> None:
        # A slave behind gets the batches of up to one scratch buffer per send,
        # viewed in the log at once: fewer reads, syscalls and wake-ups on both
        # sides. A mapped log lends its bytes (the kernel's copy into the socket
        # is the only one); others copy into ``scratch``, reused for every send
        # (fresh memory per read would cost page faults and zeroing).
        most = min(len(scratch), _SEND_PARTS // 2 * self.config.ha_transfer_batch_size)
        while True:
            while outbox:
                await stream.send_all(outbox.popleft())
            changed = self._changed
            now = _now_ms()
            plan = conn.poll_transfer(self._view(), now, most)
            if plan is not None:
                with self.log.read_view(plan.offset, scratch[: plan.max_size]) as body:
                    parts: list[bytes | memoryview] = []
                    at = 0
                    for header, size in conn.build_transfer_headers(plan, len(body), now):
                        parts += (header, body[at : at + size])
                        at += size
                    try:
                        await send_parts(stream, parts)
                    finally:
                        # No view of the log outlives the send (a cancelled send's
                        # traceback would keep it from being truncated or closed).
                        parts.clear()
                continue
            if conn.next_transfer_from < 0:
                await changed.wait()
            else:
                with trio.move_on_at(conn.heartbeat_due_ms() / 1000):
                    await changed.wait()


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
        address: str,
        connect: Callable[[], Awaitable[trio.abc.Stream]],
        config: HASlaveConfig | None = None,
        offload: Offload = trio.to_thread.run_sync,
    ) -> None:
        self.log = log
        self.offload = offload
        self.epoch_store = epoch_store
        self.address = address
        self.connect = connect
        self.config = config or HASlaveConfig()
        self.epochs = EpochCache()
        self.confirm_offset = -1
        self.connections = 0
        self.last_error: BaseException | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replicate until cancelled, reconnecting with exponential backoff."""
        self.epochs = await self.offload(self.epoch_store.load)
        task_status.started()
        backoff = self.config.reconnect_min
        while True:
            handshook = False
            try:
                stream = await self.connect()
                self.connections += 1
                async with stream:
                    handshook = await self.run_connection(stream)
            except* _SLAVE_CONNECTION_ERRORS as group:
                _clear_frames(group)
                self.last_error = group.exceptions[0]
                logger.warning("HA connection to master failed: %s", _describe(group))
            if handshook:
                backoff = self.config.reconnect_min
            await trio.sleep(backoff / 1000)
            backoff = min(backoff * 2, self.config.reconnect_max)

    async def run_connection(self, stream: trio.abc.Stream) -> bool:
        """Replicate over one stream until it closes; True if the handshake completed.

        Raises on a protocol error; the stream is left to the caller to close.
        """
        conn = SlaveConnection(
            address=self.address,
            now_ms=_now_ms(),
            is_sync_from_last_file=self.config.is_sync_from_last_file,
            is_async_learner=self.config.is_async_learner,
            ack_interval_ms=self.config.ha_send_heartbeat_interval,
            max_body_size=self.config.max_body_size,
        )
        # Held while received bytes are applied: a periodic ack reports the
        # state machine's max offset, which counts actions not yet applied.
        lock = trio.Lock()
        if isinstance(stream, trio.SocketStream) and self.config.receive_buffer_size:
            # The kernel caps it at net.core.rmem_max.
            stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                              self.config.receive_buffer_size)
        await stream.send_all(conn.start())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ack_loop, stream, conn, lock)
            if isinstance(stream, trio.SocketStream):
                await self._replicate_from_socket(stream, conn, lock)
            else:
                await self._replicate_from_stream(stream, conn, lock)
            nursery.cancel_scope.cancel()
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
        drained between two frames (or every ``_ACK_AFTER`` bytes)."""
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
                    return
                if n is not None:
                    unacked += n
                    ack = await self._apply_actions(actions, in_place) or ack
                # Inside a frame more bytes are on their way: the ack waits for them.
                if ack and ((n is None and not conn.mid_frame) or unacked >= _ACK_AFTER):
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

        Once a batch was seen, the read is scattered (``scatter_layout``): the
        rest of the current body and the bodies after it land in the log's
        space at their places, their headers in slots of ``headers``, as if
        every next batch had the size of the largest so far (a master's are
        all of its haTransferBatchSize but at the end of what it has). A read
        whose headers say otherwise (``laid_out_as_sent``), and any read
        before the first batch or inside a header, is handled from ``buffer``
        (copied there in order), and ``_append`` copies its bodies. Bytes in
        the log's space are not in the log until ``_append`` takes them.
        """
        body_size = conn.likely_body_size
        if body_size and (conn.body_remaining or not conn.mid_frame):
            offset = conn.body_offset
            waiting = bytes_waiting(sock)
            with self.log.append_buffer(offset, len(buffer) - len(headers)) as space:
                pieces = scatter_layout(space, conn.body_remaining, body_size, headers,
                                        max(waiting, 1))
            filled: list[memoryview] = []
            try:
                n = read_nowait(sock, pieces)
                if not n:
                    return n, [], _NOWHERE
                body_first = bool(conn.body_remaining)
                filled = laid_out_as_sent(pieces, n, body_first)
                if filled:
                    in_place = sum(map(len, filled[0 if body_first else 1::2]))
                    return n, self._receive_data(conn, filled), (offset, offset + in_place)
                at = 0
                for piece in pieces:
                    got = min(len(piece), n - at)
                    buffer[at:at + got] = piece[:got]
                    at += got
            finally:
                # Dropped, so released: none of these views outlives the read.
                pieces.clear()
                filled.clear()
        else:
            n = read_nowait(sock, (buffer,))
            if not n:
                return n, [], _NOWHERE
        return n, self._receive_data(conn, (buffer[:n],)), _NOWHERE

    def _receive_data(self, conn: SlaveConnection, pieces: Sequence[memoryview]
                      ) -> list[SlaveAction]:
        view = SlaveLog(self.log.max_offset, self.log.min_offset, self.epochs)
        actions = conn.receive_pieces(pieces, view, _now_ms())
        self.confirm_offset = conn.confirm_offset
        return actions

    async def _apply(self, conn: SlaveConnection, data: bytes | memoryview) -> bytes:
        return await self._apply_actions(self._receive_data(conn, (data,)), _NOWHERE)

    async def _apply_actions(self, actions: list[SlaveAction], in_place: tuple[int, int]
                             ) -> bytes:
        """Perform ``actions`` in order, each durable before the next (see
        framework.ha.slave); return the last ack among them (it carries the
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
                    self._append(writes, in_place)
                    _detach_writes(actions, i + 1)
                    if isinstance(action, Truncate):
                        logger.info("truncating the commit log at %d", action.offset)
                        await self.offload(self.log.truncate, action.offset)
                    await self._save_epochs(action.epochs)
            self._append(writes, in_place)
        finally:
            _release_writes(actions)
        return ack

    def _append(self, writes: list[WriteAt], in_place: tuple[int, int]) -> None:
        """Append contiguous writes: copied into the log's space, one append per
        segment touched, except the bytes received there at their places (the
        range ``in_place``; a write copied out of it across an await is still
        there too, so it is not copied back)."""
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
                ack = conn.poll(_now_ms())
                if ack is not None:
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


def _describe(group: BaseExceptionGroup) -> str:
    return "; ".join(f"{type(e).__name__}: {e}" for e in group.exceptions)
