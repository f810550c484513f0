"""The broker service: a node with role ``"broker"`` runs one of these.

Start-up: open the commit log through the store plugin (in a worker
thread: it runs the store's recovery) and the topic table
(``config/topics.json``), listen on the HA address, then start the
broker's components (``triomq.broker.built_ins``: its own, then the plugins'; see
``triomq.broker.components``), each started, then its handlers registered: the
flush service, the ``ReplicasManager``, the puts, topics, clients, pulls,
offsets, the delayed messages (their offsets always, their delivery in
each master term: ``triomq.broker.secondary.schedule_service``), the timer
messages likewise (``triomq.broker.secondary.timer_service``, with
``timer_wheel_enable``), ..., the
name-server registration (``broker.namesrv_addr``: at
once, on every role and topic change, and periodically); then take the static role
(``broker_id`` 0: master of ``master_epoch``; otherwise slave of
``ha_master_address``), or, with
``enable_controller_mode``, let the controllers assign the id and the role
(``triomq.broker.replication.controller_mode``). Stop: the terms are cancelled and
the commit log is closed (flushed) in a thread.

The store root is ``broker.store_path_root_dir``, else the node's
``store.path``. The commit log's store is opened with the node's
``store.options`` and ``message_delay_level`` (the schedule topic's
consume-queue entries carry delivery times by it). The HA address is
``broker.ha_listen_address``, else derived from the node's ``listen``
address (``ha_listen_address``).

The broker's clock (``Broker.clock``, a ``triomq.clock.EpochClock``) is made
once and handed to the puts (store times, timer times) and to the schedule,
timer, transaction, pop and revive services: every time they compare is on it.

Hosts and tests reach a node's running broker with ``broker_of(node)``.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

import trio

from triomq.broker.built_ins import built_in_components, plugin_components
from triomq.broker.components import (
    ActingTerm,
    ComponentHost,
)
from triomq.broker.config import BrokerConfig
from triomq.broker.consume.clients import ClientService
from triomq.broker.consume.locks import QueueLockService
from triomq.broker.consume.offset_service import ConsumerOffsetService
from triomq.broker.consume.pull_service import (
    PullService,
)
from triomq.broker.core.escape_bridge import (
    LocalEscapeBridge,
)
from triomq.broker.index.index_service import IndexService
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.metadata.topics import TopicService, load_topics
from triomq.broker.pop.pop_service import PopService
from triomq.broker.pop.revive_service import ReviveService
from triomq.broker.registration.core.namesrv_registration import (
    BrokerRegistrationInfo,
    RegistrationFlow,
)
from triomq.broker.registration.member_group import query_member_group
from triomq.broker.registration.namesrv_client import (
    NamesrvClient,
    route_address,
    rpc_address,
)
from triomq.broker.replication.confirm_checkpoint import ConfirmOffsetCheckpoint
from triomq.broker.replication.controller_mode import ControllerMode
from triomq.broker.replication.replicas_manager import (
    BrokerRole,
    ReplicasManager,
)
from triomq.broker.secondary.schedule_service import ScheduleMessageService
from triomq.broker.secondary.timer_service import TimerMessageService
from triomq.broker.secondary.transaction_service import TransactionService
from triomq.broker.send.core.put_checks import host_port
from triomq.broker.send.processor import BrokerProcessor
from triomq.clock import EpochClock, now_ms
from triomq.errors import ConfigError, PluginError
from triomq.ha.checkpoint import EpochCheckpointFile
from triomq.store import CommitLog, FlushService
from triomq.transport import split_address

if TYPE_CHECKING:
    from triomq.broker.registration.pre_online_service import PreOnlineService
    from triomq.runtime import Node

__all__ = [
    "Broker",
    "BrokerComponentView",
    "broker_of",
    "broker_service",
    "ha_listen_address",
    "local_escape_bridge",
    "running_brokers",
    "store_root",
    "vip_channel_address",
]

log = logging.getLogger("triomq.broker")

_brokers: weakref.WeakKeyDictionary[Node, Broker] = weakref.WeakKeyDictionary()


def store_root(node: Node) -> str:
    """Where the broker keeps its commit log and epoch file."""
    root = node.config.broker.store_path_root_dir or node.config.store.path
    if not root:
        raise ConfigError("no store root: set broker.store_path_root_dir or store.path",
                          "broker.store_path_root_dir")
    return root


def ha_listen_address(node: Node) -> str:
    """The address the HA service listens on (see ``BrokerConfig.ha_listen_address``)."""
    config: BrokerConfig = node.config.broker
    if config.ha_listen_address:
        return config.ha_listen_address
    if not node.config.listen:
        raise ConfigError("no HA address: set broker.ha_listen_address or the node's listen",
                          "broker.ha_listen_address")
    scheme, location = split_address(node.config.listen)
    if scheme == "tcp":
        host = location.rpartition(":")[0]
        return f"tcp://{host}:{config.ha_listen_port}"
    return f"{node.config.listen}-ha"


def vip_channel_address(node: Node) -> str | None:
    """The address of RocketMQ's VIP channel (``BrokerConfig.vip_channel``): the node's
    TCP port minus 2, as RocketMQ's ``MixAll.brokerVIPChannel`` dials it; None when off."""
    if not node.config.broker.vip_channel:
        return None
    scheme, location = split_address(node.config.listen)
    host, _, port = location.rpartition(":")
    if scheme != "tcp" or not port.isdigit() or int(port) < 3:
        raise ConfigError(f"broker.vip_channel needs a fixed TCP listen port above 2, "
                          f"not {node.config.listen!r}", "broker.vip_channel")
    return f"tcp://{host}:{int(port) - 2}"


