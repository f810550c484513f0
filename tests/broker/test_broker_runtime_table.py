"""GET_BROKER_RUNTIME_INFO's table built from plain values
(``triomq.broker.admin.core.runtime_table``)."""

from __future__ import annotations

import json

import pytest
from test_consume_stats_core import T0, QueueLog

from triomq.broker.admin.core.runtime_table import (
    DiskSpace,
    ReplicaAck,
    disk_used_ratio,
    human_bytes,
    runtime_table,
    store_table,
    timer_table,
)
from triomq.broker.admin.runtime_info import earliest_message_time

COMMON = {"cluster_name": "DefaultCluster", "broker_name": "broker-a", "min_offset": 0,
          "max_offset": 500, "ha_address": "tcp://10.0.0.1:10912", "controller_mode": False}


def test_a_master_lists_its_slaves_and_which_are_in_sync() -> None:
    table = runtime_table(
        **COMMON, broker_id=0, role="master", master_epoch=3, confirm_offset=400,
        master_ha_address="", sync_state_set={1, 0},
        slaves=[ReplicaAck(2, -1, 1, is_async_learner=True), ReplicaAck(1, 400, 2)])
    assert {k: table[k] for k in ("brokerRole", "brokerId", "masterEpoch", "confirmOffset",
                                  "commitLogMinOffset", "commitLogMaxOffset", "syncStateSet",
                                  "inSyncSlaveNums", "haMasterAddress",
                                  "enableControllerMode")} == {
        "brokerRole": "MASTER", "brokerId": "0", "masterEpoch": "3", "confirmOffset": "400",
        "commitLogMinOffset": "0", "commitLogMaxOffset": "500",
        "syncStateSet": "0,1", "inSyncSlaveNums": "1", "haMasterAddress": "",
        "enableControllerMode": "false"}
    assert json.loads(table["haConnectionInfo"]) == [
        {"brokerId": 1, "slaveAckOffset": 400, "diff": 100, "inSync": True,
         "connections": 2, "asyncLearner": False},
        {"brokerId": 2, "slaveAckOffset": -1, "diff": -1, "inSync": False,
         "connections": 1, "asyncLearner": True}]
    assert all(isinstance(v, str) for v in table.values())  # a KVTable holds strings only


def test_a_slave_names_its_master_and_no_set() -> None:
    table = runtime_table(**COMMON, broker_id=2, role="slave", master_epoch=3,
                          confirm_offset=380, master_ha_address="tcp://10.0.0.9:10912",
                          sync_state_set=(), slaves=())
    assert table["brokerRole"] == "SLAVE" and table["brokerId"] == "2"
    assert table["haMasterAddress"] == "tcp://10.0.0.9:10912"
    assert table["syncStateSet"] == "" and table["haConnectionInfo"] == "[]"
    assert table["inSyncSlaveNums"] == "0"


def test_a_master_is_id_0_whatever_id_the_controllers_gave_it() -> None:
    # RocketMQ's controller mode sets its master's brokerId to 0 (changeToMaster).
    table = runtime_table(**{**COMMON, "controller_mode": True}, broker_id=3, role="master",
                          master_epoch=2, confirm_offset=500, master_ha_address="",
                          sync_state_set=(), slaves=())
    assert table["brokerId"] == "0"


# -- the store's and the host's keys --------------------------------------------------------

STORE = {"earliest_message_time": 1_700_000_000_000, "commit_log_path": "/s/commitlog",
         "flush_behind": 0, "dispatch_behind": 0, "is_master": True}


