"""Failover benchmark: from killing a master process to the first put the new master acknowledges.

Run from the repository root (about two minutes)::

    .venv/bin/python benchmarks/failover.py

Set-up, over TCP loopback, with the default settings of every component:

- three controllers in this benchmark's process (one trio loop, three
  nodes of role ``controller``, ``triomq.testing.cluster``);
- a name server in this process too (role ``nameserver``), which every
  broker registers with;
- one broker group of three replicas, each a separate
  ``python -m triomq.cli broker --config FILE`` process in controller
  mode (mmap store, ``all_ack_in_sync_state_set = true``).

For each log size the group's commit log is first filled to that size with
synchronous puts. Then, per trial: the current master's process gets
SIGKILL; the clock starts just before the signal and stops when a put
(1 KiB, sent to the surviving replicas in turn, every 5 ms, until one
answers SUCCESS) is acknowledged by the new master. Meanwhile a second
clock stops when the name server's route of the topic names the new
master as broker id 0 (asked every 5 ms): what a client that follows
routes waits. The killed broker is
restarted (it rejoins as a slave) and the next trial waits until the
controllers' SyncStateSet holds all three replicas again. At the end every
acknowledged 1 KiB put (one before and one after each failover) is looked
up in each replica's commit log on disk.

Beside it, in the same run, RocketMQ itself (``rocketmq_peer.py``: its name
server, one controller and a group of three brokers in controller mode, with
``allAckInSyncStateSet = true`` and ``SYNC_FLUSH``, every other setting at
RocketMQ's default), measured the same way: the log filled through the master,
its JVM SIGKILLed, puts (SEND_MESSAGE_V2) to the survivors until one answers
SUCCESS, the name server's route asked until it names the new master, the
victim restarted and the SyncStateSet waited for. At the end each acknowledged
put is read back from every replica (VIEW_MESSAGE_BY_ID at its physical
offset). Skipped, saying why, without ``java``, ``mvn`` or the classpath
``make rocketmq-server`` resolves.

Prints a Markdown table; BENCHMARKS.md's "Failover" section comes from it.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rocketmq_peer
import trio

import triomq.plugins.broker
import triomq.plugins.controller_dledger
import triomq.plugins.namesrv
from triomq.broker.core.codes import RequestCode as BrokerCode
from triomq.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from triomq.namesrv.core.processor import RequestCode
from triomq.plugin_manager import PluginManager
from triomq.protocol.route import TopicRouteData, loads
from triomq.rpc import RpcError
from triomq.testing.cluster import BROKER_NAME, free_tcp_port, open_cluster
from triomq.testing.direct_send import DirectProducer, SendError

ROOT = Path(__file__).resolve().parent.parent
BODY = b"x" * 1024
FILL_BODY = b"f" * 65536


def plugin_manager() -> PluginManager:
    pm = PluginManager.discover(disable={"broker", "controller_dledger", "namesrv"})
    pm.register(triomq.plugins.broker, name="broker")
    pm.register(triomq.plugins.controller_dledger, name="controller_dledger")
    pm.register(triomq.plugins.namesrv, name="namesrv")
    return pm


class BrokerProcess:
    """One broker replica as a ``triomq broker`` process with a fixed address."""

    def __init__(self, name: str, root: Path, controllers: list[str], namesrv: str) -> None:
        self.name = name
        self.address = f"tcp://127.0.0.1:{free_tcp_port()}"
        self.config = root / f"{name}.toml"
        self.log = root / f"{name}.log"
        quoted = ", ".join(f'"{c}"' for c in controllers)
        self.config.write_text(f"""
name = "{name}"
role = "broker"
listen = "{self.address}"
log_level = "WARNING"

[store]
path = "{root / name}"

