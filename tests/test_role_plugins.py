"""A role is a plugin: it brings its own config section and role name; the kernel knows none."""

import attrs
import pytest
import trio

from triomq import NodeConfig, PluginManager, hookimpl, open_node
from triomq.cli import build_parser
from triomq.config import StoreConfig
from triomq.errors import ConfigError, PluginError
from triomq.settings import from_mapping, positive, setting


@attrs.frozen
class EchoConfig:
    """``[echo]``: what an echo node says."""

    greeting: str = setting("hello", doc="What the echo node says.")
    times: int = setting(1, doc="How often it says it.", check=positive)


class EchoRole:
    """A third-party role: ``role = "echo"`` with an ``[echo]`` section."""

    def __init__(self):
        self.heard = []

    @hookimpl
    def triomq_config_sections(self):
        return {"echo": EchoConfig}

    @hookimpl
    def triomq_roles(self):
        return ["echo"]

    @hookimpl
    def triomq_node_services(self, node):
        if node.role != "echo":
            return None
        return {"echo": self.serve}

    async def serve(self, node, task_status):
        self.heard.append(node.config.echo.greeting * node.config.echo.times)
        task_status.started()
        await trio.sleep_forever()


@pytest.fixture
def echo():
    return EchoRole()


@pytest.fixture
def pm(echo):
    pm = PluginManager.discover()
    pm.register(echo, name="echo")
    return pm


async def test_a_third_party_role_reads_its_section_from_a_file(echo, pm):
    data = {"name": "e1", "role": "echo", "echo": {"greeting": "hi", "times": 2}}
    config = NodeConfig.from_mapping(data, plugins=pm)
    assert config.echo == EchoConfig(greeting="hi", times=2)
    async with open_node(config, plugins=pm) as node:
        assert node.services == ["echo"]
        # The node's config holds every section of its plugins.
        assert node.config.broker.broker_name == "broker-a"
    assert echo.heard == ["hihi"]


async def test_a_section_not_given_is_its_defaults_in_the_node(echo, pm):
    async with open_node(NodeConfig(role="echo"), plugins=pm) as node:
        assert node.config.echo == EchoConfig()
        assert node.config.section("echo") == EchoConfig()
    assert echo.heard == ["hello"]


async def test_a_section_built_in_code(echo, pm):
    config = NodeConfig(role="echo", echo=EchoConfig(greeting="hey"))
    async with open_node(config, plugins=pm):
        pass
    assert echo.heard == ["hey"]


def test_its_keys_are_checked_with_their_path(pm):
    with pytest.raises(ConfigError, match=r"^echo\.times: must be > 0, got 0"):
        NodeConfig.from_mapping({"echo": {"times": 0}}, plugins=pm)
    with pytest.raises(ConfigError, match=r"^echo\.volume: unknown key 'volume'"):
        NodeConfig.from_mapping({"echo": {"volume": 11}}, plugins=pm)
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_mapping({"ecco": {}}, plugins=pm)
    assert info.value.path == "ecco"
    assert "known keys: broker, controller, echo, listen" in str(info.value)


def test_without_the_plugin_its_role_and_section_are_unknown():
    with pytest.raises(ConfigError, match=r"^echo: unknown key 'echo'; known keys: broker"):
        from_mapping(NodeConfig, {"echo": {"greeting": "hi"}})
    with pytest.raises(ConfigError, match=r"^role: expected one of 'standalone', 'broker'"):
        from_mapping(NodeConfig, {"role": "echo"})
    with pytest.raises(ConfigError, match=r"^role: expected one of 'standalone', 'echo'"):
        NodeConfig.from_mapping({"role": "broker"}, plugins=_only(EchoRole()))


async def test_a_node_rejects_sections_its_plugins_do_not_know():
    with pytest.raises(ConfigError, match=r"^echo: no plugin contributes section 'echo'; "
                                          r"sections: none"):
        async with open_node(NodeConfig(echo=EchoConfig()), plugins=PluginManager()):
            pass
    with pytest.raises(ConfigError, match=r"^echo: expected EchoConfig, got StoreConfig"):
        async with open_node(NodeConfig(echo=StoreConfig()), plugins=_only(EchoRole())):
            pass


async def test_a_role_no_plugin_runs_is_still_an_error():
    with pytest.raises(PluginError, match="no plugin runs role 'emperor'"):
        async with open_node(NodeConfig(role="emperor"), plugins=_only(EchoRole())):
            pass


def test_a_section_may_not_take_a_key_of_the_node():
    class Squatter:
        @hookimpl
        def triomq_config_sections(self):
            return {"store": EchoConfig}

    with pytest.raises(PluginError, match="section 'store' has the name of a key of the node"):
        NodeConfig.from_mapping({}, plugins=_only(Squatter()))


def test_the_command_line_lists_its_keys_and_runs_its_role(pm, capsys):
    parser = build_parser(pm)
    args = parser.parse_args(["config", "--markdown"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| `echo.greeting` | `'hello'` | What the echo node says. |" in out
    assert "| `broker.broker_name` |" in out
    assert parser.parse_args(["echo", "--config", "e.toml"]).command == "echo"
    args = parser.parse_args(["plugins"])
    args.func(args)
    out = capsys.readouterr().out
    assert "roles: broker, controller, echo, nameserver" in out
    assert "config sections: broker, controller, echo" in out


def _only(plugin):
    pm = PluginManager()
    pm.register(plugin, name="only")
    return pm
