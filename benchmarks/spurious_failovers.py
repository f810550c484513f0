"""Spurious failovers: master changes of an idle quickstart cluster beside CPU hogs.

Run from the repository root (ten minutes by default)::

    .venv/bin/python benchmarks/spurious_failovers.py [--duration 600] [--hogs 2]

Set-up: the quickstart's deployment (``examples/controller``: a name server,
three controllers, broker group ``broker-a`` of three replicas), each node a
``python -m triomq.cli ROLE --config FILE`` process as ``examples/fast-try.sh``
starts them, from the example files with their ports moved to free ones and
their stores to a temporary directory (every other setting as shipped). Once
the group has a master and a SyncStateSet of all three, ``--hogs`` processes
``python -c 'while True: pass'`` start beside it, and for ``--duration``
seconds nothing is sent: every fault-free second should keep the master.
The controllers are asked for the group's replica info every ``--poll``
seconds (one GET_REPLICA_INFO, failing over to the next controller); the
count is the rise of the master epoch from start to end, which counts every
election, also those between two polls. The controllers' logs give how many
brokers they declared inactive, how many elections found no master, and how
many stalls of their own they noticed, while watched (``--logs DIR`` keeps
the nodes' logs).

``--pythonpath DIR`` puts DIR first on the processes' PYTHONPATH, to run the
cluster from another source tree (a directory with a ``triomq`` package).

Prints a Markdown row; BENCHMARKS.md's "Spurious failovers" section comes from it.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from triomq.config import NodeConfig
from triomq.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from triomq.plugin_manager import PluginManager
from triomq.rpc import RpcError
from triomq.runtime import open_node

ROOT = Path(__file__).resolve().parent.parent
DEPLOYMENT = ROOT / "examples" / "controller"
#: The order ``examples/fast-try.sh`` starts them in.
NODES = ("namesrv-1", "controller-1", "controller-2", "controller-3",
         "broker-a-0", "broker-a-1", "broker-a-2")
GROUP = "broker-a"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_configs(root: Path) -> dict[str, Path]:
    """The example files with every port moved to a free one and every store under ``root``."""
    ports: dict[str, str] = {}

    def port(match: re.Match[str]) -> str:
        old = match[2]
        ports.setdefault(old, str(free_port()))
        return match[1] + ports[old]

    configs = {}
    for name in NODES:
        text = (DEPLOYMENT / f"{name}.toml").read_text()
        text = re.sub(r"(127\.0\.0\.1:)(\d+)", port, text)
        text = re.sub(r"(ha_listen_port = )(\d+)", port, text)
        text = re.sub(r'(path = ")data/', rf'\g<1>{root}/', text)
        configs[name] = root / f"{name}.toml"
        configs[name].write_text(text)
    return configs


def controller_addresses(configs: dict[str, Path]) -> list[str]:
    return [re.search(r'^listen = "(.*)"', configs[name].read_text(), re.M)[1]
            for name in NODES if name.startswith("controller-")]


def start(command: list[str], log: Path, pythonpath: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath,
                                                          env.get("PYTHONPATH")]))
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env=env)


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def replica_info(client: ControllerClient):
    try:
        return await client.get_replica_info(GROUP)
    except (ControllerError, ControllerUnavailable, RpcError):
        return None  # no leader now, or not registered yet


async def whole_group(client: ControllerClient):
    """The group's replica info once it has a master and all three replicas in sync."""
    with trio.fail_after(60):
        while True:
            info = await replica_info(client)
            if info is not None and info.master_broker_id is not None \
                    and len(info.sync_state_set) == 3:
                return info
            await trio.sleep(0.2)


async def watch(client: ControllerClient, epoch: int, duration: float, poll: float) -> int:
    """Poll the group for ``duration`` s from master epoch ``epoch``; the epoch at the end."""
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < duration:
        await trio.sleep(min(poll, duration - elapsed))
        info = await replica_info(client)
        if info is not None and info.master_epoch != epoch:
            epoch = info.master_epoch
            print(f"  {time.monotonic() - began:6.1f} s: epoch {epoch}, master "
                  f"{info.master_broker_id}", flush=True)
    with trio.fail_after(30):
        while (info := await replica_info(client)) is None:
            await trio.sleep(0.2)
    return info.master_epoch


def log_sizes(root: Path) -> dict[str, int]:
    return {name: (root / f"{name}.log").stat().st_size for name in NODES}


def count_in_logs(root: Path, since: dict[str, int], until: dict[str, int],
                  pattern: str) -> int:
    """Lines of the controllers' logs matching ``pattern`` written while watched."""
    count = 0
    for name in NODES:
        if name.startswith("controller-"):
            with open(root / f"{name}.log", "rb") as log:
                log.seek(since[name])
                text = log.read(until[name] - since[name]).decode(errors="replace")
                count += len(re.findall(pattern, text))
    return count


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="triomq-spurious-") as tmp:
        root = Path(tmp)
        configs = write_configs(root)
        processes: list[subprocess.Popen] = []
        try:
            for name in NODES:
                role = re.search(r'^role = "(.*)"', configs[name].read_text(), re.M)[1]
                processes.append(start([sys.executable, "-m", "triomq.cli", role, "--config",
                                        str(configs[name])], root / f"{name}.log",
                                       args.pythonpath))
            async with open_node(NodeConfig(name="spurious-failovers"),
                                 plugins=PluginManager.discover()) as node:
                client = ControllerClient(node.rpc, controller_addresses(configs))
                first = (await whole_group(client)).master_epoch
                since = log_sizes(root)
                print(f"master epoch {first}; idle beside {args.hogs} CPU hogs for "
                      f"{args.duration:.0f} s", flush=True)
                processes += [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                              for _ in range(args.hogs)]
                last = await watch(client, first, args.duration, args.poll)
                until = log_sizes(root)
            load = os.getloadavg()[0]
        finally:
            for process in reversed(processes):
                stop(process)
        inactive = count_in_logs(root, since, until, r"is inactive")
        no_master = count_in_logs(root, since, until, r"no master in epoch")
        stalls = count_in_logs(root, since, until, r"did not run for")
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            for name in NODES:
                shutil.copy(root / f"{name}.log", args.logs)
    print()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average at the end {load:.1f}")
    print()
    print("| code | duration s | CPU hogs | master changes (epochs) | elections without a "
          "master | brokers declared inactive | controller stalls noticed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {args.label} | {args.duration:.0f} | {args.hogs} | {last - first} | {no_master} "
          f"| {inactive} | {stalls} |")


if __name__ == "__main__":
    logging.getLogger("triomq").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0,
                        help="seconds the idle cluster is watched (default 600)")
    parser.add_argument("--hogs", type=int, default=2,
                        help="busy-loop processes beside the cluster (default 2)")
    parser.add_argument("--poll", type=float, default=1.0,
                        help="seconds between two looks at the group (default 1)")
    parser.add_argument("--pythonpath", default=None,
                        help="put this directory first on the processes' PYTHONPATH")
    parser.add_argument("--logs", type=Path, default=None,
                        help="copy the nodes' logs into this directory at the end")
    parser.add_argument("--label", default="this tree", help="the table's code column")
    trio.run(main, parser.parse_args())
