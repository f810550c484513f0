"""Controller mode: the controllers decide a broker replica's id and role.

``ControllerMode`` runs inside the broker service when
``broker.enable_controller_mode`` is set. It is the trio pump of
``triomq.broker.replication.core.controller_flow``, which decides what to ask the
controllers and which role to take (identity, registration, heartbeats,
polls, role changes, SyncStateSet proposals: see there). The pump:

- makes the flow's calls through a ``ControllerClient`` (leader
  following, over an RPC client of its own whose reconnect backoff stays
  short, ``RECONNECT_BACKOFF``) and sends its heartbeats with live info
  (last epoch, max offset, confirm offset, election priority);
- keeps the identity in ``<store root>/brokerIdentity`` (``load_identity``,
  ``save_identity``; a new replica's check code is ``"<address>;<ns
  timestamp>"``);
- changes the ``ReplicasManager``'s role as the flow says: a slave first
  asks the master's broker address for its HA address
  (EXCHANGE_BROKER_HA_INFO, 906, answered by
  ``triomq.broker.registration.ha_info_service``);
- is the ``SyncStateSetReporter`` of the replicas manager: a proposal's
  outcome is the set the controller holds (read back after a refusal),
  None when unknown (the master keeps counting the proposal), or
  ``MasterFenced`` once a newer master exists;
- answers NOTIFY_BROKER_ROLE_CHANGED pushes (1008) and GET_BROKER_EPOCH_CACHE
  (1007, for ``mqadmin getBrokerEpoch`` and ``triomq admin get-broker-epoch``:
  RocketMQ's EpochEntryCache, the broker id 0 on a master and the open epoch
  ending at ``OPEN_END``, as RocketMQ's do).

A master cut off from the controllers keeps its role but cannot change its
SyncStateSet (a change left unanswered stays counted until it is read back),
so its synchronous puts stop completing once its slaves follow a newly
elected master, and at once when the controllers tell it of one (fenced);
when it hears of the new master it becomes its slave, and the HA handshake
truncates what it wrote alone.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from triomq.broker.core.identity import IDENTITY_FILE, BrokerIdentity
from triomq.broker.replication.core.controller_flow import (
    Call,
    ControllerAnswer,
    ControllerModeFlow,
    FlowSettings,
    LearnSyncStateSet,
    Log,
    ProposalOutcome,
    Registered,
    SaveIdentity,
    SendHeartbeat,
    TakeMaster,
    TakeSlave,
)
from triomq.controller.client import ControllerClient, ControllerUnavailable
from triomq.controller.core.codes import RequestCode, ResponseCode
from triomq.controller.core.requests import BrokerHeartbeat
from triomq.controller.core.wire import (
    ReplicaInfo,
    WireError,
    encode_epoch_cache,
    read_replica_info,
    replica_epoch_cache,
    rocketmq_address,
    rpc_address,
)
from triomq.durable_files import replace_atomically
from triomq.ha.core.errors import EpochError
from triomq.ha.master_driver import MasterFenced
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import Backoff, RpcConnection, RpcError, open_rpc_client

if TYPE_CHECKING:
    from triomq.broker.service import Broker

__all__ = [
    "IDENTITY_FILE",
    "BrokerIdentity",
    "ControllerMode",
    "load_identity",
    "save_identity",
]

logger = logging.getLogger("triomq.broker.controller")

#: Reconnect backoff towards controllers and other replicas: one that restarted
#: must be reached at once (the node client's backoff grows to seconds).
RECONNECT_BACKOFF = Backoff(initial=0.01, maximum=0.2)

#: Failures of a call or a role change that the flow retries later.
_RETRYABLE = (ControllerUnavailable, RpcError, WireError, EpochError)


def load_identity(root: str) -> BrokerIdentity | None:
    """The identity saved under ``root``, or ``None``; ``ConfigError`` if unreadable."""
    path = Path(root) / IDENTITY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return BrokerIdentity.decode(data, str(path))


def save_identity(identity: BrokerIdentity, root: str) -> None:
    """Write ``identity`` under ``root`` (atomically, durably)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    replace_atomically(Path(root) / IDENTITY_FILE, identity.encode())


