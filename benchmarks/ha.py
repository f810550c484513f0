"""HA replication benchmark: master -> slave throughput and the latency of synchronous puts.

Run from the repository root::

    .venv/bin/python benchmarks/ha.py

Everything runs in one process and one trio loop, over TCP loopback, with
real broker nodes (``triomq.open_node``, role ``broker``, mmap store):

- **replication**: a master's commit log is filled beforehand with
  ``--megabytes`` of records; a fresh slave node starts and the clock runs
  until its mmap commit log holds every byte (node start, handshake,
  transfer, slave writes and indexes, acks; the master's key index has
  indexed its log first). "To first byte" is the part
  until the slave holds its first bytes (node start, handshake, the epoch
  saved, the first segment and queue files created); "transfer" is the
  rest: the rate the replication runs at once started. Side by side, in
  the same run, a raw trio socket bulk transfer of the same bytes (the
  master's log read back into one reused buffer, sent in 256 KiB chunks,
  received and dropped): the limit for one trio loop, and the aim's
  reference; and the same transfer with the receiver writing every chunk
  into a fresh mapped file: the limit for a replica that writes such a
  file (first writes to a file's pages cost page faults that the socket
  transfer alone never pays); and "fresh page cache": one thread faulting
  in as many bytes of a new file's pages, with nothing else, in large
  folios as the store's warming thread does for a slave catching up (the
  rate this machine hands out page cache at, which the slave's store and
  its warming thread share). Each of these files is deleted before the
  next step, so the slave's page cache, like the fresh page cache's, comes
  from memory freed just before: a long-running broker's page cache
  recycles its own memory, whereas memory a virtual machine has not
  touched for a while may cost the host's lazy backing on top (several
  times slower here). The slave's time in ``append_written`` (the
  store's part once the bytes are in its mapped space: checking and
  indexing the records) is shown, and the process's CPU time (both
  nodes, and the store's page-warming thread) and the trio thread's (both
  nodes) beside the wall-clock time: on a shared machine, a wall time far
  above the CPU time means the run waited for a CPU; a wall time far above
  the trio thread's means the nodes waited (for a disk, for page cache).
  An unreported replication of the first case runs first, at full size,
  so that no case pays the process's first-use costs (imports, allocator
  arenas, the first large runs of page cache: with a 16 MiB warm-up the
  first case ran at a third of the same case later in the run).
  ``--rounds`` repeats the cases, in turn.
- **put latency**: ``--puts`` sequential ``DirectProducer.send`` calls (1 KiB
  body), first to a master alone (``min_in_sync_replicas = 1``: no wait),
  then to a master with one slave and ``all_ack_in_sync_state_set`` (each
  put waits for the slave's ack). Flush policy ``none`` in both, so the
  difference is the replication.

Every other broker setting is the default (the key index on, as
``message_index_enable`` is by default); ``--broker-setting`` changes one
for a comparison, and the first line printed names it.

It prints Markdown tables; BENCHMARKS.md's "HA replication" section comes
from it.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import statistics
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import attrs
import trio

import triomq.plugins.broker
from triomq.broker.index.core.index_dispatch import SPEEDUPS as KEY_INDEX_SPEEDUPS
from triomq.broker.service import broker_of
from triomq.config import NodeConfig, from_mapping
from triomq.plugin_manager import PluginManager
from triomq.protocol import ha as ha_frames
from triomq.protocol.commitlog_layout import SPEEDUPS
from triomq.protocol.message import MessageRecord
from triomq.runtime import open_node
from triomq.testing.direct_send import DirectProducer

SEGMENT = 256 << 20
CHUNK = 256 * 1024
#: Linux 5.14+ (not in Python 3.11's mmap module).
MADV_POPULATE_WRITE = 23


def plugins() -> PluginManager:
    pm = PluginManager.discover(disable={"broker"})
    pm.register(triomq.plugins.broker, name="broker")
    return pm


#: ``--broker-setting`` lines, added to every broker's ``[broker]`` table.
SETTINGS: list[str] = []


def broker_config(name: str, root: Path, *, broker_id: int = 0, master: str = "",
                  extra: str = "") -> NodeConfig:
    text = f"""
name = "{name}"
role = "broker"
listen = "tcp://127.0.0.1:0"
log_level = "WARNING"
[store]
path = "{root / name}"
options = {{ segment_size = {SEGMENT} }}
[broker]
broker_id = {broker_id}
ha_listen_port = 0
ha_master_address = "{master}"
flush_policy = "none"
{extra}
{chr(10).join(SETTINGS)}
"""
    return from_mapping(NodeConfig, tomllib.loads(text))


@asynccontextmanager
async def broker(pm: PluginManager, name: str, root: Path, **kwargs):
    async with open_node(broker_config(name, root, **kwargs), plugins=pm) as node:
        yield broker_of(node)


def fill(pm: PluginManager, root: Path, megabytes: int, body_size: int) -> int:
    """Write ``megabytes`` of records into a fresh master store; return the log's size."""
    log = pm.log_store("commitlog", "mmap")(str(root / "master"), {"segment_size": SEGMENT})
    body = os.urandom(body_size)
    records = [MessageRecord(topic="BenchTopic", body=body, queue_id=i % 8,
                             born_host=("10.0.0.1", 50000), store_host=("10.0.0.2", 10911),
                             properties={"TAGS": "tag", "UNIQ_KEY": f"{i:032X}"})
               for i in range(256)]
    while log.max_offset < megabytes << 20:
        log.append_batch(records)
    size = log.max_offset
    log.close()
    return size