class BrokerComponentView:
    """The ``ComponentView`` of a running broker: what its components may know of it."""

    __slots__ = ("_broker",)

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def role(self) -> BrokerRole:
        return self._broker.replicas.role

    @property
    def is_master(self) -> bool:
        return self._broker.replicas.is_master

    @property
    def master_epoch(self) -> int:
        return self._broker.replicas.master_epoch

    @property
    def confirm_offset(self) -> int:
        return self._broker.replicas.confirm_offset

    @property
    def log(self) -> CommitLog:
        return self._broker.log

    def master_address(self) -> str | None:
        # Looked up at each call, so a host (or a test) may redirect the broker's.
        return self._broker.master_rpc_address()

    @property
    def broker_id(self) -> int:
        return self._broker.broker_id

    @property
    def acting(self) -> bool:
        return self._broker.acting

    async def start_acting(self) -> ActingTerm:
        return await self._broker.start_acting()

    @property
    def clock(self) -> EpochClock:
        return self._broker.clock


class Broker:
    """A running broker: its commit log, flush service, replicas manager and handlers."""

    def __init__(self, node: Node, log: CommitLog, flush: FlushService,
                 replicas: ReplicasManager, table: TopicTable) -> None:
        self.node = node
        self.config: BrokerConfig = node.config.broker
        self.log = log
        self.flush = flush
        self.replicas = replicas
        #: The broker's clock (epoch ms), made once: its store times, and every time a
        #: delayed, timer, transactional or popped message waits for.
        self.clock = EpochClock()
        #: What the broker's components see of it.
        self.view = BrokerComponentView(self)
        self.topics = TopicService(store_root(node), self.config, table, broker=self.view)
        self.processor = BrokerProcessor(log=log, flush=flush, replicas=replicas,
                                         config=self.config, store_host=host_port(node.address),
                                         topics=self.topics, clock=self.clock)
        self.processor.acting = lambda: self.acting
        self.confirm_checkpoint = ConfirmOffsetCheckpoint(store_root(node))
        #: Clients, consumer groups and their configs (set when the service starts).
        self.clients: ClientService | None = None
        #: Orderly consumers' queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
        self.locks = QueueLockService(self.config, rpc=node.rpc, peers=self.group_peers)
        #: The message index (message_index_enable; set when the service starts).
        self.index: IndexService | None = None
        #: Consumer offsets and pulls (set when the service starts).
        self.offsets: ConsumerOffsetService | None = None
        self.pulls: PullService | None = None
        #: The controller-mode driver, when ``enable_controller_mode`` is set.
        self.controller_mode: ControllerMode | None = None
        #: END_TRANSACTION and the transaction check (set when the service starts).
        self.transactions: TransactionService | None = None
        #: Delayed messages' delivery and offsets (set when the service starts).
        self.schedule: ScheduleMessageService | None = None
        #: Timer messages' wheel and checkpoint (set when the service starts, with
        #: ``timer_wheel_enable``).
        self.timer: TimerMessageService | None = None
        #: Pops and their acks, and the revive of un-acked pops (set when the service
        #: starts).
        self.pops: PopService | None = None
        self.revive: ReviveService | None = None
        #: The components the broker runs (set when the service starts).
        self.components: ComponentHost | None = None
        #: The acting term (``start_acting``) while one runs or last ran.
        self.acting_term: ActingTerm | None = None
        #: A returning static master neither registers nor heartbeats until its
        #: pre-online took back what its slaves moved on meanwhile (``go_online``).
        self.isolated = (self.config.enable_slave_acting_master
                         and not self.config.skip_pre_online
                         and not self.config.enable_controller_mode and self.config.is_master)
        #: The isolated master's pre-online (set when the service starts).
        self.pre_online: PreOnlineService | None = None
        #: Set when the broker is not (or no longer) isolated.
        self.online = trio.Event()
        if not self.isolated:
            self.online.set()
        #: The name-server registration, when ``namesrv_addr`` names any.
        self.namesrv: NamesrvClient | None = None
        if self.config.namesrv_addr:
            flow = RegistrationFlow(
                tuple(self.config.namesrv_addr),
                register_period=self.config.register_name_server_period,
                heartbeat_interval=self.config.broker_heartbeat_interval,
                retry_interval=min(1000, self.config.register_name_server_period),
                heartbeat_via_data_version=self.config.compatible_with_old_name_srv)
            self.namesrv = NamesrvClient(
                node.rpc, flow, lambda: self.topics.table,
                heartbeat_timeout=self.config.send_heartbeat_timeout / 1000)
            self.topics.on_change = self.namesrv.topics_changed

    @property
    def broker_id(self) -> int:
        """This replica's id: ``broker_id`` in static mode, the controllers' in controller mode."""
        return self.processor.broker_id

    @broker_id.setter
    def broker_id(self, broker_id: int) -> None:
        self.processor.broker_id = broker_id

    @property
    def ha_address(self) -> str:
        """The HA address slaves connect to (port resolved)."""
        return self.replicas.ha_address

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        """Tell the name servers and the plugins (``triomq_role_changed``)."""
        # A slave term may have cut bytes the flush service counted as flushed.
        self.flush.flushed = self.log.flushed_offset
        if role is BrokerRole.MASTER:
            # The master epoch as the state version: name servers then prefer this
            # master's registration to a deposed one's (RocketMQ 5 does the same).
            self.topics.table.bump(now_ms(), master_epoch)
            self.topics.changed()
        if self.namesrv is not None and not self.isolated:
            self.namesrv.identify(self.registration_info(role))
        self.node.plugins.hook.triomq_role_changed(
            node=self.node, broker_name=self.config.broker_name,
            broker_id=self.broker_id, role=role.value, master_epoch=master_epoch)

    def registration_info(self, role: BrokerRole) -> BrokerRegistrationInfo:
        """What the name servers are told: a master registers as id 0 (RocketMQ 5's
        controller mode), a slave with its own id; addresses as ``host:port``."""
        return BrokerRegistrationInfo(
            self.config.cluster_name, self.config.broker_name,
            0 if role is BrokerRole.MASTER else self.broker_id,
            route_address(self.node.address or self.node.name),
            route_address(self.ha_address), self.config.broker_not_active_timeout,
            enable_acting_master=self.config.enable_slave_acting_master)

    def go_online(self, why: str) -> None:
        """End the isolation: register with the name servers (pre-online is done) and
        start the master term's components."""
        self.isolated = False
        self.online.set()
        if self.namesrv is not None:
            self.namesrv.identify(self.registration_info(self.replicas.role))

    async def member_group(self) -> dict[int, str] | None:
        """The group's alive members by id (RPC addresses), as the first name server that
        answers names them (None: none answered)."""
        for namesrv in self.config.namesrv_addr:
            members = await query_member_group(
                self.node.rpc, namesrv, cluster=self.config.cluster_name,
                broker_name=self.config.broker_name,
                compatible=self.config.compatible_with_old_name_srv,
                timeout=self.config.send_heartbeat_timeout / 1000)
            if members is not None:
                return {i: rpc_address(a) for i, a in members.items()}
        return None

    async def group_peers(self) -> list[str]:
        """The RPC addresses of the group's other alive replicas (none: no name server
        answered)."""
        members = await self.member_group() or {}
        return sorted({a for a in members.values() if a != self.rpc_address})

    @property
    def rpc_address(self) -> str:
        """This broker's address as the group's members dial it."""
        return rpc_address(route_address(self.node.address or self.node.name))

    @property
    def acting(self) -> bool:
        """True while an acting term runs (a slave acting for its absent master)."""
        return self.acting_term is not None and not self.acting_term.ended

    async def start_acting(self) -> ActingTerm:
        """Begin an acting term in the slave term's nursery (``ComponentView.start_acting``)."""
        if not self.config.enable_slave_acting_master:
            raise RuntimeError("enable_slave_acting_master is off: this broker never acts")
        if self.replicas.role is not BrokerRole.SLAVE:
            raise RuntimeError(f"a {self.replicas.role.value} does not act for its master")
        if self.acting:
            raise RuntimeError("an acting term runs already")
        assert self.components is not None
        term: ActingTerm = await self.replicas.start_in_term(self.components.run_acting_term)
        self.acting_term = term
        log.warning("broker %s id %d acts for its absent master", self.config.broker_name,
                    self.broker_id)
        return term

    def master_rpc_address(self) -> str | None:
        """The group's master, for a slave's copies: as the controllers named it in
        controller mode, else as the name servers did (None: not known yet)."""
        if self.controller_mode is not None:
            return self.controller_mode.master_address
        address = self.namesrv.master_address if self.namesrv is not None else None
        return None if address is None else rpc_address(address)

    async def take_static_role(self) -> None:
        """Static mode: master when ``broker_id`` is 0, else slave of ``ha_master_address``."""
        if self.config.is_master:
            await self.replicas.change_to_master(self.config.master_epoch, self.config.broker_id)
        else:
            await self.replicas.change_to_slave(self.config.ha_master_address,
                                                self.config.master_epoch, self.config.broker_id)

    async def record_confirm_offset(self) -> None:
        """Keep ``<store root>/checkpoint``'s confirmPhyOffset current, every ``flush_interval``."""
        recorded = await trio.to_thread.run_sync(self.confirm_checkpoint.read)
        while True:
            await trio.sleep(self.config.flush_interval / 1000)
            confirm = min(self.replicas.confirm_offset, self.log.max_offset)
            if confirm != recorded:
                await trio.to_thread.run_sync(self.confirm_checkpoint.write, confirm)
                recorded = confirm

    async def flush_slave_log(self) -> None:
        """A slave-term task: flush the log every ``flush_interval`` (nothing waits on a
        slave's puts)."""
        if self.config.flush_policy == "none":
            return
        while True:
            await trio.sleep(self.config.flush_interval / 1000)
            if self.log.flushed_offset < self.log.max_offset:
                await trio.to_thread.run_sync(self.log.flush)


