"""Slave acting master: how soon an acting slave serves, and its escape bridges' rate.

Run from the repository root::

    .venv/bin/python benchmarks/acting_master.py [--trials 5] [--seconds 3]
                                                 [--vanish-trials 3]

One process, real TCP: a name server (``support_acting_master``, scan every
100 ms), broker group ``broker-a`` (master ``a0``, slave ``a1`` with
``enable_slave_acting_master``) and ``broker-b`` (master ``b0``), all with
the defaults otherwise (mmap store, ``flush_policy = "none"``); topic
``orders`` (4 queues) on both groups.

- **From the kill** of ``a0`` (its node stopped: its connections close, so
  the name server drops it at once, as for a crashed process whose host
  stays up; a host that vanishes is dropped after
  ``broker_not_active_timeout``), each trial measures when ``a1`` acts;
  when a route query first names ``a1`` as id 0; when a PULL_MESSAGE sent
  to the address that route names (of queue 1, which holds a message sent
  at the start) is first answered FOUND; and when a
  delayed message sent to ``a0`` just before the kill, with a 1 s level,
  reaches ``b0`` through the ``container`` bridge (given as its lateness:
  the time after it came due), and when one with the 5 s level, not yet due
  when ``a1`` starts acting and so handed on to ``b0`` as a timer message,
  reaches ``orders`` on ``b0`` (its lateness too). ``a0`` then returns,
  ``a1`` stops acting, and the next trial starts.
- **From a vanished host**: the same three first times, from the moment
  ``a0`` goes silent with its connections left open (the in-process
  transport holding back every byte to and from it, as a host that
  vanishes or a cable cut does), over a cluster of its own each trial
  (``--vanish-trials``), on the in-process transport, every broker and
  name-server setting the default but the scan: the name server drops
  ``a0`` ``broker_not_active_timeout`` (10 s) after its last heartbeat, at
  its next scan, and tells ``a1``.
- **The escape bridges' rate**: 64 tasks putting 1 KiB messages for
  ``--seconds`` through ``a1``'s ``container`` bridge (a put on ``b0``'s
  put flow in this process) and then its ``remote`` bridge
  (SEND_MESSAGE_V2 over TCP, a route query per put), beside 64 tasks of
  plain sends to ``b0`` (``DirectProducer``, SEND_MESSAGE_V2 over TCP) in
  the same run.

Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import trio

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.config import NodeConfig
from triomq.plugins.transport_inproc import get_network
from triomq.settings import from_mapping
from triomq.testing.cluster import Cluster, free_tcp_port, open_cluster
from triomq.testing.direct_send import DirectProducer

SEND_MESSAGE_V2, PULL_MESSAGE, GET_ROUTEINFO, CREATE_TOPIC = 310, 11, 105, 17
TASKS = 64
BODY = b"x" * 1024


class Nodes:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        tcp = cluster.transport == "tcp"
        names = ("a0", "a1", "b0")
        self.listen = {n: f"tcp://127.0.0.1:{free_tcp_port()}" if tcp else f"inproc://{n}"
                       for n in names}
        self.ha = {n: free_tcp_port() if tcp else 0 for n in names}
        self.ha_master = (f"tcp://127.0.0.1:{self.ha['a0']}" if tcp
                          else f"{self.listen['a0']}-ha")

    def config(self, name: str) -> NodeConfig:
        data = self.cluster._base(name, "broker", self.listen[name])
        broker_id = int(name[1])
        data["broker"] = {
            "broker_name": f"broker-{name[0]}", "broker_id": broker_id, "master_epoch": 1,
            "ha_listen_port": self.ha[name], "flush_policy": "none",
            "ha_master_address": self.ha_master if broker_id else "",
            "namesrv_addr": list(self.cluster.namesrv_addresses.values()),
            "enable_slave_acting_master": True, "enable_remote_escape": True,
            "message_delay_level": "1s 5s",
        }
        return from_mapping(NodeConfig, data)

    async def start(self, name: str) -> None:
        await self.cluster.start(name, self.config(name))


def location(address: str) -> str:
    return address.removeprefix("tcp://")


async def until(predicate, timeout: float = 60.0) -> float:
    """Poll ``predicate`` (async) until true; the perf_counter time it first held."""
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.001)
    return time.perf_counter()


async def trial(cluster: Cluster, nodes: Nodes, client, namesrv: str) -> tuple[float, ...]:


    a0, a1, b0 = (cluster.broker(n) for n in ("a0", "a1", "b0"))

    def on_b0(level: int) -> int:
        return sum(1 for r in b0.log.iter_records()
                   if r.topic == "orders" and r.body.startswith(b"%d" % level))
    before = {level: on_b0(level) for level in (1, 2)}
    due = {}
    for level, seconds in ((1, 1.0), (2, 5.0)):
        fields = {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                  "g": "0", "h": "0", "i": f"DELAY\x01{level}\x02", "j": "0"}
        answer = await client.rpc.invoke(cluster.node("a0").address, SEND_MESSAGE_V2, fields,
                                         b"%d" % level + BODY)
        assert answer.code == 0, answer.remark
        due[level] = time.perf_counter() + seconds
    await until(lambda: _true(a1.replicas.confirm_offset >= a0.log.max_offset))
    start = time.perf_counter()
    await cluster.kill("a0")
    acting, route, pull = await first_serves(client, nodes, namesrv, a1)

    def arrived(level: int):
        return lambda: _true(on_b0(level) > before[level])
    delivered = await until(arrived(1))
    handed_on = await until(arrived(2), timeout=60)
    await nodes.start("a0")
    await until(lambda: _true(not a1.acting))
    return (acting - start, route - start, pull - start, delivered - due[1],
            handed_on - due[2])


async def first_serves(client, nodes: Nodes, namesrv: str, a1) -> tuple[float, float, float]:
    """When ``a1`` acts, a route first names it id 0, and a pull to it is answered
    FOUND."""
    acting = await until(lambda: _true(a1.acting))

    async def routed() -> bool:
        answer = await client.rpc.invoke(namesrv, GET_ROUTEINFO, {"topic": "orders"})
        brokers = json.loads(answer.body)["brokerDatas"]
        return any(b["brokerAddrs"].get("0") == location(nodes.listen["a1"]) for b in brokers)
    route = await until(routed)

    async def pulled() -> bool:
        header = {"consumerGroup": "bench", "topic": "orders", "queueId": "1",
                  "queueOffset": "0", "maxMsgNums": "1", "sysFlag": "4",
                  "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                  "subVersion": "0"}
        answer = await client.rpc.invoke(nodes.listen["a1"], PULL_MESSAGE, header)
        return answer.code == 0
    return acting, route, await until(pulled)


async def _true(value: bool) -> bool:
    return value


async def rate(put, seconds: float) -> float:
    count = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await put()
            count += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(TASKS):
            nursery.start_soon(worker)
    return count / (time.perf_counter() - start)


async def start_groups(cluster: Cluster) -> tuple[Nodes, object, str]:
    """The name server and the three brokers started, ``orders`` on both groups and one
    message in queue 1 for the pulls to find; the nodes, a client node, the name server."""
    cluster.namesrv_config = lambda name: from_mapping(NodeConfig, {
        **cluster._base(name, "nameserver", cluster.namesrv_addresses[name]),
        "namesrv": {"support_acting_master": True, "scan_not_active_broker_interval": 100}})
    (namesrv,) = cluster.namesrv_addresses.values()
    await cluster.start_namesrvs()
    nodes = Nodes(cluster)
    for name in ("a0", "a1", "b0"):
        await nodes.start(name)
    client = await cluster.start("client")
    for name in ("a0", "b0"):
        fields = {"topic": "orders", "readQueueNums": "4", "writeQueueNums": "4",
                  "perm": "6"}
        answer = await client.rpc.invoke(cluster.node(name).address, CREATE_TOPIC, fields)
        assert answer.code == 0, answer.remark
    await DirectProducer(client.rpc, cluster.node("a0").address).send(
        "orders", BODY, queue_id=1)
    a1 = cluster.broker("a1")
    await until(lambda: _true("orders" in a1.topics.table))  # the slave's copy
    return nodes, client, namesrv


async def vanish_trial(root: Path) -> tuple[float, ...]:
    """A cluster of its own on the in-process transport, ``a0`` silenced."""
    async with open_cluster(root, transport="inproc", controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        nodes, client, namesrv = await start_groups(cluster)
        a0, a1 = cluster.broker("a0"), cluster.broker("a1")
        await until(lambda: _true(a1.replicas.confirm_offset >= a0.log.max_offset))
        network = get_network(cluster.network)
        start = time.perf_counter()
        network.isolate(nodes.listen["a0"])
        network.isolate(nodes.ha_master)
        times = await first_serves(client, nodes, namesrv, a1)
        network.heal()
        return tuple(t - start for t in times)


def print_times(title: str, names: list[str], rows: list[tuple[float, ...]]) -> None:
    print(f"| {title} ({len(rows)} trials) | p50 | max |")
    print("| --- | ---: | ---: |")
    for i, name in enumerate(names):
        values = [row[i] * 1000 for row in rows]
        print(f"| {name} | {round(statistics.median(values)):,} | {round(max(values)):,} |")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="triomq-acting-bench-") as tmp:
        async with open_cluster(Path(tmp), transport="tcp", controllers=0, brokers=0,
                                namesrvs=1) as cluster:
            nodes, client, namesrv = await start_groups(cluster)
            a1 = cluster.broker("a1")
            rows = [await trial(cluster, nodes, client, namesrv) for _ in range(args.trials)]
            served = ["the slave acts", "the route names it id 0", "a pull answered FOUND"]
            print_times("from the kill, ms", [
                *served, "the delayed message delivered, after it came due",
                "the one handed on not yet due, delivered by b0 after it came due"], rows)

            plugins = cluster.node("a1").plugins
            container = plugins.escape_bridge("container")(cluster.node("a1"))
            remote = plugins.escape_bridge("remote")(cluster.node("a1"))
            producer = DirectProducer(client.rpc, cluster.node("b0").address)

            def escaped(bridge):
                async def put() -> None:
                    result = await bridge.put_message(
                        EscapedMessage(topic="orders", queue_id=2, body=BODY))
                    assert result.ok, result
                return put

            async def plain() -> None:
                await producer.send("orders", BODY, queue_id=3)

            assert not a1.acting
            print()
            print(f"| 1 KiB puts, {TASKS} in flight, {args.seconds:g} s | msgs/s | vs plain |")
            print("| --- | ---: | ---: |")
            base = await rate(plain, args.seconds)
            print(f"| plain sends to b0 (SEND_MESSAGE_V2) | {base:,.0f} | 100% |")
            for name, bridge in (("container", container), ("remote", remote)):
                value = await rate(escaped(bridge), args.seconds)
                print(f"| a1's {name} bridge onto b0 | {value:,.0f} | {value / base:.0%} |")
        if args.vanish_trials:
            rows = [await vanish_trial(Path(tmp) / f"vanish-{n}")
                    for n in range(args.vanish_trials)]
            print()
            print_times("from the host's silence, ms", served, rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--vanish-trials", type=int, default=3)
    trio.run(main, parser.parse_args())
