"""``triomq demo`` (what ``make run`` runs): a broker group losing its master
while a producer and a consumer group run.

The scenario, on a fresh temporary store root, in one process over the
in-process transport (or over real TCP sockets with ``--transport tcp``):

1. a name server starts, three controllers elect a Raft leader (the active
   controller), and a broker group of three replicas registers in
   controller mode: the controller makes one of them master and the others
   slaves, and the master registers with the name server as broker id 0;
2. a topic is created on the master; a ``triomq.client.Producer`` sends to
   it with synchronous replication (every put waits for the whole
   SyncStateSet), finding the master through the name server's route, and
   a ``PushConsumer`` of a consumer group reads it from the first offset;
3. the master is killed mid-stream; the controller notices its heartbeats
   stop and elects a new master from the SyncStateSet at the next master
   epoch; the new master registers as id 0, and the producer and the
   consumer follow the route to it without being told;
4. the producer stops, and the demo waits (``SETTLE_WITHIN`` seconds at most)
   until the consumer group has seen every acknowledged message; then a
   report: messages produced, acknowledged and consumed; acknowledged
   messages never consumed (lost: must be 0) and messages consumed more
   than once; how long the producer and the consumer each stalled; and
   that the surviving replicas hold identical logs.

With ``keep`` (``triomq demo --keep``) the stores stay on disk afterwards and
the demo says where, and which commands read them.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import trio

from triomq.broker.service import Broker
from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import ClientError
from triomq.client.core.listener import ConsumeConcurrentlyStatus, MessageListenerConcurrently
from triomq.client.core.message import Message, MessageExt, SendStatus
from triomq.client.producer import Producer
from triomq.client.push_consumer import PushConsumer
from triomq.plugin_manager import PluginManager
from triomq.rpc import RpcError
from triomq.runtime import Node
from triomq.testing.cluster import Cluster, open_cluster

TOPIC = "DemoTopic"
GROUP = "DemoGroup"
QUEUES = 4
BEFORE_KILL = 300
AFTER_FAILOVER = 200
#: Seconds the report waits for the consumer group to see the last acknowledged messages.
SETTLE_WITHIN = 30.0
#: UPDATE_AND_CREATE_TOPIC, as an admin tool sends it to a master.
_CREATE_TOPIC = 17


class _Gaps:
    """The longest pause between two events after a moment (a stall)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.since: float | None = None
        self.longest = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        if self.since is not None:
            self.longest = max(self.longest, now - max(self.last, self.since))
        self.last = now


class Ledger:
    """Which acknowledged messages the consumer group has seen, and how often.

    The report waits on it (``settled``) before calling anything lost: the last
    messages acknowledged are still on their way to the consumer then.
    """

    def __init__(self) -> None:
        self.acked: set[str] = set()
        self.seen: Counter[str] = Counter()
        self._changed = trio.Event()

    def acknowledged(self, msg_id: str) -> None:
        self.acked.add(msg_id)

    def consumed(self, msg_id: str) -> None:
        self.seen[msg_id] += 1
        self._changed.set()

    @property
    def unconsumed(self) -> set[str]:
        """Acknowledged, not (yet) consumed."""
        return self.acked - self.seen.keys()

    @property
    def duplicates(self) -> int:
        return sum(self.seen.values()) - len(self.seen)

    async def settled(self, within: float) -> float:
        """Wait until every acknowledged message was consumed, ``within`` seconds at most;
        the seconds waited. What is still unconsumed then is lost."""
        began = trio.current_time()
        with trio.move_on_after(within):
            while self.unconsumed:
                self._changed = trio.Event()
                await self._changed.wait()
        return trio.current_time() - began


class _Producing:
    """A producer sending without pause, through the name servers' routes."""

    def __init__(self, producer: Producer, ledger: Ledger, say: Callable[[str], None]) -> None:
        self.producer = producer
        self.ledger = ledger
        self.say = say
        self.produced = 0
        self.failed = 0
        self.gaps = _Gaps()
        #: Seconds from the kill to the first put acknowledged after it.
        self.failover: float | None = None
        self._stopping = False
        self._stopped = trio.Event()

    async def run(self) -> None:
        try:
            while not self._stopping:
                await self._send_one()
        finally:
            self._stopped.set()

    async def _send_one(self) -> None:
        self.produced += 1
        try:
            result = await self.producer.send(
                Message(TOPIC, f"message-{self.produced}".encode(), tags="demo"))
        except (ClientError, RpcError):
            self.failed += 1
            return
        if result.send_status is not SendStatus.SEND_OK:
            self.failed += 1  # stored on the master, not known to be replicated
            return
        self.ledger.acknowledged(result.msg_id)
        self.gaps.tick()
        if self.gaps.since is not None and self.failover is None:
            self.failover = time.monotonic() - self.gaps.since
            self.say(f"  the new master acknowledged a put {self.failover * 1000:.0f} ms "
                     "after the kill")
        if len(self.ledger.acked) % 100 == 0:
            self.say(f"  {len(self.ledger.acked)} messages acknowledged")

    async def until(self, count: int) -> None:
        while len(self.ledger.acked) < count:
            await trio.sleep(0.005)

    async def stop(self) -> None:
        """Send no more, and wait for the send in flight to end: its message may be
        acknowledged yet."""
        self._stopping = True
        await self._stopped.wait()


