"""3-node Raft clusters on TCP loopback: triomq's Raft next to PySyncObj.

    PYTHONPATH=. .venv/bin/python benchmarks/consensus.py [--seconds 5] [--size 64]

Every node of every cluster runs in a process of its own (multiprocessing,
spawn); the parent only starts, commands and kills them through pipes. The
load runs inside the leader's process, as a library user's would:

- throughput: ``--concurrency`` callers each proposing ``--size``-byte
  commands back to back for ``--seconds`` (after a one-second warm-up).
  Two load models: callbacks, where each command's completion callback
  proposes the caller's next command (PySyncObj's ``callback=``, triomq's
  ``propose_nowait``), the one both implementations are compared under;
  and, for triomq, a trio task per caller awaiting ``propose``;
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

Children say when they serve, and send the traceback of whatever kills
them; a cluster that does not start (a picked port taken meanwhile) is tried
again on new ports.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import platform
import socket
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

#: Load models: each command's callback proposes the caller's next (PySyncObj's
#: and triomq's ``propose_nowait``), or a trio task per caller awaiting ``propose``.
CALLBACKS = "callbacks"
TASKS = "tasks"

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


def _reporting(target: Callable[..., None]) -> Callable[..., None]:
    """Run a child's body; an exception goes to the parent as text before the child dies."""

    @functools.wraps(target)
    def run(*args: Any) -> None:
        conn: Connection = args[-1]
        try:
            target(*args)
        except BaseException:
            with contextlib.suppress(OSError):
                conn.send(("error", traceback.format_exc()))
            raise

    return run


@_reporting
def triomq_child(node_id: int, addresses: dict[int, str], directory: str, fsync: bool,
                 conn: Connection) -> None:
    import trio

    trio.run(_triomq_child, node_id, addresses, directory, fsync, conn)


async def _triomq_child(node_id: int, addresses: dict[int, str], directory: str, fsync: bool,
                        conn: Connection) -> None:
    import trio

    from triomq.config import NodeConfig, StoreConfig
    from triomq.consensus.core.config import RaftConfig
    from triomq.consensus.node import NotLeader, ProposalFailed, open_raft_node
    from triomq.runtime import open_node

    config = NodeConfig(name=f"n{node_id}", listen=addresses[node_id], log_level="ERROR",
                        store=StoreConfig(path=directory))
    raft_config = RaftConfig(node_id=node_id, peers=addresses, fsync=fsync)
    async with open_node(config) as node, \
            open_raft_node(node, raft_config, _Counter()) as raft:
        conn.send(("ready", None))

        async def throughput(seconds: float, concurrency: int, size: int,
                             load: str) -> tuple[float, int, list[float]]:
            if load == CALLBACKS:
                return await callbacks(seconds, concurrency, size)
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

        async def callbacks(seconds: float, concurrency: int,
                            size: int) -> tuple[float, int, list[float]]:
            # PySyncObj's load model: no task per caller; each command's
            # callback proposes the caller's next one.
            data = b"x" * size
            done = failed = 0
            latencies: list[float] = []
            measuring, running = False, True
            retry: list[Callable[[], None]] = []

            def call() -> None:
                nonlocal failed
                began = time.perf_counter()

                def on_done(result: Any, error: BaseException | None) -> None:
                    nonlocal done, failed
                    if error is None:
                        done += 1
                        if measuring:
                            latencies.append(time.perf_counter() - began)
                    else:
                        failed += 1
                    if not running:
                        return
                    if error is None:
                        call()
                    else:
                        retry.append(call)  # a leader change: try again a little later

                try:
                    raft.propose_nowait(data, on_done, timeout=30)
                except (NotLeader, ProposalFailed):
                    failed += 1
                    retry.append(call)

            async def retrier() -> None:
                while True:
                    await trio.sleep(0.1)
                    again, retry[:] = list(retry), []
                    for caller in again:
                        caller()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(retrier)
                for _ in range(concurrency):
                    call()
                await trio.sleep(1.0)
                measuring = True
                start, began = done, time.perf_counter()
                await trio.sleep(seconds)
                rate = (done - start) / (time.perf_counter() - began)
                measuring = running = False
                nursery.cancel_scope.cancel()
            await trio.sleep(0.5)  # let the commands in flight finish
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
                conn.send(("ok", raft.is_leader))
            elif request[0] == "throughput":
                outcome = await throughput(*request[1:])
                conn.send(("ok", outcome) if raft.is_leader else ("lost", raft.leader_id))
            elif request[0] == "latency":
                try:
                    conn.send(("ok", await latency(*request[1:])))
                except (NotLeader, ProposalFailed):
                    conn.send(("lost", raft.leader_id))
            else:
                conn.send(("ok", None))
                return


