"""Store benchmarks: append, read and restart figures for the mmap and LMDB stores.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python benchmarks/store.py

For 100-byte and 1-KiB bodies it measures, each as the best of a few
repetitions on fresh files:

- ``raw mmap``: slice writes of pre-encoded records into a fresh mapped
  file, the limit for a Python writer (no encoding, no index); and the
  same into a file whose blocks were allocated first (``posix_fallocate``),
  as the mmap store's files do a few MiB ahead of their writes (the
  commit log instead warms its pages ahead in a background thread, see
  ``plugins/store_mmap/prefault.py``);
- ``mmap append``: ``MmapCommitLog.append`` one record at a time (encode,
  blank placement, write, consume-queue entry);
- ``mmap batch``: ``append_batch`` of 256 records;
- ``lmdb batch``: ``LmdbCommitLog.append_batch`` of 256 records, durable
  (one fsync per batch), and with ``sync=False``;
- sequential reads: ``read`` in 1 MiB chunks over the whole log, and
  decoding every record with ``iter_records``;
- restart after a clean stop for two log sizes (no scan: should not grow).

Every writer starts on an open store whose files exist (the raw writers'
file is created before the clock starts; the stores get one untimed batch
first, which creates the segment and the consume-queue files). Repetitions
of the writers are interleaved so that they share the machine's load. It
prints which encoder ran (the C speedups or pure Python, see
``TRIOMQ_NO_SPEEDUPS``) and a Markdown table with records/s, MB/s and the
ratio to the raw limit; the figures in BENCHMARKS.md come from it.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from triomq.plugins.store_lmdb import LmdbCommitLog
from triomq.plugins.store_mmap import MmapCommitLog
from triomq.protocol.commitlog_layout import SPEEDUPS
from triomq.protocol.message import MessageRecord, encode

BATCH = 256
SEGMENT = 1 << 30


def make_records(n: int, body_size: int) -> list[MessageRecord]:
    body = os.urandom(body_size)
    return [MessageRecord(topic="BenchTopic", body=body, queue_id=i % 8, store_timestamp=i,
                          born_host=("10.0.0.1", 50000), store_host=("10.0.0.2", 10911),
                          properties={"TAGS": "tag", "UNIQ_KEY": f"{i:032X}"})
            for i in range(n)]


def best(repeat: int, run: Callable[[str], float], workdir: str) -> float:
    """The smallest time of ``repeat`` runs, each in a fresh directory."""
    times = []
    for i in range(repeat):
        d = os.path.join(workdir, f"run{i}")
        os.makedirs(d)
        try:
            times.append(run(d))
        finally:
            shutil.rmtree(d)
    return min(times)


def raw_mmap(encoded: list[bytes], *, preallocate: bool = False) -> Callable[[str], float]:
    def run(d: str) -> float:
        fd = os.open(os.path.join(d, "raw"), os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, SEGMENT)
        if preallocate:
            os.posix_fallocate(fd, 0, sum(map(len, encoded)))
        mm = mmap.mmap(fd, SEGMENT)
        start = time.perf_counter()
        pos = 0
        for rec in encoded:
            n = len(rec)
            mm[pos:pos + n] = rec
            pos += n
        elapsed = time.perf_counter() - start
        mm.close()
        os.close(fd)
        return elapsed
    return run


def warm_up(log, records: list[MessageRecord]) -> None:
    """One untimed batch, so that the log's segment and queue files exist."""
    log.append_batch(records[:BATCH])


def mmap_append(records: list[MessageRecord]) -> Callable[[str], float]:
    def run(d: str) -> float:
        log = MmapCommitLog(d)
        warm_up(log, records)
        append = log.append
        start = time.perf_counter()
        for r in records:
            append(r)
        elapsed = time.perf_counter() - start
        log.close()
        return elapsed
    return run


def batched(open_log: Callable[[str], object], records: list[MessageRecord]
            ) -> Callable[[str], float]:
    batches = [records[i:i + BATCH] for i in range(0, len(records), BATCH)]

    def run(d: str) -> float:
        log = open_log(d)
        warm_up(log, records)
        start = time.perf_counter()
        for b in batches:
            log.append_batch(b)
        elapsed = time.perf_counter() - start
        log.close()
        return elapsed
    return run


