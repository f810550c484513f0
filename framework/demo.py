"""``triomq demo`` (what ``make run`` runs): a broker group losing its master.

The scenario, on a fresh temporary store root, in one process over the
in-process transport (or over real TCP sockets with ``--transport tcp``):

1. three controllers elect a Raft leader (the active controller);
2. a broker group of three replicas registers in controller mode; the
   controller makes one of them master and the others slaves;
3. a producer writes through the master with synchronous replication (every
   put waits for the whole SyncStateSet); it finds the master by asking the
   controller for the group's replica info, and asks again when a put fails;
4. the master is killed mid-stream; the controller notices its heartbeats
   stop, elects a new master from the SyncStateSet at the next master
   epoch, and the remaining slave follows it;
5. a report: messages acknowledged, how many of them the new master holds
   (all of them), the failover time and the epochs.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from framework.broker.client import Producer, SendError
from framework.broker.service import Broker
from framework.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from framework.plugins import PluginManager
from framework.rpc import RpcError
from framework.runtime import Node
from framework.testing.cluster import BROKER_NAME, Cluster, open_cluster

TOPIC = "DemoTopic"
BEFORE_KILL = 300
AFTER_FAILOVER = 200
_RETRYABLE = (SendError, RpcError, ControllerError, ControllerUnavailable)


class _Producing:
    """A producer sending without pause to the master the controller names."""

    def __init__(self, client: Node, controllers: ControllerClient,
                 say: Callable[[str], None]) -> None:
        self.client = client
        self.controllers = controllers
        self.say = say
        self.acked: set[str] = set()
        self.failed = 0
        self.stopped = False
        self.killed_at: float | None = None
        #: Seconds from the kill to the first put acknowledged by the new master.
        self.failover: float | None = None

    async def run(self) -> None:
        address = None
        sent = 0
        while not self.stopped:
            try:
                if address is None:
                    address = (await self.controllers.get_replica_info(BROKER_NAME)).master_address
                    if address is None:
                        raise ControllerUnavailable("the group has no master right now")
                result = await Producer(self.client.rpc, address, timeout=2).send(
                    TOPIC, f"message-{sent}".encode(), tags="demo")
            except _RETRYABLE:
                self.failed += 1
                address = None
                await trio.sleep(0.01)
                continue
            sent += 1
            self.acked.add(result.msg_id)
            if self.killed_at is not None and self.failover is None:
                self.failover = time.monotonic() - self.killed_at
                self.say(f"  the new master acknowledged a put {self.failover * 1000:.0f} ms "
                         "after the kill")
            if len(self.acked) % 100 == 0:
                self.say(f"  {len(self.acked)} messages acknowledged")

    async def until(self, count: int) -> None:
        while len(self.acked) < count:
            await trio.sleep(0.005)


def _describe(cluster: Cluster, name: str) -> str:
    broker = cluster.broker(name)
    return f"{name} (broker id {broker.broker_id}, epoch {broker.replicas.master_epoch})"


async def run_demo(pm: PluginManager, transport: str = "inproc",
                   say: Callable[[str], None] = print) -> int:
    """Run the scenario; return 0 when the new master holds every acknowledged message."""
    with tempfile.TemporaryDirectory(prefix="triomq-demo-") as tmp:
        say(f"triomq demo over {transport}; stores under {tmp}")
        async with (open_cluster(Path(tmp), transport=transport, plugins=pm,
                                 broker={"all_ack_in_sync_state_set": True}) as cluster,
                    trio.open_nursery() as nursery):
            say("starting 3 controllers (Raft) ...")
            await cluster.start_controllers()
            say("starting broker group of 3 replicas b1, b2, b3 in controller mode ...")
            await cluster.start_brokers()
            master = await cluster.wait_master()
            others = [n for n in cluster.broker_names if n != master]
            await cluster.wait_for(
                lambda: len(cluster.broker(master).replicas.sync_state_set) == 3)
            say(f"the controller elected {_describe(cluster, master)} master; "
                f"{' and '.join(others)} replicate from it; SyncStateSet holds all three")

            client = await cluster.start("client")
            controllers = ControllerClient(
                client.rpc, [cluster.controller_addresses[n] for n in cluster.controller_names])
            producing = _Producing(client, controllers, say)
            say("producing with synchronous replication ...")
            nursery.start_soon(producing.run)
            await producing.until(BEFORE_KILL)

            old_epoch = cluster.broker(master).replicas.master_epoch
            say(f"killing master {master} mid-stream")
            producing.killed_at = time.monotonic()
            await cluster.kill(master)
            new_master = await cluster.wait_master(epoch_above=old_epoch)
            elected = time.monotonic() - producing.killed_at
            say(f"the controller elected {_describe(cluster, new_master)} "
                f"{elected * 1000:.0f} ms after the kill")
            await producing.until(BEFORE_KILL + AFTER_FAILOVER)
            producing.stopped = True

            survivors = [cluster.broker(n) for n in others]
            new = cluster.broker(new_master)
            await cluster.wait_for(
                lambda: all(b.log.max_offset == new.log.max_offset for b in survivors))
            found = {r.properties.get("UNIQ_KEY") for r in new.log.iter_records()}
            missing = producing.acked - found
            images = {_image(b) for b in survivors}
            failover = producing.failover or 0.0
            say("")
            say("report")
            say(f"  messages acknowledged        {len(producing.acked)}")
            say(f"  found on the new master      {len(producing.acked & found)} "
                f"({'all of them' if not missing else f'{len(missing)} MISSING'})")
            say(f"  puts refused or failed       {producing.failed} (retried)")
            say(f"  election (kill -> elected)   {elected * 1000:.0f} ms")
            say(f"  failover (kill -> first put) {failover * 1000:.0f} ms")
            say(f"  master epochs                {master}: {old_epoch}, "
                f"{new_master}: {new.replicas.master_epoch}")
            say(f"  surviving replicas identical {len(images) == 1}")
            nursery.cancel_scope.cancel()
    return 0 if not missing and len(images) == 1 else 1


def _image(broker: Broker) -> bytes:
    log = broker.log
    return log.read(log.min_offset, log.max_offset - log.min_offset)