[broker]
broker_name = "{BROKER_NAME}"
enable_controller_mode = true
controller_addresses = [{quoted}]
namesrv_addr = ["{namesrv}"]
ha_listen_port = {free_tcp_port()}
all_ack_in_sync_state_set = true
""")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "triomq.cli", "broker", "--config", str(self.config)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


async def wait_for(predicate, timeout: float = 60.0):
    """Poll an async predicate until it returns something true."""
    with trio.fail_after(timeout):
        while not (value := await predicate()):
            await trio.sleep(0.02)
    return value


async def run_size(root: Path, megabytes: int, trials: int
                   ) -> tuple[list[float], list[float], int]:
    """Fill the log to ``megabytes`` and run ``trials`` failovers; their times and the
    times until the route names the new master (s), and how many acknowledged puts a
    replica lacks at the end."""
    async with open_cluster(root, transport="tcp", brokers=0, plugins=plugin_manager(),
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        client_node = await cluster.start("client")
        rpc = client_node.rpc
        namesrv = cluster.namesrv_addresses["n1"]
        controller = ControllerClient(rpc, list(cluster.controller_addresses.values()))
        brokers = [BrokerProcess(f"b{i}", root, list(cluster.controller_addresses.values()),
                                 namesrv.removeprefix("tcp://"))
                   for i in (1, 2, 3)]
        by_address = {b.address: b for b in brokers}
        try:
            for broker in brokers:
                broker.start()

            async def full_group():
                try:
                    info = await controller.get_replica_info(BROKER_NAME)
                except (ControllerError, ControllerUnavailable):
                    return None  # no leader yet, or the group is not registered yet
                if info.master_address and len(info.sync_state_set) == 3:
                    return info
                return None

            info = await wait_for(full_group)
            await fill(rpc, info.master_address, megabytes << 20)
            acked: list[int] = []
            times: list[float] = []
            route_times: list[float] = []
            for trial in range(trials):
                info = await wait_for(full_group)
                victim = by_address[info.master_address]
                survivors = [b.address for b in brokers if b is not victim]
                offset = await DirectProducer(rpc, victim.address).send("bench", BODY)
                acked.append(offset.physical_offset)
                await wait_for(functools.partial(routed_master, rpc, namesrv, victim.address))
                start = time.perf_counter()
                victim.kill()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(time_route, rpc, namesrv, survivors, start, route_times)
                    new_master, offset = await first_put(rpc, survivors)
                    times.append(time.perf_counter() - start)
                acked.append(offset)
                print(f"  {megabytes} MiB trial {trial + 1}: {times[-1] * 1000:.0f} ms, "
                      f"routed after {route_times[-1] * 1000:.0f} ms ({victim.name} killed, "
                      f"{by_address[new_master].name} took over)", flush=True)
                victim.start()
            await wait_for(full_group)
            max_offsets = [await broker_max_offset(rpc, b.address) for b in brokers]
            await wait_for(lambda: caught_up(rpc, brokers, max(max_offsets)))
        finally:
            for broker in brokers:
                broker.stop()
        lost = await trio.to_thread.run_sync(count_lost, cluster.plugins, root, acked)
        return times, route_times, lost


async def routed_master(rpc, namesrv: str, candidates: str | list[str]) -> str | None:
    """The broker the name server routes topic "bench" to as id 0, if one of ``candidates``."""
    answer = await rpc.invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "bench"})
    if answer.code != 0:
        return None
    (group,) = TopicRouteData.decode(answer.body).broker_datas
    master = group.broker_addrs.get(0)
    address = None if master is None else f"tcp://{master}"
    return address if address in ([candidates] if isinstance(candidates, str)
                                  else candidates) else None


async def time_route(rpc, namesrv: str, survivors: list[str], start: float,
                     into: list[float]) -> None:
    """Append the time from ``start`` until the route names one of ``survivors`` as id 0."""
    while not await routed_master(rpc, namesrv, survivors):
        await trio.sleep(0.005)
    into.append(time.perf_counter() - start)


async def caught_up(rpc, brokers: list[BrokerProcess], offset: int) -> bool:
    return all([await broker_max_offset(rpc, b.address) >= offset for b in brokers])


def count_lost(pm: PluginManager, root: Path, acked: list[int]) -> int:
    """Acknowledged puts missing from any replica's commit log (read from disk)."""
    lost = 0
    for name in ("b1", "b2", "b3"):
        log = pm.log_store("commitlog", "mmap")(str(root / name), {})
        try:
            lost += sum(1 for offset in acked if offset >= log.max_offset
                        or log.read_record(offset).body != BODY)
        finally:
            log.close()
    return lost


async def fill(rpc, master: str, size: int) -> None:
    """Synchronous 64 KiB puts from eight tasks until the log holds ``size`` bytes."""
    producer = DirectProducer(rpc, master)
    written = [0]

    async def writer() -> None:
        while written[0] < size:
            result = await producer.send("fill", FILL_BODY)
            written[0] = max(written[0], result.physical_offset)

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(writer)


async def first_put(rpc, candidates: list[str]) -> tuple[str, int]:
    """Put to each candidate in turn until one acknowledges; (its address, the offset)."""
    while True:
        for address in candidates:
            try:
                result = await DirectProducer(rpc, address).send("bench", BODY)
            except (SendError, RpcError):
                continue
            return address, result.physical_offset
        await trio.sleep(0.005)


async def broker_max_offset(rpc, address: str) -> int:
    response = await rpc.invoke(address, BrokerCode.GET_MAX_OFFSET)
    return int(response.ext_fields["offset"])


# ------------------------------------------------------------------ RocketMQ


