"""RocketMQ itself as the benchmarks' peer: its name server, controller and brokers, run
from their Maven jars by ``tests/compat/rocketmq_server.py`` (``make rocketmq-server``
resolves them), on 127.0.0.1 with their stores under the folder given.

Two deployments, both driven by triomq's own client (it speaks RocketMQ's protocol):

- **durable**, the durability of triomq's rows: a name server, one controller (a
  DLedger group of one, standalone: ``ControllerStartup``) and a group of three brokers
  in controller mode (``enableControllerMode``, ``brokerId = -1``: the controller
  assigns the ids and elects the master, which it makes ``SYNC_MASTER``), with
  ``allAckInSyncStateSet = true`` (a put waits for every replica of the SyncStateSet)
  and ``flushDiskType = SYNC_FLUSH`` (the master fsyncs before it answers, its group
  commit batching the puts waiting at once);
- **default**: a name server and one broker at RocketMQ's defaults (``ASYNC_MASTER``,
  ``ASYNC_FLUSH``: answered once in the page cache, no replica).

Each JVM gets a small heap (``-Xmx256m``); the brokers get the JIT's full tiers
(the tests' servers stop at C1 for a quick start).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from triomq.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from triomq.rpc import RpcError
from triomq.testing.cluster import free_tcp_port

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "compat"))
from rocketmq_server import (
    CLASSPATH,
    JVM_OPTIONS,
    START_WAIT,
    VERSION,
    JavaServer,
    broker,
    controller,
    namesrv,
    unavailable_server,
)

BROKER_NAME = "broker-a"
#: The brokers' JVM: the tests' options without ``-XX:TieredStopAtLevel=1``.
BROKER_JVM = tuple(option for option in JVM_OPTIONS if not option.startswith("-XX:Tiered"))
DURABLE = {"enableControllerMode": "true", "allAckInSyncStateSet": "true",
           "brokerId": -1, "brokerRole": "SLAVE"}


def unavailable() -> str | None:
    """Why RocketMQ's servers cannot run here, or None."""
    reason = unavailable_server()
    if reason is None and not CLASSPATH.exists():
        reason = f"{CLASSPATH} is missing: run `make rocketmq-server`"
    return reason


def rss_mib(pid: int) -> float:
    """A process's resident set (VmRSS in /proc/<pid>/status), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS")


class Peer:
    """A running RocketMQ deployment: its name server's address, its brokers, and (in
    controller mode) its controller."""

    def __init__(self, names: JavaServer, brokers: list[JavaServer],
                 controller_server: JavaServer | None) -> None:
        self.names = names
        self.brokers = brokers
        self.controller = controller_server
        self.master = brokers[0].address

    @property
    def namesrv(self) -> str:
        return self.names.address

    def by_address(self, address: str) -> JavaServer:
        (found,) = (b for b in self.brokers if b.address == address)
        return found

    async def in_sync(self, client: ControllerClient) -> str | None:
        """The master's address once the SyncStateSet holds all three replicas."""
        try:
            (data,) = await client.get_sync_state_data([BROKER_NAME])
        except (ControllerError, ControllerUnavailable, RpcError, ValueError):
            return None  # no leader yet, or the group not registered yet
        if data.master_address and len(data.in_sync_replicas) == len(self.brokers):
            return data.master_address
        return None

    async def wait_in_sync(self, client: ControllerClient) -> str:
        """Until the SyncStateSet holds every replica; the master's address (kept in
        ``master``, brokers reordered master first)."""
        with trio.fail_after(START_WAIT):
            while (master := await self.in_sync(client)) is None:
                await trio.sleep(0.1)
        self.master = master
        self.brokers.sort(key=lambda b: b.address != master)
        return master

    def rss(self) -> list[float]:
        """Each broker's RSS, MiB, the master first."""
        return [rss_mib(b.process.pid) for b in self.brokers if b.process is not None]


async def _stop_all(servers: list[JavaServer]) -> None:
    async with trio.open_nursery() as nursery:
        for server in servers:
            nursery.start_soon(server.stop)


@asynccontextmanager
async def open_peer(home: Path, *, durable: bool, rpc=None, flush: str = "SYNC_FLUSH"
                    ) -> AsyncIterator[Peer]:
    """RocketMQ's deployment (see the module's docstring) under ``home``; with ``durable``,
    ``rpc`` (a triomq RpcClient) asks its controller until the SyncStateSet holds all
    three, and ``flush`` is its brokers' ``flushDiskType``. Everything is stopped cleanly
    at the end, the brokers first."""
    names = namesrv(home)
    started: list[JavaServer] = [names]
    controller_server = None
    try:
        await names.start()
        if durable:
            port = free_tcp_port()
            controller_server = controller(home, "n0", {"n0": port})
            started.append(controller_server)
            await controller_server.start()
            brokers = [broker(home, names.address, name=BROKER_NAME, broker_id=i,
                              controllerAddr=controller_server.address, flushDiskType=flush,
                              **DURABLE)
                       for i in range(3)]
        else:
            brokers = [broker(home, names.address, name=BROKER_NAME)]
        for server in brokers:
            server.jvm_options = BROKER_JVM
        started[:0] = brokers  # stopped first
        async with trio.open_nursery() as nursery:
            for server in brokers:
                nursery.start_soon(server.start)
        peer = Peer(names, brokers, controller_server)
        if durable:
            assert rpc is not None and controller_server is not None
            await peer.wait_in_sync(ControllerClient(rpc, ["tcp://" + controller_server.address]))
        yield peer
    finally:
        await _stop_all([b for b in started if b not in (names, controller_server)])
        await _stop_all([s for s in started if s in (names, controller_server)])


__all__ = ["VERSION", "Peer", "open_peer", "rss_mib", "unavailable"]
