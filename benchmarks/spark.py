"""Spark read throughput: the ``triomq`` data source against Parquet, 1 and 2 cores.

Writes a store root of N records (RocketMQ layout, IPv4 hosts, ~100-byte
bodies, three topics), exports it to Parquet with ``triomq export
parquet`` (pyarrow), then measures rows per second of

- the data source with ``local[1]`` and ``local[2]`` (the speed-up),
- Spark reading the Parquet export with ``local[1]`` and ``local[2]``
  (what an analyst would otherwise use),
- the data source's decoding alone, in this process (no Spark),

each Spark query materialising every column (``write.format("noop")``),
with the data source's default options unless ``--max-bytes-per-partition``
is given (``register(spark)`` makes ``parallelism`` the session's
``defaultParallelism``, N for ``local[N]``, as for any user). Sessions
alternate between 1 and 2 cores for ``--rounds`` rounds (the machine's load
moves), and each session's processes (the JVM, its Python workers and this
driver), every thread of them, run on N CPUs only for ``local[N]``, so that
1 -> 2 measures one CPU against two. Each session runs one warm-up query
per read, then ``--queries`` timed ones; each figure is the best over
rounds and queries, and the medians are printed too. Besides
wall-clock rows per second, it reports rows per CPU-second of the Spark
processes (the JVM and its Python workers, from ``/proc`` on Linux), which
other programs' load moves much less. Usage::

    .venv/bin/python benchmarks/spark.py --records 3000000 --rounds 2 --queries 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

import attrs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.spark.storegen import StoreWriter, sample_records
from triomq.plugins.spark_export import register
from triomq.plugins.spark_export.options import parse_options
from triomq.plugins.spark_export.parquet import export_parquet
from triomq.plugins.spark_export.plan import plan_tasks, read_task, resolve
from triomq.plugins.spark_export.store_files import StoreFiles
from triomq.protocol import columns

CHUNK = 100_000


def write_store(root: str, records: int, segment_size: int, body_size: int) -> StoreWriter:
    """A store of ``records`` records with IPv4 hosts."""
    writer = StoreWriter(root, segment_size)
    for start in range(0, records, CHUNK):
        batch = sample_records(min(CHUNK, records - start), start=start, body_size=body_size)
        writer.append([attrs.evolve(r, born_host=("10.0.0.1", 40000)) for r in batch])
    return writer


def session(cores: int):
    """A fresh local session with ``cores`` cores."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{cores}]").appName(f"bench-{cores}")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def timed(run) -> float:
    """Seconds ``run()`` takes."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def spark_processes() -> dict[int, int] | None:
    """This process's descendants (the Spark JVM, its Python workers) with the CPU
    ticks each used so far (its finished children included), from ``/proc``;
    ``None`` off Linux."""
    try:
        stats = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                fields = stat[stat.rindex(")") + 2:].split()
                stats[int(pid)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {}, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        found[pid] = stats[pid][1]
        todo += children.get(pid, [])
    return found


def spark_cpu_seconds() -> float | None:
    """CPU seconds used so far by the Spark processes (``spark_processes``)."""
    found = spark_processes()
    return None if found is None else sum(found.values()) / _TICK


def pin_spark(cpus: set[int]) -> bool:
    """Run this process and the Spark processes, every thread of them, on ``cpus``
    only (threads and processes started later inherit it); whether it could."""
    found = spark_processes()
    if found is None or not hasattr(os, "sched_setaffinity"):
        return False
    for pid in (os.getpid(), *found):
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # ended meanwhile
        for tid in threads:
            with contextlib.suppress(OSError):  # ended meanwhile
                os.sched_setaffinity(int(tid), cpus)
    return True


def cpu_ticks() -> tuple[int, int] | None:
    """The machine's (steal, all) CPU ticks so far (``/proc/stat``); ``None`` off Linux."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    return ticks[7], sum(ticks)


def cpu_timed(run) -> tuple[float, float | None, float | None]:
    """Seconds and Spark CPU-seconds ``run()`` takes, and the share of the machine's
    CPU time the hypervisor gave to others meanwhile (steal)."""
    before, ticks = spark_cpu_seconds(), cpu_ticks()
    seconds = timed(run)
    after, ticks_after = spark_cpu_seconds(), cpu_ticks()
    steal = None
    if ticks is not None and ticks_after is not None and ticks_after[1] > ticks[1]:
        steal = (ticks_after[0] - ticks[0]) / (ticks_after[1] - ticks[1])
    return seconds, None if before is None or after is None else after - before, steal


def measure(spark, store: str, parquet: str, max_bytes: int | None, queries: int
            ) -> dict[str, list[tuple[float, float | None, float | None]]]:
    """(seconds, CPU-seconds, steal) of each of ``queries`` reads of every column
    through the data source and from Parquet, after a warm-up read of each."""
    def source() -> None:
        reader = spark.read.format("triomq")
        if max_bytes is not None:
            reader = reader.option("maxBytesPerPartition", max_bytes)
        reader.load(store).write.format("noop").mode("overwrite").save()

    def from_parquet() -> None:
        spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

    source()
    from_parquet()
    found: dict[str, list[tuple[float, float | None, float | None]]] = {
        "source": [], "parquet": []}
    for _ in range(queries):
        found["source"].append(cpu_timed(source))
        found["parquet"].append(cpu_timed(from_parquet))
    return found


