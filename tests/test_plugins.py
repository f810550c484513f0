"""The plugin manager: discovery, explicit registration, look-ups and errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from triomq import hookimpl
from triomq.errors import PluginError
from triomq.plugin_manager import PluginManager

ROOT = Path(__file__).resolve().parents[1]


class Loopback:
    scheme = "loop"

    def __init__(self, options):
        self.options = options


class LoopPlugin:
    @hookimpl
    def triomq_transport(self):
        return {"loop": Loopback}


def test_in_tree_plugins_are_discovered():
    pm = PluginManager.discover()
    names = {info.name for info in pm.plugins()}
    assert {"transport_inproc", "transport_tcp"} <= names
    assert {"inproc", "tcp"} <= set(pm.transport_schemes())
    tcp = next(i for i in pm.plugins() if i.name == "transport_tcp")
    assert tcp.distribution == "triomq"
    assert "triomq_transport" in tcp.hooks


def test_disable_by_name():
    pm = PluginManager.discover(disable={"transport_tcp"})
    assert "tcp" not in pm.transport_schemes()
    with pytest.raises(PluginError, match=r"no plugin provides transport scheme 'tcp'; "
                                          r"available: .*inproc"):
        pm.transport("tcp")


def test_explicit_registration_and_options():
    pm = PluginManager()
    pm.register(LoopPlugin(), name="loop")
    transport = pm.transport("loop", {"x": 1})
    assert isinstance(transport, Loopback)
    assert transport.options == {"x": 1}
    assert [i.name for i in pm.plugins()] == ["loop"]
    pm.unregister("loop")
    with pytest.raises(PluginError, match="available: none"):
        pm.transport("loop")
    with pytest.raises(PluginError, match="no plugin named 'loop'"):
        pm.unregister("loop")


def test_host_registration_overrides_a_discovered_scheme():
    class MyInproc:
        scheme = "inproc"

        def __init__(self, options):
            pass

    class Override:
        @hookimpl
        def triomq_transport(self):
            return {"inproc": MyInproc}

    pm = PluginManager.discover()
    pm.register(Override(), name="override")
    assert isinstance(pm.transport("inproc"), MyInproc)


def test_unknown_store_and_policy_name_what_exists():
    pm = PluginManager()
    with pytest.raises(PluginError, match="no plugin provides log store 'commitlog:zip'"):
        pm.log_store("commitlog", "zip")
    with pytest.raises(PluginError, match="election policy 'fair'"):
        pm.election_policy("fair")
    with pytest.raises(PluginError, match="escape bridge 'remote'"):
        pm.escape_bridge("remote")


def test_a_plugin_that_fails_to_import_is_named(tmp_path, monkeypatch):
    dist = tmp_path / "broken-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[triomq]\nbroken = no_such_module_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"plugin 'broken' \(no_such_module_xyz, from broken\)"):
        PluginManager.discover()
    assert "broken" not in {i.name for i in PluginManager.discover({"broken"}).plugins()}


@pytest.fixture(scope="module")
def third_party_site(tmp_path_factory):
    """The example plugin installed as its own distribution into a private folder."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(ROOT / "tests" / "fixtures" / "thirdparty")],
        check=True, capture_output=True)
    return target


def _triomq(site, *args):
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "triomq.cli", *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_third_party_distribution_is_listed_and_its_hooks_called(third_party_site):
    listing = _triomq(third_party_site, "plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    data = json.loads(listing.stdout)
    example = next(p for p in data["plugins"] if p["name"] == "example")
    assert example["distribution"] == "triomq-example-plugin"
    assert example["module"] == "triomq_example_plugin"
    assert set(example["hooks"]) == {"triomq_transport", "triomq_add_cli_commands"}
    assert "echo" in data["transports"]

    hello = _triomq(third_party_site, "example")
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout.strip() == "hello from triomq-example-plugin"

    gone = _triomq(third_party_site, "--disable-plugin", "example", "plugins", "--json")
    assert "example" not in {p["name"] for p in json.loads(gone.stdout)["plugins"]}


def test_the_role_plugins_contribute_their_roles_and_sections():
    from triomq.broker.config import BrokerConfig
    from triomq.controller.core.config import ControllerConfig

    pm = PluginManager.discover()
    assert {"broker", "controller", "nameserver"} <= set(pm.roles())
    sections = pm.config_sections()
    assert (sections["broker"], sections["controller"]) == (BrokerConfig, ControllerConfig)
    pm = PluginManager.discover(disable={"broker"})
    assert "broker" not in pm.roles()
    assert "broker" not in pm.config_sections()
