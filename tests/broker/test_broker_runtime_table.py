"""GET_BROKER_RUNTIME_INFO's table built from plain values (``triomq.broker.runtime_table``)."""

from __future__ import annotations

import json

from triomq.broker.runtime_table import SlaveConnection, runtime_table

COMMON = {"cluster_name": "DefaultCluster", "broker_name": "broker-a", "min_offset": 0,
          "max_offset": 500, "ha_address": "tcp://10.0.0.1:10912", "controller_mode": False}


def test_a_master_lists_its_slaves_and_which_are_in_sync() -> None:
    table = runtime_table(
        **COMMON, broker_id=0, role="master", master_epoch=3, confirm_offset=400,
        master_ha_address="", sync_state_set={"tcp://b:1", "tcp://a:1"},
        slaves=[SlaveConnection("tcp://c:1", -1, 1, is_async_learner=True),
                SlaveConnection("tcp://b:1", 400, 2)])
    assert {k: table[k] for k in ("brokerRole", "brokerId", "masterEpoch", "confirmOffset",
                                  "commitLogMinOffset", "commitLogMaxOffset", "syncStateSet",
                                  "inSyncSlaveNums", "haMasterAddress",
                                  "enableControllerMode")} == {
        "brokerRole": "MASTER", "brokerId": "0", "masterEpoch": "3", "confirmOffset": "400",
        "commitLogMinOffset": "0", "commitLogMaxOffset": "500",
        "syncStateSet": "tcp://a:1,tcp://b:1", "inSyncSlaveNums": "1", "haMasterAddress": "",
        "enableControllerMode": "false"}
    assert json.loads(table["haConnectionInfo"]) == [
        {"addr": "tcp://b:1", "slaveAckOffset": 400, "diff": 100, "inSync": True,
         "connections": 2, "asyncLearner": False},
        {"addr": "tcp://c:1", "slaveAckOffset": -1, "diff": -1, "inSync": False,
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
