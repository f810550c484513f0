"""Controller-mode brokers as users see them: refusals, the producer's record, stopping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import triomq.plugins.broker
import triomq.plugins.controller_dledger
from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.plugin_manager import PluginManager
from triomq.testing.cluster import free_tcp_port, open_cluster
from triomq.testing.direct_send import DirectProducer, ServiceNotAvailable

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = {"raft": {"tick_interval_ms": 20, "fsync": False}}
BROKER = {"ha_send_heartbeat_interval": 50, "flush_policy": "none"}
STORE = {"options": {"segment_size": 65536}}


def plugins() -> PluginManager:
    pm = PluginManager.discover(disable={"broker", "controller_dledger"})
    pm.register(triomq.plugins.broker, name="broker")
    pm.register(triomq.plugins.controller_dledger, name="controller_dledger")
    return pm


async def test_a_slave_refusing_a_put_names_its_own_id(tmp_path):
    async with open_cluster(tmp_path, brokers=2, plugins=plugins(), controller=CONTROLLER,
                            broker=BROKER, store=STORE) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        slave = next(b for n, b in cluster.brokers().items() if n != master)
        await cluster.wait_for(lambda: slave.replicas.role is BrokerRole.SLAVE)
        client = await cluster.start("client")
        with pytest.raises(ServiceNotAvailable) as refused:
            await DirectProducer(client.rpc, slave.node.address).send("t", b"x")
        assert slave.broker_id == slave.controller_mode.broker_id
        assert slave.broker_id >= 1  # the controllers' id, not the config's 0
        assert f"id {slave.broker_id} is slave" in refused.value.remark


async def test_the_producer_records_when_and_where_a_message_was_born(tmp_path):
    async with open_cluster(tmp_path, transport="tcp", brokers=1, plugins=plugins(),
                            controller=CONTROLLER, broker=BROKER, store=STORE) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        broker = cluster.broker(await cluster.wait_master())
        client = await cluster.start("client")
        before = time.time_ns() // 1_000_000
        result = await DirectProducer(client.rpc, broker.node.address).send("t", b"born")
        after = time.time_ns() // 1_000_000
        record = broker.log.read_record(result.physical_offset)
        assert before <= record.born_timestamp <= after
        # The born host: the producer's end of its connection, as the broker sees it.
        connection = await client.rpc.connection(broker.node.address)
        assert record.born_host == connection.stream.socket.getsockname()


# -- stopping a broker process ----------------------------------------------------------------


def _start(tmp_path: Path, role: str, name: str, body: str) -> subprocess.Popen:
    config = tmp_path / f"{name}.toml"
    config.write_text(body)
    return subprocess.Popen([sys.executable, "-m", "triomq.cli", role, "--config", str(config)],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if text in line:
            return
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"no line with {text!r}")


def _seconds_to_stop(proc: subprocess.Popen) -> float:
    start = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 0
    return time.monotonic() - start


@pytest.mark.parametrize("controller_up", [True, False])
def test_sigterm_stops_a_controller_mode_broker_promptly(tmp_path, controller_up):
    controller_address = f"tcp://127.0.0.1:{free_tcp_port()}"
    controller = _start(tmp_path, "controller", "c1", f"""
name = "c1"
role = "controller"
listen = "{controller_address}"
[store]
path = "{tmp_path / 'c1'}"
[controller]
node_id = 1
peers = {{ "1" = "{controller_address}" }}
""")
    broker = _start(tmp_path, "broker", "b1", f"""
name = "b1"
role = "broker"
listen = "tcp://127.0.0.1:{free_tcp_port()}"
[store]
path = "{tmp_path / 'b1'}"
[broker]
broker_name = "g"
enable_controller_mode = true
controller_addresses = ["{controller_address}"]
ha_listen_port = 0
""")
    try:
        _wait_for_line(broker, "is now master")
        if not controller_up:
            assert _seconds_to_stop(controller) < 30
        # Well under a second on a quiet host; the bound leaves room for a busy one while
        # still catching a stop that sits out the controller calls' retries and backoff.
        assert _seconds_to_stop(broker) < 10.0
    finally:
        broker.kill()
        controller.kill()
        broker.communicate()
        controller.communicate()