async def rocketmq_size(root: Path, megabytes: int, trials: int
                        ) -> tuple[list[float], list[float], int]:
    """``run_size`` against RocketMQ's controller-mode group (``rocketmq_peer``)."""
    async with open_cluster(root, transport="tcp", controllers=0, brokers=0) as cluster:
        rpc = (await cluster.start("client")).rpc
        async with rocketmq_peer.open_peer(root / "rocketmq", durable=True, rpc=rpc) as peer:
            assert peer.controller is not None
            controller = ControllerClient(rpc, ["tcp://" + peer.controller.address])
            namesrv = "tcp://" + peer.namesrv
            for topic in ("bench", "fill"):
                for broker in peer.brokers:  # each replica knows the topic once it leads
                    answer = await rpc.invoke(
                        "tcp://" + broker.address, BrokerCode.UPDATE_AND_CREATE_TOPIC, {
                        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1",
                        "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
                        "topicSysFlag": "0", "order": "false"})
                    assert answer.code == 0, answer.remark
            await fill(rpc, "tcp://" + peer.master, megabytes << 20)
            acked: list[int] = []
            times: list[float] = []
            route_times: list[float] = []
            for trial in range(trials):
                master = await peer.wait_in_sync(controller)
                victim = peer.by_address(master)
                survivors = ["tcp://" + b.address for b in peer.brokers if b is not victim]
                offset = await DirectProducer(rpc, "tcp://" + master).send("bench", BODY)
                acked.append(offset.physical_offset)
                await wait_for(functools.partial(rocketmq_routed, rpc, namesrv, [master]))
                start = time.perf_counter()
                await victim.kill()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(rocketmq_time_route, rpc, namesrv,
                                       [s.removeprefix("tcp://") for s in survivors], start,
                                       route_times)
                    new_master, offset = await first_put(rpc, survivors)
                    times.append(time.perf_counter() - start)
                acked.append(offset)
                print(f"  RocketMQ {megabytes} MiB trial {trial + 1}: {times[-1] * 1000:.0f} ms, "
                      f"routed after {route_times[-1] * 1000:.0f} ms ({victim.name} killed, "
                      f"{peer.by_address(new_master.removeprefix('tcp://')).name} took over)",
                      flush=True)
                await victim.start()
            await peer.wait_in_sync(controller)
            lost = 0
            for broker in peer.brokers:
                for offset in acked:
                    with trio.move_on_after(60):  # a replica still catching up
                        while not await rocketmq_holds(rpc, "tcp://" + broker.address, offset):
                            await trio.sleep(0.1)
                        continue
                    lost += 1
    return times, route_times, lost


async def rocketmq_routed(rpc, namesrv: str, candidates: list[str]) -> str | None:
    """The broker RocketMQ's name server routes "bench" to as id 0, if one of ``candidates``
    (read with ``loads``: its name server writes fastjson's bare integer keys)."""
    answer = await rpc.invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "bench"})
    if answer.code != 0:
        return None
    masters = {group["brokerAddrs"].get("0") for group in loads(answer.body)["brokerDatas"]}
    return next((master for master in candidates if master in masters), None)


async def rocketmq_time_route(rpc, namesrv: str, survivors: list[str], start: float,
                              into: list[float]) -> None:
    while not await rocketmq_routed(rpc, namesrv, survivors):
        await trio.sleep(0.005)
    into.append(time.perf_counter() - start)


async def rocketmq_holds(rpc, address: str, offset: int) -> bool:
    """Whether the broker at ``address`` reads the 1 KiB put at ``offset`` of its log."""
    answer = await rpc.invoke(address, BrokerCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
    # The record, as stored: its body comes before its topic and properties.
    return answer.code == 0 and BODY in answer.body


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main(args: argparse.Namespace) -> None:
    rows = []
    unavailable = "--no-rocketmq" if args.no_rocketmq else rocketmq_peer.unavailable()
    if unavailable is not None:
        print(f"RocketMQ skipped: {unavailable}")
    systems = [("triomq", run_size)]
    if unavailable is None:
        systems.append((f"RocketMQ {rocketmq_peer.VERSION}", rocketmq_size))
    for system, run in systems:
        for megabytes in args.sizes:
            with tempfile.TemporaryDirectory(prefix="triomq-failover-") as root:
                print(f"{system}, log size {megabytes} MiB: filling, then {args.trials} "
                      f"failovers", flush=True)
                times, route_times, lost = await run(Path(root), megabytes, args.trials)
            rows.append((system, megabytes, times, route_times, lost))
    print()
    print(f"Machine: {platform.machine()}, Python {platform.python_version()}, "
          f"trio {trio.__version__}, load average {os.getloadavg()[0]:.1f}")
    print()
    print("| system | log size | trials | p50 ms | p99 ms | min ms | max ms | mean ms "
          "| acked puts lost | routed p50 ms | routed p99 ms | routed minus failover, max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for system, megabytes, times, route_times, lost in rows:
        ms = [t * 1000 for t in times]
        routed = [t * 1000 for t in route_times]
        late = max(r - f for r, f in zip(routed, ms, strict=True))
        print(f"| {system} | {megabytes} MiB | {len(ms)} | {percentile(ms, 0.5):.0f} | "
              f"{percentile(ms, 0.99):.0f} | {min(ms):.0f} | {max(ms):.0f} | "
              f"{statistics.mean(ms):.0f} | {lost} | {percentile(routed, 0.5):.0f} | "
              f"{percentile(routed, 0.99):.0f} | {late:.0f} |")


if __name__ == "__main__":
    logging.getLogger("triomq").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40, help="failovers per log size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 256],
                        help="log sizes in MiB (default: 1 256)")
    parser.add_argument("--no-rocketmq", action="store_true", help="skip RocketMQ")
    trio.run(main, parser.parse_args())
