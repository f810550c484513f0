"""A running broker's self-description for admin tools: its runtime table and its settings.

- GET_BROKER_RUNTIME_INFO (28): the KVTable ``mqadmin brokerStatus`` prints
  and ``mqadmin clusterList`` reads. Its keys and the rules that fill them
  are ``triomq.broker.admin.core.runtime_table``'s and ``triomq.broker.admin.core.store_stats``';
  this reads the broker's state when asked, and keeps the message rates:
  ``run`` samples the counters once a second (with the local date, for the
  midnight totals), and on a slave counts what replication added to its
  queues, as RocketMQ's slave counts the records it dispatches. The
  partition's space is measured in a worker thread at each request.
- GET_BROKER_HA_STATUS (907): the replication, as ``mqadmin haStatus``
  prints it (``triomq.broker.admin.core.ha_status``).
- GET_BROKER_CONFIG (26): the settings under RocketMQ's names
  (``triomq.broker.core.config_properties``), with the header ``version``: the
  configuration's DataVersion, which never moves (triomq takes no
  configuration change at run time).

A broker of a static group answers as well as one in controller mode.
"""

from __future__ import annotations

import datetime
import json
import os
import struct
from typing import TYPE_CHECKING

import attrs
import trio

from triomq.broker.admin.core.ha_status import (
    HAClientInfo,
    HAConnectionInfo,
    encode_master_ha_info,
    encode_slave_ha_info,
    java_socket_address,
)
from triomq.broker.admin.core.runtime_table import (
    DiskSpace,
    ReplicaAck,
    runtime_table,
    store_table,
)
from triomq.broker.core.codes import RequestCode
from triomq.broker.core.config_properties import Facts, broker_properties
from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.clock import now_ms
from triomq.protocol.java_properties import dump_properties
from triomq.protocol.message import STORE_TIMESTAMP_SPAN, store_timestamp_at
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import DataVersion, dumps
from triomq.store import CommitLog, StoreError
from triomq.transport import split_address

if TYPE_CHECKING:
    from triomq.broker.service import Broker
    from triomq.rpc import RpcConnection, RpcServer

__all__ = ["SAMPLE_INTERVAL", "RuntimeInfoService", "earliest_message_time"]

#: Seconds between samples of the message counters (RocketMQ's FREQUENCY_OF_SAMPLING).
SAMPLE_INTERVAL = 1.0


def earliest_message_time(log: CommitLog) -> int:
    """The store time of the commit log's first record; -1 when there is none (RocketMQ's
    ``getEarliestMessageTime``)."""
    first = log.min_offset
    span = min(STORE_TIMESTAMP_SPAN, log.max_offset - first)
    try:
        return store_timestamp_at(log.read(first, span))
    except (StoreError, OSError, struct.error):  # no record there, or a cut one
        return -1


def _disk_space(path: str) -> DiskSpace | None:
    try:
        vfs = os.statvfs(path)
    except OSError:
        return None
    return DiskSpace(vfs.f_blocks * vfs.f_frsize, vfs.f_bfree * vfs.f_frsize,
                     vfs.f_bavail * vfs.f_frsize)


def _queue_total(log: CommitLog) -> int:
    """Messages ever put to the log's queues: each queue's next offset, summed."""
    return sum(log.queue_max_offset(topic, queue_id) for topic, queue_id in log.queues())


def _host_port(address: str) -> tuple[str, int]:
    location = split_address(address)[1] if "://" in address else address
    host, _, port = location.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


