"""``[broker]``: a broker replica's identity, its HA replication and its puts.

Keys keep RocketMQ's names in snake_case (``haListenPort`` ->
``ha_listen_port``); times are in milliseconds. The HA keys are converted
to the drivers' own settings by ``master_config()`` / ``slave_config()``.

Static roles (until a controller assigns them): ``broker_id = 0`` is the
master of epoch ``master_epoch``; any other id is a slave of
``ha_master_address``::

    [broker]
    broker_name = "broker-a"
    broker_id = 1
    ha_master_address = "tcp://10.0.0.1:10912"
"""

from __future__ import annotations

from typing import Literal

import attrs

from framework.errors import ConfigError
from framework.ha.master_driver import HAMasterConfig
from framework.ha.slave_driver import HASlaveConfig
from framework.settings import non_negative, one_of, port, positive, setting
from framework.store import FLUSH_POLICIES

__all__ = ["MASTER_ID", "BrokerConfig"]

#: The broker id of the master in static mode (RocketMQ's ``MixAll.MASTER_ID``).
MASTER_ID = 0


def _not_empty(value: str) -> str | None:
    return None if value else "must not be empty"


def _ha_address(value: str) -> str | None:
    if not value:
        return None
    if "://" not in value:
        return "expected 'scheme://location', e.g. 'tcp://10.0.0.1:10912'"
    return None


def _addresses(value: tuple[str, ...]) -> str | None:
    for address in value:
        if "://" not in address:
            return f"{address!r}: expected 'scheme://location' addresses, e.g. 'tcp://10.0.0.1:9878'"
    return None


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else "must be >= 1"


