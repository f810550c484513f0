"""HA replication with master and slave in two processes, beside a raw transfer between two.

Run from the repository root::

    .venv/bin/python benchmarks/ha_two_processes.py

``benchmarks/ha.py`` runs both nodes on one trio thread. Here the slave
broker node runs in a child process (a CPU of its own, as in a deployment),
started on a signal once its imports are done, and the clock runs from the
signal until its mmap commit log holds every byte (as ``ha.py`` measures,
from the slave node's start). Side by side, in the same run: the raw trio
transfer of ``ha.py`` (one process) and the same bytes sent from the
master's log to a child process that receives them into one reused buffer
(the limit for two processes). The child's CPU time covers its node and its
page-warming thread. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ha
import trio

from triomq.plugins.store_mmap.commitlog import MmapCommitLog

CHILD = [sys.executable, __file__, "--child"]


def started(args: list[str]) -> subprocess.Popen:
    """A child process of this script, once it reports it is ready."""
    child = subprocess.Popen([*CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError(f"child {args} did not start")
    return child


def go(child: subprocess.Popen) -> None:
    child.stdin.write("go\n")
    child.stdin.flush()


def raw_receiver(port: int, size: int) -> None:
    """Child: on 'go', receive ``size`` bytes into one reused buffer, then answer a byte."""
    print("ready", flush=True)
    sys.stdin.readline()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        buffer = memoryview(bytearray(ha.CHUNK))
        received = 0
        while received < size:
            n = sock.recv_into(buffer)
            if not n:
                break
            received += n
        sock.sendall(b"x")


def slave_node(root: str, master: str, size: int, batch: int) -> None:
    """Child: on 'go', start a slave node; print its seconds and CPU seconds to all bytes."""
    pm = ha.plugins()
    print("ready", flush=True)
    sys.stdin.readline()

    async def replicate() -> None:
        done = trio.Event()

        def appended(end: int) -> None:
            if end >= size:
                done.set()

        # The slave's last append stops the clock, as in ha.py (no polling).
        with ha.timed_append_written(MmapCommitLog, [0.0], appended):
            start, cpu = time.perf_counter(), time.process_time()
            async with ha.broker(pm, "slave", Path(root), broker_id=1, master=master,
                                 extra=f"ha_transfer_batch_size = {batch}"):
                await done.wait()
                print(time.perf_counter() - start, time.process_time() - cpu, flush=True)

    trio.run(replicate)


async def raw_two_processes(log, size: int) -> float:
    """Seconds to send ``size`` bytes of ``log`` to a child process over TCP loopback."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    child = await trio.to_thread.run_sync(started, ["raw", str(port), str(size)])
    scratch = memoryview(bytearray(ha.CHUNK))
    start = time.perf_counter()
    go(child)
    stream = await listeners[0].accept()
    offset = 0
    while offset < size:
        with log.read_view(offset, scratch) as chunk:
            await stream.send_all(chunk)
            offset += len(chunk)
    await stream.receive_some(1)
    elapsed = time.perf_counter() - start
    await stream.aclose()
    await listeners[0].aclose()
    await trio.to_thread.run_sync(child.wait)
    return elapsed


async def replication(pm, root: Path, megabytes: int, body_size: int, batch: int) -> str:
    """One case's table row."""
    size = await trio.to_thread.run_sync(ha.fill, pm, root, megabytes, body_size)
    async with ha.broker(pm, "master", root, extra=f"ha_transfer_batch_size = {batch}") as master:
        raw = await ha.raw_transfer(master.log, size)
        raw_two = await raw_two_processes(master.log, size)
        ha.fresh_pages(root / "fresh-pages", size)  # the slave's page cache: memory freed just now
        child = await trio.to_thread.run_sync(
            started, ["slave", str(root), master.ha_address, str(size), str(batch)])
        cpu = time.process_time()
        go(child)
        report = await trio.to_thread.run_sync(child.stdout.readline)
        elapsed, child_cpu = map(float, report.split())
        cpu = time.process_time() - cpu
        await trio.to_thread.run_sync(child.wait)
    mb = size / 1e6
    return (f"| {body_size} B | {batch // 1024} KiB | {mb / raw:,.0f} | {mb / raw_two:,.0f} "
            f"| {mb / elapsed:,.0f} | {raw_two / elapsed:.0%} | {raw / elapsed:.0%} "
            f"| {elapsed * 1000:,.0f} | {child_cpu * 1000:,.0f} | {cpu * 1000:,.0f} |")


async def main(args: argparse.Namespace) -> None:
    pm = ha.plugins()
    print("| body | batch | raw trio TCP MB/s | raw TCP, two processes MB/s | HA replication MB/s "
          "| vs raw, two processes | vs raw, one process | HA ms | slave process CPU ms "
          "| master process CPU ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    cases = [(1024, 32 * 1024), (1024, 256 * 1024), (16 * 1024, 256 * 1024)]
    with tempfile.TemporaryDirectory(prefix="triomq-ha2-bench-") as tmp:
        await replication(pm, Path(tmp), args.megabytes, *cases[0])  # first-use costs
    for body_size, batch in cases * args.rounds:
        with tempfile.TemporaryDirectory(prefix="triomq-ha2-bench-") as tmp:
            print(await replication(pm, Path(tmp), args.megabytes, body_size, batch), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        kind, *rest = sys.argv[2:]
        if kind == "raw":
            raw_receiver(int(rest[0]), int(rest[1]))
        else:
            slave_node(rest[0], rest[1], int(rest[2]), int(rest[3]))
        sys.exit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=128,
                        help="size of the log to replicate (default 128)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times to run the cases, in turn (default 1)")
    trio.run(main, parser.parse_args())