class RuntimeInfoService:
    """Answers GET_BROKER_RUNTIME_INFO, GET_BROKER_HA_STATUS and GET_BROKER_CONFIG for
    ``broker``, as it is when asked; ``run`` samples its message counters."""

    def __init__(self, broker: Broker, root: str) -> None:
        self.broker = broker
        # Absolute, as RocketMQ's store paths are: admin tools print them.
        self.root = os.path.abspath(root)
        self.stats = broker.processor.stats
        self.config_version = DataVersion(0, self.stats.boot_ms, 0)

    def register(self, server: RpcServer) -> None:
        # Not inline: the disk is measured in a worker thread.
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        server.register(RequestCode.GET_BROKER_CONFIG, self.broker_config, inline=True)
        server.register(RequestCode.GET_BROKER_HA_STATUS, self.ha_status, inline=True)

    async def run(self) -> None:
        """Sample the counters every ``SAMPLE_INTERVAL`` until cancelled."""
        while True:
            self.stats.sample(now_ms(), datetime.date.today().toordinal())
            await trio.sleep(SAMPLE_INTERVAL)

    async def count_replicated(self) -> None:
        """A slave-term task: count what the log took from the master, as a master counts
        its puts, every ``SAMPLE_INTERVAL``."""
        log = self.broker.log
        held = (_queue_total(log), log.max_offset)
        while True:
            await trio.sleep(SAMPLE_INTERVAL)
            now_held = (_queue_total(log), log.max_offset)
            self.stats.replicated(now_held[0] - held[0], now_held[1] - held[1])
            held = now_held

    def table(self, disk: DiskSpace | None) -> dict[str, str]:
        broker = self.broker
        replicas = broker.replicas
        state = replicas.state()
        master = replicas.ha_master
        slaves = ([ReplicaAck(broker_id, p.ack_offset, p.connections, p.is_async_learner)
                   for broker_id, p in master.tracker.slaves.items() if p.connected]
                  if master is not None else [])
        index = broker.index
        return {
            **self.stats.table(broker.clock()),
            **store_table(
                earliest_message_time=earliest_message_time(broker.log), disk=disk,
                commit_log_path=os.path.join(self.root, "commitlog"),
                flush_behind=broker.log.max_offset - broker.log.flushed_offset,
                dispatch_behind=(broker.log.max_offset - index.position
                                 if index is not None else 0),
                is_master=state.role is BrokerRole.MASTER,
                timer=broker.timer.runtime_fields() if broker.timer is not None else None),
            **runtime_table(
                cluster_name=broker.config.cluster_name, broker_name=broker.config.broker_name,
                broker_id=broker.broker_id, role=state.role.value,
                master_epoch=state.master_epoch, min_offset=broker.log.min_offset,
                max_offset=state.max_offset, confirm_offset=state.confirm_offset,
                ha_address=replicas.ha_address, master_ha_address=state.master_ha_address,
                sync_state_set=state.sync_state_set, slaves=slaves,
                controller_mode=broker.controller_mode is not None),
        }

    async def runtime_info(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        disk = await trio.to_thread.run_sync(_disk_space, self.root)
        return RemotingCommand.response(body=json.dumps({"table": self.table(disk)}).encode())

    async def ha_status(self, request: RemotingCommand, peer: RpcConnection
                        ) -> RemotingCommand:
        """GET_BROKER_HA_STATUS (``triomq.broker.admin.core.ha_status``)."""
        replicas, log = self.broker.replicas, self.broker.log
        now, wall = now_ms(), self.broker.clock()
        master = replicas.ha_master
        if master is not None:
            members = master.tracker.sync_state_set
            body = encode_master_ha_info(log.max_offset, [HAConnectionInfo(
                java_socket_address(address), conn.slave_ack_offset,
                conn.slave is not None and conn.slave.broker_id in members,
                conn.transferred.per_second(now), conn.next_transfer_from)
                for address, conn in master.slave_connections()])
        else:
            master_address = replicas.state().master_ha_address
            slave = replicas.ha_slave
            conn = None if slave is None else slave.connection
            if conn is None:
                client = HAClientInfo(master_address, log.max_offset, 0, 0, 0)
            else:
                # The connection's times are trio's clock: as epoch ms, 0 for never.
                def epoch_ms(at: int) -> int:
                    return 0 if at < 0 else wall - (now - at)

                client = HAClientInfo(master_address, log.max_offset,
                                      conn.received.per_second(now),
                                      epoch_ms(conn.last_read_ms), epoch_ms(conn.last_write_ms))
            body = encode_slave_ha_info(client)
        return RemotingCommand.response(body=body)

    def properties(self) -> dict[str, str]:
        broker = self.broker
        host, port = _host_port(broker.node.address or broker.node.name)
        return broker_properties(attrs.asdict(broker.config), Facts(
            broker_id=broker.broker_id, is_master=broker.replicas.is_master,
            listen_host=host, listen_port=port, ha_port=_host_port(broker.ha_address)[1],
            store_root=self.root))

    async def broker_config(self, request: RemotingCommand, peer: RpcConnection
                            ) -> RemotingCommand:
        return RemotingCommand.response(
            ext_fields={"version": dumps(self.config_version.to_json()).decode()},
            body=dump_properties(self.properties()))
