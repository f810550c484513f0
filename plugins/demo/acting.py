"""``triomq demo --acting-master``: a static group's master killed and a slave acting for it
(slave acting master, RIP-32), then the master's return through pre-online.

The scenario, on a fresh temporary store root, in one process over the
in-process transport (or TCP with ``--transport tcp``):

1. a name server with ``support_acting_master``; static group ``broker-a``
   (master a0, slaves a1 and a2) and group ``broker-b`` (master b0), every
   broker with ``enable_slave_acting_master``, escaping through the
   ``container`` bridge (a master in the same process);
2. a ``TransactionProducer`` sends normal, delayed (level 1, 1 s) and
   committed transactional messages to topic ``ActingTopic`` on both
   groups, and a ``PushConsumer`` group reads them all; it stops, and the
   producer leaves a backlog on broker-a: normal messages and delayed ones of
   level 2 (5 s), due after the kill;
3. once a1 and a2 hold a0's log and offsets, a0 is killed; the demo waits for
   the name server's route to name a slave broker id 0 with perm 4 (read
   only), sends more (broker-b takes them), and starts the consumer group
   again: it reads broker-a's backlog through the acting slave, and the
   delayed messages, delivered by the acting slave through the escape
   bridge onto broker-b;
4. the consumer group stops and a0 starts again: isolated, it takes the
   newer tables of its slaves (pre-online), then registers; the demo waits
   for the route to name it broker id 0 with perm 6, sends to both groups and
   consumes once more.

Every wait is on the nodes' state, bounded (``WAIT_WITHIN``), and names what
it waited for when it gives up. The version steps are the defaults: the
acting term's tables are newer than the dead master's by the new DataVersion
state the term starts them in. The report is ``acting_report``'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from triomq.client.core.consume_from import ConsumeFromWhere
from triomq.client.core.errors import ClientError
from triomq.client.core.listener import ConsumeConcurrentlyStatus, MessageListenerConcurrently
from triomq.client.core.message import (
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
)
from triomq.client.core.transaction import LocalTransactionState
from triomq.client.push_consumer import PushConsumer
from triomq.client.transaction_producer import TransactionProducer
from triomq.plugin_manager import PluginManager
from triomq.plugins.demo.acting_report import ActingRun, problems, report
from triomq.plugins.demo.demo import stores
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode
from triomq.protocol.route import PERM_READ, PERM_WRITE, TopicRouteData
from triomq.rpc import RpcError
from triomq.runtime import Node
from triomq.testing.cluster import Cluster, open_cluster
from triomq.testing.static_groups import ACTING_NAMESRV, Groups

__all__ = ["WAIT_WITHIN", "run_acting_demo"]

TOPIC = "ActingTopic"
GROUP = "ActingGroup"
QUEUES = 4
MASTER, SLAVES, OTHER = "a0", ("a1", "a2"), "b0"
#: Seconds any wait on the nodes' state lasts at most.
WAIT_WITHIN = 30.0
#: The delay levels the demo sends at: 1 s before the kill, 5 s (due after it) just before.
LEVEL_BEFORE, LEVEL_OUTAGE = 1, 2
BROKER = {"acting_escape_bridges": ["container"], "slave_synchronize_period": 100}


class Stalled(Exception):
    """A wait on the nodes ran out."""


async def until(what: str, holds: Callable[[], Awaitable[bool]],
                within: float = WAIT_WITHIN) -> float:
    """Poll ``holds`` until it is true; the seconds that took. ``Stalled`` naming ``what``
    after ``within`` seconds."""
    began = trio.current_time()
    with trio.move_on_after(within):
        while not await _answered(holds):
            await trio.sleep(0.02)
        return trio.current_time() - began
    raise Stalled(f"{what} ({within:g} s)")


async def _answered(holds: Callable[[], Awaitable[bool]]) -> bool:
    try:
        return await holds()
    except RpcError:
        return False  # a node that did not answer yet: asked again at the next poll


class _Commit:
    """Every local transaction commits."""

    def execute_local_transaction(self, message: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, message: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


class _Scenario:
    """The nodes, the clients and the run's record."""

    def __init__(self, cluster: Cluster, groups: Groups, client: Node,
                 say: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.groups = groups
        self.client = client
        self.say = say
        self.namesrv = list(cluster.namesrv_addresses.values())
        self.run = ActingRun(master=MASTER, other_group=groups.group(OTHER))
        self.producer = TransactionProducer("ActingProducer", self.namesrv,
                                            transaction_listener=_Commit())
        self._bodies = itertools.count(1)
        self._acting = False
        #: broker-a's delayed messages of LEVEL_OUTAGE, in the order they were stored.
        self._backlog_delayed: list[str] = []

    # -- what the nodes say -------------------------------------------------------------

    async def route(self) -> TopicRouteData | None:
        answer = await self.client.rpc.invoke(self.namesrv[0], RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                              {"topic": TOPIC})
        return TopicRouteData.decode(answer.body) if answer.code == ResponseCode.SUCCESS else None

    async def broker_a_routed(self) -> tuple[dict[int, str], int] | None:
        """broker-a's addresses by broker id and its queues' perm, as the route has them."""
        route = await self.route()
        if route is None:
            return None
        addrs = [b.broker_addrs for b in route.broker_datas if b.broker_name == "broker-a"]
        perms = [q.perm for q in route.queue_datas if q.broker_name == "broker-a"]
        return (dict(addrs[0]), perms[0]) if addrs and perms else None

    async def offsets(self, node: str) -> dict[int, int]:
        """broker-a's consumer offsets of the group, as broker ``node`` answers them."""
        found = {}
        for queue in range(QUEUES):
            answer = await self.client.rpc.invoke(
                self.cluster.node(node).address, RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue)})
            if answer.code == ResponseCode.SUCCESS:
                found[queue] = int(answer.ext_fields["offset"])
        return found

    # -- traffic ------------------------------------------------------------------------

    def _message(self, level: int = 0) -> Message:
        return Message(TOPIC, f"acting-{next(self._bodies)}".encode(), tags="demo",
                       delay_time_level=level)

    def _acked(self, result: SendResult, kind: str) -> str | None:
        """Record a send's result: its msg id if the broker acknowledged it."""
        if result.send_status is not SendStatus.SEND_OK:
            self.run.unacknowledged += 1
            return None
        self.run.acked[result.msg_id] = (kind, result.message_queue.broker_name)
        if self._acting:
            self.run.outage_sends[result.message_queue.broker_name] += 1
        return result.msg_id

    async def _send_one(self, kind: str, level: int, queue: MessageQueue | None) -> str | None:
        try:
            if kind == "transactional":
                sent = await self.producer.send_message_in_transaction(self._message())
                return self._acked(sent.send_result, kind)
            return self._acked(await self.producer.send(self._message(level), queue), kind)
        except (ClientError, RpcError) as exc:
            # Not acknowledged: nothing the report holds the brokers to.
            self.run.unacknowledged += 1
            self.say(f"  a {kind} send failed: {exc}")
            return None

    async def send(self, normal: int, transactional: int = 0, delayed: int = 0,
                   level: int = LEVEL_BEFORE, to: list[MessageQueue] | None = None
                   ) -> list[str]:
        """Send and record; ``to``: round robin over those queues instead of the route's
        choice (not for transactions). The ids of the delayed messages acknowledged."""
        targets = itertools.cycle(to) if to else None
        delayed_ids = []
        for kind, count in (("normal", normal), ("delayed", delayed),
                            ("transactional", transactional)):
            for _ in range(count):
                queue = next(targets) if targets and kind != "transactional" else None
                msg_id = await self._send_one(kind, level if kind == "delayed" else 0, queue)
                if msg_id is not None and kind == "delayed":
                    delayed_ids.append(msg_id)
        return delayed_ids

    async def consume(self, what: str) -> None:
        """Run the consumer group until it has every acknowledged message (or the bound)."""
        run = self.run
        acting = self._acting

        async def handle(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            for message in messages:
                run.consumed.setdefault(message.msg_id, []).append(message.broker_name)
                if acting and message.broker_name == "broker-a":
                    run.through_acting.add(message.msg_id)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(GROUP, self.namesrv, rebalance_interval=1.0,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*")
        consumer.register_message_listener(MessageListenerConcurrently(handle))
        pending = len(run.acked.keys() - run.consumed.keys())
        async with consumer.start(self.client.connect):

            async def settled() -> bool:
                return not run.acked.keys() - run.consumed.keys()
            try:
                waited = await until(f"the consumer group to get {what}", settled)
                self.say(f"  the consumer group got the {pending} message(s) not consumed yet "
                         f"in {waited * 1000:.0f} ms")
            except Stalled as stalled:
                # What is still not consumed is lost: the report says so.
                self.say(f"  gave up waiting for {stalled}")

    # -- the scenario -------------------------------------------------------------------

    async def start(self) -> None:
        self.say("starting a name server with support_acting_master ...")
        await self.cluster.start_namesrvs()
        self.say(f"starting broker-a ({MASTER} master, {' and '.join(SLAVES)} slaves) and "
                 f"broker-b ({OTHER} master), static, with enable_slave_acting_master ...")
        for name in (MASTER, *SLAVES, OTHER):
            await self.groups.start(name)
        for name in (MASTER, OTHER):
            answer = await self.client.rpc.invoke(
                self.cluster.node(name).address, RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": TOPIC, "readQueueNums": str(QUEUES),
                 "writeQueueNums": str(QUEUES), "perm": str(PERM_READ | PERM_WRITE)})
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"creating topic {TOPIC} on {name} failed: {answer.remark}")

        async def routed() -> bool:
            route = await self.route()
            a = await self.broker_a_routed()
            slaves_hold = all(self.cluster.broker(s).topics.table.get(TOPIC) is not None
                              for s in SLAVES)
            return (route is not None and len(route.broker_datas) == 2 and a is not None
                    and sorted(a[0]) == [0, 1, 2] and slaves_hold)
        await until(f"the route of {TOPIC} to name broker-a's three brokers and broker-b",
                    routed)

    async def before_the_kill(self) -> None:
        self.say(f"sending normal, delayed (level {LEVEL_BEFORE}) and transactional messages "
                 f"to {TOPIC} on both groups; consumer group {GROUP} reading ...")
        await self.send(normal=40, transactional=10, delayed=10, level=LEVEL_BEFORE)
        await self.consume("the messages sent before the kill")
        to_a = [q for q in await self.producer.fetch_publish_message_queues(TOPIC)
                if q.broker_name == "broker-a"]
        self.say(f"the consumer group stopped; leaving a backlog on broker-a, delayed "
                 f"messages of level {LEVEL_OUTAGE} among it ...")
        self._backlog_delayed = await self.send(normal=40, delayed=10, level=LEVEL_OUTAGE,
                                                to=to_a)
        master = self.cluster.broker(MASTER)

        async def slaves_hold_all() -> bool:
            held = await self.offsets(MASTER)
            for name in SLAVES:
                slave = self.cluster.broker(name)
                if (slave.replicas.confirm_offset != master.log.max_offset
                        or await self.offsets(name) != held):
                    return False
            return True
        await until(f"{' and '.join(SLAVES)} to hold {MASTER}'s log and consumer offsets",
                    slaves_hold_all)
        self.run.offsets["at the kill"] = await self.offsets(MASTER)

    async def outage(self) -> None:
        run = self.run
        self.say(f"killing master {MASTER}")
        master = self.cluster.broker(MASTER)
        killed = trio.current_time()
        await self.cluster.kill(MASTER)
        # Those the master delivered before it died (its delay offset, as it ended) were
        # not due in the outage: only the others are the acting slave's to deliver.
        schedule = master.schedule
        delivered = schedule.table.offset(LEVEL_OUTAGE) if schedule is not None else 0
        run.due_in_outage.update(self._backlog_delayed[delivered:])
        if delivered:
            self.say(f"  {MASTER} delivered {delivered} delayed message(s) of level "
                     f"{LEVEL_OUTAGE} before it died")
        where = {self.groups.location(s): s for s in SLAVES}

        async def rewritten_and_acting() -> bool:
            # Both checked at each poll: either may come first.
            if run.rewrite_after is None:
                a = await self.broker_a_routed()
                if a is not None and a[0].get(0) in where and a[1] == PERM_READ:
                    run.rewrite_after = trio.current_time() - killed
                    run.acting_address = a[0][0]
                    run.acting_slave = where[run.acting_address]
            for name in SLAVES:
                if run.acting_after is None and self.cluster.broker(name).acting:
                    run.acting_after = trio.current_time() - killed
                    run.acting_term = name
            return run.rewrite_after is not None and run.acting_after is not None
        await until("the name server to route a slave of broker-a as broker id 0, perm 4, "
                    "and a slave to begin its acting term", rewritten_and_acting)
        slave = run.acting_slave or ""
        run.acting_id = self.cluster.broker(slave).broker_id
        self.say(f"the name server routes {slave} (broker id {run.acting_id}) as broker id 0, "
                 f"read only, {run.rewrite_after * 1000:.0f} ms after the kill; it acts")
        self._acting = True
        await self.producer.fetch_publish_message_queues(TOPIC)  # broker-a is read only now
        await self.send(normal=20, transactional=5)
        self.say(f"consumer group {GROUP} reading again: broker-a's backlog through {slave}, "
                 "the due delayed messages from broker-b ...")
        await self.consume(f"broker-a's backlog and the delayed messages while {slave} acts")
        run.offsets["while acting"] = await self.offsets(slave)
        self._acting = False

    async def master_back(self) -> None:
        run = self.run
        self.say(f"the consumer group stopped; starting {MASTER} again (pre-online) ...")
        restarted = trio.current_time()
        await self.groups.start(MASTER)
        back = self.groups.location(MASTER)

        async def registered() -> bool:
            a = await self.broker_a_routed()
            return a is not None and a[0].get(0) == back and a[1] == PERM_READ | PERM_WRITE
        await until(f"the name server to route {MASTER} as broker id 0, perm 6", registered)
        run.registered_after = trio.current_time() - restarted
        pre_online = self.cluster.broker(MASTER).pre_online
        if pre_online is not None:
            run.adopted = list(pre_online.adopted)
            run.pre_online = pre_online.outcome
        run.offsets["after the return"] = await self.offsets(MASTER)
        self.say(f"{MASTER} registered {run.registered_after * 1000:.0f} ms after its start "
                 f"({run.pre_online or 'without a pre-online'})")
        slave = run.acting_slave or SLAVES[0]

        async def ended() -> bool:
            return not self.cluster.broker(slave).acting
        await until(f"{slave}'s acting term to end", ended)
        await self.producer.fetch_publish_message_queues(TOPIC)  # broker-a is writable again
        await self.send(normal=20)
        await self.consume("the messages sent after the return")