class _Consuming:
    """The consumer group's listener: what it sees goes to the ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.gaps = _Gaps()

    async def handle(self, messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for message in messages:
            self.ledger.consumed(message.msg_id)
        self.gaps.tick()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _describe(cluster: Cluster, name: str) -> str:
    broker = cluster.broker(name)
    return f"{name} (broker id {broker.broker_id}, epoch {broker.replicas.master_epoch})"


@contextlib.contextmanager
def stores(keep: bool) -> Iterator[str]:
    if keep:
        yield tempfile.mkdtemp(prefix="triomq-demo-")
    else:
        with tempfile.TemporaryDirectory(prefix="triomq-demo-") as tmp:
            yield tmp


async def run_demo(pm: PluginManager, transport: str = "inproc",
                   say: Callable[[str], None] = print, *, keep: bool = False) -> int:
    """Run the scenario; return 0 when every acknowledged message was consumed and the
    surviving replicas are identical.

    ``keep``: leave the stores on disk and end the report with where they are.
    """
    with stores(keep) as tmp:
        say(f"triomq demo over {transport}; stores under {tmp}")
        async with (open_cluster(Path(tmp), transport=transport, plugins=pm, namesrvs=1,
                                 broker={"all_ack_in_sync_state_set": True}) as cluster,
                    trio.open_nursery() as nursery):
            say("starting a name server and 3 controllers (Raft) ...")
            await cluster.start_namesrvs()
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
            await _create_topic(cluster, client, master)
            namesrv = list(cluster.namesrv_addresses.values())
            ledger = Ledger()
            producing = _Producing(Producer("DemoProducer", namesrv), ledger, say)
            consuming = _Consuming(ledger)
            consumer = PushConsumer(GROUP, namesrv, rebalance_interval=1.0,
                                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe(TOPIC, "*")
            consumer.register_message_listener(MessageListenerConcurrently(consuming.handle))
            async with (producing.producer.start(client.connect),
                        consumer.start(client.connect)):
                say(f"producing to topic {TOPIC} with synchronous replication; consumer group "
                    f"{GROUP} reading it ...")
                nursery.start_soon(producing.run)
                await producing.until(BEFORE_KILL)

                old_epoch = cluster.broker(master).replicas.master_epoch
                say(f"killing master {master} mid-stream")
                producing.gaps.since = consuming.gaps.since = time.monotonic()
                await cluster.kill(master)
                new_master = await cluster.wait_master(epoch_above=old_epoch)
                elected = time.monotonic() - producing.gaps.since
                say(f"the controller elected {_describe(cluster, new_master)} "
                    f"{elected * 1000:.0f} ms after the kill")
                await producing.until(BEFORE_KILL + AFTER_FAILOVER)
                await producing.stop()
                pending = len(ledger.unconsumed)
                waited = await ledger.settled(within=SETTLE_WITHIN)
                say(f"producer stopped; waited {waited * 1000:.0f} ms for the {pending} "
                    f"acknowledged message(s) not yet consumed (at most {SETTLE_WITHIN:g} s)")

            survivors = [cluster.broker(n) for n in others]
            new = cluster.broker(new_master)
            await cluster.wait_for(
                lambda: all(b.log.max_offset == new.log.max_offset for b in survivors))
            lost = ledger.unconsumed
            images = {_image(b) for b in survivors}
            failover = producing.failover or 0.0
            say("")
            say("report")
            say(f"  messages produced            {producing.produced} "
                f"({producing.failed} sends failed after their send timeout, sent again "
                "as new messages)")
            say(f"  messages acknowledged        {len(ledger.acked)}")
            say(f"  messages consumed            {len(ledger.seen)}")
            say(f"  acknowledged, never consumed {len(lost)} (lost)")
            say(f"  consumed more than once      {ledger.duplicates}")
            say(f"  producer stalled             {producing.gaps.longest * 1000:.0f} ms")
            say(f"  consumer stalled             {consuming.gaps.longest * 1000:.0f} ms")
            say(f"  election (kill -> elected)   {elected * 1000:.0f} ms")
            say(f"  failover (kill -> first put) {failover * 1000:.0f} ms")
            say(f"  master epochs                {master}: {old_epoch}, "
                f"{new_master}: {new.replicas.master_epoch}")
            say(f"  surviving replicas identical {len(images) == 1}")
            nursery.cancel_scope.cancel()
        if keep:
            _say_kept(say, Path(tmp), cluster, new_master)
    return 0 if not lost and len(images) == 1 else 1


async def _create_topic(cluster: Cluster, client: Node, master: str) -> None:
    """The demo's topic on the group's master (the slaves copy it), routed by the name server."""
    answer = await client.rpc.invoke(
        cluster.node(master).address, _CREATE_TOPIC,
        {"topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
         "perm": "6"})
    if answer.code != 0:
        raise RuntimeError(f"creating topic {TOPIC} failed: {answer.remark}")


def _say_kept(say: Callable[[str], None], root: Path, cluster: Cluster, master: str) -> None:
    say("")
    say(f"stores kept under {root}")
    say(f"  brokers     {', '.join(str(root / n) for n in cluster.broker_names)}")
    say(f"  controllers {', '.join(str(root / n) for n in cluster.controller_names)}")
    say(f"  read them:  triomq store dump {root / master}")
    say(f"              triomq export controller OUT_DIR "
        f"{' '.join(str(root / n) for n in cluster.controller_names)}  (the spark extra)")


def _image(broker: Broker) -> bytes:
    log = broker.log
    return log.read(log.min_offset, log.max_offset - log.min_offset)
