"""Every configuration under examples/ loads and validates, and each set of files
describes one working deployment: the addresses the files name of each other agree,
and the nodes, started from the files (on free ports, stores in a temporary folder),
take a put and replicate it."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import triomq
from triomq.broker.service import broker_of
from triomq.config import NodeConfig
from triomq.testing.cluster import free_tcp_port
from triomq.testing.direct_send import DirectProducer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILES = sorted(EXAMPLES.rglob("*.toml"))


def load(path: Path) -> NodeConfig:
    return triomq.load_toml(NodeConfig, path)


def ha_address(config: NodeConfig) -> str:
    host = config.listen.removeprefix("tcp://").rpartition(":")[0]
    return f"tcp://{host}:{config.broker.ha_listen_port}"


def test_both_deployments_are_there():
    assert {p.relative_to(EXAMPLES).as_posix() for p in FILES} >= {
        "static/namesrv-1.toml", "static/broker-a-0.toml", "static/broker-a-1.toml",
        "static/broker-a-2.toml",
        "controller/controller-1.toml", "controller/controller-2.toml",
        "controller/controller-3.toml", "controller/broker-a-0.toml",
        "controller/broker-a-1.toml", "controller/broker-a-2.toml",
        "controller/namesrv-1.toml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_example_loads_and_is_named_after_its_file(path):
    config = load(path)
    assert config.name == path.stem
    assert config.store.path.endswith(path.stem)


def _folder(name: str) -> list[NodeConfig]:
    return [load(p) for p in FILES if p.parent.name == name]


def test_each_node_has_its_own_ports_and_store():
    for folder in ("static", "controller"):
        nodes = _folder(folder)
        ports = [c.listen for c in nodes] + [ha_address(c) for c in nodes if c.role == "broker"]
        assert len(set(ports)) == len(ports)
        assert len({c.store.path for c in nodes}) == len(nodes)


def test_each_deployment_keeps_its_stores_apart_from_the_other():
    for folder in ("static", "controller"):
        assert all(c.store.path.startswith(f"data/{folder}/") for c in _folder(folder))


def test_static_slaves_replicate_from_the_master_and_all_register_with_the_name_server():
    nodes = _folder("static")
    brokers = {c.broker.broker_id: c for c in nodes if c.role == "broker"}
    [namesrv] = [c.listen.removeprefix("tcp://") for c in nodes if c.role == "nameserver"]
    assert sorted(brokers) == [0, 1, 2]
    assert not any(c.broker.enable_controller_mode for c in brokers.values())
    assert all(list(c.broker.namesrv_addr) == [namesrv] for c in brokers.values())
    for broker_id in (1, 2):
        assert brokers[broker_id].broker.ha_master_address == ha_address(brokers[0])


def test_controller_mode_brokers_name_every_controller():
    nodes = _folder("controller")
    controllers = [c for c in nodes if c.role == "controller"]
    brokers = [c for c in nodes if c.role == "broker"]
    namesrvs = [c.listen.removeprefix("tcp://") for c in nodes if c.role == "nameserver"]
    assert (len(controllers), len(brokers), len(namesrvs)) == (3, 3, 1)
    for broker in brokers:
        assert list(broker.broker.namesrv_addr) == namesrvs
    peers = {c.controller.node_id: c.listen for c in controllers}
    for controller in controllers:
        assert dict(controller.controller.peers) == peers
    for broker in brokers:
        assert broker.broker.enable_controller_mode
        assert sorted(broker.broker.controller_addresses) == sorted(peers.values())


def _on_free_ports(folder: str, tmp_path: Path) -> list[NodeConfig]:
    """The folder's configs with every port moved to a free one and stores under tmp_path."""
    texts = {p.name: p.read_text() for p in FILES if p.parent.name == folder}
    pattern = r"(?<=127\.0\.0\.1:)\d+|(?<=ha_listen_port = )\d+"
    ports = {int(port) for text in texts.values() for port in re.findall(pattern, text)}
    moved = {port: free_tcp_port() for port in ports}
    configs = []
    for name, text in texts.items():
        text = re.sub(pattern, lambda m: str(moved[int(m.group())]), text)
        text = text.replace('path = "data/', f'path = "{tmp_path.as_posix()}/')
        (tmp_path / name).write_text(text)
        configs.append(load(tmp_path / name))
    return configs


def test_fast_try_starts_the_deployment_creates_a_topic_and_shows_its_route(tmp_path):
    """examples/fast-try.sh, run as the README says, on a copy with free ports."""
    (tmp_path / "controller").mkdir()
    _on_free_ports("controller", tmp_path / "controller")
    script = tmp_path / "fast-try.sh"
    shutil.copy(EXAMPLES / "fast-try.sh", script)
    env = {**os.environ, "TRIOMQ": str(Path(sys.executable).parent / "triomq")}
    try:
        started = subprocess.run([str(script), "start"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        route = started.stdout.split("readQueueNums")[-1]
        assert "broker-a    4              4               6" in route
        assert re.search(r"DefaultCluster\s+broker-a\s+0\s+127\.0\.0\.1:\d+", route)

        def status() -> dict[str, tuple[str, str]]:
            done = subprocess.run([str(script), "status"], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=60, check=True)
            rows = [line.split(maxsplit=3) for line in done.stdout.splitlines()[1:]]
            return {node: (state, role) for node, _, state, role in rows}

        nodes = status()
        assert [s for s, _ in nodes.values()] == ["running"] * 7
        [master] = [n for n, (_, role) in nodes.items() if role.startswith("broker-a master")]
        pid = (tmp_path / "data" / "run" / f"{master}.pid").read_text().strip()
        slave = next(n for n in nodes if n.startswith("broker-") and n != master)
        subprocess.run([str(script), "stop", slave], cwd=tmp_path, env=env, timeout=60,
                       check=True)
        assert status()[slave][0] == "stopped"
        subprocess.run([str(script), "start", slave], cwd=tmp_path, env=env, timeout=60,
                       check=True)
        assert status()[slave][0] == "running"
        assert (tmp_path / "data" / "run" / f"{master}.pid").read_text().strip() == pid
    finally:
        subprocess.run([str(script), "stop"], cwd=tmp_path, env=env, timeout=60)


async def _wait_until(condition) -> None:
    with trio.fail_after(30):
        while not condition():
            await trio.sleep(0.02)


async def _put_and_replicate(nodes: list[triomq.Node]) -> None:
    """A put through the master reaches every replica's commit log."""
    brokers = [broker_of(node) for node in nodes]
    await _wait_until(lambda: any(b.replicas.is_master for b in brokers))
    master = next(n for n, b in zip(nodes, brokers, strict=True) if b.replicas.is_master)
    async with triomq.open_node(NodeConfig(name="app")) as app:
        sent = await DirectProducer(app.rpc, master.address).send("orders", b"order 1")
    end = broker_of(master).log.max_offset
    assert sent.physical_offset < end
    await _wait_until(lambda: all(b.log.max_offset == end for b in brokers))


async def test_the_static_group_runs(tmp_path):
    configs = sorted(_on_free_ports("static", tmp_path),
                     key=lambda c: (c.role != "nameserver", c.role == "broker"
                                    and c.broker.broker_id))
    async with contextlib.AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(triomq.open_node(c)) for c in configs]
        await _put_and_replicate([n for n in nodes if n.role == "broker"])


async def test_the_controller_deployment_runs(tmp_path):
    configs = sorted(_on_free_ports("controller", tmp_path), key=lambda c: c.role != "controller")
    async with contextlib.AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(triomq.open_node(c)) for c in configs]
        await _put_and_replicate([n for n in nodes if n.role == "broker"])
