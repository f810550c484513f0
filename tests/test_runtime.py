"""A node: services in one nursery, lifecycle hooks, crash and graceful stop."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from triomq import NodeConfig, PluginManager, hookimpl, open_node
from triomq.config import TransportConfig
from triomq.errors import PluginError, ServiceCrashed
from triomq.runtime import ServiceStartFailed
from triomq.transport import TransportError

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """A plugin that runs one service and records every lifecycle call."""

    def __init__(self, role="standalone"):
        self.role = role
        self.events = []

    @hookimpl
    def triomq_node_services(self, node):
        if node.role != self.role:
            return None
        return {"ticker": self.ticker}

    async def ticker(self, node, task_status):
        self.events.append("ticker ready")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.events.append("ticker cancelled")

    @hookimpl
    def triomq_node_started(self, node):
        self.events.append(f"started {node.name}")

    @hookimpl
    def triomq_node_stopping(self, node):
        self.events.append(f"stopping {node.name}")


def manager(*plugins):
    pm = PluginManager()
    for i, plugin in enumerate(plugins):
        pm.register(plugin, name=f"p{i}")
    return pm


async def test_services_start_before_the_body_and_stop_after_it():
    rec = Recorder()
    async with open_node(NodeConfig(name="n1"), plugins=manager(rec)) as node:
        assert node.services == ["ticker"]
        assert rec.events == ["ticker ready", "started n1"]
    assert rec.events[2:] == ["stopping n1", "ticker cancelled"]


async def test_host_services_and_returned_started_value():
    async def answer(node, task_status):
        task_status.started(42)
        await trio.sleep_forever()

    async with open_node(NodeConfig(), plugins=manager()) as node:
        assert await node.start_service("answer", answer) == 42
        with pytest.raises(PluginError, match="already runs a service named 'answer'"):
            await node.start_service("answer", answer)


async def test_a_crashed_service_stops_the_node_with_its_name(autojump_clock):
    rec = Recorder()

    async def doomed(node, task_status):
        task_status.started()
        await trio.sleep(1)
        raise RuntimeError("disk on fire")

    crash = r"service 'doomed' crashed: RuntimeError: disk on fire"
    with pytest.raises(ServiceCrashed, match=crash):
        async with open_node(NodeConfig(), plugins=manager(rec), services={"doomed": doomed}):
            await trio.sleep_forever()
    assert "ticker cancelled" in rec.events


async def test_a_service_failing_at_start_is_reported():
    async def broken(node, task_status):
        raise OSError("port taken")

    with pytest.raises(ServiceCrashed, match=r"'broken'.*port taken"):
        async with open_node(NodeConfig(), plugins=manager(), services={"broken": broken}):
            pass


async def test_host_errors_come_back_unwrapped():
    with pytest.raises(KeyError):
        async with open_node(NodeConfig(), plugins=manager(Recorder())):
            raise KeyError("mine")


async def test_stop_from_inside():
    rec = Recorder()
    async with open_node(NodeConfig(), plugins=manager(rec)) as node:
        node.stop()
        await trio.sleep_forever()
    assert rec.events[-1] == "ticker cancelled"


async def test_a_role_nobody_runs_is_an_error():
    with pytest.raises(PluginError, match="no plugin runs role 'controller'"):
        async with open_node(NodeConfig(role="controller"), plugins=manager(Recorder())):
            pass
    async with open_node(NodeConfig(role="broker"), plugins=manager(Recorder("broker"))) as node:
        assert node.services == ["ticker"]


async def test_node_transports_come_from_plugins_with_config_options():
    class Fake:
        scheme = "fake"

        def __init__(self, options):
            self.options = options

    class P:
        @hookimpl
        def triomq_transport(self):
            return {"fake": Fake}

    config = NodeConfig(transport=TransportConfig(options={"fake": {"k": 1}}))
    async with open_node(config, plugins=manager(P())) as node:
        assert node.transport("fake").options == {"k": 1}
        assert node.transport("fake") is node.transport("fake")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_process_stops_gracefully_on_signal(tmp_path, signum):
    config = tmp_path / "node.toml"
    config.write_text('name = "proc"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "triomq.cli", "standalone", "--config", str(config)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        line = ""
        while "started" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "node 'proc' started" in line
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopping" in err


async def test_nodes_call_each_other_by_address():
    """A service registers a handler; another node calls it over inproc."""
    from triomq.protocol.remoting import RemotingCommand

    async def echo(request, peer):
        return RemotingCommand(code=0, body=request.body[::-1])

    async def echo_service(node, task_status):
        node.rpc_server.register(1234, echo)
        task_status.started()
        await trio.sleep_forever()

    pm = PluginManager.discover()
    server_config = NodeConfig(name="echo", listen="inproc://runtime-test-echo")
    async with open_node(server_config, plugins=pm, services={"echo": echo_service}) as server:
        assert server.address == "inproc://runtime-test-echo"
        assert server.services == ["echo", "rpc"]
        async with open_node(NodeConfig(name="caller"), plugins=pm) as caller:
            response = await caller.rpc.invoke(server.address, 1234, body=b"abc")
    assert response.body == b"cba"


class Listening:
    """A plugin whose service declares ``address``, checks that it is bound when
    the service starts, and (``claim``) takes the listener."""

    def __init__(self, address, claim=True):
        self.address = address
        self.claim = claim
        self.events = []

    @hookimpl
    def triomq_transport(self):
        from triomq.plugins.transport_tcp import TcpTransport
        return {"tcp": TcpTransport.from_options}

    @hookimpl
    def triomq_node_services(self, node):
        node.declare_listen(self.address)
        return {"listening": self.service}

    async def service(self, node, task_status):
        self.events.append("service ran")
        # Bound before this service started: a connection waits in its backlog.
        early = await node.connect(self.address)
        if self.claim:
            listener = await node.listen(self.address)
            accepted = await listener.accept()
            self.events.append(f"accepted on {listener.address}")
            for resource in (accepted, listener):
                await resource.aclose()
        await early.aclose()
        task_status.started()
        await trio.sleep_forever()


def tcp_port_in_use():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def test_a_declared_address_in_use_stops_the_node_before_any_service():
    with tcp_port_in_use() as taken:
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        plugin = Listening(address)
        with pytest.raises(TransportError, match="cannot listen"):
            async with open_node(NodeConfig(), plugins=manager(plugin, Recorder())):
                pass
    assert plugin.events == []


async def test_a_declared_address_is_bound_before_its_service_starts():
    with tcp_port_in_use() as free:  # a port known to be free once this socket closes
        address = f"tcp://127.0.0.1:{free.getsockname()[1]}"
    plugin = Listening(address)
    async with open_node(NodeConfig(), plugins=manager(plugin)):
        assert plugin.events == ["service ran", f"accepted on {address}"]


async def test_a_declared_address_not_taken_is_closed_once_started():
    with tcp_port_in_use() as free:
        port = free.getsockname()[1]
    plugin = Listening(f"tcp://127.0.0.1:{port}", claim=False)
    async with open_node(NodeConfig(), plugins=manager(plugin)):
        with socket.socket() as again:
            # Refused while anything listens on the port, even with SO_REUSEADDR.
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))  # free: the node let it go


async def test_a_service_failing_at_start_is_not_logged_as_a_crash(caplog):
    async def broken(node, task_status):
        raise OSError("disk says no")

    with pytest.raises(ServiceStartFailed, match=r"service 'broken' could not start: "
                                                 r"OSError: disk says no"):
        async with open_node(NodeConfig(), plugins=manager(), services={"broken": broken}):
            pass
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