class ControllerMode:
    """Pumps one broker's ``ControllerModeFlow`` (module docstring)."""

    def __init__(self, broker: Broker, root: str) -> None:
        self.broker = broker
        self.config = config = broker.config
        self.replicas = broker.replicas
        self.root = root
        #: Talks to the controllers (set by ``run``, over the mode's own RPC client).
        self.client: ControllerClient
        broker.broker_id = -1  # unknown until the controllers assign it
        self._followed: str | None = None
        self.flow = ControllerModeFlow(FlowSettings(
            cluster_name=config.cluster_name, broker_name=config.broker_name,
            address=self.replicas.address, controllers=tuple(config.controller_addresses),
            broker_heartbeat_interval=config.broker_heartbeat_interval,
            sync_controller_metadata_period=config.sync_controller_metadata_period,
            election_priority=config.election_priority,
            controller_heartbeat_timeout=config.controller_heartbeat_timeout or None))
        self._nursery: trio.Nursery | None = None
        self._timers_changed = trio.Event()
        self._outcomes: dict[int, ProposalOutcome] = {}
        self._outcome_arrived = trio.Event()

    @property
    def address(self) -> str:
        """This replica's address (its name in the SyncStateSet and at the controller)."""
        return self.replicas.address

    @property
    def identity(self) -> BrokerIdentity | None:
        """The identity the controllers gave this replica, once known."""
        return self.flow.identity

    @property
    def broker_id(self) -> int:
        """The id the controllers gave this replica (``-1`` until known)."""
        return self.flow.broker_id

    @property
    def replica_info(self) -> ReplicaInfo | None:
        """The newest replica info heard of (what the role changes work towards)."""
        return self.flow.replica_info

    @property
    def sync_state_set_epoch(self) -> int:
        """The SyncStateSet epoch of this broker's own master term."""
        return self.flow.sync_state_set_epoch

    @sync_state_set_epoch.setter
    def sync_state_set_epoch(self, epoch: int) -> None:
        self.flow.sync_state_set_epoch = epoch

    # -- running --------------------------------------------------------------------

    def register_handlers(self) -> None:
        """Answer role pushes and epoch questions on the node's RPC server."""
        server = self.broker.node.rpc_server
        server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)
        server.register(RequestCode.GET_BROKER_EPOCH_CACHE, self._on_epoch_cache)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Register, then follow the controllers until cancelled.

        Reports started at once: registration needs the node's RPC server
        (the other replicas ask this one for its HA address).
        ``ConfigError`` if the saved identity is of another cluster or group.
        """
        self.register_handlers()
        async with (
            open_rpc_client(self.broker.node.connect, backoff=RECONNECT_BACKOFF) as rpc,
            trio.open_nursery() as nursery,
        ):
            self.broker.node.sign_internal(rpc)
            self.client = ControllerClient(rpc, self.config.controller_addresses)
            self._nursery = nursery
            try:
                task_status.started()
                # Until it takes a role, the replica reports the epoch its store recorded.
                epochs = await trio.to_thread.run_sync(self.replicas.epoch_store.load)
                saved = await trio.to_thread.run_sync(load_identity, self.root)
                self.flow.start(self._now(), saved, epochs.last_epoch or 0,
                                f"{rocketmq_address(self.address)};{time.time_ns()}")
                self._pump()
                while True:
                    changed = self._timers_changed
                    deadline = self.flow.next_deadline()
                    with trio.move_on_at(math.inf if deadline is None else deadline / 1000):
                        await changed.wait()
                    self.flow.tick(self._now())
                    self._pump()
            finally:
                # The broker is stopping: the HA master may still propose a SyncStateSet
                # on its way out, and nothing is sent for it any more. Cleared as the body
                # ends, not after: the nursery takes no new task while its own wind down.
                self._nursery = None

    @staticmethod
    def _now() -> float:
        return trio.current_time() * 1000

    def _pump(self) -> None:
        """Carry out what the flow asks for (tasks for what waits); nothing once stopped."""
        nursery = self._nursery
        if nursery is None:
            return
        while outputs := self.flow.outputs():
            for out in outputs:
                if isinstance(out, Call):
                    nursery.start_soon(self._call, out)
                elif isinstance(out, SendHeartbeat):
                    nursery.start_soon(self._heartbeat, out)
                elif isinstance(out, (TakeMaster, TakeSlave, SaveIdentity)):
                    nursery.start_soon(self._carry_out, out)
                elif isinstance(out, LearnSyncStateSet):
                    ha_master = self.replicas.ha_master
                    if ha_master is not None:
                        ha_master.sync_state_set_committed(out.sync_state_set)
                elif isinstance(out, ProposalOutcome):
                    self._outcomes[out.token] = out
                    self._outcome_arrived.set()
                    self._outcome_arrived = trio.Event()
                elif isinstance(out, Registered):
                    self.broker.broker_id = out.broker_id
                    logger.info("broker %s registered as %s/%d", self.address,
                                self.config.broker_name, out.broker_id)
                elif isinstance(out, Log):
                    logger.log(logging.WARNING if out.warning else logging.INFO, out.text)
        self._timers_changed.set()
        self._timers_changed = trio.Event()

    async def _call(self, call: Call) -> None:
        try:
            response, payload = await self.client.answer(call.request)
            answer: ControllerAnswer | None = ControllerAnswer(
                response.code, response.remark or "", payload)
            error = ""
        except (ControllerUnavailable, RpcError, WireError) as exc:
            answer, error = None, str(exc)
        self.flow.answered(self._now(), call.id, answer, error)
        self._pump()

    async def _heartbeat(self, out: SendHeartbeat) -> None:
        config, replicas = self.config, self.replicas
        epochs = None
        if replicas.ha_master is not None:
            epochs = replicas.ha_master.epochs
        elif replicas.ha_slave is not None:
            epochs = replicas.ha_slave.epochs
        epoch = epochs.last_epoch if epochs is not None else out.recorded_epoch
        try:
            await self.client.heartbeat(BrokerHeartbeat(
                config.cluster_name, config.broker_name, out.broker_id, self.address,
                epoch=epoch or 0, max_offset=replicas.log.max_offset,
                confirm_offset=max(replicas.confirm_offset, 0),
                election_priority=config.election_priority,
                heartbeat_timeout_ms=config.controller_heartbeat_timeout or None),
                address=out.controller)
        except RpcError as exc:
            logger.debug("heartbeat to controller %s failed: %s", out.controller, exc)
        self.flow.heartbeat_sent(self._now(), out.controller)
        self._pump()

    @property
    def master_address(self) -> str | None:
        """The RPC address of the master this replica follows as a slave; None while the
        controllers name no master for the group (its last master is gone)."""
        return self._followed if self.flow.group_has_master else None

    async def _carry_out(self, out: TakeMaster | TakeSlave | SaveIdentity) -> None:
        if isinstance(out, SaveIdentity):
            await trio.to_thread.run_sync(save_identity, out.identity, self.root)
            self.flow.identity_saved(self._now())
            self._pump()
            return
        error = ""
        try:
            if isinstance(out, TakeMaster):
                await self.replicas.change_to_master(out.epoch, out.broker_id,
                                                     out.sync_state_set)
            else:
                ha_address = await self._ha_address_of(out.master_address)
                await self.replicas.change_to_slave(ha_address, out.epoch, out.broker_id)
                self._followed = out.master_address
        except _RETRYABLE as exc:
            error = str(exc) or type(exc).__name__
        self.flow.followed(self._now(), self.replicas.role, self.replicas.master_epoch, error)
        self._pump()

    async def _ha_address_of(self, broker_address: str) -> str:
        response = await self.client.rpc.invoke(
            broker_address, RequestCode.EXCHANGE_BROKER_HA_INFO,
            timeout=self.client.attempt_timeout)
        address = response.ext_fields.get("masterHaAddress", "")
        if response.code != ResponseCode.SUCCESS or not address:
            raise WireError(f"broker {broker_address} did not tell its HA address "
                            f"(code {response.code}: {response.remark})")
        return rpc_address(address)

    async def _offer_or_elect(self, info: ReplicaInfo) -> None:
        self.flow.offer_or_elect(self._now(), info)
        self._pump()

    # -- the SyncStateSetReporter seam ------------------------------------------------------

    async def alter_sync_state_set(self, proposal: frozenset[int]) -> frozenset[int] | None:
        """Ask the controller to make ``proposal`` (broker ids) the SyncStateSet.

        The set the controller holds afterwards (read back after a refusal:
        an earlier try of this change may have been committed with its answer
        lost); None if unknown; ``MasterFenced`` once a newer master exists.
        """
        token = self.flow.propose(self._now(), proposal, self.replicas.master_epoch)
        self._pump()
        while token not in self._outcomes:
            await self._outcome_arrived.wait()
        outcome = self._outcomes.pop(token)
        if outcome.fenced:
            raise MasterFenced(outcome.fenced)
        return outcome.sync_state_set

    # -- handlers -------------------------------------------------------------------------

    async def _on_notify(self, request: RemotingCommand, peer: RpcConnection
                         ) -> RemotingCommand:
        try:
            info = read_replica_info(request.ext_fields, request.body, self.config.broker_name,
                                     "NOTIFY_BROKER_ROLE_CHANGED")
        except WireError as exc:
            logger.warning("bad NOTIFY_BROKER_ROLE_CHANGED from %s: %s", peer.peer, exc)
            return RemotingCommand.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                            remark=str(exc))
        if self._nursery is not None:
            self.flow.notified(self._now(), info)
            self._pump()
        return RemotingCommand.response()

    async def _on_epoch_cache(self, request: RemotingCommand, peer: RpcConnection
                              ) -> RemotingCommand:
        epochs = await trio.to_thread.run_sync(self.replicas.epoch_store.load)
        config, replicas = self.config, self.replicas
        return RemotingCommand.response(body=encode_epoch_cache(replica_epoch_cache(
            config.cluster_name, config.broker_name, self.broker_id,
            is_master=replicas.is_master, epochs=epochs, max_offset=replicas.log.max_offset)))
