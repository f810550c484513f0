"""3-node Raft clusters on TCP loopback: triomq's Raft next to PySyncObj.

    PYTHONPATH=. .venv/bin/python benchmarks/consensus.py [--seconds 5] [--size 64]

Every node of every cluster runs in a process of its own (multiprocessing,
spawn); the parent only starts, commands and kills them through pipes. The
load runs inside the leader's process, as a library user's would:

- throughput: ``--concurrency`` callers each proposing ``--size``-byte
  commands back to back for ``--seconds`` (after a one-second warm-up);
  committed-and-applied commands per second at the best of the concurrency
  levels tried (PySyncObj needs many commands in flight: it batches per
  tick), best of three runs at that level; proposals that failed (a leader
  change under load) are counted apart; the p50 / p99 latency of the
  commands committed meanwhile says what that throughput costs each caller;
- latency: one caller, one command at a time (``--latency-ops`` of them):
  p50 / p99 from the call to the leader's apply;
- failover: SIGKILL the leader and time until a surviving node says it
  leads (polled every 5 ms), ``--failovers`` times, restarting the killed
  node in between; default timeouts of each implementation.

Clusters: triomq with ``fsync = false`` (entries in the mmap entry log, left
to the OS to write back: survives a process crash, not a power loss),
triomq with ``fsync = true`` (every acknowledged entry on disk first), and
PySyncObj with its defaults (log in memory) and with ``journalFile`` (an
mmap journal, never fsynced: the same durability as triomq's fsync = false).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

COMMAND = "command"

# ---------------------------------------------------------------- the children


class _Counter:
    """A tiny state machine: counts commands."""

    def __init__(self) -> None:
        self.count = 0

    def apply(self, index: int, data: bytes) -> int:
        self.count += 1
        return self.count

    def snapshot(self) -> bytes:
        return str(self.count).encode()

    def restore(self, data: bytes) -> None:
        self.count = int(data)


def triomq_child(node_id: int, addresses: dict[int, str], directory: str, fsync: bool,
                 conn: Connection) -> None:
    import trio

    trio.run(_triomq_child, node_id, addresses, directory, fsync, conn)


async def _triomq_child(node_id: int, addresses: dict[int, str], directory: str, fsync: bool,
                        conn: Connection) -> None:
    import trio

    from framework.config import NodeConfig, StoreConfig
    from framework.consensus.config import RaftConfig
    from framework.consensus.node import NotLeader, ProposalFailed, open_raft_node
    from framework.runtime import open_node

    config = NodeConfig(name=f"n{node_id}", listen=addresses[node_id], log_level="ERROR",
                        store=StoreConfig(path=directory))
    raft_config = RaftConfig(node_id=node_id, peers=addresses, fsync=fsync)
    async with open_node(config) as node, \
            open_raft_node(node, raft_config, _Counter()) as raft:

        async def throughput(seconds: float, concurrency: int,
                             size: int) -> tuple[float, int, list[float]]:
            data = b"x" * size
            done = failed = 0
            latencies: list[float] = []
            measuring = False

            async def caller() -> None:
                nonlocal done, failed
                while True:
                    began = time.perf_counter()
                    try:
                        await raft.propose(data, timeout=30)
                        done += 1
                        if measuring:
                            latencies.append(time.perf_counter() - began)
                    except (NotLeader, ProposalFailed, trio.TooSlowError):
                        failed += 1
                        await trio.sleep(0.1)

            async with trio.open_nursery() as nursery:
                for _ in range(concurrency):
                    nursery.start_soon(caller)
                await trio.sleep(1.0)
                measuring = True
                start, began = done, time.perf_counter()
                await trio.sleep(seconds)
                rate = (done - start) / (time.perf_counter() - began)
                measuring = False
                nursery.cancel_scope.cancel()
            return rate, failed, latencies

        async def latency(count: int, size: int) -> list[float]:
            data = b"y" * size
            samples = []
            for _ in range(count):
                began = time.perf_counter()
                await raft.propose(data)
                samples.append(time.perf_counter() - began)
            return samples

        while True:
            request = await trio.to_thread.run_sync(conn.recv)
            if request[0] == "leader":
                conn.send(raft.is_leader)
            elif request[0] == "throughput":
                conn.send(await throughput(*request[1:]))
            elif request[0] == "latency":
                conn.send(await latency(*request[1:]))
            else:
                conn.send(None)
                return


def pysyncobj_child(node_id: int, addresses: dict[int, str], directory: str, journal: bool,
                    conn: Connection) -> None:
    import threading

    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

    class Counter(SyncObj):
        def __init__(self, me: str, partners: list[str], conf: SyncObjConf) -> None:
            super().__init__(me, partners, conf)
            self.count = 0

        @replicated
        def add(self, data: bytes) -> int:
            self.count += 1
            return self.count

    me = addresses[node_id]
    partners = [a for i, a in addresses.items() if i != node_id]
    conf = SyncObjConf(journalFile=os.path.join(directory, "journal") if journal else None)
    obj = Counter(me, partners, conf)

    def throughput(seconds: float, concurrency: int,
                   size: int) -> tuple[float, int, list[float]]:
        data = b"x" * size
        done = failed = 0
        running = True
        measuring = False
        latencies: list[float] = []
        lock = threading.Lock()

        def call() -> None:
            began = time.perf_counter()

            def callback(result: Any, error: int) -> None:
                nonlocal done, failed
                with lock:
                    if error == FAIL_REASON.SUCCESS:
                        done += 1
                        if measuring:
                            latencies.append(time.perf_counter() - began)
                    else:
                        failed += 1
                if running:
                    call()

            obj.add(data, callback=callback)

        for _ in range(concurrency):
            call()
        time.sleep(1.0)
        measuring = True
        start, began = done, time.perf_counter()
        time.sleep(seconds)
        rate = (done - start) / (time.perf_counter() - began)
        measuring = False
        running = False
        time.sleep(0.5)
        return rate, failed, list(latencies)

    def latency(count: int, size: int) -> list[float]:
        data = b"y" * size
        samples = []
        for _ in range(count):
            began = time.perf_counter()
            obj.add(data, sync=True, timeout=10)
            samples.append(time.perf_counter() - began)
        return samples

    while True:
        request = conn.recv()
        if request[0] == "leader":
            conn.send(obj._isLeader())
        elif request[0] == "throughput":
            conn.send(throughput(*request[1:]))
        elif request[0] == "latency":
            conn.send(latency(*request[1:]))
        else:
            conn.send(None)
            obj.destroy()
            return


# ---------------------------------------------------------------- the parent


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Cluster:
    """Three child processes running one implementation."""

    def __init__(self, target: Callable[..., None], option: bool, root: str,
                 scheme: str) -> None:
        self.target = target
        self.option = option
        self.root = root
        ports = free_ports(3)
        if scheme == "tcp":
            self.addresses = {i: f"tcp://127.0.0.1:{p}" for i, p in zip((1, 2, 3), ports,
                                                                        strict=True)}
        else:
            self.addresses = {i: f"127.0.0.1:{p}" for i, p in zip((1, 2, 3), ports,
                                                                  strict=True)}
        self.context = multiprocessing.get_context("spawn")
        self.procs: dict[int, Any] = {}
        self.conns: dict[int, Connection] = {}
        for node_id in (1, 2, 3):
            self.start(node_id)

    def start(self, node_id: int) -> None:
        parent, child = self.context.Pipe()
        directory = os.path.join(self.root, f"n{node_id}")
        os.makedirs(directory, exist_ok=True)
        proc = self.context.Process(target=self.target, daemon=True,
                                    args=(node_id, self.addresses, directory, self.option,
                                          child))
        proc.start()
        self.procs[node_id], self.conns[node_id] = proc, parent

    def ask(self, node_id: int, *request: Any) -> Any:
        self.conns[node_id].send(request)
        return self.conns[node_id].recv()

    def leader(self, among: list[int] | None = None, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node_id in among or list(self.procs):
                if self.ask(node_id, "leader"):
                    return node_id
            time.sleep(0.005)
        raise TimeoutError("no leader")

    def kill(self, node_id: int) -> None:
        self.procs[node_id].kill()
        self.procs[node_id].join()
        del self.procs[node_id], self.conns[node_id]

    def close(self) -> None:
        for node_id in list(self.procs):
            with contextlib.suppress(BrokenPipeError, EOFError):
                self.ask(node_id, "stop")
            self.procs[node_id].join(5)
            if self.procs[node_id].is_alive():
                self.procs[node_id].kill()


def fsync_ms(rounds: int = 100) -> float:
    """The median time of a 64-byte write plus fsync in the benchmark's temp folder."""
    samples = []
    with tempfile.NamedTemporaryFile() as f:
        for _ in range(rounds):
            began = time.perf_counter()
            f.write(b"x" * 64)
            f.flush()
            os.fsync(f.fileno())
            samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(name: str, target: Callable[..., None], option: bool, scheme: str,
            args: argparse.Namespace, failover: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-consensus-") as root:
        cluster = Cluster(target, option, root, scheme)
        try:
            leader = cluster.leader()
            rates = {c: cluster.ask(leader, "throughput", args.seconds, c, args.size)
                     for c in args.concurrency}
            best = max(rates, key=lambda c: rates[c][0])
            # The machine is shared: measure the best level twice more, keep the best.
            again = [cluster.ask(leader, "throughput", args.seconds, best, args.size)
                     for _ in range(2)]
            rates[best] = max([rates[best], *again])
            samples = cluster.ask(leader, "latency", args.latency_ops, args.size)
            loaded = rates[best][2]
            row: dict[str, Any] = {
                "name": name, "rate": rates[best][0], "concurrency": best,
                "failed": sum(f for _, f, _ in rates.values()),
                "load_p50": percentile(loaded, 0.50) * 1000,
                "load_p99": percentile(loaded, 0.99) * 1000,
                "p50": percentile(samples, 0.50) * 1000,
                "p99": percentile(samples, 0.99) * 1000,
                "mean": statistics.fmean(samples) * 1000,
            }
            if failover:
                times = []
                for _ in range(args.failovers):
                    leader = cluster.leader()
                    time.sleep(1.0)  # a steady state first
                    killed_at = time.monotonic()
                    cluster.kill(leader)
                    cluster.leader([i for i in (1, 2, 3) if i != leader])
                    times.append(time.monotonic() - killed_at)
                    cluster.start(leader)
                row["failover"] = times
            return row
        finally:
            cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=64, help="command size in bytes")
    parser.add_argument("--concurrency", type=lambda v: [int(c) for c in v.split(",")],
                        default=[256, 2048, 8192],
                        help="callers in flight for throughput; the best level is shown")
    parser.add_argument("--latency-ops", type=int, default=200)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.platform()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; fsync of a small write: {fsync_ms():.2f} ms (median); "
          f"{args.size}-byte commands")
    rows = [
        measure("triomq Raft, fsync = false", triomq_child, False, "tcp", args, True),
        measure("triomq Raft, fsync = true", triomq_child, True, "tcp", args, False),
        measure("PySyncObj, defaults (log in memory)", pysyncobj_child, False, "plain",
                args, True),
        measure("PySyncObj, journalFile (mmap, no fsync)", pysyncobj_child, True, "plain",
                args, False),
    ]
    print(f"{'cluster':42} {'commits/s':>10} {'callers':>8} {'failed':>7} "
          f"{'loaded p50/p99 ms':>18} {'p50 ms':>8} {'p99 ms':>8}  failover s")
    for row in rows:
        failover = " ".join(f"{t:.2f}" for t in row.get("failover", []))
        loaded = f"{row['load_p50']:.1f}/{row['load_p99']:.1f}"
        print(f"{row['name']:42} {row['rate']:10.0f} {row['concurrency']:8} "
              f"{row['failed']:7} {loaded:>18} {row['p50']:8.2f} {row['p99']:8.2f}  {failover}")
    ours, theirs = rows[0]["rate"], rows[3]["rate"]
    print(f"throughput, triomq fsync=false vs PySyncObj journalFile (equal durability): "
          f"{ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