@_reporting
def pysyncobj_child(node_id: int, addresses: dict[int, str], directory: str, journal: bool,
                    conn: Connection) -> None:
    import threading

    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjException, replicated

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
    conn.send(("ready", None))

    def throughput(seconds: float, concurrency: int, size: int,
                   load: str) -> tuple[float, int, list[float]]:
        assert load == CALLBACKS, "PySyncObj's load is callbacks"
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
            conn.send(("ok", obj._isLeader()))
        elif request[0] == "throughput":
            outcome = throughput(*request[1:])
            conn.send(("ok", outcome) if obj._isLeader() else ("lost", None))
        elif request[0] == "latency":
            try:
                conn.send(("ok", latency(*request[1:])))
            except SyncObjException:
                conn.send(("lost", None))
        else:
            conn.send(("ok", None))
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


class ChildFailed(RuntimeError):
    """A child process died or reported an exception (its traceback is the message)."""


class LeadershipLost(RuntimeError):
    """The node asked to measure stopped leading during the measurement."""


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
        #: Measurements repeated because the leader changed during them.
        self.leader_changes = 0
        for node_id in (1, 2, 3):
            self.spawn(node_id)
        for node_id in (1, 2, 3):
            self._receive(node_id, 60.0)  # ("ready", None) once it serves

    def start(self, node_id: int) -> None:
        """Start (again) one node and wait until it serves."""
        self.spawn(node_id)
        self._receive(node_id, 60.0)

    def spawn(self, node_id: int) -> None:
        parent, child = self.context.Pipe()
        directory = os.path.join(self.root, f"n{node_id}")
        os.makedirs(directory, exist_ok=True)
        proc = self.context.Process(target=self.target, daemon=True,
                                    args=(node_id, self.addresses, directory, self.option,
                                          child))
        proc.start()
        self.procs[node_id], self.conns[node_id] = proc, parent

    def _receive(self, node_id: int, timeout: float | None = None) -> Any:
        conn = self.conns[node_id]
        try:
            if timeout is not None and not conn.poll(timeout):
                raise ChildFailed(f"node {node_id} did not answer in {timeout} s")
            kind, value = conn.recv()
        except (EOFError, OSError) as exc:
            code = self.procs[node_id].exitcode
            raise ChildFailed(f"node {node_id} died (exit code {code}): {exc!r}") from None
        if kind == "error":
            raise ChildFailed(f"node {node_id} failed:\n{value}")
        if kind == "lost":
            raise LeadershipLost(f"node {node_id} no longer leads")
        return value

    def ask(self, node_id: int, *request: Any) -> Any:
        self.conns[node_id].send(request)
        return self._receive(node_id)

    def on_leader(self, *request: Any, attempts: int = 3) -> Any:
        """Ask whichever node leads; again (on the new leader) if leadership moved
        during the request, counting the moves in ``leader_changes``."""
        for attempt in range(1, attempts + 1):
            try:
                return self.ask(self.leader(), *request)
            except LeadershipLost:
                self.leader_changes += 1
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

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
            with contextlib.suppress(ChildFailed, BrokenPipeError):
                self.ask(node_id, "stop")
            self.procs[node_id].join(5)
            if self.procs[node_id].is_alive():
                self.procs[node_id].kill()


def started_cluster(target: Callable[..., None], option: bool, root: str,
                    scheme: str, attempts: int = 3) -> Cluster:
    """A cluster that has elected a leader.

    Ports are picked free, then bound by the children: another process can
    take one in between. A cluster that does not start is closed and tried
    again on new ports (its children's errors are printed).
    """
    for attempt in range(1, attempts + 1):
        directory = tempfile.mkdtemp(prefix=f"try{attempt}-", dir=root)
        cluster: Cluster | None = None
        try:
            cluster = Cluster(target, option, directory, scheme)
            cluster.leader()
            return cluster
        except (ChildFailed, TimeoutError) as exc:
            print(f"cluster start {attempt} of {attempts} failed: {exc}", flush=True)
            if cluster is not None:
                cluster.close()
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


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