@attrs.frozen
class BrokerConfig:
    """One broker replica: identity, static role, HA replication and synchronous puts."""

    broker_name: str = setting(
        "broker-a", doc="The replica group this broker belongs to (RocketMQ's brokerName).",
        check=_not_empty)
    broker_id: int = setting(
        MASTER_ID, doc="This replica's id in its group; in static mode 0 is the master and "
                       "any other id a slave of ha_master_address.", check=non_negative)
    cluster_name: str = setting(
        "DefaultCluster", doc="The cluster the group belongs to (RocketMQ's brokerClusterName).",
        check=_not_empty)
    store_path_root_dir: str = setting(
        "", doc="Store root: the commit log ('commitlog/', 'consumequeue/') and the "
                "'epochFileCheckpoint' live here; an existing RocketMQ store is reused. "
                "Empty: the node's [store] path.")
    ha_listen_port: int = setting(
        10912, doc="TCP port the HA service accepts slaves on, on the host of the node's "
                   "'listen' address; 0 picks a free port.", check=port)
    ha_listen_address: str = setting(
        "", doc="Explicit HA listen address, e.g. 'inproc://broker-a-ha'; overrides "
                "ha_listen_port. Empty: derived from 'listen' (tcp: its host with "
                "ha_listen_port; other schemes: the listen address plus '-ha').",
        check=_ha_address)
    ha_master_address: str = setting(
        "", doc="The master's HA address a slave replicates from (static mode; required "
                "when broker_id != 0).", check=_ha_address)
    master_epoch: int = setting(
        1, doc="Static mode: the epoch the master serves; raise it when a restarted or new "
               "master starts a new term (never lower than the one recorded).",
        check=_at_least_one)
    ha_transfer_batch_size: int = setting(
        32 * 1024, doc="Largest batch of commit-log bytes in one transfer frame.",
        check=positive)
    ha_send_heartbeat_interval: int = setting(
        200, doc="ms between heartbeats: the master's empty transfers when idle and the "
                 "slave's periodic acks (RocketMQ: 5000).", check=positive)
    ha_max_time_slave_not_catchup: int = setting(
        2000, doc="ms a SyncStateSet member may go without catching up before the master "
                  "shrinks it out (RocketMQ: 15000).", check=positive)
    check_sync_state_set_period: int = setting(
        500, doc="ms between the master's SyncStateSet shrink/expand checks (RocketMQ: 5000).",
        check=positive)
    all_ack_in_sync_state_set: bool = setting(
        False, doc="A put waits for every SyncStateSet member, instead of min_in_sync_replicas.")
    min_in_sync_replicas: int = setting(
        1, doc="Replicas (the master included) that must hold a put before it succeeds; a put "
               "fails at once when the SyncStateSet is smaller.", check=_at_least_one)
    sync_flush_timeout: int = setting(
        5000, doc="ms a put waits for its disk flush and its replication before it answers "
                  "FLUSH_DISK_TIMEOUT or FLUSH_SLAVE_TIMEOUT.", check=positive)
    flush_policy: Literal["group", "interval", "none"] = setting(
        "group", doc="Commit-log fsync: 'group' (a put waits for an fsync shared with the "
                     "puts around it), 'interval' (fsync every flush_interval; a put waits "
                     "for the next one), 'none' (left to the OS). A slave flushes 'group' "
                     "as 'interval'.", check=one_of(*FLUSH_POLICIES))
    flush_interval: int = setting(
        200, doc="ms between fsyncs with flush_policy 'interval' (and on slaves).",
        check=positive)
    is_sync_from_last_file: bool = setting(
        False, doc="An empty slave starts from the master's last segment instead of its "
                   "first byte.")
    is_async_learner: bool = setting(
        False, doc="The slave replicates but never joins the SyncStateSet.")
    ha_max_body_size: int = setting(
        64 * 1024 * 1024, doc="Largest frame body a slave accepts from its master (bytes).",
        check=positive)
    ha_reconnect_min: int = setting(
        100, doc="ms a slave waits before its first reconnect; doubles per failure.",
        check=positive)
    ha_reconnect_max: int = setting(
        5000, doc="ms cap of the slave's reconnect backoff.", check=positive)
    ha_receive_buffer_size: int = setting(
        4 * 1024 * 1024, doc="Bytes of socket receive buffer on a slave's TCP connection to "
                             "its master (SO_RCVBUF, capped by net.core.rmem_max; 0: the "
                             "kernel's autotuning, for links whose bandwidth-delay product "
                             "is larger).", check=non_negative)

    enable_controller_mode: bool = setting(
        False, doc="Take the role from the controllers: they allocate the broker id and "
                   "elect the master (broker_id, ha_master_address, master_epoch unused).")
    controller_addresses: tuple[str, ...] = setting(
        (), doc="RPC addresses of the controllers (controller mode), e.g. "
                "['tcp://10.0.0.1:9878', 'tcp://10.0.0.2:9878'].", check=_addresses)
    broker_heartbeat_interval: int = setting(
        100, doc="ms between heartbeats (with live info) to every controller (RocketMQ: "
                 "1000).", check=positive)
    controller_heartbeat_timeout: int = setting(
        0, doc="ms of silence after which the controllers count this broker inactive, sent "
               "with each heartbeat; 0: the controllers' broker_not_active_timeout "
               "(RocketMQ's controllerHeartBeatTimeoutMills).", check=non_negative)
    sync_controller_metadata_period: int = setting(
        500, doc="ms between polls of the controller for the group's master and "
                 "SyncStateSet, in case a notification was missed (RocketMQ's "
                 "syncBrokerMetadataPeriod: 5000).", check=positive)
    election_priority: int = setting(
        0, doc="Among equally up-to-date replicas a smaller value is elected first "
               "(RocketMQ's brokerElectionPriority).", check=non_negative)

    def __attrs_post_init__(self) -> None:
        if self.enable_controller_mode and not self.controller_addresses:
            raise ConfigError("required in controller mode", "controller_addresses")
        if (self.broker_id != MASTER_ID and not self.ha_master_address
                and not self.enable_controller_mode):
            raise ConfigError(
                f"required for a slave (broker_id = {self.broker_id})", "ha_master_address")
        if self.ha_reconnect_max < self.ha_reconnect_min:
            raise ConfigError(
                f"must be >= ha_reconnect_min ({self.ha_reconnect_min}), "
                f"got {self.ha_reconnect_max}", "ha_reconnect_max")

    @property
    def is_master(self) -> bool:
        """Static mode: this broker starts as its group's master."""
        return self.broker_id == MASTER_ID

    def master_config(self) -> HAMasterConfig:
        """The HA master driver's settings."""
        return HAMasterConfig(
            ha_transfer_batch_size=self.ha_transfer_batch_size,
            ha_send_heartbeat_interval=self.ha_send_heartbeat_interval,
            ha_max_time_slave_not_catchup=self.ha_max_time_slave_not_catchup,
            check_sync_state_set_period=self.check_sync_state_set_period,
            all_ack_in_sync_state_set=self.all_ack_in_sync_state_set,
            min_in_sync_replicas=self.min_in_sync_replicas,
        )

    def slave_config(self) -> HASlaveConfig:
        """The HA slave driver's settings."""
        return HASlaveConfig(
            is_sync_from_last_file=self.is_sync_from_last_file,
            is_async_learner=self.is_async_learner,
            ha_send_heartbeat_interval=self.ha_send_heartbeat_interval,
            max_body_size=self.ha_max_body_size,
            reconnect_min=self.ha_reconnect_min,
            reconnect_max=self.ha_reconnect_max,
            receive_buffer_size=self.ha_receive_buffer_size,
        )
