"""GET_BROKER_RUNTIME_INFO's table: a broker's role, offsets, replication and store. Pure.

RocketMQ answers GET_BROKER_RUNTIME_INFO (28) with a ``KVTable`` (``{"table":
{...}}``, string keys and values) built by ``AdminBrokerProcessor.prepareRuntimeInfo``;
``mqadmin brokerStatus`` prints it and ``mqadmin clusterList`` reads it. triomq
keeps RocketMQ's key names where it has the value, and adds its own for
replication, which RocketMQ serves apart (``HARuntimeInfo``, the controller's
SyncStateSet). The message counts and rates are ``triomq.broker.admin.core.store_stats``';
here:

- ``runtime_table``, RocketMQ's: ``commitLogMinOffset``, ``commitLogMaxOffset``
  (the store's), ``brokerClusterName``, ``brokerName``, ``brokerId`` (0 on a
  master: RocketMQ's controller mode gives its master id 0 too), ``brokerRole``
  (``MASTER``, ``SLAVE``, ``NONE`` during a change), ``haServerAddr``,
  ``haMasterAddress`` (a slave's master, empty on a master),
  ``enableControllerMode``, ``masterEpoch``, ``confirmOffset``;
- HARuntimeInfo's names: ``inSyncSlaveNums`` and ``haConnectionInfo``, a
  JSON array of the master's slaves (``slaveAckOffset``, ``diff``,
  ``inSync``, and triomq's ``brokerId``, ``connections`` and
  ``asyncLearner``: the slave is known by the broker id its handshake
  names, as RocketMQ 5.3's master knows it);
- triomq's: ``syncStateSet``, the broker ids the master counts acks over,
  comma-separated and sorted (empty on a slave);
- ``store_table``, RocketMQ's: ``brokerVersionDesc`` / ``brokerVersion`` (the
  RocketMQ version whose protocol triomq speaks, ``V5_3_3``),
  ``earliestMessageTimeStamp`` (the store time of the commit log's first
  record, -1 when it is empty), ``commitLogDiskRatio`` (and
  ``commitLogDiskRatio_<commit-log path>``, ``consumeQueueDiskRatio``) and
  ``commitLogDirCapacity`` from the store's partition (``DiskSpace``;
  RocketMQ's rounding and byte units), ``remainHowManyDataToFlush``,
  ``dispatchBehindBytes`` (what the message index has yet to read),
  ``brokerActive`` (true on a master: RocketMQ runs its special services
  there), and the timer wheel's ``timerReadBehind``, ``timerOffsetBehind``,
  ``timerCongestNum``, ``timerEnqueueTps`` and ``timerDequeueTps`` while it runs
  (``timer_table``; at zero, as RocketMQ gives them with its timer store
  off, when it does not: a slave, ``timer_wheel_enable`` off). triomq has
  no request thread pools and no transient store pool: their queue sizes,
  capacities and head wait times are 0,
  ``remainTransientStoreBufferNumbs`` is RocketMQ's "no pool" value
  (``Integer.MAX_VALUE``); a put appends in the event loop holding no page
  cache lock, so ``pageCacheLockTimeMills`` is 0; and no send is held back
  at start-up (``startAcceptSendRequestTimeStamp`` 0).

``triomq.broker.admin.runtime_info`` answers the request from a running broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import ROUND_HALF_UP, Decimal

import attrs

from triomq.broker.admin.core.store_stats import java_double
from triomq.protocol.remoting import ROCKETMQ_VERSION, ROCKETMQ_VERSION_DESC

__all__ = ["DiskSpace", "ReplicaAck", "disk_used_ratio", "human_bytes", "runtime_table",
           "store_table", "timer_table"]

#: RocketMQ's runtime keys for its request thread pools and their queues.
_THREAD_POOL_KEYS = (
    "sendThreadPoolQueueSize", "sendThreadPoolQueueCapacity", "pullThreadPoolQueueSize",
    "pullThreadPoolQueueCapacity", "litePullThreadPoolQueueSize",
    "litePullThreadPoolQueueCapacity", "queryThreadPoolQueueSize",
    "queryThreadPoolQueueCapacity", "ackThreadPoolQueueSize", "ackThreadPoolQueueCapacity",
    "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueHeadWaitTimeMills", "litePullThreadPoolQueueHeadWaitTimeMills",
    "ackThreadPoolQueueHeadWaitTimeMills", "EndTransactionQueueSize",
    "EndTransactionThreadPoolQueueCapacity")
#: RocketMQ's values when its timer store (timerWheelEnable) is off.
_TIMER_OFF = {"timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "0",
              "timerEnqueueTps": "0.0", "timerDequeueTps": "0.0"}
#: ``remainTransientStoreBufferNumbs`` without a transient store pool.
_NO_TRANSIENT_POOL = str(2**31 - 1)


@attrs.frozen
class ReplicaAck:
    """A slave as the master sees it: its broker id and how far it acked."""

    broker_id: int
    ack_offset: int
    connections: int
    is_async_learner: bool = False


def runtime_table(*, cluster_name: str, broker_name: str, broker_id: int, role: str,
                  master_epoch: int, min_offset: int, max_offset: int, confirm_offset: int,
                  ha_address: str, master_ha_address: str, sync_state_set: Iterable[int],
                  slaves: Iterable[ReplicaAck], controller_mode: bool) -> dict[str, str]:
    """The KVTable's table (see the module); ``role`` is ``master``, ``slave`` or ``none``."""
    members = sorted(sync_state_set)
    connections = [{"brokerId": s.broker_id, "slaveAckOffset": s.ack_offset,
                    "diff": max(0, max_offset - s.ack_offset) if s.ack_offset >= 0 else -1,
                    "inSync": s.broker_id in members, "connections": s.connections,
                    "asyncLearner": s.is_async_learner}
                   for s in sorted(slaves, key=lambda s: s.broker_id)]
    is_master = role == "master"
    return {
        "brokerClusterName": cluster_name,
        "brokerName": broker_name,
        "brokerId": "0" if is_master else str(broker_id),
        "brokerRole": role.upper(),
        "enableControllerMode": str(controller_mode).lower(),
        "masterEpoch": str(master_epoch),
        "commitLogMinOffset": str(min_offset),
        "commitLogMaxOffset": str(max_offset),
        "confirmOffset": str(confirm_offset),
        "haServerAddr": ha_address,
        "haMasterAddress": "" if is_master else master_ha_address,
        "syncStateSet": ",".join(map(str, members)),
        "inSyncSlaveNums": str(sum(1 for c in connections if c["inSync"])),
        "haConnectionInfo": json.dumps(connections),
    }


