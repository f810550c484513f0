"""GET_BROKER_CONFIG's body: ``[broker]`` settings under RocketMQ's names."""

from __future__ import annotations

import attrs

from triomq.broker.config import BrokerConfig
from triomq.broker.core.config_properties import (
    ROCKETMQ_NAMES,
    TRIOMQ_ONLY,
    Facts,
    broker_properties,
)

FACTS = Facts(broker_id=2, is_master=False, listen_host="10.0.0.1", listen_port=10911,
              ha_port=10912, store_root="/data/broker-a")


def test_every_setting_is_named_for_rocketmq_or_listed_as_triomqs_own() -> None:
    fields = {f.name for f in attrs.fields(BrokerConfig)}
    assert set(ROCKETMQ_NAMES) | TRIOMQ_ONLY == fields
    assert not set(ROCKETMQ_NAMES) & TRIOMQ_ONLY
    assert len(set(ROCKETMQ_NAMES.values())) == len(ROCKETMQ_NAMES)


def test_values_take_rocketmqs_forms() -> None:
    config = BrokerConfig(
        broker_id=2, enable_controller_mode=True,
        controller_addresses=("tcp://10.0.0.1:9878", "tcp://10.0.0.2:9878"),
        namesrv_addr=("10.0.0.1:9876", "10.0.0.2:9876"), slave_read_enable=True,
        flush_policy="none")
    properties = broker_properties(attrs.asdict(config), FACTS)
    assert {k: properties[k] for k in (
        "brokerName", "brokerClusterName", "brokerId", "brokerRole", "brokerIP1",
        "listenPort", "haListenPort", "controllerAddr", "namesrvAddr", "slaveReadEnable",
        "flushDiskType", "storePathRootDir", "storePathCommitLog", "maxMessageSize",
        "haMasterAddress")} == {
        "brokerName": "broker-a", "brokerClusterName": "DefaultCluster", "brokerId": "2",
        "brokerRole": "SLAVE", "brokerIP1": "10.0.0.1", "listenPort": "10911",
        "haListenPort": "10912", "controllerAddr": "10.0.0.1:9878;10.0.0.2:9878",
        "namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876", "slaveReadEnable": "true",
        "flushDiskType": "ASYNC_FLUSH", "storePathRootDir": "/data/broker-a",
        "storePathCommitLog": "/data/broker-a/commitlog", "maxMessageSize": "4194304",
        "haMasterAddress": ""}
    assert "masterEpoch" not in properties and "master_epoch" not in properties


def test_a_master_is_id_0_and_sync_master() -> None:
    properties = broker_properties(attrs.asdict(BrokerConfig(
        enable_controller_mode=True, controller_addresses=("tcp://c:1",))),
        attrs.evolve(FACTS, is_master=True))
    assert (properties["brokerId"], properties["brokerRole"], properties["flushDiskType"]) == (
        "0", "SYNC_MASTER", "SYNC_FLUSH")

