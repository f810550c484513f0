"""``[broker]``: parsing, key-path errors, conversion to the HA drivers' settings."""

from __future__ import annotations

import tomllib

import pytest

from triomq.broker.config import BrokerConfig
from triomq.config import NodeConfig, describe, from_mapping
from triomq.errors import ConfigError
from triomq.ha.master_driver import HAMasterConfig
from triomq.ha.slave_driver import HASlaveConfig


def node(text: str) -> NodeConfig:
    return from_mapping(NodeConfig, tomllib.loads(text))


def test_a_slave_from_toml():
    config = node("""
role = "broker"
[broker]
broker_name = "broker-b"
broker_id = 2
ha_master_address = "tcp://10.0.0.1:10912"
all_ack_in_sync_state_set = true
ha_max_time_slave_not_catchup = 900
is_async_learner = true
""").broker
    assert (config.broker_name, config.broker_id, config.is_master) == ("broker-b", 2, False)
    assert config.master_config() == HAMasterConfig(
        all_ack_in_sync_state_set=True, ha_max_time_slave_not_catchup=900)
    assert config.slave_config() == HASlaveConfig(is_async_learner=True)


def test_defaults_map_to_the_drivers_defaults():
    config = BrokerConfig()
    assert config.is_master
    assert config.master_config() == HAMasterConfig()
    assert config.slave_config() == HASlaveConfig()


@pytest.mark.parametrize(("text", "path", "reason"), [
    ("[broker]\nha_listen_prot = 1", "broker.ha_listen_prot", "unknown key"),
    ("[broker]\nmin_in_sync_replicas = 0", "broker.min_in_sync_replicas", "must be >= 1"),
    ("[broker]\nha_listen_port = 70000", "broker.ha_listen_port", "port number"),
    ("[broker]\nbroker_id = -1", "broker.broker_id", "must be >= 0"),
    ("[broker]\nbroker_id = 1", "broker.ha_master_address", "required for a slave"),
    ("[broker]\nbroker_id = 1\nha_master_address = '10.0.0.1:10912'",
     "broker.ha_master_address", "scheme://location"),
    ("[broker]\nflush_policy = 'sometimes'", "broker.flush_policy", "expected one of"),
    ("[broker]\nsync_flush_timeout = 'soon'", "broker.sync_flush_timeout", "expected int"),
    ("[broker]\nmaster_epoch = 0", "broker.master_epoch", "must be >= 1"),
    ("[broker]\nha_reconnect_min = 900\nha_reconnect_max = 100", "broker.ha_reconnect_max",
     "must be >= ha_reconnect_min"),
])
def test_bad_keys_and_values_name_their_key_path(text, path, reason):
    with pytest.raises(ConfigError) as info:
        node(text)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")
    assert reason in str(info.value)


def test_every_key_is_documented():
    rows = [row for row in describe(NodeConfig) if row[0].startswith("broker.")]
    assert len(rows) == len(BrokerConfig.__attrs_attrs__)
    assert all(doc for _key, _default, doc in rows)
