"""RPC round trips per second over inproc and TCP loopback, next to a raw trio ping-pong.

    PYTHONPATH=. .venv/bin/python benchmarks/rpc.py [--seconds 2] [--rounds 3]

Every figure is one client task doing request -> response round trips, one
at a time, against a server in the same process and trio run (so both ends
share one core, as they do in the raw ping-pong). The raw ping-pong sends
the same number of bytes as an RPC frame (a 64-byte body plus the header)
over a plain ``trio.SocketStream`` and reads the echo: it is the limit for
what any protocol on trio sockets can reach. The kinds are measured in
turns, ``--rounds`` times each, and the best round of each kind is shown,
which keeps noise from other processes out of the comparison. The
``pipelined`` line has 32 tasks calling concurrently over one connection;
the ``inline handler`` line registers the handler with ``inline=True``
(every other line uses the default registration).
Round trips per CPU-second are shown too: on a shared machine they move
less with other processes' load than the wall-clock rate does.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable

import trio

from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.plugins.transport_tcp import TcpTransport
from triomq.protocol.remoting import RemotingCommand, encode
from triomq.rpc import RpcConnection, RpcServer, open_rpc_client
from triomq.transport import Transport

CODE_ECHO = 1
BODY = b"x" * 64
PIPELINE_TASKS = 32


async def echo(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
    return RemotingCommand.response(body=request.body)


Rates = tuple[float, float]  # round trips per wall-clock second, per CPU second


async def run_for(seconds: float, round_trip: Callable[[], Awaitable[object]]) -> Rates:
    """Round trips per second of ``round_trip`` over ``seconds``: wall clock and CPU time."""
    count = 0
    start, start_cpu = time.perf_counter(), time.process_time()
    end = start + seconds
    while True:
        for _ in range(100):
            await round_trip()
        count += 100
        now = time.perf_counter()
        if now >= end:
            return count / (now - start), count / (time.process_time() - start_cpu)


async def raw_ping_pong(transport: Transport, address: str, seconds: float) -> Rates:
    size = len(encode(RemotingCommand.request(CODE_ECHO, body=BODY)))
    message = b"x" * size

    async def serve(stream: trio.abc.Stream) -> None:
        async with stream:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        listener = await transport.listen(address)

        async def accept_one() -> None:
            await serve(await listener.accept())

        nursery.start_soon(accept_one)
        stream = await transport.connect(listener.address)

        async def round_trip() -> None:
            await stream.send_all(message)
            received = 0
            while received < size:
                received += len(await stream.receive_some(65536))

        rate = await run_for(seconds, round_trip)
        await stream.aclose()
        await listener.aclose()
    return rate


async def rpc(transport: Transport, address: str, seconds: float, tasks: int = 1,
              inline: bool = False) -> Rates:
    server = RpcServer()
    server.register(CODE_ECHO, echo, inline=inline)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(server.serve, await transport.listen(address))
        async with open_rpc_client(transport.connect) as client:

            async def round_trip() -> None:
                await client.invoke(bound, CODE_ECHO, None, BODY, timeout=5.0)

            await round_trip()
            if tasks == 1:
                rate = await run_for(seconds, round_trip)
            else:
                rates: list[Rates] = []

                async def worker() -> None:
                    rates.append(await run_for(seconds, round_trip))

                async with trio.open_nursery() as workers:
                    for _ in range(tasks):
                        workers.start_soon(worker)
                # Each worker counts its own round trips against the whole CPU time.
                rate = (sum(wall for wall, _ in rates), sum(cpu for _, cpu in rates))
        nursery.cancel_scope.cancel()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    args = parser.parse_args()
    network = InprocNetwork("benchmark")
    inproc = InprocTransport(network, "inproc://bench-client")
    tcp = TcpTransport()
    kinds: dict[str, Callable[[], Awaitable[Rates]]] = {
        "raw ping-pong, TCP loopback": lambda: raw_ping_pong(tcp, "tcp://127.0.0.1:0",
                                                             args.seconds),
        "RPC, TCP loopback": lambda: rpc(tcp, "tcp://127.0.0.1:0", args.seconds),
        "RPC, TCP loopback, inline handler": lambda: rpc(tcp, "tcp://127.0.0.1:0",
                                                         args.seconds, inline=True),
        "RPC, inproc": lambda: rpc(inproc, "inproc://bench-server", args.seconds),
        "raw ping-pong, inproc": lambda: raw_ping_pong(inproc, "inproc://bench-raw",
                                                       args.seconds),
        f"RPC, TCP loopback, pipelined ({PIPELINE_TASKS} tasks)":
            lambda: rpc(tcp, "tcp://127.0.0.1:0", args.seconds, PIPELINE_TASKS),
    }
    best: dict[str, list[float]] = {name: [0.0, 0.0] for name in kinds}

    async def measure() -> None:
        for _ in range(args.rounds):
            for name, kind in kinds.items():
                wall, cpu = await kind()
                best[name] = [max(best[name][0], wall), max(best[name][1], cpu)]

    trio.run(measure)
    wall_limit, cpu_limit = best["raw ping-pong, TCP loopback"]
    print(f"{'kind':<45} {'round trips/s':>14} {'vs raw TCP':>11} {'per CPU-s':>10} "
          f"{'vs raw TCP':>11}")
    for name, (wall, cpu) in best.items():
        print(f"{name:<45} {wall:>14,.0f} {wall / wall_limit:>10.0%} {cpu:>10,.0f} "
              f"{cpu / cpu_limit:>10.0%}")


if __name__ == "__main__":
    main()