def broker_of(node: Node) -> Broker:
    """The broker running in ``node``; ``PluginError`` if it runs none."""
    try:
        return _brokers[node]
    except KeyError:
        raise PluginError(f"node {node.name!r} runs no broker") from None


def running_brokers() -> list[Broker]:
    """Every broker running in this process, by node name (a host embedding several
    brokers, as RocketMQ's BrokerContainer holds them)."""
    return sorted(_brokers.values(), key=lambda broker: broker.node.name)


def local_escape_bridge(node: Node) -> LocalEscapeBridge:
    """The escape bridge ``"local"``: puts through the put flow of the broker running
    in ``node`` (``PluginError`` if it runs none)."""
    return LocalEscapeBridge(broker_of(node).processor.put_own)


async def broker_service(node: Node, *,
                         task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the broker role in ``node`` until cancelled."""
    config: BrokerConfig = node.config.broker
    root = store_root(node)
    ha_address = ha_listen_address(node)
    address = node.address or node.name
    factory = node.plugins.log_store("commitlog", node.config.store.scheme)
    # The store makes SCHEDULE_TOPIC_XXXX's entries by the broker's delay levels.
    options = {**node.config.store.options, "message_delay_level": config.message_delay_level}
    log: CommitLog = await trio.to_thread.run_sync(factory, root, options)
    table = await trio.to_thread.run_sync(load_topics, root, config,
                                          now_ms())
    try:
        flush = FlushService.for_log(log, config.flush_policy, config.flush_interval / 1000)
        replicas = ReplicasManager(
            log=log,
            epoch_store=EpochCheckpointFile(root),
            address=address,
            ha_listener=await node.listen(ha_address),
            connect=node.connect,
            master_config=config.master_config(),
            slave_config=config.slave_config(),
            auth=node.inner_auth,
        )
        broker = Broker(node, log, flush, replicas, table)
        try:
            host = broker.components = ComponentHost(
                await built_in_components(broker, root) + plugin_components(broker),
                may_act=config.enable_slave_acting_master, online=broker.online)
        except BaseException:
            # A file or a component refused: the HA port is not served (replicas.run
            # closes it once it runs).
            with trio.CancelScope(shield=True):
                await replicas.ha_listener.aclose()
            raise
        replicas.terms = host
        try:
            async with trio.open_nursery() as nursery:
                await host.start(nursery, node.rpc_server)
                if broker.controller_mode is None:
                    await broker.take_static_role()
                vip_address = vip_channel_address(node)
                if vip_address is not None:
                    nursery.start_soon(node.rpc_server.serve, await node.listen(vip_address))
                _brokers[node] = broker
                task_status.started(broker)
        except BaseExceptionGroup as group:
            raise _unwrapped(group) from None
    finally:
        _brokers.pop(node, None)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(log.close)


def _unwrapped(group: BaseExceptionGroup) -> BaseException:
    """One failure (e.g. an EpochError at start-up) reads better unwrapped, however
    deep the components' nurseries nest it."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return group if isinstance(error, BaseExceptionGroup) else error
