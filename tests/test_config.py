"""Configuration: TOML and in-code construction, with key-path errors."""

import attrs
import pytest

from triomq.broker.config import BrokerConfig
from triomq.config import NodeConfig, StoreConfig
from triomq.controller.core.config import ControllerConfig
from triomq.errors import ConfigError
from triomq.settings import describe, from_mapping, load_toml, positive, setting


def test_toml_round_trip(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text(
        """
name = "b1"
role = "broker"
listen = "tcp://127.0.0.1:0"

[plugins]
disable = ["transport_tcp"]

[store]
scheme = "lmdb"
path = "/data/b1"
options = { segment_size = 1024 }

[transport.options.tcp]
connect_timeout = 2.5
"""
    )
    config = load_toml(NodeConfig, path)
    assert config.name == "b1"
    assert config.role == "broker"
    assert config.plugins.disable == ("transport_tcp",)
    assert config.store == StoreConfig(scheme="lmdb", path="/data/b1",
                                       options={"segment_size": 1024})
    assert config.transport.options == {"tcp": {"connect_timeout": 2.5}}


def test_defaults_when_empty():
    assert from_mapping(NodeConfig, {}) == NodeConfig()


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"nmae": "x"}, "nmae", "unknown key 'nmae'"),
        ({"store": {"scheme": "mmap", "pth": "/x"}}, "store.pth", "unknown key 'pth'"),
        ({"role": "emperor"}, "role",
         "expected one of 'standalone', 'broker', 'controller', 'nameserver' "
         "(no plugin runs role 'emperor')"),
        ({"brokr": {}}, "brokr", "unknown key 'brokr'; known keys: broker, controller, listen"),
        ({"sections": {}}, "sections", "unknown key 'sections'"),
        ({"broker": "broker-a"}, "broker", "expected a table"),
        ({"broker": {"broker_nme": "a"}}, "broker.broker_nme", "unknown key 'broker_nme'"),
        ({"controller": {"node_id": -1}}, "controller.node_id", "must be >= 0"),
        ({"name": ""}, "name", "must not be empty"),
        ({"name": 3}, "name", "expected str"),
        ({"plugins": {"disable": "tcp"}}, "plugins.disable", "expected a list"),
        ({"plugins": {"disable": ["a", 2]}}, "plugins.disable[1]", "expected str"),
        ({"store": "mmap"}, "store", "expected a table"),
        ({"transport": {"options": {"tcp": 1}}}, "transport.options.tcp", "expected a table"),
        ({"log_level": "LOUD"}, "log_level", "expected one of"),
    ],
)
def test_bad_keys_and_values_name_the_key_path(data, path, reason):
    with pytest.raises(ConfigError) as info:
        from_mapping(NodeConfig, data)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")
    assert reason in str(info.value)


def test_values_built_in_code_are_checked_too():
    with pytest.raises(ConfigError, match=r"^name: must not be empty"):
        NodeConfig(name="")
    with pytest.raises(ConfigError, match=r"^role: must not be empty"):
        NodeConfig(role="")
    # A keyword that is no key of the node must be a section object.
    with pytest.raises(ConfigError, match=r"^nmae: neither a key of the node"):
        NodeConfig(nmae="x")


def test_role_sections_come_from_the_role_plugins():
    config = from_mapping(NodeConfig, {"role": "broker", "broker": {"broker_name": "b"}})
    assert config.broker == BrokerConfig(broker_name="b")
    assert config.section("broker") is config.broker
    # A section not given is its defaults.
    assert config.controller == ControllerConfig()
    assert NodeConfig().broker == BrokerConfig()
    with pytest.raises(AttributeError, match="no section 'brokr'; sections: broker, controller"):
        config.section("brokr")


def test_sections_given_in_code_and_evolved():
    config = NodeConfig(name="b1", role="broker", broker=BrokerConfig(broker_name="a"))
    assert config.broker.broker_name == "a"
    evolved = attrs.evolve(config, broker=attrs.evolve(config.broker, broker_name="b"))
    assert (evolved.broker.broker_name, evolved.name) == ("b", "b1")
    assert config.broker.broker_name == "a"
    assert attrs.evolve(config, name="b2").broker is config.broker
    assert config == from_mapping(NodeConfig, {"name": "b1", "role": "broker",
                                               "broker": {"broker_name": "a"}})


def test_a_disabled_plugin_takes_its_section_and_role_along():
    data = {"plugins": {"disable": ["broker"]}, "broker": {}}
    with pytest.raises(ConfigError, match=r"^broker: unknown key 'broker'; known keys: controller"):
        from_mapping(NodeConfig, data)
    with pytest.raises(ConfigError, match=r"^role: expected one of 'standalone', 'controller'"):
        from_mapping(NodeConfig, {"plugins": {"disable": ["broker"]}, "role": "broker"})


def test_numbers_are_checked():
    @attrs.frozen
    class Timeouts:
        connect: float = setting(1.0, doc="seconds", check=positive)
        retries: int = setting(3, doc="count")

    assert from_mapping(Timeouts, {"connect": 2}).connect == 2.0
    with pytest.raises(ConfigError, match=r"^connect: must be > 0, got -1"):
        from_mapping(Timeouts, {"connect": -1})
    with pytest.raises(ConfigError, match=r"^retries: expected an integer, got True"):
        from_mapping(Timeouts, {"retries": True})
    with pytest.raises(ConfigError, match=r"^connect: expected a number"):
        from_mapping(Timeouts, {"connect": "fast"})


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(NodeConfig, tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(NodeConfig, bad)


def test_every_key_is_documented():
    rows = list(describe(NodeConfig))
    keys = [key for key, _, _ in rows]
    assert {"name", "role", "listen", "store.scheme", "store.path", "plugins.disable",
            "broker.broker_name", "controller.node_id"} <= set(keys)
    assert "sections" not in keys
    assert all(doc for _, _, doc in rows), [k for k, _, d in rows if not d]
