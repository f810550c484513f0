"""The broker service: a node with role ``"broker"`` runs one of these.

Start-up: open the commit log through the store plugin (in a worker
thread: it runs the store's recovery), listen on the HA address, start the
flush service and the ``ReplicasManager``, register the request handlers,
then take the static role (``broker_id`` 0: master of ``master_epoch``;
otherwise slave of ``ha_master_address``), or, with
``enable_controller_mode``, let the controllers assign the id and the role
(``framework.broker.controller_mode``). Stop: the terms are cancelled and
the commit log is closed (flushed) in a thread.

The store root is ``broker.store_path_root_dir``, else the node's
``store.path``. The HA address is ``broker.ha_listen_address``, else
derived from the node's ``listen`` address (``ha_listen_address``).

Hosts and tests reach a node's running broker with ``broker_of(node)``.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import trio

from framework.broker.config import BrokerConfig
from framework.broker.confirm_checkpoint import ConfirmOffsetCheckpoint
from framework.broker.controller_mode import ControllerMode
from framework.broker.processor import BrokerProcessor, host_port
from framework.broker.replicas_manager import BrokerRole, ReplicasManager, check_replica_address
from framework.errors import ConfigError, PluginError
from framework.ha.checkpoint import EpochCheckpointFile
from framework.store import CommitLog, FlushService
from framework.transport import split_address

if TYPE_CHECKING:
    from framework.runtime import Node

__all__ = ["Broker", "broker_of", "broker_service", "ha_listen_address", "store_root"]

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


class Broker:
    """A running broker: its commit log, flush service, replicas manager and handlers."""

    def __init__(self, node: Node, log: CommitLog, flush: FlushService,
                 replicas: ReplicasManager, processor: BrokerProcessor) -> None:
        self.node = node
        self.config: BrokerConfig = node.config.broker
        self.log = log
        self.flush = flush
        self.replicas = replicas
        self.processor = processor
        self.confirm_checkpoint = ConfirmOffsetCheckpoint(store_root(node))
        #: This replica's id: ``broker_id`` in static mode, the controllers' in controller mode.
        self.broker_id = self.config.broker_id
        #: The controller-mode driver, when ``enable_controller_mode`` is set.
        self.controller_mode: ControllerMode | None = None

    @property
    def ha_address(self) -> str:
        """The HA address slaves connect to (port resolved)."""
        return self.replicas.ha_address

    def role_changed(self, role: BrokerRole, master_epoch: int) -> None:
        """Tell the plugins (``triomq_role_changed``)."""
        # A slave term may have cut bytes the flush service counted as flushed.
        self.flush.flushed = self.log.flushed_offset
        self.node.plugins.hook.triomq_role_changed(
            node=self.node, broker_name=self.config.broker_name,
            broker_id=self.broker_id, role=role.value, master_epoch=master_epoch)

    async def take_static_role(self) -> None:
        """Static mode: master when ``broker_id`` is 0, else slave of ``ha_master_address``."""
        if self.config.is_master:
            await self.replicas.change_to_master(self.config.master_epoch)
        else:
            await self.replicas.change_to_slave(self.config.ha_master_address,
                                                self.config.master_epoch)

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
        """Flush the log every ``flush_interval`` while slave (nothing waits on a slave's puts)."""
        while True:
            await trio.sleep(self.config.flush_interval / 1000)
            if (self.config.flush_policy != "none" and self.replicas.role is BrokerRole.SLAVE
                    and self.log.flushed_offset < self.log.max_offset):
                await trio.to_thread.run_sync(self.log.flush)


def broker_of(node: Node) -> Broker:
    """The broker running in ``node``; ``PluginError`` if it runs none."""
    try:
        return _brokers[node]
    except KeyError:
        raise PluginError(f"node {node.name!r} runs no broker") from None


async def broker_service(node: Node, *,
                         task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the broker role in ``node`` until cancelled."""
    config: BrokerConfig = node.config.broker
    root = store_root(node)
    ha_address = ha_listen_address(node)
    address = node.address or node.name
    try:
        check_replica_address(address)
    except ValueError as exc:
        raise ConfigError(str(exc), "listen") from None
    factory = node.plugins.log_store("commitlog", node.config.store.scheme)
    log: CommitLog = await trio.to_thread.run_sync(factory, root, node.config.store.options)
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
        )
        processor = BrokerProcessor(log=log, flush=flush, replicas=replicas, config=config,
                                    store_host=host_port(node.address))
        broker = Broker(node, log, flush, replicas, processor)
        replicas.on_role_changed = broker.role_changed
        if config.enable_controller_mode:
            broker.controller_mode = ControllerMode(broker, root)
            replicas.reporter = broker.controller_mode
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(flush.run)
                await nursery.start(replicas.run)
                nursery.start_soon(broker.flush_slave_log)
                nursery.start_soon(broker.record_confirm_offset)
                processor.register(node.rpc_server)
                if broker.controller_mode is not None:
                    await nursery.start(broker.controller_mode.run)
                else:
                    await broker.take_static_role()
                _brokers[node] = broker
                task_status.started(broker)
        except BaseExceptionGroup as group:
            # One failure (e.g. an EpochError at start-up) reads better unwrapped.
            if len(group.exceptions) != 1 or isinstance(group.exceptions[0], BaseExceptionGroup):
                raise
            raise group.exceptions[0] from None
    finally:
        _brokers.pop(node, None)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(log.close)
