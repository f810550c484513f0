"""The master's HA driver: a thin trio shell around ``triomq.ha.core.master``.

``HAMaster`` serves slave connections (any ``trio.abc.Stream``: the caller
accepts them from a transport listener and calls ``serve``), keeps the
replica group's SyncStateSet bookkeeping and completes synchronous puts.
Over TCP it sends batches from its log's mapping (``CommitLog.read_view``)
in gathered writes: the kernel's copy into the socket is the only copy of
those bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping
from typing import Protocol

import trio

from triomq.clock import now_ms
from triomq.errors import TriomqError
from triomq.ha.core.epoch import EpochCache
from triomq.ha.core.errors import HandshakeRefused
from triomq.ha.core.master import MasterConnection, MasterLog, SendToSlave, SlaveAcked, SlaveJoined
from triomq.ha.core.master_term import HAMasterConfig, MasterTerm
from triomq.ha.core.sync_replication import PutResult, ReplicationStatus
from triomq.ha.core.sync_state import SyncStateTracker
from triomq.ha.driver import CONNECTION_ERRORS, ReplicaLog, describe, logger
from triomq.ha.streams import send_frames
from triomq.rpc.peer import describe_peer

__all__ = [
    "Admit",
    "ApproveLocally",
    "HAMaster",
    "HAMasterConfig",
    "MasterFenced",
    "SyncStateSetReporter",
]

#: ``admit(broker_id, credential)`` at a slave's handshake: why to refuse it, or None.
Admit = Callable[[int, Mapping[str, str] | None], str | None]

#: How many bytes of batches the master gathers into one send, in at most
#: ``_SEND_PARTS`` pieces (a header and a body each; Linux's IOV_MAX is 1024).
#: Sends of 1 MiB made replication about 10% slower: the socket's buffers
#: then cycle through more memory than a core's cache holds.
_SEND_SIZE = 256 * 1024
_SEND_PARTS = 512
#: Bytes a master asks of one receive from a slave.
_SLAVE_FRAMES_RECEIVE_SIZE = 4096


class MasterFenced(TriomqError):
    """The controller elected a newer master: this term may no longer complete puts."""


class SyncStateSetReporter(Protocol):
    """Asks the controller to change the SyncStateSet (the controller client implements it)."""

    async def alter_sync_state_set(self, proposal: frozenset[int]) -> frozenset[int] | None:
        """The SyncStateSet the controller holds for this term once it has answered.

        That is ``proposal`` if applied, else the set it still holds (read
        back after a refusal). None if that is unknown (no answer: the
        change may have been committed all the same); the master then keeps
        counting the proposal and asks again. Raises ``MasterFenced`` if a
        newer master was elected.
        """


class ApproveLocally:
    """The reporter for static roles (no controller): every proposal is applied as is."""

    async def alter_sync_state_set(self, proposal: frozenset[int]) -> frozenset[int] | None:
        """Approve ``proposal``."""
        return proposal


class HAMaster:
    """A master's HA service for one term (epoch): the trio pump of its ``MasterTerm``.

    Run ``run`` in a nursery (SyncStateSet checks and reports), hand every
    accepted slave stream to ``serve``, call ``appended`` after local
    appends, ``wait_replicated`` for synchronous puts, and ``end`` when the
    term ends.
    """

    def __init__(
        self,
        *,
        log: ReplicaLog,
        epochs: EpochCache,
        broker_id: int,
        sync_state_set: frozenset[int],
        confirm_offset: int,
        reporter: SyncStateSetReporter,
        config: HAMasterConfig | None = None,
        on_acked: Callable[[], None] = lambda: None,
    ) -> None:
        if epochs.last is None:
            raise ValueError("a master needs its epoch recorded before serving")
        self.log = log
        self.epochs = epochs
        self.config = config or HAMasterConfig()
        self.reporter = reporter
        #: Called after a slave's ack was counted: the confirm offset may have moved.
        self.on_acked = on_acked
        self.term = MasterTerm(
            broker_id=broker_id,
            sync_state_set=sync_state_set,
            epoch_start_offset=epochs.last.start_offset,
            confirm_offset=confirm_offset,
            now_ms=now_ms(),
            config=self.config,
        )
        self._waiters: dict[Hashable, tuple[trio.Event, list[ReplicationStatus | None]]] = {}
        self._changed = trio.Event()
        self._proposed = trio.Event()
        self._joined: set[MasterConnection] = set()
        #: Each connection's far end (``describe_peer``), for ``mqadmin haStatus``.
        self._peers: dict[MasterConnection, str] = {}
        #: Connections waiting for their slave handshake, and those past it.
        self.handshaking = 0
        self.transferring = 0
        #: Connections woken by new bytes or acks, summed over the wake-ups.
        self.connections_woken = 0
        #: Connections closed for want of a handshake, and slaves dropped for not reading.
        self.handshake_timeouts = 0
        self.write_timeouts = 0

    @property
    def tracker(self) -> SyncStateTracker:
        """The term's SyncStateSet bookkeeping."""
        return self.term.tracker

    @property
    def fenced(self) -> bool:
        """Set once the controller said a newer master was elected (``MasterFenced``)."""
        return self.term.fenced

    @property
    def transferring_slaves(self) -> frozenset[int]:
        """The broker ids of the slaves whose connections passed their handshake."""
        return frozenset(conn.slave.broker_id for conn in self._joined if conn.slave is not None)

    def slave_connections(self) -> list[tuple[str, MasterConnection]]:
        """Each connection whose slave joined, with its far end's address."""
        return [(self._peers.get(conn, "unknown peer"), conn) for conn in self._joined]

    @property
    def confirm_offset(self) -> int:
        """Min ack over the effective SyncStateSet."""
        return self.term.confirm_offset(self.log.max_offset)

    def appended(self) -> None:
        """New local bytes: wake the connections. (No pending put completes by an
        append: each was checked against the master's own bytes when it came.)"""
        self._notify()

    def _notify(self) -> None:
        self.connections_woken += self._changed.statistics().tasks_waiting
        self._changed.set()
        self._changed = trio.Event()

    def _view(self) -> MasterLog:
        max_offset = self.log.max_offset
        return MasterLog(
            max_offset=max_offset,
            min_offset=self.log.min_offset,
            epochs=self.epochs,
            confirm_offset=self.term.confirm_offset(max_offset),
            last_segment_start=max_offset - max_offset % self.log.segment_size,
        )

    # -- SyncStateSet and synchronous puts -------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check for shrink/expand periodically and report proposals, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._report_proposals)
            task_status.started()
            while (next_check := self.term.check(now_ms(), self.log.max_offset)) is not None:
                self._wake_reporter()
                await trio.sleep_until(next_check / 1000)
            await trio.sleep_forever()

    def _wake_reporter(self) -> None:
        self._proposed.set()
        self._proposed = trio.Event()

    async def _report_proposals(self) -> None:
        while True:
            proposal = self.term.next_proposal()
            if proposal is None:
                await self._proposed.wait()
                continue
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
            self.term.answered(current)
            self._update_puts()

    def sync_state_set_committed(self, sync_state_set: frozenset[int]) -> None:
        """The controller's SyncStateSet of this term, as a poll read it."""
        self.term.committed(sync_state_set)
        self._update_puts()

    def fence(self) -> None:
        """A newer master exists: fail pending puts and complete no more."""
        self._deliver(self.term.fence())

    def end(self) -> None:
        """The term ends: the pending puts' callers hear that this is no longer master."""
        for waiter in self.term.end():
            event, result = self._waiters[waiter]
            result.append(None)
            event.set()

    async def wait_replicated(self, next_offset: int, timeout_ms: int
                              ) -> ReplicationStatus | None:
        """Wait until enough replicas hold the bytes before ``next_offset``.

        ``None`` if the term ends first.
        """
        # Most puts are already replicated once their flush is done: no waiter then.
        if self.term.replicated(next_offset, self.log.max_offset):
            return ReplicationStatus.PUT_OK
        waiter = object()
        deadline_ms = now_ms() + timeout_ms
        failed = self.term.add_put(waiter, next_offset, deadline_ms)
        if failed is not None:
            return failed
        event, result = trio.Event(), list[ReplicationStatus | None]()
        self._waiters[waiter] = (event, result)
        try:
            with trio.move_on_at(deadline_ms / 1000):
                await event.wait()
            if not result:
                self._deliver(self.term.expired(deadline_ms))
            return result[0]
        finally:
            self._waiters.pop(waiter, None)
            if not result:  # cancelled: a completed or expired put is already gone
                self.term.withdraw(waiter)

    def _update_puts(self) -> None:
        self._deliver(self.term.completed(self.log.max_offset))

    def _deliver(self, results: list[PutResult]) -> None:
        for outcome in results:
            event, result = self._waiters[outcome.waiter]
            result.append(outcome.status)
            event.set()

    # -- connections -----------------------------------------------------------

    async def serve(self, stream: trio.abc.Stream,
                    admit: Admit = lambda broker_id, credential: None) -> None:
        """Serve one slave until it disconnects or breaks the protocol; closes ``stream``.

        ``admit(broker_id, credential)`` is asked at the slave's handshake, before
        anything counts for that slave, with the credential frame it sent first
        (or None): a reason to refuse it (the connection closes), or None.

        A peer holds little until its slave handshake: no send buffer and no
        wake-up on puts; without a handshake within ``ha_handshake_timeout``
        it is closed. A slave that takes in no bytes for ``ha_write_timeout``
        is dropped, as any lost slave (its last connection closing proposes it
        out of the SyncStateSet).
        """
        conn = MasterConnection(
            now_ms=now_ms(),
            transfer_batch_size=self.config.ha_transfer_batch_size,
            heartbeat_interval_ms=self.config.ha_send_heartbeat_interval,
        )
        outbox: deque[bytes] = deque()
        self._peers[conn] = describe_peer(stream)
        try:
            if not await self._handshake(stream, conn, outbox, admit):
                return
            self.transferring += 1
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_loop, stream, conn, outbox)
                    await self._read_loop(stream, conn, outbox)
                    nursery.cancel_scope.cancel()
            finally:
                self.transferring -= 1
        except* trio.TooSlowError:
            self.write_timeouts += 1
            logger.warning("dropping HA slave %s: it took in no bytes for %d ms", conn.peer,
                           self.config.ha_write_timeout)
        except* HandshakeRefused as group:
            logger.warning("refusing HA connection: %s", describe(group))
        except* CONNECTION_ERRORS as group:
            logger.warning("closing HA connection to %s: %s", conn.peer, describe(group))
        finally:
            # Only a connection its slave joined on leaves: one that named a slave and
            # broke the protocol before its admission is no connection of that slave's.
            self._peers.pop(conn, None)
            if conn in self._joined:
                self._joined.discard(conn)
                self.term.slave_left(conn.slave.broker_id)
            await trio.aclose_forcefully(stream)

    async def _handshake(
        self, stream: trio.abc.Stream, conn: MasterConnection, outbox: deque[bytes],
        admit: Admit,
    ) -> bool:
        """Read until the slave's handshake; False if the peer closed or sent none in time."""
        self.handshaking += 1
        try:
            with trio.move_on_after(self.config.ha_handshake_timeout / 1000):
                while conn.slave is None:
                    data = await stream.receive_some(_SLAVE_FRAMES_RECEIVE_SIZE)
                    if not data:
                        return False
                    self._received(conn, data, outbox, admit)
                return True
        finally:
            self.handshaking -= 1
        self.handshake_timeouts += 1
        logger.debug("closing HA connection: no slave handshake within %d ms",
                     self.config.ha_handshake_timeout)
        return False

    async def _read_loop(
        self, stream: trio.abc.Stream, conn: MasterConnection, outbox: deque[bytes]
    ) -> None:
        # A slave sends handshakes and 12-byte acks: a receive asks for little, as
        # a socket's receive allocates what it asks for.
        while data := await stream.receive_some(_SLAVE_FRAMES_RECEIVE_SIZE):
            self._received(conn, data, outbox)

    def _received(self, conn: MasterConnection, data: bytes, outbox: deque[bytes],
                  admit: Admit | None = None) -> None:
        outputs = conn.receive_data(data, self._view(), now_ms())
        if not outputs:  # a frame's first bytes only
            return
        for out in outputs:
            if isinstance(out, SendToSlave):
                outbox.append(out.data)
            elif isinstance(out, SlaveJoined):
                reason = (admit(out.handshake.broker_id, out.credential) if admit is not None
                          else None)
                if reason is not None:
                    raise HandshakeRefused(reason, conn.peer)
                self.term.slave_joined(
                    out.handshake.broker_id,
                    is_async_learner=out.handshake.is_async_learner,
                    now_ms=now_ms(),
                )
                self._joined.add(conn)
            elif isinstance(out, SlaveAcked):
                self.term.slave_acked(out.broker_id, out.ack_offset,
                                      out.last_caught_up_time_ms, self.log.max_offset)
                self._wake_reporter()
        self._update_puts()
        self._notify()
        if any(isinstance(out, SlaveAcked) for out in outputs):
            self.on_acked()

    async def _write_loop(
        self, stream: trio.abc.Stream, conn: MasterConnection, outbox: deque[bytes]
    ) -> None:
        timeout = self.config.ha_write_timeout / 1000
        # Until its first ack says where to start, the slave gets the handshake's
        # answer only, and no send buffer.
        while True:
            await self._send_outbox(stream, outbox, timeout)
            changed = self._changed
            if conn.next_transfer_from >= 0:
                break
            await changed.wait()
        # A slave behind gets the batches of up to one scratch buffer per send,
        # viewed in the log at once: fewer reads, syscalls and wake-ups on both
        # sides. A mapped log lends its bytes (the kernel's copy into the socket
        # is the only one); others copy into ``scratch``, reused for every send
        # (fresh memory per read would cost page faults and zeroing).
        scratch = memoryview(bytearray(_SEND_SIZE))
        most = min(len(scratch), _SEND_PARTS // 2 * self.config.ha_transfer_batch_size)
        while True:
            await self._send_outbox(stream, outbox, timeout)
            changed = self._changed
            now = now_ms()
            plan = conn.poll_transfer(self._view(), now, most)
            if plan is not None:
                with self.log.read_view(plan.offset, scratch[: plan.max_size]) as body:
                    headers = conn.build_transfer_headers(plan, len(body), now)
                    await send_frames(stream, headers, body, conn.transfer_batch_size,
                                      timeout)
                continue
            with trio.move_on_at(conn.heartbeat_due_ms() / 1000):
                await changed.wait()

    @staticmethod
    async def _send_outbox(stream: trio.abc.Stream, outbox: deque[bytes], timeout: float
                           ) -> None:
        while outbox:
            with trio.fail_after(timeout):
                await stream.send_all(outbox.popleft())