@attrs.frozen
class DiskSpace:
    """A partition's bytes, as Java's ``File`` gives them: all, free, usable by us."""

    total: int
    free: int
    usable: int


def disk_used_ratio(space: DiskSpace | None) -> float:
    """The share of the partition in use, rounded up to hundredths, as RocketMQ's
    ``getDiskPartitionSpaceUsedPercent`` counts it; -1 when it cannot be measured."""
    if space is None or space.total <= 0:
        return -1.0
    used = space.total - space.free
    entire = used + space.usable
    if entire <= 0:
        return -1.0
    return -(-used * 100 // entire) / 100.0


def human_bytes(count: int) -> str:
    """``count`` bytes in binary units, as RocketMQ's ``humanReadableByteCount`` writes them."""
    if count < 1024:
        return f"{count} B"
    exponent = min(6, (count.bit_length() - 1) // 10)
    # Java rounds the shortest decimal digits of the double half up: so does this.
    value = Decimal(repr(count / 1024**exponent)).quantize(Decimal("0.1"), ROUND_HALF_UP)
    return f"{value} {'KMGTPE'[exponent - 1]}iB"


def timer_table(values: Mapping[str, int | float] | None) -> dict[str, str]:
    """The ``timer*`` keys from the wheel's values (None: no wheel runs), written as
    RocketMQ writes a long and a double."""
    if values is None:
        return dict(_TIMER_OFF)
    return {key: java_double(float(values[key])) if key.endswith("Tps")
            else str(int(values[key])) for key in _TIMER_OFF}


def store_table(*, earliest_message_time: int, disk: DiskSpace | None, commit_log_path: str,
                flush_behind: int, dispatch_behind: int, is_master: bool,
                timer: Mapping[str, int | float] | None = None) -> dict[str, str]:
    """The store's and the host's keys (see the module); ``timer``: the wheel's values
    while it runs."""
    ratio = java_double(disk_used_ratio(disk))
    table = {
        "brokerVersionDesc": ROCKETMQ_VERSION_DESC,
        "brokerVersion": str(ROCKETMQ_VERSION),
        "brokerActive": str(is_master).lower(),
        "earliestMessageTimeStamp": str(earliest_message_time),
        "startAcceptSendRequestTimeStamp": "0",
        "dispatchBehindBytes": str(max(0, dispatch_behind)),
        "pageCacheLockTimeMills": "0",
        "remainTransientStoreBufferNumbs": _NO_TRANSIENT_POOL,
        "remainHowManyDataToFlush": human_bytes(max(0, flush_behind)),
        "commitLogDiskRatio": ratio,
        f"commitLogDiskRatio_{commit_log_path}": ratio,
        "consumeQueueDiskRatio": ratio,
        **timer_table(timer),
        **dict.fromkeys(_THREAD_POOL_KEYS, "0"),
    }
    if disk is not None:
        table["commitLogDirCapacity"] = (f"Total : {human_bytes(disk.total)}, "
                                         f"Free : {human_bytes(disk.free)}.")
    return table