def reads(records: list[MessageRecord], workdir: str) -> tuple[float, float, int]:
    """(seconds for 1 MiB reads of the log, seconds to decode every record, log bytes)."""
    d = os.path.join(workdir, "reads")
    log = MmapCommitLog(d)
    for i in range(0, len(records), BATCH):
        log.append_batch(records[i:i + BATCH])
    end = log.max_offset
    chunk_times, decode_times = [], []
    for _ in range(3):
        start = time.perf_counter()
        pos = 0
        while pos < end:
            pos += len(log.read(pos, 1 << 20))
        chunk_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        count = sum(1 for _ in log.iter_records())
        decode_times.append(time.perf_counter() - start)
        assert count == len(records)
    log.close()
    shutil.rmtree(d)
    return min(chunk_times), min(decode_times), end


def restart_time(size_bytes: int, workdir: str) -> tuple[float, float]:
    """(seconds to reopen after a clean stop, seconds for a full-scan recovery) for a log
    of about ``size_bytes``."""
    d = os.path.join(workdir, f"restart{size_bytes}")
    records = make_records(4096, 1024)
    log = MmapCommitLog(d, segment_size=64 << 20)
    while log.max_offset < size_bytes:
        log.append_batch(records[:BATCH])
    log.close()
    opens = []
    for _ in range(3):
        start = time.perf_counter()
        log = MmapCommitLog(d, segment_size=64 << 20)
        opens.append(time.perf_counter() - start)
        assert log.recovery["scanned"] == 0
        log.close()
    start = time.perf_counter()
    MmapCommitLog(d, segment_size=64 << 20, full_recovery=True).close()
    full = time.perf_counter() - start
    shutil.rmtree(d)
    return min(opens), full


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="triomq-bench-", dir=args.dir)
    try:
        print(f"encoder: {'C speedups' if SPEEDUPS else 'pure Python'}\n")
        print("| body | writer | records/s | MB/s | vs raw |")
        print("| --- | --- | ---: | ---: | ---: |")
        for body_size, n in ((100, 200_000), (1024, 80_000)):
            records = make_records(n, body_size)
            encoded = [encode(r) for r in records]
            nbytes = sum(len(e) for e in encoded)
            cases = [
                ("raw mmap (limit)", raw_mmap(encoded), args.repeat),
                ("raw mmap, blocks preallocated", raw_mmap(encoded, preallocate=True),
                 args.repeat),
                ("mmap append", mmap_append(records), args.repeat),
                ("mmap batch", batched(MmapCommitLog, records), args.repeat),
                ("lmdb batch, durable", batched(LmdbCommitLog, records), 1),
                ("lmdb batch, sync=False",
                 batched(lambda d: LmdbCommitLog(d, sync=False), records), 1),
            ]
            # Repetitions are interleaved so that every writer sees the same load.
            times: dict[str, float] = {}
            for rep in range(args.repeat):
                for name, run, repeat in cases:
                    if rep < repeat:
                        t = best(1, run, workdir)
                        times[name] = min(times.get(name, t), t)
            raw = times[cases[0][0]]
            for name, _, _ in cases:
                t = times[name]
                print(f"| {body_size} B | {name} | {n / t:,.0f} | {nbytes / t / 1e6:,.0f} "
                      f"| {raw / t:.0%} |", flush=True)
            chunk, dec, end = reads(records, workdir)
            print(f"| {body_size} B | sequential read, 1 MiB chunks | {n / chunk:,.0f} "
                  f"| {end / chunk / 1e6:,.0f} | |")
            print(f"| {body_size} B | iter_records (decode + CRC) | {n / dec:,.0f} "
                  f"| {end / dec / 1e6:,.0f} | |", flush=True)
        print()
        print("| log size | clean restart | full-scan recovery |")
        print("| ---: | ---: | ---: |")
        for size in (64 << 20, 512 << 20):
            clean, full = restart_time(size, workdir)
            print(f"| {size >> 20} MiB | {clean * 1000:.1f} ms | {full * 1000:.0f} ms |",
                  flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