def test_the_store_keys_clusterlist_reads() -> None:
    disk = DiskSpace(total=100 * 2**30, free=47 * 2**30, usable=40 * 2**30)
    table = store_table(**{**STORE, "flush_behind": 1536, "dispatch_behind": 20}, disk=disk)
    assert {k: table[k] for k in (
        "brokerVersionDesc", "brokerVersion", "brokerActive", "earliestMessageTimeStamp",
        "commitLogDiskRatio", "commitLogDiskRatio_/s/commitlog", "consumeQueueDiskRatio",
        "commitLogDirCapacity", "remainHowManyDataToFlush", "dispatchBehindBytes",
        "pageCacheLockTimeMills", "remainTransientStoreBufferNumbs")} == {
        "brokerVersionDesc": "V5_3_3", "brokerVersion": "479", "brokerActive": "true",
        "earliestMessageTimeStamp": "1700000000000",
        # 53 GiB used of the 93 GiB the broker may use: 56.99 %, rounded up.
        "commitLogDiskRatio": "0.57", "commitLogDiskRatio_/s/commitlog": "0.57",
        "consumeQueueDiskRatio": "0.57",
        "commitLogDirCapacity": "Total : 100.0 GiB, Free : 47.0 GiB.",
        "remainHowManyDataToFlush": "1.5 KiB", "dispatchBehindBytes": "20",
        "pageCacheLockTimeMills": "0", "remainTransientStoreBufferNumbs": "2147483647"}
    # No thread pools, no timer wheel running: RocketMQ's keys, at zero.
    assert table["sendThreadPoolQueueSize"] == table["pullThreadPoolQueueHeadWaitTimeMills"] \
        == table["EndTransactionThreadPoolQueueCapacity"] == table["timerReadBehind"] == "0"
    assert table["timerEnqueueTps"] == table["timerDequeueTps"] == "0.0"
    assert all(isinstance(v, str) for v in table.values())


def test_a_running_timer_wheel_gives_its_values_as_rocketmq_writes_them() -> None:
    table = store_table(**STORE, disk=None, timer={
        "timerReadBehind": 2, "timerOffsetBehind": 5, "timerCongestNum": 1000,
        "timerEnqueueTps": 12.5, "timerDequeueTps": 0})
    assert {k: v for k, v in table.items() if k.startswith("timer")} == {
        "timerReadBehind": "2", "timerOffsetBehind": "5", "timerCongestNum": "1000",
        "timerEnqueueTps": "12.5", "timerDequeueTps": "0.0"}
    assert timer_table(None)["timerCongestNum"] == "0"


def test_a_slave_is_not_active_and_an_unmeasured_disk_is_minus_one() -> None:
    table = store_table(**{**STORE, "is_master": False, "earliest_message_time": -1},
                        disk=None)
    assert (table["brokerActive"], table["earliestMessageTimeStamp"]) == ("false", "-1")
    assert table["commitLogDiskRatio"] == "-1.0" and "commitLogDirCapacity" not in table


@pytest.mark.parametrize(("count", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    # Java's %.1f rounds the shortest digits half up: 1.25 GiB is 1.3 GiB.
    (int(1.25 * 2**30), "1.3 GiB"), (10**12, "931.3 GiB"), (2**60, "1.0 EiB"),
])
def test_byte_counts_in_rocketmqs_binary_units(count: int, text: str) -> None:
    assert human_bytes(count) == text


def test_the_used_ratio_rounds_up_to_hundredths() -> None:
    assert disk_used_ratio(DiskSpace(100, 50, 50)) == 0.5
    assert disk_used_ratio(DiskSpace(300, 200, 200)) == 0.34  # 33.3 % up to 34 %
    assert disk_used_ratio(DiskSpace(0, 0, 0)) == -1.0


def test_the_earliest_message_is_the_first_records_store_time() -> None:
    log = QueueLog()
    assert earliest_message_time(log) == -1  # an empty log
    log.put("orders", 0, T0, born_host=("::1", 9))  # an IPv6 born host moves the field
    log.put("orders", 0, T0 + 5)
    assert earliest_message_time(log) == T0
    log.min_offset = log.queues[("orders", 0)][1][1]  # retention took the first record
    assert earliest_message_time(log) == T0 + 5