async def run_acting_demo(pm: PluginManager, transport: str = "inproc",
                          say: Callable[[str], None] = print, *, keep: bool = False) -> int:
    """Run the scenario and print its report; 0 when every acknowledged message was
    consumed and no consumer offset of broker-a went back.

    ``keep``: leave the stores on disk and say where they are.
    """
    with stores(keep) as tmp:
        say(f"triomq demo --acting-master over {transport}; stores under {tmp}")
        async with open_cluster(Path(tmp), transport=transport, plugins=pm, controllers=0,
                                brokers=0, namesrvs=1, namesrv=ACTING_NAMESRV) as cluster:
            client = await cluster.start("client")
            scenario = _Scenario(cluster, Groups(cluster, **BROKER), client, say)
            try:
                await scenario.start()
                async with scenario.producer.start(client.connect):
                    await scenario.before_the_kill()
                    await scenario.outage()
                    await scenario.master_back()
            except Stalled as stalled:
                scenario.run.stalled = str(stalled)
                say(f"gave up waiting for {stalled}")
        run = scenario.run
        say("")
        for line in report(run):
            say(line)
        if keep:
            say("")
            say(f"stores kept under {tmp}")
            say(f"  read them:  triomq store dump {Path(tmp) / MASTER}")
    return 1 if problems(run) else 0
