"""The controller service: the replicas-info state machine on Raft, serving brokers.

A controller node runs one Raft member (``triomq.consensus.node``) whose
state machine is ``ReplicasStateMachine``; the Raft leader is the *active*
controller. Every rule of the service (leader-only serving, the read
barrier, one state change at a time, answering once committed, heartbeats,
the inactive-broker scan and its elections) is
``triomq.controller.core.service_core.ControllerCore``; this module is its trio
pump: it decodes requests (``triomq.controller.core.requests``), hands the
core's proposals and read barriers to the Raft node, arms its timer on
trio's clock, and sends its replies and its oneway
NOTIFY_BROKER_ROLE_CHANGED, through an RPC client of the service's own
whose reconnect backoff stays short (``NOTIFY_BACKOFF``). A request whose
names, ids or addresses break the rules of ``triomq.controller.core.validation``
is refused as it is decoded, before the core sees it.

Reach a node's running controller with ``controller_of(node)``.
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from triomq.clock import now_ms
from triomq.consensus.node import NotLeader, ProposalFailed, RaftNode, open_raft_node
from triomq.controller import RequestCode, ResponseCode
from triomq.controller.core.config import ControllerConfig
from triomq.controller.core.heartbeat import BrokerHeartbeatTable
from triomq.controller.core.requests import (
    REQUEST_CODES,
    ControllerRequest,
    Reply,
    decode_request,
    reply_command,
)
from triomq.controller.core.service_core import (
    MUTABLE_KEYS,
    Applied,
    ControllerCore,
    Leadership,
    LostLeadership,
    NotCommitted,
    Notify,
    Outcome,
    Propose,
    ReadBarrier,
)
from triomq.controller.core.state_machine import ReplicasStateMachine
from triomq.controller.core.validation import check_request
from triomq.controller.core.wire import (
    ControllerMetadata,
    ReplicaInfo,
    encode_sync_state_set,
    replica_info_fields,
    rpc_address,
)
from triomq.errors import PluginError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import Backoff, RpcClient, RpcConnection, RpcError, RpcServer, open_rpc_client

if TYPE_CHECKING:
    from triomq.controller import ReplicasInfoManager
    from triomq.runtime import Node

__all__ = ["MUTABLE_KEYS", "ControllerService", "controller_of", "controller_service"]

logger = logging.getLogger("triomq.controller")

#: Reconnect backoff of the notification client: a broker that was down and came
#: back must hear of an election at once, not after the node client's backoff.
NOTIFY_BACKOFF = Backoff(initial=0.01, maximum=0.1)

_services: weakref.WeakKeyDictionary[Node, ControllerService] = weakref.WeakKeyDictionary()


def controller_of(node: Node) -> ControllerService:
    """The controller running in ``node``; ``PluginError`` if it runs none."""
    try:
        return _services[node]
    except KeyError:
        raise PluginError(f"node {node.name!r} runs no controller") from None


@attrs.define(eq=False)
class _Answer:
    """Where a request handler waits for its reply."""

    ready: trio.Event = attrs.Factory(trio.Event)
    reply: Reply | None = None


class ControllerService:
    """One controller: the core, fed from RPC, the Raft node and trio's clock."""

    def __init__(self, node: Node, config: ControllerConfig, raft: RaftNode,
                 machine: ReplicasStateMachine, nursery: trio.Nursery,
                 notify_rpc: RpcClient) -> None:
        self.node = node
        self.notify_rpc = notify_rpc
        self.raft = raft
        self.machine = machine
        self.core = ControllerCore(config, machine.manager, node.plugins.election_policy,
                                   self.now_ms())
        self._nursery = nursery
        self._request_ids = itertools.count(1)
        self._answers: dict[int, _Answer] = {}
        self._rearm = trio.Event()

    # -- views ----------------------------------------------------------------------

    @property
    def config(self) -> ControllerConfig:
        """The settings in force (UPDATE_CONTROLLER_CONFIG changes some)."""
        return self.core.config

    @property
    def manager(self) -> ReplicasInfoManager:
        """The applied replicas-info state."""
        return self.machine.manager

    @property
    def heartbeats(self) -> BrokerHeartbeatTable:
        """The brokers' latest heartbeats as this controller recorded them."""
        return self.core.heartbeats

    @property
    def elections(self) -> int:
        """Elections committed by this controller."""
        return self.core.elections

    def metadata(self) -> ControllerMetadata:
        """This controller's Raft view, as GET_METADATA_INFO answers it."""
        self._follow_raft()
        return self.core.metadata()

    now_ms = staticmethod(now_ms)

    # -- feeding the core -------------------------------------------------------------

    def _follow_raft(self) -> None:
        raft = self.raft
        leadership = Leadership(raft.term, raft.leader_id or 0, raft.leader_address or "",
                                raft.is_leader)
        if leadership != self.core.leadership:
            self.core.lead(leadership)

    def _feed(self, step: Callable[[int], None]) -> None:
        """Give the core one input at the current time, then carry out its outputs."""
        self._follow_raft()
        step(self.now_ms())
        for output in self.core.drain():
            if isinstance(output, Reply):
                answer = self._answers.pop(output.request_id, None)
                if answer is not None:
                    answer.reply = output
                    answer.ready.set()
            elif isinstance(output, Propose):
                self._nursery.start_soon(self._propose, output.ticket, output.data)
            elif isinstance(output, ReadBarrier):
                self._nursery.start_soon(self._read_barrier, output.ticket)
            elif isinstance(output, Notify):
                self._nursery.start_soon(self._notify, output.address, output.info)
        self._rearm.set()

    def _settle(self, ticket: int, outcome: Outcome) -> None:
        self._feed(lambda now: self.core.settle(ticket, outcome, now))

    async def _propose(self, ticket: int, data: bytes) -> None:
        outcome: Outcome
        try:
            changed = await self.raft.propose(data, timeout=self.config.request_timeout / 1000)
        except trio.TooSlowError:
            return  # the core's own deadline answers
        except NotLeader:
            outcome = LostLeadership()
        except Exception as exc:  # ProposalFailed, or what applying the entry raised
            outcome = NotCommitted(str(exc))
        else:
            outcome = Applied(changed)
        self._settle(ticket, outcome)

    async def _read_barrier(self, ticket: int) -> None:
        outcome: Outcome
        try:
            await self.raft.read_index(timeout=self.config.request_timeout / 1000)
        except trio.TooSlowError:
            return  # the core's own deadline answers
        except NotLeader:
            outcome = LostLeadership()
        except ProposalFailed as exc:
            outcome = NotCommitted(str(exc))
        else:
            outcome = Applied()
        self._settle(ticket, outcome)

    async def _notify(self, address: str, info: ReplicaInfo) -> None:
        try:
            # Addresses are kept as brokers sent them: RocketMQ's are host:port.
            await self.notify_rpc.invoke_oneway(
                rpc_address(address), RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                replica_info_fields(info),
                encode_sync_state_set(info.sync_state_set, info.sync_state_set_epoch),
                timeout=1.0)
        except RpcError as exc:
            logger.debug("notifying %s of a role change failed: %s", address, exc)

    async def timer_loop(self) -> None:
        """Fire the core whenever its next deadline is reached."""
        while True:
            rearm = self._rearm = trio.Event()
            with trio.move_on_at(self.core.next_deadline() / 1000):
                await rearm.wait()
                continue
            self._feed(self.core.fire)

    # -- requests ---------------------------------------------------------------------

    def register(self, server: RpcServer) -> None:
        """Register the controller's request handlers on ``server``."""
        for code in REQUEST_CODES:
            server.register(code, self.handle)

    async def handle(self, command: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        """Serve one request: hand it to the core and wait for its reply."""
        request = decode_request(command)
        invalid = check_request(request)
        if invalid is not None:
            # Refused before the core sees it: no state read, nothing proposed.
            reply = Reply(0, invalid.code, invalid.remark)
        else:
            reply = await self._serve(request)
        if reply.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_NOT_LEADER):
            logger.info("controller %s: %s from %s refused: %s (%d): %s", self.raft.node_id,
                        RequestCode(command.code).name, peer.peer, _code_name(reply.code),
                        reply.code, reply.remark)
        return reply_command(reply)

    async def _serve(self, request: ControllerRequest) -> Reply:
        request_id = next(self._request_ids)
        answer = self._answers[request_id] = _Answer()
        try:
            self._feed(lambda now: self.core.request(request_id, request, now))
            await answer.ready.wait()
        finally:
            self._answers.pop(request_id, None)
        assert answer.reply is not None
        return answer.reply


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


async def controller_service(node: Node, *,
                             task_status: trio.TaskStatus[ControllerService]
                             = trio.TASK_STATUS_IGNORED) -> None:
    """Run ``node.config.controller``'s controller in ``node`` until cancelled."""
    config: ControllerConfig = node.config.controller
    raft_config = config.raft_config()
    node.plugins.election_policy(config.election_policy)
    machine = ReplicasStateMachine()
    async with (
        open_raft_node(node, raft_config, machine) as raft,
        open_rpc_client(node.connect, backoff=NOTIFY_BACKOFF) as notify_rpc,
        trio.open_nursery() as nursery,
    ):
        node.sign_internal(notify_rpc)
        service = ControllerService(node, config, raft, machine, nursery, notify_rpc)
        service.register(node.rpc_server)
        _services[node] = service
        try:
            nursery.start_soon(service.timer_loop)
            task_status.started(service)
            await trio.sleep_forever()
        finally:
            _services.pop(node, None)
