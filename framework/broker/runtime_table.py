"""GET_BROKER_RUNTIME_INFO's table: a broker's role, offsets and replication. Pure.

RocketMQ answers GET_BROKER_RUNTIME_INFO (28) with a ``KVTable`` (``{"table":
{...}}``, string keys and values) built by ``AdminBrokerProcessor.prepareRuntimeInfo``;
``mqadmin brokerStatus`` prints it. triomq keeps RocketMQ's key names where it
has the value, and adds its own for replication, which RocketMQ serves apart
(``HARuntimeInfo``, the controller's SyncStateSet):

- RocketMQ's: ``commitLogMinOffset``, ``commitLogMaxOffset`` (the store's),
  ``brokerClusterName``, ``brokerName``, ``brokerId``, ``brokerRole``
  (``MASTER``, ``SLAVE``, ``NONE`` during a change), ``haServerAddr``,
  ``haMasterAddress`` (a slave's master, empty on a master),
  ``enableControllerMode``, ``masterEpoch``, ``confirmOffset``;
- HARuntimeInfo's names: ``inSyncSlaveNums`` and ``haConnectionInfo``, a
  JSON array of the master's slaves (``addr``, ``slaveAckOffset``,
  ``diff``, ``inSync``, and triomq's ``connections`` and ``asyncLearner``);
- triomq's: ``syncStateSet``, the replica addresses the master counts acks
  over, comma-separated and sorted (empty on a slave).

``triomq.broker.runtime_info`` answers the request from a running broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import attrs

__all__ = ["SlaveConnection", "runtime_table"]


@attrs.frozen
class SlaveConnection:
    """A slave as the master sees it: its replica address and how far it acked."""

    address: str
    ack_offset: int
    connections: int
    is_async_learner: bool = False


def runtime_table(*, cluster_name: str, broker_name: str, broker_id: int, role: str,
                  master_epoch: int, min_offset: int, max_offset: int, confirm_offset: int,
                  ha_address: str, master_ha_address: str, sync_state_set: Iterable[str],
                  slaves: Iterable[SlaveConnection], controller_mode: bool) -> dict[str, str]:
    """The KVTable's table (see the module); ``role`` is ``master``, ``slave`` or ``none``."""
    members = sorted(sync_state_set)
    connections = [{"addr": s.address, "slaveAckOffset": s.ack_offset,
                    "diff": max(0, max_offset - s.ack_offset) if s.ack_offset >= 0 else -1,
                    "inSync": s.address in members, "connections": s.connections,
                    "asyncLearner": s.is_async_learner}
                   for s in sorted(slaves, key=lambda s: s.address)]
    is_master = role == "master"
    return {
        "brokerClusterName": cluster_name,
        "brokerName": broker_name,
        "brokerId": str(broker_id),
        "brokerRole": role.upper(),
        "enableControllerMode": str(controller_mode).lower(),
        "masterEpoch": str(master_epoch),
        "commitLogMinOffset": str(min_offset),
        "commitLogMaxOffset": str(max_offset),
        "confirmOffset": str(confirm_offset),
        "haServerAddr": ha_address,
        "haMasterAddress": "" if is_master else master_ha_address,
        "syncStateSet": ",".join(members),
        "inSyncSlaveNums": str(sum(1 for c in connections if c["inSync"])),
        "haConnectionInfo": json.dumps(connections),
    }
