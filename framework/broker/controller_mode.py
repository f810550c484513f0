"""Controller mode: the controllers decide a broker replica's id and role.

``ControllerMode`` runs inside the broker service when
``broker.enable_controller_mode`` is set:

1. **Identity.** The broker id comes from ``<store root>/brokerIdentity``
   (JSON: cluster, group, id, register check code); a new replica asks
   GET_NEXT_BROKER_ID, claims it with APPLY_BROKER_ID and a fresh check code
   (``"<address>;<ns timestamp>"``), then writes the file.
2. **Registration.** REGISTER_BROKER answers the group's alive master; with
   none the broker asks ELECT_MASTER for itself.
3. **Roles.** Every answer, NOTIFY_BROKER_ROLE_CHANGED push (1008) and poll
   (GET_REPLICA_INFO every ``sync_controller_metadata_period``) is offered
   to one applier task, which keeps the newest by master epoch and makes
   the ``ReplicasManager`` follow it: ``change_to_master`` when this
   replica is the master, else ``change_to_slave`` to the master's HA
   address, which it asks the master for (EXCHANGE_BROKER_HA_INFO, 906).
4. **Heartbeats.** Every ``broker_heartbeat_interval`` to every controller,
   with live info: last epoch, max offset, confirm offset, election priority.
5. **SyncStateSet.** As the ``SyncStateSetReporter`` of the replicas
   manager, it turns the HA master's proposals (replica addresses) into
   ALTER_SYNC_STATE_SET requests (broker ids, fenced by both epochs). A
   refusal is answered with the set read back (GET_REPLICA_INFO), no answer
   with "unknown" (the master keeps counting the proposal), a newer master
   epoch with ``MasterFenced``; every poll of the master's own epoch hands
   the committed set to the HA master.

It calls out over an RPC client of its own whose reconnect backoff stays
short (``RECONNECT_BACKOFF``). It also answers GET_BROKER_EPOCH_CACHE (1007)
for ``triomq admin get-broker-epoch``.
A master cut off from the controllers keeps its role but cannot change its
SyncStateSet (a change left unanswered stays counted until it is read back),
so its synchronous puts stop completing once its slaves follow a newly
elected master, and at once when the controllers tell it of one (fenced);
when it hears of the new master it becomes its slave, and the HA handshake
truncates what it wrote alone.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from framework.broker.replicas_manager import BrokerRole
from framework.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from framework.controller.codes import RequestCode, ResponseCode
from framework.controller.wire import (
    BrokerEpochCache,
    ReplicaInfo,
    WireError,
    decode_replica_info,
    encode_epoch_cache,
)
from framework.errors import ConfigError
from framework.ha.errors import EpochError
from framework.ha.master_driver import MasterFenced
from framework.protocol.remoting import RemotingCommand
from framework.rpc import Backoff, RpcConnection, RpcError, open_rpc_client

if TYPE_CHECKING:
    from framework.broker.service import Broker

__all__ = ["EXCHANGE_BROKER_HA_INFO", "IDENTITY_FILE", "BrokerIdentity", "ControllerMode"]

logger = logging.getLogger("triomq.broker.controller")

#: Request code a broker answers with its HA address (``extFields.haServerAddr``).
EXCHANGE_BROKER_HA_INFO = 906
#: The identity file under the store root (RocketMQ's storePathBrokerIdentity).
IDENTITY_FILE = "brokerIdentity"

#: Reconnect backoff towards controllers and other replicas: one that restarted
#: must be reached at once (the node client's backoff grows to seconds).
RECONNECT_BACKOFF = Backoff(initial=0.01, maximum=0.2)

#: Failures after which the applier or a loop simply tries again later.
_RETRYABLE = (ControllerError, ControllerUnavailable, RpcError, WireError, EpochError)


@attrs.frozen
class BrokerIdentity:
    """Which replica this is, as the controllers registered it."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str

    @classmethod
    def load(cls, root: str) -> BrokerIdentity | None:
        """The identity saved under ``root``, or ``None``; ``ConfigError`` if unreadable."""
        path = Path(root) / IDENTITY_FILE
        try:
            data = json.loads(path.read_text("utf-8"))
            return cls(data["clusterName"], data["brokerName"], int(data["brokerId"]),
                       data["registerCheckCode"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"broker identity file {str(path)!r} is damaged: {exc}") from None

    def save(self, root: str) -> None:
        """Write the identity under ``root`` (atomically, durably)."""
        path = Path(root) / IDENTITY_FILE
        temporary = path.with_suffix(".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump({"clusterName": self.cluster_name, "brokerName": self.broker_name,
                       "brokerId": self.broker_id,
                       "registerCheckCode": self.register_check_code}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)