def decode_alone(store: str, max_bytes: int | None) -> float:
    """CPU seconds to plan and decode every task in this process, without Spark."""
    raw = {"path": store}
    if max_bytes is not None:
        raw["maxBytesPerPartition"] = str(max_bytes)
    opts = parse_options(raw)

    def run() -> None:
        files = StoreFiles.open(store)
        bounds = resolve(files, opts)
        for task in plan_tasks(files, bounds.start, bounds.end, opts):
            for _ in read_task(task):
                pass

    start = time.process_time()
    run()
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--segment-size", type=int, default=128 << 20)
    parser.add_argument("--max-bytes-per-partition", type=int,
                        help="the data source's option (default: its own default)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=3,
                        help="timed queries per read in each session")
    parser.add_argument("--workdir", help="keep the store and export here (default: temp)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    workdir = args.workdir or tempfile.mkdtemp(prefix="triomq-bench-")
    store, parquet = os.path.join(workdir, "store"), os.path.join(workdir, "parquet")
    try:
        start = time.perf_counter()
        writer = write_store(store, args.records, args.segment_size, args.body_size)
        print(f"store: {args.records} records, {writer.end / 2**20:.0f} MiB "
              f"({time.perf_counter() - start:.1f} s)")
        start = time.perf_counter()
        export_parquet(parse_options({"path": store}), parquet)
        elapsed = time.perf_counter() - start
        print(f"pyarrow export: {elapsed:.1f} s, {args.records / elapsed:,.0f} rows/s")
        decode = decode_alone(store, args.max_bytes_per_partition)
        available = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        pinned = False
        samples: dict[tuple[int, str], list[float]] = {}
        cpu_samples: dict[tuple[int, str], list[float]] = {}
        every: list[str] = []
        for _ in range(args.rounds):
            for cores in (1, 2):
                spark = session(cores)
                # local[N] on N CPUs: with more, the JVM and the Python workers
                # of local[1] would run side by side on a second CPU.
                pinned = pin_spark(set(sorted(available)[:cores]))
                for name, runs in measure(spark, store, parquet, args.max_bytes_per_partition,
                                          args.queries).items():
                    for seconds, cpu, steal in runs:
                        every.append(f"local[{cores}] {name} {args.records / seconds:,.0f} rows/s"
                                     + (f", steal {steal:.0%}" if steal is not None else ""))
                        samples.setdefault((cores, name), []).append(seconds)
                        if cpu is not None:
                            cpu_samples.setdefault((cores, name), []).append(cpu)
                spark.stop()
        pin_spark(available)
        best = {key: min(values) for key, values in samples.items()}
        best_cpu = {key: min(values) for key, values in cpu_samples.items()}
        n = args.records
        print("\n| read | local[1] rows/s | local[2] rows/s | speed-up 1 -> 2 "
              "| rows per CPU-s, local[1] | local[2] |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, label in (("source", "triomq data source"), ("parquet", "Parquet export")):
            one, two = best[1, name], best[2, name]
            per_cpu = [f"{n / cpu:,.0f}" if (cpu := best_cpu.get((cores, name))) else "n/a"
                       for cores in (1, 2)]
            print(f"| {label} | {n / one:,.0f} | {n / two:,.0f} | {one / two:.2f}x "
                  f"| {' | '.join(per_cpu)} |")
        print(f"| decoding alone (one Python process, no Spark; per CPU-s) | {n / decode:,.0f} "
              "| | | | |")
        runs = args.rounds * args.queries
        for name, label in (("source", "data source"), ("parquet", "Parquet")):
            one, two = (statistics.median(samples[cores, name]) for cores in (1, 2))
            print(f"\nmedian of {runs} queries, {label}: local[1] {n / one:,.0f} rows/s, "
                  f"local[2] {n / two:,.0f} rows/s, speed-up {one / two:.2f}x", end="")
        print()
        for cores in (1, 2):
            ratio = best[cores, "parquet"] / best[cores, "source"]
            print(f"\ndata source / Parquet with local[{cores}]: {ratio:.0%} of the rate", end="")
            if best_cpu.get((cores, "source")) and best_cpu.get((cores, "parquet")):
                cpu_ratio = best_cpu[cores, "parquet"] / best_cpu[cores, "source"]
                print(f", {cpu_ratio:.0%} of the rows per CPU-second", end="")
        print()
        print("every query (steal: the machine's CPU time the hypervisor gave to others):")
        for line in every:
            print(f"  {line}")
        print(f"Spark pinned to as many CPUs as local[N] has: {'yes' if pinned else 'no'}")
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
              f"columns decoded {'in C' if columns.SPEEDUPS else 'in Python (no C pass)'}")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
