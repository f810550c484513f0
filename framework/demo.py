"""``triomq demo`` (what ``make run`` runs): a broker group losing its master.

The scenario, on a fresh temporary store root:

1. a broker group of three replicas (``a`` master, ``b`` and ``c`` slaves),
   in one process over the in-process transport, or over real TCP sockets
   with ``--transport tcp``;
2. a producer writing through the master with synchronous replication
   (every put waits for the whole SyncStateSet);
3. the master killed mid-stream;
4. a new master taking over at the next master epoch, the remaining slave
   following it, the producer carrying on against the new master;
5. a report: messages acknowledged, how many of them the new master holds
   (all of them), the failover time and the epochs.

In this version the new master is appointed the way an operator of a
static (non-controller) deployment would, by a role change; the
controller that elects it automatically is not built yet, and the demo says
so when it gets there.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from framework.broker.client import Producer, SendError
from framework.broker.service import Broker, broker_of
from framework.config import NodeConfig
from framework.plugins import PluginManager
from framework.rpc import RpcError
from framework.runtime import Node, open_node
from framework.settings import from_mapping

TOPIC = "DemoTopic"
BEFORE_KILL = 300
AFTER_FAILOVER = 200


def _broker_config(root: Path, transport: str, name: str, broker_id: int,
                   master_ha: str = "") -> NodeConfig:
    if transport == "inproc":
        listen = f"inproc://demo-{name}"
        options = {"inproc": {"network": "demo", "local": listen}}
    else:
        listen, options = "tcp://127.0.0.1:0", {}
    return from_mapping(NodeConfig, {
        "name": f"broker-{name}", "role": "broker", "listen": listen, "log_level": "WARNING",
        "transport": {"options": options},
        "store": {"scheme": "mmap", "path": str(root / name),
                  "options": {"segment_size": 1 << 20}},
        "broker": {"broker_name": "demo-group", "broker_id": broker_id, "master_epoch": 1,
                   "ha_listen_port": 0, "ha_master_address": master_ha,
                   "all_ack_in_sync_state_set": True, "flush_policy": "none"},
    })


async def _caught_up(master: Broker, slaves: list[Broker], timeout: float = 30) -> None:
    with trio.fail_after(timeout):
        while any(s.log.max_offset < master.log.max_offset for s in slaves):
            await trio.sleep(0.01)


class _Producing:
    """A producer sending without pause to whichever address is the master now."""

    def __init__(self, client: Node, master_address: str, say: Callable[[str], None]) -> None:
        self.client = client
        self.master_address = master_address
        self.say = say
        self.acked: set[str] = set()
        self.failed = 0
        self.killed_at: float | None = None
        #: Seconds from the kill to the first put acknowledged by the new master.
        self.failover: float | None = None
        self.stopped = False

    async def run(self) -> None:
        sent = 0
        while not self.stopped:
            address = self.master_address
            try:
                result = await Producer(self.client.rpc, address, timeout=2).send(
                    TOPIC, f"message-{sent}".encode(), tags=address)
            except (SendError, RpcError):
                self.failed += 1
                await trio.sleep(0.005)
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


async def run_demo(pm: PluginManager, transport: str = "inproc",
                   say: Callable[[str], None] = print) -> int:
    """Run the scenario; return 0 when the new master holds every acknowledged message."""
    with tempfile.TemporaryDirectory(prefix="triomq-demo-") as tmp:
        root = Path(tmp)
        say(f"triomq demo: a broker group of 3 replicas over {transport}, stores in {root}")
        async with trio.open_nursery() as nursery:
            async def start(config: NodeConfig) -> tuple[Node, trio.CancelScope]:
                return await nursery.start(_run_node, pm, config)

            a_node, kill_a = await start(_broker_config(root, transport, "a", 0))
            a = broker_of(a_node)
            b = broker_of((await start(_broker_config(root, transport, "b", 1, a.ha_address)))[0])
            c = broker_of((await start(_broker_config(root, transport, "c", 2, a.ha_address)))[0])
            await _caught_up(a, [b, c])
            say(f"master a (epoch {a.replicas.master_epoch}) at {a_node.address}; "
                f"slaves b and c replicating from {a.ha_address}")

            client, _ = await start(_client_config(transport))
            producing = _Producing(client, a_node.address, say)
            say("producing with synchronous replication (each put waits for b and c) ...")
            nursery.start_soon(producing.run)
            await producing.until(BEFORE_KILL)

            say("killing master a mid-stream")
            producing.killed_at = time.monotonic()
            kill_a.cancel()
            say("promoting b to master at epoch 2 (an operator's role change: the controller "
                "that elects it automatically is not built yet)")
            await b.replicas.change_to_master(
                2, frozenset({b.replicas.address, c.replicas.address}))
            await c.replicas.change_to_slave(b.ha_address, 2)
            producing.master_address = b.node.address
            await producing.until(BEFORE_KILL + AFTER_FAILOVER)
            producing.stopped = True
            await _caught_up(b, [c])

            found = {r.properties.get("UNIQ_KEY") for r in b.log.iter_records()}
            missing = producing.acked - found
            identical = _image(c) == _image(b)
            failover = producing.failover or 0.0
            say("")
            say("report")
            say(f"  messages acknowledged      {len(producing.acked)}")
            say(f"  found on the new master b  {len(producing.acked & found)} "
                f"({'all of them' if not missing else f'{len(missing)} MISSING'})")
            say(f"  puts refused or failed     {producing.failed} (retried)")
            say(f"  failover (kill -> put)     {failover * 1000:.0f} ms")
            say(f"  epochs                     a: 1, b: {b.replicas.master_epoch}, "
                f"c follows epoch {c.replicas.master_epoch}")
            say(f"  c byte-identical to b      {identical}")
            say("")
            say("still to come: the Raft-replicated controller that notices the dead master "
                "and elects b on its own (issue 6).")
            nursery.cancel_scope.cancel()
    return 0 if not missing and identical else 1


async def _run_node(pm: PluginManager, config: NodeConfig,
                    task_status: trio.TaskStatus[tuple[Node, trio.CancelScope]]) -> None:
    """Run one node until its cancel scope (handed back through ``task_status``) is cancelled."""
    with trio.CancelScope() as scope:
        async with open_node(config, plugins=pm) as node:
            task_status.started((node, scope))
            await trio.sleep_forever()


def _client_config(transport: str) -> NodeConfig:
    options = ({"inproc": {"network": "demo", "local": "inproc://demo-client"}}
               if transport == "inproc" else {})
    return from_mapping(NodeConfig, {"name": "demo-client", "log_level": "WARNING",
                                     "transport": {"options": options}})


def _image(broker: Broker) -> bytes:
    log = broker.log
    return log.read(log.min_offset, log.max_offset - log.min_offset)
