"""How long a broker with many topics takes to start.

    .venv/bin/python benchmarks/startup_topics.py [--topics 100,1000,10000] [--rounds 3]

For each count a static master broker (``python -m triomq.cli broker``, mmap
store, TCP loopback) is started once on an empty store whose
``config/topics.json`` names that many topics of 4 queues, and whose
commit log holds one message for each queue, written through the store
(so every queue has its consume-queue file, as a topic in use has; the
fixture is written without syncing). Then
the broker is started ``--rounds``
times on that store: the time from spawning the process to the broker
answering a GET_MAX_OFFSET of the last topic is one start. The table shows
the best and the median start, and the time per topic over the smallest
count's start (what start-up adds for each topic).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import trio

from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.config import NodeConfig
from triomq.plugins.store_mmap import MmapCommitLog
from triomq.protocol.message import MessageRecord
from triomq.protocol.route import TopicConfig
from triomq.runtime import open_node
from triomq.testing.cluster import free_tcp_port

ROOT = Path(__file__).resolve().parents[1]
QUEUES = 4
GET_MAX_OFFSET = 30


def topic(i: int) -> str:
    return f"topic-{i:05d}"


def write_store(root: Path, count: int) -> Path:
    """A broker config and a store whose topics.json holds ``count`` topics."""
    port = free_tcp_port()
    config = root / "broker.toml"
    config.write_text(f'name = "b"\nrole = "broker"\nlisten = "tcp://127.0.0.1:{port}"\n'
                      f'log_level = "WARNING"\n[store]\npath = "{root / "store"}"\n'
                      f'[broker]\nbroker_name = "broker-a"\nha_listen_port = {free_tcp_port()}\n'
                      'flush_policy = "none"\n')
    table = TopicTable.with_system_topics("DefaultCluster", "broker-a", auto_create=False,
                                          now=0)
    for i in range(count):
        table.update(TopicConfig(topic(i), QUEUES, QUEUES), now=0)
    (root / "store" / "config").mkdir(parents=True)
    (root / "store" / "config" / "topics.json").write_bytes(table.encode())
    return config


def address_of(config: Path) -> str:
    line = next(x for x in config.read_text().splitlines() if x.startswith("listen"))
    return line.split('"')[1]


async def start(config: Path, client, last_topic: str) -> tuple[subprocess.Popen, float]:
    """Spawn the broker; the seconds until it answers for ``last_topic``."""
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "triomq.cli", "broker", "--config",
                                str(config)], cwd=ROOT, stdout=subprocess.DEVNULL)
    address = address_of(config)
    port = int(address.rsplit(":", 1)[1])
    while True:  # a raw connect: the RPC client would back off between refusals
        if process.poll() is not None:
            raise SystemExit(f"the broker exited with {process.returncode}")
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.005)
            continue
        await stream.aclose()
        break
    while True:
        answer = await client.rpc.invoke(address, GET_MAX_OFFSET,
                                         {"topic": last_topic, "queueId": "0"}, timeout=30)
        if answer.code == 0:
            return process, time.perf_counter() - began
        await trio.sleep(0.005)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(60)


async def measure(count: int, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="triomq-startup-") as tmp:
        config = write_store(Path(tmp), count)
        # The fixture needs no durability: its queue files are not synced one by
        # one (tens of thousands of fsyncs would take minutes on a busy disk).
        with mock.patch("os.fdatasync", lambda fd: None), mock.patch("os.fsync",
                                                                     lambda fd: None):
            log = MmapCommitLog(str(Path(tmp) / "store"))
            for i in range(count):
                for queue in range(QUEUES):
                    log.append(MessageRecord(topic=topic(i), body=b"m", queue_id=queue))
            log.close()
        async with open_node(NodeConfig(name="client")) as client:
            times = []
            for _ in range(rounds):
                process, seconds = await start(config, client, topic(count - 1))
                times.append(seconds)
                stop(process)
        return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(c) for c in args.topics.split(",")]
    print("| topics | best start (s) | median start (s) | per topic over the first (µs) |")
    print("|---:|---:|---:|---:|")
    base: tuple[int, float] | None = None
    for count in counts:
        times = await measure(count, args.rounds)
        best = min(times)
        per_topic = "" if base is None else f"{(best - base[1]) / (count - base[0]) * 1e6:.0f}"
        base = base or (count, best)
        print(f"| {count:,} | {best:.2f} | {statistics.median(times):.2f} | {per_topic} |",
              flush=True)


if __name__ == "__main__":
    trio.run(main)
