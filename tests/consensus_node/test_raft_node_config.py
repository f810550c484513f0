"""RaftConfig: defaults, TOML-shaped input, and errors naming the key."""

from __future__ import annotations

import pytest

from triomq.consensus.core.config import RaftConfig
from triomq.errors import ConfigError
from triomq.settings import describe, from_mapping


def test_from_toml_shaped_mapping():
    config = from_mapping(RaftConfig, {
        "node_id": 2,
        "peers": {"1": "tcp://10.0.0.1:9870", "2": "tcp://10.0.0.2:9870"},
        "store_scheme": "lmdb", "fsync": False, "election_ticks": 12,
    })
    assert config.peers == {1: "tcp://10.0.0.1:9870", 2: "tcp://10.0.0.2:9870"}
    assert config.founders() == (1, 2)
    assert config.raft_config().election_ticks == 12
    assert config.tick_interval == 0.05


def test_defaults_aim_at_sub_second_failover():
    config = RaftConfig(node_id=1)
    worst_election_timeout = (2 * config.election_ticks - 1) * config.tick_interval
    assert worst_election_timeout < 1.0
    assert all(doc for _, _, doc in describe(RaftConfig))


@pytest.mark.parametrize(("data", "path"), [
    ({"node_id": 0}, "node_id"),
    ({"node_id": 1, "peers": {"x": "tcp://a:1"}}, "peers.x"),
    ({"node_id": 1, "peers": {"2": "nowhere"}}, "peers.2"),
    ({"node_id": 1, "heartbeat_ticks": 8}, "heartbeat_ticks"),
    ({"node_id": 1, "members": [5]}, "members"),
    ({"node_id": 1, "tick_interval_ms": 0}, "tick_interval_ms"),
    ({"node_id": 1, "snapshot_entries": -1}, "snapshot_entries"),
])
def test_bad_values_name_their_key(data, path):
    with pytest.raises(ConfigError) as caught:
        from_mapping(RaftConfig, data)
    assert caught.value.path == path