class ControllerMode:
    """Drives one broker's ``ReplicasManager`` from the controllers (module docstring)."""

    def __init__(self, broker: Broker, root: str) -> None:
        self.broker = broker
        self.config = broker.config
        self.replicas = broker.replicas
        self.root = root
        #: Talks to the controllers (set by ``run``, over the mode's own RPC client).
        self.client: ControllerClient
        self.identity: BrokerIdentity | None = None
        broker.broker_id = -1  # unknown until the controllers assign it
        #: The newest replica info heard of (what the applier works towards).
        self.replica_info: ReplicaInfo | None = None
        #: The SyncStateSet epoch of this broker's own master term.
        self.sync_state_set_epoch = 0
        self._wake = trio.Event()
        self._registered = trio.Event()
        self._no_master_reason = ""
        self._recorded_epoch = 0

    @property
    def address(self) -> str:
        """This replica's address (its name in the SyncStateSet and at the controller)."""
        return self.replicas.address

    @property
    def broker_id(self) -> int:
        """The id the controllers gave this replica (``-1`` until known)."""
        return self.identity.broker_id if self.identity is not None else -1

    # -- running --------------------------------------------------------------------

    def register_handlers(self) -> None:
        """Answer role pushes, HA-address and epoch questions on the node's RPC server."""
        server = self.broker.node.rpc_server
        server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)
        server.register(EXCHANGE_BROKER_HA_INFO, self._on_ha_info, inline=True)
        server.register(RequestCode.GET_BROKER_EPOCH_CACHE, self._on_epoch_cache)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Register, then follow the controllers until cancelled.

        Reports started at once: registration needs the node's RPC server
        (the other replicas ask this one for its HA address).
        """
        self.register_handlers()
        async with (
            open_rpc_client(self.broker.node.connect, backoff=RECONNECT_BACKOFF) as rpc,
            trio.open_nursery() as nursery,
        ):
            self.client = ControllerClient(rpc, self.config.controller_addresses)
            task_status.started()
            nursery.start_soon(self._apply_loop)
            await self._register()
            for address in self.client.addresses:
                nursery.start_soon(self._heartbeat_loop, address)
            nursery.start_soon(self._poll_loop)

    async def _register(self) -> None:
        # Until it takes a role, the replica reports the epoch its store recorded.
        epochs = await trio.to_thread.run_sync(self.replicas.epoch_store.load)
        self._recorded_epoch = epochs.last_epoch or 0
        while True:
            try:
                if self.identity is None:
                    self.identity = await self._obtain_identity()
                    self.broker.broker_id = self.identity.broker_id
                info = await self._register_once()
            except _RETRYABLE as exc:
                logger.warning("broker %s: registration with the controllers failed: %s",
                               self.address, exc)
                await trio.sleep(self.config.sync_controller_metadata_period / 1000)
                continue
            logger.info("broker %s registered as %s/%d", self.address,
                        self.config.broker_name, self.broker_id)
            self._registered.set()
            await self._offer_or_elect(info)
            return

    async def _obtain_identity(self) -> BrokerIdentity:
        saved = await trio.to_thread.run_sync(BrokerIdentity.load, self.root)
        if saved is not None:
            if (saved.cluster_name, saved.broker_name) != (self.config.cluster_name,
                                                           self.config.broker_name):
                raise ConfigError(
                    f"the store at {self.root!r} belongs to {saved.cluster_name}/"
                    f"{saved.broker_name}, not {self.config.cluster_name}/"
                    f"{self.config.broker_name}", "broker.broker_name")
            return saved
        cluster, name = self.config.cluster_name, self.config.broker_name
        broker_id = await self.client.get_next_broker_id(cluster, name)
        identity = BrokerIdentity(cluster, name, broker_id, f"{self.address};{time.time_ns()}")
        await self.client.apply_broker_id(cluster, name, broker_id, self.address,
                                          identity.register_check_code)
        await trio.to_thread.run_sync(identity.save, self.root)
        return identity

    async def _register_once(self) -> ReplicaInfo:
        assert self.identity is not None
        cluster, name = self.config.cluster_name, self.config.broker_name
        try:
            return await self.client.register_broker(cluster, name, self.broker_id, self.address)
        except ControllerError as exc:
            if exc.code != ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                raise
        # The controllers forgot this replica (its group was cleaned): claim the id again.
        await self.client.apply_broker_id(cluster, name, self.broker_id, self.address,
                                          self.identity.register_check_code)
        return await self.client.register_broker(cluster, name, self.broker_id, self.address)

    async def _offer_or_elect(self, info: ReplicaInfo) -> None:
        if info.master_broker_id is None:
            try:
                info = await self.client.elect_master(self.config.cluster_name,
                                                      self.config.broker_name,
                                                      broker_id=self.broker_id)
            except ControllerError as exc:
                if exc.remark != self._no_master_reason:  # say so once per reason
                    logger.warning("broker %s: group %s has no master: %s", self.address,
                                   self.config.broker_name, exc.remark)
                self._no_master_reason = exc.remark
                return
            except (ControllerUnavailable, RpcError, WireError) as exc:
                # The next poll asks again; the broker's service must not end.
                logger.warning("broker %s: electing a master failed: %s", self.address, exc)
                return
        self._no_master_reason = ""
        self.offer(info)

    # -- roles ------------------------------------------------------------------------

    def offer(self, info: ReplicaInfo) -> None:
        """Consider ``info`` (from an answer, a push or a poll); older epochs are ignored."""
        current = self.replica_info
        if current is not None and info.is_older_than(current):
            return
        self.replica_info = info
        self._wake.set()

    async def _apply_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            info = self.replica_info
            if info is None:
                continue
            try:
                await self._follow(info)
            except _RETRYABLE as exc:
                logger.warning("broker %s: taking the role of epoch %d failed, will retry: %s",
                               self.address, info.master_epoch, exc)
                await trio.sleep(self.config.sync_controller_metadata_period / 1000)
                self._wake.set()

    async def _follow(self, info: ReplicaInfo) -> None:
        if info.master_epoch < self.replicas.master_epoch:
            return
        master = info.master_broker_id
        if master is None:
            return
        if master == self.broker_id:
            members = _addresses(info, info.sync_state_set)
            ha_master = self.replicas.ha_master
            if not (self.replicas.role is BrokerRole.MASTER
                    and self.replicas.master_epoch == info.master_epoch):
                await self.replicas.change_to_master(info.master_epoch, members)
            elif (ha_master is not None
                  and info.sync_state_set_epoch >= self.sync_state_set_epoch):
                # The set itself, not only its epoch: an answer lost on the
                # way may have left the master's view behind the controller's.
                ha_master.sync_state_set_committed(members)
            self.sync_state_set_epoch = max(self.sync_state_set_epoch,
                                            info.sync_state_set_epoch)
            return
        if (self.replicas.role is BrokerRole.SLAVE
                and self.replicas.master_epoch == info.master_epoch):
            return
        if info.master_address is None:
            return
        ha_address = await self._ha_address_of(info.master_address)
        await self.replicas.change_to_slave(ha_address, info.master_epoch)

    async def _ha_address_of(self, broker_address: str) -> str:
        response = await self.client.rpc.invoke(broker_address, EXCHANGE_BROKER_HA_INFO,
                                                     timeout=self.client.attempt_timeout)
        address = response.ext_fields.get("haServerAddr", "")
        if response.code != ResponseCode.SUCCESS or not address:
            raise WireError(f"broker {broker_address} did not tell its HA address "
                            f"(code {response.code}: {response.remark})")
        return address

    # -- loops --------------------------------------------------------------------------

    def live_info(self) -> tuple[int, int, int]:
        """(last epoch, max offset, confirm offset) as the heartbeat reports them."""
        epochs = None
        if self.replicas.ha_master is not None:
            epochs = self.replicas.ha_master.epochs
        elif self.replicas.ha_slave is not None:
            epochs = self.replicas.ha_slave.epochs
        epoch = epochs.last_epoch if epochs is not None else self._recorded_epoch
        return (epoch or 0, self.replicas.log.max_offset, max(self.replicas.confirm_offset, 0))

    async def _heartbeat_loop(self, controller: str) -> None:
        assert self.identity is not None
        config = self.config
        timeout = config.controller_heartbeat_timeout or None
        while True:
            epoch, max_offset, confirm_offset = self.live_info()
            try:
                await self.client.heartbeat(
                    config.cluster_name, config.broker_name, self.broker_id, self.address,
                    epoch=epoch, max_offset=max_offset, confirm_offset=confirm_offset,
                    election_priority=config.election_priority, heartbeat_timeout_ms=timeout,
                    address=controller)
            except RpcError as exc:
                logger.debug("heartbeat to controller %s failed: %s", controller, exc)
            await trio.sleep(config.broker_heartbeat_interval / 1000)

    async def _poll_loop(self) -> None:
        while True:
            await trio.sleep(self.config.sync_controller_metadata_period / 1000)
            try:
                info = await self.client.get_replica_info(self.config.broker_name)
            except ControllerError as exc:
                if exc.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                    await self._register()
                else:
                    logger.warning("broker %s: polling the controller failed: %s",
                                   self.address, exc)
                continue
            except (ControllerUnavailable, WireError) as exc:
                logger.warning("broker %s: polling the controller failed: %s", self.address, exc)
                continue
            await self._offer_or_elect(info)

    # -- the SyncStateSetReporter seam ------------------------------------------------------

    async def alter_sync_state_set(self, proposal: frozenset[str]) -> frozenset[str] | None:
        """Ask the controller to make ``proposal`` (replica addresses) the SyncStateSet.

        The set the controller holds afterwards (read back after a refusal:
        an earlier try of this change may have been committed with its answer
        lost); None if unknown; ``MasterFenced`` once a newer master exists.
        """
        info = self.replica_info
        epoch = self.replicas.master_epoch
        if info is None or self.broker_id < 0:
            return None
        ids = {info.broker_id_of(address) for address in proposal}
        if None in ids:
            # A replica that registered after our last news: learn the group anew.
            info = await self._read_sync_state_set(epoch)
            if info is None:
                return None
            ids = {info.broker_id_of(address) for address in proposal}
            if None in ids:
                logger.warning("SyncStateSet proposal %s names unregistered replicas",
                               sorted(proposal))
                return _addresses(info, info.sync_state_set)
        try:
            applied, new_epoch = await self.client.alter_sync_state_set(
                self.config.broker_name, self.broker_id, epoch, self.sync_state_set_epoch,
                {i for i in ids if i is not None})
        except ControllerError as exc:
            if exc.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH:
                # Learn the new master now (and step down) instead of at the next poll.
                await self._read_sync_state_set(epoch)
                raise MasterFenced(f"SyncStateSet {sorted(proposal)} refused: {exc}") from None
            logger.warning("SyncStateSet %s refused: %s", sorted(proposal), exc)
            current = await self._read_sync_state_set(epoch)
            return None if current is None else _addresses(current, current.sync_state_set)
        except (ControllerUnavailable, RpcError, WireError) as exc:
            logger.warning("SyncStateSet %s: no answer, it may be applied: %s",
                           sorted(proposal), exc)
            return None
        self.sync_state_set_epoch = max(self.sync_state_set_epoch, new_epoch)
        return _addresses(info, applied)

    async def _read_sync_state_set(self, master_epoch: int) -> ReplicaInfo | None:
        """The group's replica info if it is of this master's term (else None: unknown).

        ``MasterFenced`` if it names a newer master epoch.
        """
        try:
            info = await self.client.get_replica_info(self.config.broker_name)
        except (ControllerError, ControllerUnavailable, RpcError, WireError) as exc:
            logger.warning("reading the SyncStateSet back failed: %s", exc)
            return None
        self.offer(info)
        if info.master_epoch > master_epoch:
            raise MasterFenced(f"the controller is at master epoch {info.master_epoch}")
        if (info.master_epoch != master_epoch or info.master_broker_id != self.broker_id
                or info.sync_state_set_epoch < self.sync_state_set_epoch):
            return None
        self.sync_state_set_epoch = info.sync_state_set_epoch
        return info

    # -- handlers -------------------------------------------------------------------------

    async def _on_notify(self, request: RemotingCommand, peer: RpcConnection
                         ) -> RemotingCommand:
        try:
            info = decode_replica_info(request.body)
        except WireError as exc:
            logger.warning("bad NOTIFY_BROKER_ROLE_CHANGED from %s: %s", peer.peer, exc)
            return RemotingCommand.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                            remark=str(exc))
        if info.broker_name == self.config.broker_name and self._registered.is_set():
            self.offer(info)
        return RemotingCommand.response()

    async def _on_ha_info(self, request: RemotingCommand, peer: RpcConnection
                          ) -> RemotingCommand:
        return RemotingCommand.response(ext_fields={"haServerAddr": self.replicas.ha_address})

    async def _on_epoch_cache(self, request: RemotingCommand, peer: RpcConnection
                              ) -> RemotingCommand:
        epochs = await trio.to_thread.run_sync(self.replicas.epoch_store.load)
        return RemotingCommand.response(body=encode_epoch_cache(BrokerEpochCache(
            self.config.broker_name, max(self.broker_id, 0), self.replicas.log.max_offset,
            max(self.replicas.confirm_offset, 0),
            tuple((e.epoch, e.start_offset) for e in epochs))))



def _addresses(info: ReplicaInfo, broker_ids: Iterable[int]) -> frozenset[str]:
    """The addresses of ``broker_ids`` that ``info`` knows."""
    return frozenset(a for a in map(info.address_of, broker_ids) if a is not None)
