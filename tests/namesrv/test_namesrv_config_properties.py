"""GET_NAMESRV_CONFIG's and UPDATE_NAMESRV_CONFIG's properties, pure."""

from __future__ import annotations

import attrs
import pytest

from triomq.namesrv.config import NamesrvConfig
from triomq.namesrv.core.config_properties import (
    ROCKETMQ_NAMES,
    TRIOMQ_ONLY,
    NamesrvFacts,
    UpdateRefused,
    namesrv_properties,
    updated,
)

FACTS = NamesrvFacts(listen_port=9876, kv_config_path="/data/ns/kvConfig.json")

#: RocketMQ 5.3.3's NamesrvConfig fields, as its source declares them.
NAMESRV_CONFIG_FIELDS = {
    "rocketmqHome", "kvConfigPath", "configStorePath", "productEnvName", "clusterTest",
    "orderMessageEnable", "returnOrderTopicConfigToBroker", "clientRequestThreadPoolNums",
    "defaultThreadPoolNums", "clientRequestThreadPoolQueueCapacity",
    "defaultThreadPoolQueueCapacity", "scanNotActiveBrokerInterval",
    "unRegisterBrokerQueueCapacity", "supportActingMaster", "enableAllTopicList",
    "enableTopicList", "notifyMinBrokerIdChanged", "enableControllerInNamesrv",
    "needWaitForService", "waitSecondsForService", "deleteTopicWithBrokerRegistration",
    "configBlackList"}


def test_every_setting_is_named_for_rocketmq_or_listed_as_triomqs_own() -> None:
    fields = {f.name for f in attrs.fields(NamesrvConfig)}
    assert set(ROCKETMQ_NAMES) | TRIOMQ_ONLY == fields
    assert not set(ROCKETMQ_NAMES) & TRIOMQ_ONLY
    assert set(ROCKETMQ_NAMES.values()) <= NAMESRV_CONFIG_FIELDS


def test_properties_take_rocketmqs_names_and_forms() -> None:
    config = NamesrvConfig(scan_not_active_broker_interval=500, order_message_enable=True)
    assert namesrv_properties(config, FACTS) == {
        "scanNotActiveBrokerInterval": "500", "supportActingMaster": "false",
        "deleteTopicWithBrokerRegistration": "false", "enableAllTopicList": "true",
        "enableTopicList": "true", "orderMessageEnable": "true",
        "returnOrderTopicConfigToBroker": "true", "listenPort": "9876",
        "kvConfigPath": "/data/ns/kvConfig.json"}
    # A name server keeping its KV config in memory has no path to show.
    assert "kvConfigPath" not in namesrv_properties(config, NamesrvFacts())


def test_an_update_changes_the_named_settings_only() -> None:
    config = updated(NamesrvConfig(), {"orderMessageEnable": "true",
                                       "scanNotActiveBrokerInterval": " 2000 "}, FACTS)
    assert config == NamesrvConfig(order_message_enable=True,
                                   scan_not_active_broker_interval=2000)
    assert updated(config, {}, FACTS) == config


@pytest.mark.parametrize("name", ["kvConfigPath", "configStorePath", "configBlackList",
                                  "rocketmqHome"])
def test_black_listed_names_are_refused_as_rocketmq_refuses_them(name: str) -> None:
    with pytest.raises(UpdateRefused) as refused:
        updated(NamesrvConfig(), {name: "/tmp/x", "orderMessageEnable": "true"}, FACTS)
    assert refused.value.black_listed
    assert refused.value.remark == "Can not update config in black list."


@pytest.mark.parametrize(("properties", "says"), [
    ({"listenPort": "1"}, "read-only while the name server runs: listenPort"),
    ({"clusterTest": "true", "productEnvName": "x"}, "unknown name server config: "
                                                     "clusterTest, productEnvName"),
    ({"orderMessageEnable": "yes"}, "orderMessageEnable: expected true or false"),
    ({"scanNotActiveBrokerInterval": "soon"}, "scanNotActiveBrokerInterval: expected an "
                                              "integer"),
    ({"scanNotActiveBrokerInterval": "0"}, "scanNotActiveBrokerInterval"),
])
def test_what_cannot_be_applied_is_refused_naming_it(properties: dict[str, str],
                                                     says: str) -> None:
    with pytest.raises(UpdateRefused) as refused:
        updated(NamesrvConfig(), properties, FACTS)
    assert not refused.value.black_listed
    assert says in refused.value.remark