async def raw_transfer(log, size: int, sink: Path | None = None) -> float:
    """Seconds to send ``size`` bytes over a trio TCP loopback socket and receive them.

    With ``sink``, the receiver also writes every chunk at its offset into
    a fresh mapped file there (blocks allocated beforehand, as the mmap
    store allocates them ahead of its writes): what any replica writing
    such a file pays for its page faults, outside the clock's file setup.
    """
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    received = 0
    done = trio.Event()
    mm = None
    if sink is not None:
        fd = os.open(sink, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, SEGMENT)
        os.posix_fallocate(fd, 0, size)
        mm = mmap.mmap(fd, SEGMENT)
        os.close(fd)

    async def receive(stream: trio.abc.Stream) -> None:
        nonlocal received
        while received < size:
            data = await stream.receive_some(CHUNK)
            if not data:
                break
            if mm is not None:
                mm[received:received + len(data)] = data
            received += len(data)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, receive, listeners)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        start = time.perf_counter()
        offset = 0
        scratch = memoryview(bytearray(CHUNK))
        while offset < size:
            with log.read_view(offset, scratch) as chunk:
                await stream.send_all(chunk)
                offset += len(chunk)
        await done.wait()
        elapsed = time.perf_counter() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    if mm is not None:
        mm.close()
        sink.unlink()
    return elapsed


def fresh_pages(path: Path, size: int) -> float:
    """Seconds one thread takes to fault in ``size`` bytes of a new file's page cache.

    ``madvise(MADV_POPULATE_WRITE)`` over a fresh mapping, random access and
    large folios, as the store warms the segment a slave catching up fills:
    what the slave's store and its warming thread pay per byte besides the
    copy, here. The file is deleted afterwards.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, SEGMENT)
        mm = mmap.mmap(fd, SEGMENT)
    finally:
        os.close(fd)
    mm.madvise(mmap.MADV_RANDOM)
    mm.madvise(mmap.MADV_HUGEPAGE)
    start = time.perf_counter()
    mm.madvise(MADV_POPULATE_WRITE, 0, size)
    elapsed = time.perf_counter() - start
    mm.close()
    path.unlink()
    return elapsed


@contextmanager
def timed_append_written(log_type: type, spent: list[float],
                         appended: Callable[[int], None]) -> Iterator[None]:
    """Add the seconds spent in ``log_type.append_written`` to ``spent[0]`` while
    inside, and call ``appended`` with the log's new end after each call."""
    original = log_type.append_written

    def append_written(self, offset, size):
        start = time.perf_counter()
        try:
            end = original(self, offset, size)
        finally:
            spent[0] += time.perf_counter() - start
        appended(end)
        return end

    log_type.append_written = append_written
    try:
        yield
    finally:
        log_type.append_written = original


@attrs.frozen
class Replication:
    """One replication case's measurements, in bytes and seconds."""

    size: int
    elapsed: float  # from the slave node's start until it holds every byte
    first_byte: float  # from the slave node's start until it holds any byte
    raw: float
    raw_file: float
    fresh_pages: float  # one thread faulting in ``size`` bytes of new page cache
    appending: float  # the slave's time in ``append_written``
    cpu: float  # the process's CPU time over ``elapsed``
    loop_cpu: float  # the trio thread's (both nodes') CPU time over ``elapsed``


async def replication(pm: PluginManager, root: Path, megabytes: int, body_size: int,
                      batch: int) -> Replication:
    """Replicate ``megabytes`` of records to a fresh slave; the raw transfers beside it."""
    size = await trio.to_thread.run_sync(fill, pm, root, megabytes, body_size)
    extra = f"ha_transfer_batch_size = {batch}"
    spent = [0.0]
    first_byte: list[float] = []
    done = trio.Event()

    def appended(end: int) -> None:
        if not first_byte:
            first_byte.append(time.perf_counter() - start)
        if end >= size:
            done.set()

    async with broker(pm, "master", root, extra=extra) as master:
        # A running master's key index follows its puts: let it index the log filled
        # beforehand, so that neither the raw transfers nor the replication share the
        # process with that backlog.
        while master.index is not None and not master.index.caught_up:
            await trio.sleep(0.01)
        raw = await raw_transfer(master.log, size)
        raw_file = await raw_transfer(master.log, size, root / "raw-sink")
        fresh = fresh_pages(root / "fresh-pages", size)
        # Only the slave appends replicated bytes: the master's log was filled
        # before. Its appends stop the clock (no polling in the measured loop).
        with timed_append_written(type(master.log), spent, appended):
            start, cpu = time.perf_counter(), time.process_time()
            loop_cpu = time.thread_time()
            async with broker(pm, "slave", root, broker_id=1, master=master.ha_address,
                              extra=extra):
                with trio.fail_after(600):
                    await done.wait()
                elapsed = time.perf_counter() - start
                cpu = time.process_time() - cpu
                loop_cpu = time.thread_time() - loop_cpu
    return Replication(size, elapsed, first_byte[0], raw, raw_file, fresh, spent[0], cpu,
                       loop_cpu)


