"""The master's HA driver: a thin trio shell around ``framework.ha.master``.

``HAMaster`` serves slave connections (any ``trio.abc.Stream``: the caller
accepts them from a transport listener and calls ``serve``), keeps the
replica group's SyncStateSet bookkeeping and completes synchronous puts.
Over TCP it sends batches from its log's mapping (``CommitLog.read_view``)
in gathered writes: the kernel's copy into the socket is the only copy of
those bytes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable
from typing import Protocol

import attrs
import trio

from framework.errors import TriomqError
from framework.ha.driver import CONNECTION_ERRORS, ReplicaLog, describe, logger, now_ms
from framework.ha.epoch import EpochCache
from framework.ha.master import MasterConnection, MasterLog, Send, SlaveAcked, SlaveJoined
from framework.ha.streams import send_frames
from framework.ha.sync_replication import PutResult, ReplicationStatus, SyncReplication
from framework.ha.sync_state import SyncStateTracker

__all__ = [
    "ApproveLocally",
    "HAMaster",
    "HAMasterConfig",
    "MasterFenced",
    "SyncStateSetReporter",
]

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
            started_ms=now_ms(),
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
                self._propose(self.tracker.maybe_shrink(now_ms()))
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
        deadline_ms = now_ms() + timeout_ms
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
            now_ms=now_ms(),
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
        except* CONNECTION_ERRORS as group:
            logger.warning("closing HA connection to %s: %s", conn.peer, describe(group))
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
            for out in conn.receive_data(data, self._view(), now_ms()):
                if isinstance(out, Send):
                    outbox.append(out.data)
                elif isinstance(out, SlaveJoined):
                    self.tracker.slave_connected(
                        out.handshake.address,
                        is_async_learner=out.handshake.is_async_learner,
                        now_ms=now_ms(),
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
            now = now_ms()
            plan = conn.poll_transfer(self._view(), now, most)
            if plan is not None:
                with self.log.read_view(plan.offset, scratch[: plan.max_size]) as body:
                    headers = conn.build_transfer_headers(plan, len(body), now)
                    await send_frames(stream, headers, body, conn.transfer_batch_size)
                continue
            if conn.next_transfer_from < 0:
                await changed.wait()
            else:
                with trio.move_on_at(conn.heartbeat_due_ms() / 1000):
                    await changed.wait()
