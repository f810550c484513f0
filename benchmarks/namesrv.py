"""Route queries per second against one name server, next to the RPC layer's limit.

    .venv/bin/python benchmarks/namesrv.py [--clients 64] [--seconds 3] [--rounds 3]

A name server runs in a child process (the ``namesrv`` plugin's node, role
``nameserver``, on TCP loopback) holding 1,000 topics on 10 broker groups
of 3 replicas, registered through REGISTER_BROKER as brokers do. The parent
runs ``--clients`` clients, each on its own connection, asking
GET_ROUTEINFO_BY_TOPIC for random topics one request at a time. The limit
beside it is the same RPC layer with the same clients answering an echo
request that carries a body of a route answer's size, from a handler
registered on the same name-server node: what any request costs that the
RPC layer serves without looking anything up. The two kinds run in turns,
``--rounds`` times, and the best round of each is shown. The aim: route
queries at 50% of the echo rate or better.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import trio

from triomq.plugins.transport_tcp import TcpTransport
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    encode_register_broker_body,
)
from triomq.rpc import RpcConnection

CODE_ECHO = 1
GROUPS = 10
TOPICS = 1000
REPLICAS = 3


def topic(i: int) -> str:
    return f"topic-{i:04d}"


def registrations() -> list[tuple[dict[str, str], bytes]]:
    """REGISTER_BROKER requests of 10 groups of 3, holding 1,000 topics between them."""
    out = []
    for group in range(GROUPS):
        table = {topic(i): TopicConfig(topic(i), 8, 8, 6)
                 for i in range(TOPICS) if i % GROUPS in (group, (group + 1) % GROUPS)}
        body = encode_register_broker_body(RegisterBrokerBody(DataVersion(0, 1, 1), table),
                                           compressed=True)
        for broker_id in range(REPLICAS):
            address = f"10.0.{group}.{broker_id + 1}:10911"
            out.append(({"brokerName": f"broker-{group}", "brokerAddr": address,
                         "clusterName": "DefaultCluster", "haServerAddr": address,
                         "brokerId": str(broker_id), "compressed": "true",
                         "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
                         "heartbeatTimeoutMillis": "3600000"}, body))
    return out


def serve(port_file: str, echo_size: int) -> None:
    """The child: a name-server node plus an echo handler, until stdin closes."""
    from triomq import NodeConfig, open_node

    async def echo(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
        return RemotingCommand.response(body=b"x" * echo_size)

    async def main() -> None:
        config = NodeConfig(name="ns", role="nameserver", listen="tcp://127.0.0.1:0")
        async with open_node(config) as node:
            node.rpc_server.register(CODE_ECHO, echo, inline=True)
            Path(port_file).write_text(node.address)
            await trio.to_thread.run_sync(sys.stdin.read)

    trio.run(main)


async def connect(address: str, nursery: trio.Nursery) -> RpcConnection:
    stream = await TcpTransport().connect(address)
    connection = RpcConnection(stream)
    await nursery.start(connection.run)
    return connection


async def measure(address: str, clients: int, seconds: float, code: int) -> tuple[float, float]:
    """Requests per second (wall clock, and per CPU-second of this process)."""
    counts = [0] * clients
    async with trio.open_nursery() as nursery:
        connections = [await connect(address, nursery) for _ in range(clients)]
        start, start_cpu = time.perf_counter(), time.process_time()
        end = start + seconds

        async def client(i: int, connection: RpcConnection) -> None:
            rng = random.Random(i)
            while time.perf_counter() < end:
                fields = {"topic": topic(rng.randrange(TOPICS))} if code != CODE_ECHO else {}
                answer = await connection.invoke(code, fields, timeout=10.0)
                assert answer.code == 0, answer.remark
                counts[i] += 1

        async with trio.open_nursery() as workers:
            for i, connection in enumerate(connections):
                workers.start_soon(client, i, connection)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        nursery.cancel_scope.cancel()
    return sum(counts) / wall, sum(counts) / cpu


async def register(address: str, nursery: trio.Nursery) -> int:
    """Register the groups on a connection kept open (closing it drops them); a route's size."""
    connection = await connect(address, nursery)
    for fields, body in registrations():
        answer = await connection.invoke(103, fields, body, timeout=10.0)
        assert answer.code == 0, answer.remark
    answer = await connection.invoke(105, {"topic": topic(0)}, timeout=10.0)
    assert answer.code == 0, answer.remark
    assert len(json.loads(answer.body)["brokerDatas"]) == 2
    return len(answer.body)


async def route_size(address: str) -> int:
    async with trio.open_nursery() as nursery:
        size = await register(address, nursery)
        nursery.cancel_scope.cancel()
    return size


async def rounds(address: str, clients: int, seconds: float, count: int
                 ) -> dict[str, tuple[float, float]]:
    best = {"route queries": (0.0, 0.0), "echo (RPC limit)": (0.0, 0.0)}
    async with trio.open_nursery() as nursery:
        await register(address, nursery)
        for _ in range(count):
            for name, code in (("route queries", 105), ("echo (RPC limit)", CODE_ECHO)):
                wall, cpu = await measure(address, clients, seconds, code)
                best[name] = (max(best[name][0], wall), max(best[name][1], cpu))
        nursery.cancel_scope.cancel()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    parser.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--echo-size", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.echo_size)
        return
    # A route's size is known once the topics are registered: a first server
    # measures it, the second (its echo of that size) is measured.
    size, best = 0, {}
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(2):
            port_file = os.path.join(tmp, f"port{attempt}")
            child = subprocess.Popen(
                [sys.executable, __file__, "--serve", port_file, "--echo-size", str(size)],
                stdin=subprocess.PIPE)
            try:
                while not os.path.exists(port_file) or not Path(port_file).read_text():
                    time.sleep(0.05)
                address = Path(port_file).read_text()
                if attempt == 0:
                    size = trio.run(route_size, address)
                else:
                    best = trio.run(rounds, address, args.clients, args.seconds, args.rounds)
            finally:
                child.stdin.close()  # type: ignore[union-attr]
                child.wait()
    limit = best["echo (RPC limit)"][0]
    print(f"{args.clients} clients, {TOPICS} topics on {GROUPS} groups of {REPLICAS}, "
          f"route body {size} bytes")
    print(f"{'kind':<20} {'requests/s':>12} {'vs limit':>9} {'client CPU-s':>13}")
    for name, (wall, cpu) in best.items():
        print(f"{name:<20} {wall:>12,.0f} {wall / limit:>8.0%} {cpu:>13,.0f}")


if __name__ == "__main__":
    main()
