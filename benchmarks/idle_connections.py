"""Idle connections: put latency with 2,000 silent connections on each port vs quiet.

Run from the repository root (well under a minute)::

    .venv/bin/python benchmarks/idle_connections.py

A master and a slave broker (real nodes, role ``broker``, mmap store, flush
policy ``none``, ``all_ack_in_sync_state_set``: each put waits for the
slave's ack) run in this process, in one trio loop, over TCP loopback. A
client sends ``--puts`` sequential 1 KiB puts, first with both ports
quiet (the slave's HA connection and the client's RPC connection only),
then again while ``--idle`` more connections per port, opened by a child
process, sit on the master's HA port, on its RPC port, and on both, without
sending a byte. The master's HA handshake timeout and connection cap are
raised for the measurement (``ha_handshake_timeout``,
``ha_max_connections``) so that the idle connections stay for it; by
default they would be closed after 3 s, and at most 64 served at once. On
the RPC port the defaults hold them (120 s idle timeout, 4,096
connections).

Prints a Markdown table: put p50/p99 side by side, the HA connections the
master woke per put (its ``connections_woken`` counter: the put's own
wake-up and its ack's, each of the slave's connection only), and the cost of
one idle connection to this process: its anonymous resident memory
(``RssAnon``) grown while they are open, divided by their count.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import trio

import triomq.plugins.broker
from triomq.broker.service import broker_of
from triomq.config import NodeConfig, from_mapping
from triomq.plugin_manager import PluginManager
from triomq.runtime import open_node
from triomq.testing.direct_send import DirectProducer

#: The child process: opens the idle connections, says so, and holds them
#: until its standard input closes.
_IDLE_CLIENT = textwrap.dedent("""
    import socket, sys
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    held = [socket.create_connection((host, port)) for _ in range(count)]
    print("open", flush=True)
    sys.stdin.read()
""")


def plugins() -> PluginManager:
    pm = PluginManager.discover(disable={"broker"})
    pm.register(triomq.plugins.broker, name="broker")
    return pm


def broker_config(name: str, root: Path, idle: int, *, broker_id: int = 0,
                  master: str = "") -> NodeConfig:
    text = f"""
name = "{name}"
role = "broker"
listen = "tcp://127.0.0.1:0"
log_level = "WARNING"
[store]
path = "{root / name}"
[broker]
broker_id = {broker_id}
ha_listen_port = 0
ha_master_address = "{master}"
flush_policy = "none"
all_ack_in_sync_state_set = true
ha_handshake_timeout = 600000
ha_max_connections = {idle + 16}
"""
    return from_mapping(NodeConfig, tomllib.loads(text))


def rss_anon_kib() -> int:
    """This process's anonymous resident memory (``RssAnon``), in KiB.

    Memory freed by an earlier case is first handed back to the system
    (glibc's ``malloc_trim``), or a later case would reuse it and look cheap.
    """
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


@asynccontextmanager
async def idle_connections(ha_address: str, count: int):
    """``count`` connections to ``ha_address`` from a child process that sends nothing."""
    host, port = ha_address.removeprefix("tcp://").rsplit(":", 1)
    child = subprocess.Popen([sys.executable, "-c", _IDLE_CLIENT, host, port, str(count)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = await trio.to_thread.run_sync(child.stdout.readline)
        if line.strip() != "open":
            raise RuntimeError(f"the idle client failed (exit {child.wait()})")
        yield
    finally:
        child.stdin.close()
        await trio.to_thread.run_sync(child.wait)


async def timed_puts(producer: DirectProducer, body: bytes, puts: int) -> list[float]:
    latencies = []
    for _ in range(puts):
        start = time.perf_counter()
        await producer.send("Idle", body)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def main(args: argparse.Namespace) -> None:
    pm = plugins()
    body = os.urandom(1024)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, trio {trio.__version__}\n")
    with tempfile.TemporaryDirectory(prefix="triomq-idle-bench-") as tmp:
        root = Path(tmp)
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                open_node(from_mapping(NodeConfig, {"name": "client"}), plugins=pm))
            master = broker_of(await stack.enter_async_context(
                open_node(broker_config("master", root, args.idle), plugins=pm)))
            await stack.enter_async_context(open_node(
                broker_config("slave", root, args.idle, broker_id=1, master=master.ha_address),
                plugins=pm))
            while len(master.replicas.sync_state_set) < 2:
                await trio.sleep(0.01)
            ha = master.replicas.ha_master
            assert ha is not None
            producer = DirectProducer(client.rpc, master.node.address)
            await timed_puts(producer, body, min(200, args.puts))  # warm up

            rpc = master.node.rpc_server
            busy = len(rpc.connections)
            cases = {"quiet": (), "HA port": ("ha",), "RPC port": ("rpc",),
                     "both ports": ("ha", "rpc")}
            rows = []
            for label, ports in cases.items():
                async with AsyncExitStack() as phase:
                    before = rss_anon_kib()
                    if "ha" in ports:
                        await phase.enter_async_context(
                            idle_connections(master.ha_address, args.idle))
                    if "rpc" in ports:
                        await phase.enter_async_context(
                            idle_connections(master.node.address, args.idle))
                    while (("ha" in ports and ha.handshaking < args.idle)
                           or ("rpc" in ports and len(rpc.connections) < busy + args.idle)):
                        await trio.sleep(0.01)
                    grown = rss_anon_kib() - before
                    woken = ha.connections_woken
                    latencies = await timed_puts(producer, body, args.puts)
                    woken = (ha.connections_woken - woken) / args.puts
                    rows.append((label, len(ports), latencies, woken, grown))

    print(f"| {args.idle:,} idle connections on | put p50 ms | put p99 ms "
          "| connections woken per put | RssAnon growth KiB | per idle connection KiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, ports, latencies, woken, grown in rows:
        per = f"{grown / (args.idle * ports):.1f}" if ports else ""
        print(f"| {label} | {percentile(latencies, 50):.3f} | {percentile(latencies, 99):.3f} "
              f"| {woken:.2f} | {grown:,} | {per} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=2000,
                        help="idle connections on each port (default 2000)")
    parser.add_argument("--puts", type=int, default=2000,
                        help="sequential puts per case (default 2000)")
    trio.run(main, parser.parse_args())