async def put_latencies(pm: PluginManager, root: Path, puts: int, with_slave: bool
                        ) -> list[float]:
    """Latency of each of ``puts`` sequential sends, in ms."""
    extra = "all_ack_in_sync_state_set = true" if with_slave else ""
    tag = "sync" if with_slave else "alone"
    body = os.urandom(1024)
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            open_node(from_mapping(NodeConfig, {"name": "client"}), plugins=pm))
        master = await stack.enter_async_context(broker(pm, f"m-{tag}", root, extra=extra))
        if with_slave:
            await stack.enter_async_context(
                broker(pm, f"s-{tag}", root, broker_id=1, master=master.ha_address, extra=extra))
            while len(master.replicas.sync_state_set) < 2:
                await trio.sleep(0.01)
        producer = DirectProducer(client.rpc, master.node.address)
        for _ in range(min(200, puts)):  # warm up the connections
            await producer.send("Lat", body)
        latencies = []
        for _ in range(puts):
            start = time.perf_counter()
            await producer.send("Lat", body)
            latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def main(args: argparse.Namespace) -> None:
    pm = plugins()
    SETTINGS.extend(args.broker_setting)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, trio {trio.__version__}; slave indexing: "
          f"{'C speedups' if SPEEDUPS else 'pure Python'}; HA frames: "
          f"{'C speedups' if ha_frames.SPEEDUPS else 'pure Python'}; key index: "
          f"{'C speedups' if KEY_INDEX_SPEEDUPS else 'pure Python'}; settings: "
          f"{', '.join(SETTINGS) or 'the defaults'}\n")
    print("| body | batch | bytes | raw trio TCP MB/s | raw TCP into a file MB/s "
          "| fresh page cache MB/s "
          "| HA replication MB/s | vs raw | vs raw into a file | HA ms | to first byte ms "
          "| transfer MB/s | transfer vs raw | slave append_written ms | process CPU ms "
          "| trio thread CPU ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: |")
    cases = [(1024, 32 * 1024), (1024, 256 * 1024), (16 * 1024, 256 * 1024)]
    with tempfile.TemporaryDirectory(prefix="triomq-ha-bench-") as tmp:
        await replication(pm, Path(tmp), args.megabytes, *cases[0])
    for body_size, batch in cases * args.rounds:
        with tempfile.TemporaryDirectory(prefix="triomq-ha-bench-") as tmp:
            r = await replication(pm, Path(tmp), args.megabytes, body_size, batch)
        mb = r.size / 1e6
        transfer = r.elapsed - r.first_byte
        print(f"| {body_size} B | {batch // 1024} KiB | {r.size:,} | {mb / r.raw:,.0f} | "
              f"{mb / r.raw_file:,.0f} | {mb / r.fresh_pages:,.0f} | {mb / r.elapsed:,.0f} | "
              f"{r.raw / r.elapsed:.0%} | {r.raw_file / r.elapsed:.0%} | {r.elapsed * 1000:,.0f} | "
              f"{r.first_byte * 1000:,.0f} | {mb / transfer:,.0f} | {r.raw / transfer:.0%} | "
              f"{r.appending * 1000:,.0f} | {r.cpu * 1000:,.0f} | {r.loop_cpu * 1000:,.0f} |",
              flush=True)
    print("\n| put (1 KiB, sequential) | p50 ms | p99 ms | puts/s |")
    print("| --- | ---: | ---: | ---: |")
    results = {}
    for with_slave in (False, True):
        with tempfile.TemporaryDirectory(prefix="triomq-ha-bench-") as tmp:
            lat = await put_latencies(pm, Path(tmp), args.puts, with_slave)
        label = "master + 1 slave, all_ack" if with_slave else "master alone"
        results[with_slave] = lat
        print(f"| {label} | {percentile(lat, 50):.3f} | {percentile(lat, 99):.3f} | "
              f"{len(lat) / (sum(lat) / 1000):,.0f} |")
    added50 = percentile(results[True], 50) - percentile(results[False], 50)
    added99 = percentile(results[True], 99) - percentile(results[False], 99)
    print(f"| added by synchronous replication | {added50:.3f} | {added99:.3f} | |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=128,
                        help="size of the log to replicate (default 128)")
    parser.add_argument("--puts", type=int, default=3000,
                        help="sequential puts per latency run (default 3000)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times to run the replication cases, in turn (default 1)")
    parser.add_argument("--broker-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a [broker] setting (TOML) that differs from the defaults, "
                             "e.g. 'message_index_enable = false'; may repeat")
    trio.run(main, parser.parse_args())