def throughput(cluster: Cluster, label: str, load: str, callers: int,
               args: argparse.Namespace) -> tuple[float, int, list[float]]:
    """One throughput measurement on the leader, printed as it comes."""
    outcome = cluster.on_leader("throughput", args.seconds, callers, args.size, load)
    print(f"  {label}, {callers} callers: {outcome[0]:.0f} commits/s, {outcome[1]} failed",
          flush=True)
    return outcome


def measure(name: str, target: Callable[..., None], option: bool, scheme: str,
            loads: list[tuple[str, str]], args: argparse.Namespace,
            failover: bool) -> list[dict[str, Any]]:
    """One cluster: a row per (row name, load model) in ``loads``."""
    with tempfile.TemporaryDirectory(prefix="bench-consensus-") as root:
        cluster = started_cluster(target, option, root, scheme)
        try:
            rows = []
            for row_name, load in loads:
                label = f"{name}, {row_name}"
                rates = {c: throughput(cluster, label, load, c, args) for c in args.concurrency}
                best = max(rates, key=lambda c: rates[c][0])
                # The machine is shared: measure the best level twice more, keep the best.
                again = [throughput(cluster, label, load, best, args) for _ in range(2)]
                rates[best] = max([rates[best], *again])
                loaded = rates[best][2]
                rows.append({
                    "name": f"{name}, {row_name}", "rate": rates[best][0], "concurrency": best,
                    "failed": sum(f for _, f, _ in rates.values()),
                    "load_p50": percentile(loaded, 0.50) * 1000,
                    "load_p99": percentile(loaded, 0.99) * 1000,
                })
            samples = cluster.on_leader("latency", args.latency_ops, args.size)
            rows[0].update(p50=percentile(samples, 0.50) * 1000,
                           p99=percentile(samples, 0.99) * 1000,
                           mean=statistics.fmean(samples) * 1000)
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
                rows[0]["failover"] = times
            rows[0]["leader_changes"] = cluster.leader_changes
            return rows
        finally:
            cluster.close()


TRIOMQ_LOADS = [
    ("callbacks (propose_nowait)", CALLBACKS),
    ("a task per caller (propose)", TASKS),
]
PYSYNCOBJ_LOADS = [("callbacks", CALLBACKS)]


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
    ours = measure("triomq Raft, fsync = false", triomq_child, False, "tcp", TRIOMQ_LOADS,
                   args, True)
    ours_synced = measure("triomq Raft, fsync = true", triomq_child, True, "tcp",
                          TRIOMQ_LOADS, args, False)
    theirs_memory = measure("PySyncObj, defaults (log in memory)", pysyncobj_child, False,
                            "plain", PYSYNCOBJ_LOADS, args, True)
    theirs = measure("PySyncObj, journalFile (mmap, no fsync)", pysyncobj_child, True,
                     "plain", PYSYNCOBJ_LOADS, args, False)
    rows = [*ours, *ours_synced, *theirs_memory, *theirs]
    print(f"{'cluster, load':68} {'commits/s':>10} {'callers':>8} {'failed':>7} "
          f"{'loaded p50/p99 ms':>18} {'p50 ms':>8} {'p99 ms':>8}  failover s")
    for row in rows:
        failover = " ".join(f"{t:.2f}" for t in row.get("failover", []))
        loaded = f"{row['load_p50']:.1f}/{row['load_p99']:.1f}"
        p50 = f"{row['p50']:.2f}" if "p50" in row else ""
        p99 = f"{row['p99']:.2f}" if "p99" in row else ""
        print(f"{row['name']:68} {row['rate']:10.0f} {row['concurrency']:8} "
              f"{row['failed']:7} {loaded:>18} {p50:>8} {p99:>8}  {failover}")
    for row in rows:
        if row.get("leader_changes"):
            print(f"{row['name']}: {row['leader_changes']} measurement(s) repeated after the "
                  "leader changed under load")
    journal = theirs[0]["rate"]
    print("throughput against PySyncObj with journalFile (equal durability: mmap, no fsync; "
          "PySyncObj's load is callbacks):")
    for row in ours:
        print(f"  {row['name']}: {row['rate'] / journal:.2f}x")


if __name__ == "__main__":
    main()
