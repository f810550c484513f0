"""The trio driver of ``raft.Raft``: timers, RPC, durable log, state machine.

``open_raft_node(node, config, state_machine)`` runs one member of a Raft
group inside a ``triomq.runtime.Node``::

    async with open_node(node_config) as node, \\
            open_raft_node(node, RaftConfig(node_id=1, peers=...), machine) as raft:
        result = await raft.propose(b"command")   # on the leader

The driver is thin; the protocol is ``triomq.consensus.core.raft``. It

- ticks the state machine every ``tick_interval_ms`` of trio's clock (so a
  ``MockClock`` drives it deterministically);
- sends Raft messages as oneway remoting requests under DLedger's codes
  (``codec``), one queue and task per peer, dropping what a slow peer
  cannot take (Raft retries); heartbeats go as answered requests, so the
  RPC client sees its connections alive. It answers the same codes on
  ``node.rpc_server``; a peer sending a body that does not decode has its
  connection closed;
- carries out each ``Ready`` in order: writes to the ``EntryLog`` of the
  configured store plugin (in a worker thread whenever they may block:
  fsync, truncation, hard state, snapshot), then messages, then the rest
  through an ``applier.Applier`` (the snapshot to restore, the committed
  entries to apply, proposers and readers to settle);
- keeps the state-machine snapshot in the store plugin's ``MetaStore`` next
  to the entry log, compacting every ``snapshot_entries`` applied entries,
  and restores from it on start (then replays the log).

Reads are linearizable through ``read_index``: once it returns, the local
state machine reflects every write committed before it was called.

Proposals are queued and handed to Raft together at the driver's next
turn (one append for many commands). They wait for their entry to be
applied here, then get ``apply``'s result: ``propose`` parks the calling
task; ``propose_nowait`` calls a callback instead, for callers that keep
many commands in flight without a task each. Their timeouts share one
timer task (a cancel scope per proposal would cost more than the rest of
the driver's work for it).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from triomq.consensus.core import codec
from triomq.consensus.core.applier import Applier, ProposalFailed, StateMachine
from triomq.consensus.core.confchange import ConfChangeV2
from triomq.consensus.core.config import RaftConfig
from triomq.consensus.core.messages import DLedgerCode, HeartbeatRequest, Message
from triomq.consensus.core.pusher import ProposalRejected
from triomq.consensus.core.raft import Raft
from triomq.consensus.core.ready import (
    Ready,
    Role,
)
from triomq.consensus.durable import DurableState
from triomq.consensus.waiting import Deadlines, ProposalCallback, Waiter
from triomq.errors import ConfigError, TriomqError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcError
from triomq.runtime import Node

__all__ = ["NotLeader", "ProposalCallback", "ProposalFailed", "RaftNode", "StateMachine",
           "open_raft_node"]

RAFT_REQUEST_CODES = (codec.VOTE, codec.HEART_BEAT, codec.PUSH, codec.LEADERSHIP_TRANSFER,
                      codec.INSTALL_SNAPSHOT)


class NotLeader(TriomqError):
    """This node is not the leader; ``leader_id`` / ``leader_address`` name the one
    it knows of (``None`` while there is none)."""

    def __init__(self, leader_id: int | None, leader_address: str | None) -> None:
        self.leader_id = leader_id
        self.leader_address = leader_address
        where = f"node {leader_id} at {leader_address}" if leader_id else "unknown"
        super().__init__(f"not the leader; the leader is {where}")


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------


class RaftNode:
    """One running member of a Raft group. Built by ``open_raft_node``."""

    def __init__(self, node: Node, config: RaftConfig, state_machine: StateMachine,
                 disk: DurableState, raft: Raft, nursery: trio.Nursery) -> None:
        self.node_id = config.node_id
        self.config = config
        self._node = node
        self._sm = state_machine
        self._disk = disk
        self._raft = raft
        self._nursery = nursery
        self._log = logging.getLogger(f"triomq.{node.name}.raft")
        self._applier = Applier(state_machine, raft.applied_index, on_proposal=Waiter.finish,
                                on_read=self._read_settled, log=self._log)
        self._kicked = trio.Event()
        self._changed = trio.Event()
        #: Commands proposed since the driver's last turn, and their waiters.
        self._queued: list[bytes] = []
        self._queued_waiters: list[Waiter] = []
        self._deadlines = Deadlines()
        self._timer = trio.CancelScope()
        self._read_numbers = itertools.count(1)
        self._senders: dict[int, trio.MemorySendChannel[Message]] = {}
        self._closed = False
        #: Messages not sent because a peer's queue was full or its address unknown.
        self.dropped_messages = 0
        #: Request bodies from peers that did not decode (their connection was closed).
        self.malformed_frames = 0

    # ------------------------------------------------------------- status

    @property
    def term(self) -> int:
        """The current term."""
        return self._raft.term

    @property
    def is_leader(self) -> bool:
        """Whether this node leads its term."""
        return self._raft.role is Role.LEADER

    @property
    def leader_id(self) -> int | None:
        """The leader this node knows of, or ``None``."""
        return self._raft.leader_id or None

    @property
    def leader_address(self) -> str | None:
        """The RPC address of ``leader_id``, or ``None``."""
        return self._address_of(self._raft.leader_id) if self._raft.leader_id else None

    @property
    def applied_index(self) -> int:
        """The index of the last entry applied to the state machine."""
        return self._applier.applied_index

    def status(self) -> dict:
        """Term, role, leader, commit/applied/log indexes and the configuration."""
        raft = self._raft
        conf = raft.configuration.to_conf_state()
        return {
            "node_id": self.node_id,
            "term": raft.term,
            "role": raft.role.value,
            "leader": self.leader_id,
            "leader_address": self.leader_address,
            "commit_index": raft.commit_index,
            "applied_index": self._applier.applied_index,
            "first_index": raft.log.first_index,
            "last_index": raft.log.last_index,
            "snapshot_index": raft.log.snapshot.index,
            "configuration": {
                "voters": list(conf.voters),
                "learners": list(conf.learners),
                "voters_outgoing": list(conf.voters_outgoing),
                "learners_next": list(conf.learners_next),
                "auto_leave": conf.auto_leave,
            },
            "dropped_messages": self.dropped_messages,
            "malformed_frames": self.malformed_frames,
        }

    # ---------------------------------------------------------------- API

    async def propose(self, data: bytes, *, timeout: float = 3.0) -> Any:
        """Replicate ``data``; return ``state_machine.apply``'s result once applied here.

        Raises NotLeader, ProposalFailed, ``trio.TooSlowError`` after
        ``timeout`` seconds, or whatever ``apply`` raised for this command.
        Commands reach Raft at the driver's next turn, all those proposed
        meanwhile together; one cancelled before then is not proposed, one
        cancelled later may still commit.
        """
        waiter = Waiter()
        self._queue(data, waiter, timeout)
        try:
            return await waiter.wait()
        finally:
            self._forget(waiter)

    def propose_nowait(self, data: bytes, on_done: ProposalCallback, *,
                       timeout: float = 3.0) -> None:
        """Start replicating ``data`` and return at once; no task waits for it.

        ``on_done(result, error)`` is called exactly once, on the trio
        thread, from the driver's loop: with ``apply``'s result and ``None``
        once applied here, or with ``None`` and the error ``propose`` would
        raise (NotLeader if leadership was lost before the command was
        appended, ProposalFailed, ``trio.TooSlowError`` after ``timeout``
        seconds, or what ``apply`` raised). Keep it quick; it may propose
        again. What it raises is logged and dropped. A refusal known at
        once (NotLeader, ProposalFailed LEADER_TRANSFERRING) is raised here
        instead, and ``on_done`` is then never called.
        """
        self._queue(data, Waiter(callback=on_done), timeout)

    def _queue(self, data: bytes, waiter: Waiter, timeout: float) -> None:
        # Commands wait for the driver's next turn and go to Raft together:
        # one append for all proposed meanwhile instead of one per command.
        self._check_open()
        if type(data) is not bytes:
            if not isinstance(data, bytearray | memoryview):
                raise TypeError(f"proposal data must be bytes, got {type(data).__name__}")
            data = bytes(data)  # the caller may change it before it is appended
        raft = self._raft
        if raft.role is not Role.LEADER or raft.transferee:
            try:
                raft.check_can_propose()
            except ProposalRejected as exc:
                raise self._rejected(exc) from None
        self._queued.append(data)
        self._queued_waiters.append(waiter)
        self._arm(waiter, timeout)
        self._kick()

    def _propose_queued(self) -> None:
        datas, waiters = self._queued, self._queued_waiters
        self._queued, self._queued_waiters = [], []
        if any(w.done for w in waiters):  # timed out or cancelled while queued: dropped
            kept = [(d, w) for d, w in zip(datas, waiters, strict=True) if not w.done]
            datas, waiters = [d for d, _ in kept], [w for _, w in kept]
        try:
            first = self._raft.propose_many(datas)
        except ProposalRejected as exc:
            error = self._rejected(exc)
            for waiter in waiters:
                waiter.finish(error=error)
            return
        term, expect = self._raft.term, self._applier.expect
        for index, waiter in enumerate(waiters, first):
            waiter.term, waiter.index = term, index
            expect(index, term, waiter)

    async def change_membership(self, change: ConfChangeV2, *, timeout: float = 3.0) -> None:
        """Propose a membership change and return once it is applied here.

        A joint change with automatic leave returns once entered; the leader
        proposes the leave by itself. Raises as ``propose`` does
        (ProposalFailed UNEXPECTED_ARGUMENT for a change the rules refuse).
        """
        self._check_open()
        try:
            index = self._raft.propose_conf_change(change)
        except ProposalRejected as exc:
            raise self._rejected(exc) from None
        await self._wait_entry(index, timeout)

    async def read_index(self, *, timeout: float = 3.0) -> None:
        """A linearizable read barrier: return once this node, confirmed leader by a
        quorum, has applied everything committed before the call.

        Raises NotLeader (also when leadership is lost meanwhile) or
        ``trio.TooSlowError``.
        """
        self._check_open()
        context = next(self._read_numbers).to_bytes(8, "big")
        try:
            self._raft.read_index(context)
        except ProposalRejected as exc:
            raise self._rejected(exc) from None
        waiter = Waiter()
        self._applier.expect_read(context, waiter)
        self._kick()
        try:
            with trio.fail_after(timeout):
                await waiter.wait()
        finally:
            self._applier.forget_read(context)

    def _read_settled(self, waiter: Waiter, confirmed: bool) -> None:
        if confirmed:
            waiter.finish()
        else:
            waiter.finish(error=NotLeader(self.leader_id, self.leader_address))

    async def wait_leader(self) -> int:
        """Wait until some leader is known; return its id."""
        while not self._raft.leader_id:
            await self._wait_change()
        return self._raft.leader_id

    async def transfer_leadership(self, target: int, *, timeout: float = 3.0) -> None:
        """Hand leadership to voter ``target``; return once this node follows it.

        Raises NotLeader on a follower, ProposalFailed for a target that is
        not a voter, ``trio.TooSlowError`` if it has not happened in time.
        """
        self._check_open()
        try:
            self._raft.transfer_leadership(target)
        except ProposalRejected as exc:
            raise self._rejected(exc) from None
        self._kick()
        with trio.fail_after(timeout):
            while self._raft.leader_id != target:
                await self._wait_change()

    # ----------------------------------------------------------- waiting

    async def _wait_entry(self, index: int, timeout: float) -> Any:
        waiter = Waiter(self._raft.term, index)
        self._applier.expect(index, waiter.term, waiter)
        self._arm(waiter, timeout)
        self._kick()
        try:
            return await waiter.wait()
        finally:
            self._applier.forget(index, waiter)

    def _arm(self, waiter: Waiter, timeout: float) -> None:
        deadline = self._deadlines.add(waiter, trio.current_time(), timeout)
        if deadline < self._timer.deadline:
            self._timer.deadline = deadline

    async def _timer_loop(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._deadlines.next()) as timer:
                self._timer = timer
                await trio.sleep_forever()
            for waiter in self._deadlines.expired(trio.current_time()):
                self._fail(waiter, trio.TooSlowError())

    def _fail(self, waiter: Waiter, error: BaseException) -> None:
        self._forget(waiter)
        waiter.finish(error=error)

    def _forget(self, waiter: Waiter) -> None:
        self._applier.forget(waiter.index, waiter)

    async def _wait_change(self) -> None:
        await self._changed.wait()

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _check_open(self) -> None:
        if self._closed:
            raise TriomqError(f"Raft node {self.node_id} is closed")

    def _rejected(self, exc: ProposalRejected) -> TriomqError:
        if exc.code is DLedgerCode.NOT_LEADER:
            return NotLeader(self.leader_id, self.leader_address)
        return ProposalFailed(exc.code, str(exc))

    def _address_of(self, node_id: int) -> str | None:
        if node_id == self.node_id:
            return self._node.address or self.config.peers.get(node_id)
        return self.config.peers.get(node_id)

    # ----------------------------------------------------- driver tasks

    def _kick(self) -> None:
        self._kicked.set()

    async def _tick_loop(self) -> None:
        interval = self.config.tick_interval
        while True:
            await trio.sleep(interval)
            self._raft.tick()
            self._kick()

    async def _ready_loop(self) -> None:
        while True:
            await self._kicked.wait()
            self._kicked = trio.Event()
            while True:
                if self._queued_waiters:
                    self._propose_queued()
                if not self._raft.has_ready():
                    break
                await self._carry_out(self._raft.ready())

    async def _carry_out(self, ready: Ready) -> None:
        if ready.writes:
            if self._disk.blocks(ready.writes):
                await trio.to_thread.run_sync(self._disk.persist, ready.writes)
            else:
                self._disk.persist(ready.writes)
        for message in ready.messages:
            self._send(message)
        self._applier.carry_out(ready)
        if ready.soft_state is not None:
            soft = ready.soft_state
            self._log.info("term %d: %s, leader %s", soft.term, soft.role.value,
                           soft.leader_id or "unknown")
        self._maybe_compact()
        self._changed_now()

    def _maybe_compact(self) -> None:
        every, applied = self.config.snapshot_entries, self._applier.applied_index
        if every and applied - self._raft.log.snapshot.index >= every:
            self._raft.compact(applied, self._sm.snapshot())
            self._kick()

    # ------------------------------------------------------------ network

    def _send(self, message: Message) -> None:
        channel = self._senders.get(message.dst)
        if channel is None:
            address = self._address_of(message.dst)
            if address is None:
                self.dropped_messages += 1
                self._log.debug("no address for node %d; message dropped", message.dst)
                return
            channel, receive = trio.open_memory_channel[Message](self.config.send_queue_size)
            self._senders[message.dst] = channel
            self._nursery.start_soon(self._send_loop, address, receive)
        try:
            channel.send_nowait(message)
        except trio.WouldBlock:
            self.dropped_messages += 1

    async def _send_loop(self, address: str,
                         receive: trio.MemoryReceiveChannel[Message]) -> None:
        # A write unfinished at its deadline closes the connection, losing what
        # is queued on it: under a burst, waiting a few election timeouts is
        # better than a reconnect.
        timeout = 4 * self.config.election_ticks * self.config.tick_interval
        async for message in receive:
            try:
                body = codec.encode(message)
            except codec.RaftCodecError as exc:
                self._log.error("cannot encode %s: %s", type(message).__name__, exc)
                continue
            code = codec.request_code(message)
            if isinstance(message, HeartbeatRequest):
                # Sent as a request: the RPC client only resets its reconnect
                # backoff for connections whose peer has answered something.
                self._nursery.start_soon(self._invoke, address, code, body, timeout)
                continue
            try:
                await self._node.rpc.invoke_oneway(address, code, body=body, timeout=timeout)
            except RpcError as exc:
                self._log.debug("send to %s failed: %s", address, exc)

    async def _invoke(self, address: str, code: int, body: bytes, timeout: float) -> None:
        try:
            await self._node.rpc.invoke(address, code, body=body, timeout=timeout)
        except RpcError as exc:
            self._log.debug("send to %s failed: %s", address, exc)

    async def _on_request(self, request: RemotingCommand, peer: RpcConnection) -> None:
        if self._closed:
            return
        try:
            message = codec.decode(request.body)
            if codec.request_code(message) != request.code:
                raise codec.RaftCodecError(f"{type(message).__name__} sent under request "
                                           f"code {request.code}")
        except codec.RaftCodecError as exc:
            self.malformed_frames += 1
            self._log.warning("closing the connection from %s: malformed Raft request: %s",
                              peer.peer, exc)
            self._nursery.start_soon(peer.aclose)
            return
        self._raft.step(message)
        self._kick()

    def _close(self) -> None:
        self._closed = True
        gone = ProposalFailed(DLedgerCode.TERM_CHANGED, "the Raft node closed")
        waiters = [*self._queued_waiters, *self._applier.take_all()]
        self._queued, self._queued_waiters = [], []
        for waiter in waiters:
            waiter.finish(error=gone)


def _directory(node: Node, config: RaftConfig) -> str:
    if config.path:
        return config.path
    if node.config.store.path:
        return os.path.join(node.config.store.path, "raft")
    raise ConfigError("no directory for the Raft log: set raft.path or store.path", "path")


@asynccontextmanager
async def open_raft_node(node: Node, config: RaftConfig,
                         state_machine: StateMachine) -> AsyncIterator[RaftNode]:
    """Run this node's member of the Raft group until the block ends.

    Opens (or, for a founder of a new group, creates) the entry log and the
    snapshot, restores the state machine from the snapshot, and registers
    the Raft request handlers on ``node.rpc_server`` (``node.config.listen``
    must be set, and this can be done once per node).
    """
    if not node.config.listen:
        raise ConfigError("a Raft node needs an RPC address: set listen", "listen")
    directory = _directory(node, config)
    disk = await trio.to_thread.run_sync(DurableState.open, node.plugins, config, directory)
    try:
        hard_state, snapshot, entries = await trio.to_thread.run_sync(disk.load, config)
        raft = Raft(config.node_id, config.raft_config(), hard_state=hard_state,
                    snapshot=snapshot, entries=entries)
        if snapshot.index:
            state_machine.restore(snapshot.data)
        try:
            async with trio.open_nursery() as nursery:
                raft_node = RaftNode(node, config, state_machine, disk, raft, nursery)
                for code in RAFT_REQUEST_CODES:
                    node.rpc_server.register(code, raft_node._on_request, inline=True)
                nursery.start_soon(raft_node._tick_loop)
                nursery.start_soon(raft_node._timer_loop)
                nursery.start_soon(raft_node._ready_loop)
                try:
                    yield raft_node
                finally:
                    raft_node._close()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The driver's tasks raise nothing of their own: this is the block's error.
            if len(group.exceptions) != 1:
                raise
            raise group.exceptions[0] from None
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(disk.close)
