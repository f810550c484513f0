"""Deterministic simulation of slave acting master (RIP-32) in a static broker group.

One seed drives one run, in 10 ms steps of virtual time, as
``clustersim`` does for controller mode: a static group ``broker-a``
(master ``a0``, id 0; slaves ``a1`` and ``a2``, ids 1 and 2; every member
with ``enable_slave_acting_master``), the master ``b0`` of a second group
``broker-b`` (where an acting slave's delayed and timer messages escape
to), 1 or 2 name servers with ``support_acting_master`` (the name
server's core: route rewrite, member groups, NOTIFY_MIN_BROKER_ID_CHANGE),
a producer of delayed messages (levels 1 to 3) and timer messages to
``a0``, two orderly clients locking a queue in half the runs, and a
consumer that commits its offsets to whichever broker the name servers
route as the group's id 0 (the acting slave while the master is gone).
The brokers are ``clustersim_acting_broker.StaticBroker``: their
registration, the acting decision (``GroupWatch``), the schedule and
timer cores, the put core, the escape bridges' flows (the seed picks
``acting_escape_bridges``: ``remote``, its route queries to the name
servers and its sends; ``container``, its choice of master, every broker
in one process; or both in turn), the lock quorum and the returning
master's ``PreOnline`` are the brokers' own cores. The seed picks the faults:
datagram drops and delays, crashes and returns of the master and the
slaves, partitions (the master cut from the name servers, from its slaves
or from everyone, a slave cut from the name servers or from its master)
and name-server crashes.

Invariants (a ``Violation`` names the seed and its replay command):

- an acting slave never appends to its own commit log (its delayed and timer
  messages escape to ``b0``; a slave writes only what it copies from its
  master, a prefix of the master's log);
- no due delayed message is lost: once faults heal, every delayed or timer
  message ``a0`` acknowledged is delivered (a PUT_OK of its real topic on
  ``a0``, or escaped onto ``b0``) within ``DELIVER_HEAL_LIMIT_MS``;
- consumer offsets never go backwards through a pre-online: when the
  returning master goes online, each of its tables (consumer offsets, delay
  offsets, timer checkpoint) has the newest DataVersion of those it fetched from its slaves,
  and where the slave that acted last held the newest consumer offsets,
  none of the master's offsets is behind that slave's (every queue's, with
  ``offsets_by_queue``: see ``ActingSimulation``);
- with strict locks (``lock_in_strict_mode``, half the runs:
  ``clustersim_acting_locks``), at most one orderly client holds a queue's
  lock at any time, across the acting slave and the returning master;
- with pops (half the runs: ``clustersim_acting_pops``), served by the master
  or the acting slave and revived wherever their checkpoints went (``b0``
  reading an acting slave's popped messages from its group): no broker
  revives a message whose ack it read, none is lost from its log, and once
  healed every acknowledged pop is acked or revived;
- with transactions (half the runs: ``clustersim_acting_transactions``),
  half messages on ``a0``, checked and ended by ``a0``, by the acting slave
  (its rounds escaping them to ``b0``, its commits put there) and by
  ``b0``: an acting term hands a transaction on at most once, no log
  commits one more often than it took it nor one its producer rolled
  back, and once healed every acknowledged transaction has ended;
- route safety: a name server routes the group's id 0 either to the
  registered master or, without one, to a slave with the group's queues
  read-only;
- liveness: once healed, the master goes online and every name server
  routes it as id 0 within ``ONLINE_HEAL_LIMIT_MS``.

Replay one seed: ``python -m triomq.testing.clustersim_acting --seeds 1
--start SEED``; ``triomq sim --acting --seeds N --start K`` sweeps. The
suite's moving window runs some seeds per commit, ``make soak`` thousands.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence

from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.namesrv.config import NamesrvConfig
from triomq.namesrv.core.processor import NameServerCore
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.request_codes import RequestCode
from triomq.protocol.route import PERM_WRITE, TopicRouteData
from triomq.testing import seeds
from triomq.testing.clustersim import SeedResult
from triomq.testing.clustersim_acting_broker import OffsetCommit, StaticBroker
from triomq.testing.clustersim_acting_locks import (
    CLIENT_HOLD_MS,
    CLIENTS,
    LockResponse,
    OrderlyClients,
)
from triomq.testing.clustersim_acting_pops import POP_HEAL_LIMIT_MS, ActingPops
from triomq.testing.clustersim_acting_transactions import ActingTxProducer
from triomq.testing.clustersim_namesrv import (
    NamesrvRequest,
    NamesrvResponse,
    NamesrvSettings,
    SimNamesrv,
    broker_of,
    namesrv_name,
)
from triomq.testing.clustersim_net import NetFaults, Network, Stream
from triomq.testing.clustersim_parts import (
    GROUP,
    TOPIC,
    TOPIC_QUEUES,
    BrokerSettings,
    PutRequest,
    PutResponse,
)
from triomq.testing.clustersim_producer import send_header
from triomq.testing.clustersim_transactions import (
    SEED_TRANSACTIONS,
    TX_HEAL_LIMIT_MS,
    TX_PRODUCER,
)
from triomq.testing.seeds import SimSummary, Violation

STEP_MS = 10
CHAOS_MS = 10_000
#: After healing: every acked delayed message delivered (the longest level used is
#: 10 s, and a return's worth).
DELIVER_HEAL_LIMIT_MS = 20_000
#: After healing: the master online and routed as id 0 by every name server.
ONLINE_HEAL_LIMIT_MS = 10_000
#: The second group, whose master takes what an acting slave escapes.
ESCAPE_GROUP = "broker-b"
PRODUCER, CONSUMER = "p", "k"
CONSUMER_GROUP = "acting-readers"
MODULE = "triomq.testing.clustersim_acting"


class ActingNamesrv(SimNamesrv):
    """A name server with ``support_acting_master``; it sends its notices."""

    def start(self) -> None:
        super().start()
        self.core = NameServerCore(config=NamesrvConfig(
            support_acting_master=True,
            scan_not_active_broker_interval=self.settings.scan_not_active_broker_interval,
            broker_not_active_timeout=self.settings.broker_not_active_timeout))

    def receive(self, src: str, payload: object) -> None:
        super().receive(src, payload)
        self._notify()

    def step(self) -> None:
        super().step()
        if self.up:
            self._notify()

    def _notify(self) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE to the group's members (oneway)."""
        for address, command in self.core.take_notices():
            self.sim.network.send(self.name, broker_of(address),
                                  NamesrvRequest(0, 0, command), self.sim.now)

    def check_routes(self) -> None:
        """Id 0 is the registered master, or a slave with the group's queues read-only."""
        route = self.core.route.topic_route(TOPIC)
        if route is None:
            return
        for broker in route.broker_datas:
            if broker.broker_name != GROUP:
                continue
            addrs = dict(broker.broker_addrs)
            if len(set(addrs.values())) != len(addrs):
                self.sim.violation(f"name server {self.name} routes an address under two "
                                   f"ids: {addrs}")
            master = addrs.get(0)
            if master is None or broker_of(master) == "a0":
                continue
            perms = [q.perm for q in route.queue_datas if q.broker_name == GROUP]
            if any(perm & PERM_WRITE for perm in perms):
                self.sim.violation(f"name server {self.name} routes slave {master} as id 0 "
                                   f"of {GROUP} with writable queues")


class ActingSimulation:
    """One seeded run of a static group whose slaves act for their absent master.

    ``escape_while_acting`` False makes an acting slave put its delayed
    messages through its own put (a broken rule, for the tests that show the
    invariants catch it). ``offsets_by_queue`` checks every queue offset of the
    slave that acted last after a pre-online, even where another table had a
    newer DataVersion: RocketMQ's rule takes whole tables by DataVersion, so a
    slave whose copy was stale (cut from its master, or a master that moved on
    after the last copy) or that acted beside a master cut from the name
    servers loses the moves it made, as chaos seeds with ``offsets_by_queue`` show.
    """

    def __init__(self, seed: int, *, chaos: bool = True, namesrvs: int | None = None,
                 escape_while_acting: bool = True, offsets_by_queue: bool = False,
                 locks: bool | None = None, pops: bool | None = None,
                 transactions: bool | None = None) -> None:
        self.seed = seed
        #: The options given beyond the seed (a replay names them).
        self._options = {"chaos": chaos, **{k: v for k, v in (
            ("namesrvs", namesrvs), ("locks", locks), ("pops", pops),
            ("transactions", transactions)) if v is not None}}
        if not escape_while_acting:
            self._options["escape_while_acting"] = False
        if offsets_by_queue:
            self._options["offsets_by_queue"] = True
        self.rng = random.Random(seed)
        rng = self.rng
        self.now = 0
        self.chaos = chaos
        self.network = Network(random.Random(rng.getrandbits(64)))
        self.faults = NetFaults(drop=rng.choice([0.0, 0.01, 0.05]),
                                max_delay_ms=rng.choice([0, 5, 20]))
        self.p_crash = rng.choice([0.0, 0.001, 0.003])
        self.p_partition = rng.choice([0.0, 0.002, 0.005])
        self.p_crash_namesrv = rng.choice([0.0, 0.0, 0.001])
        self.p_put = rng.choice([0.05, 0.2])
        self.escape_while_acting = escape_while_acting
        self.offsets_by_queue = offsets_by_queue
        self.static_group = GROUP
        # Strict locks in half the runs, from a stream of their own.
        locks_rng = random.Random(f"locks-{seed}")
        self.locks = locks if locks is not None else locks_rng.random() < 0.5
        self.orderly = OrderlyClients(self, locks_rng) if self.locks else None
        # Pops in half the runs, from a stream of their own.
        pops_rng = random.Random(f"pops-{seed}")
        popping = pops if pops is not None else pops_rng.random() < 0.5
        self.pops = ActingPops(self, pops_rng) if popping else None
        # The acting escape bridges, from a stream of their own.
        bridges_rng = random.Random(f"bridges-{seed}")
        self.escape_bridges: tuple[str, ...] = bridges_rng.choice(
            [("remote",), ("container", "remote"), ("container",)])
        # Transactions in half the runs, from a stream of their own.
        tx_rng = random.Random(f"tx-{seed}")
        transacting = transactions if transactions is not None else tx_rng.random() < 0.5
        self.tx = ActingTxProducer(self, tx_rng, SEED_TRANSACTIONS) if transacting else None
        self._request_id = 0
        self.down_until: dict[str, int] = {}
        self.crashed_at: dict[str, int] = {}
        count = namesrvs if namesrvs is not None else rng.choice([1, 2])
        self.namesrv_names = tuple(namesrv_name(i) for i in range(1, count + 1))
        self.namesrvs = {name: ActingNamesrv(name, self, NamesrvSettings(),
                                             random.Random(rng.getrandbits(64)))
                         for name in self.namesrv_names}
        settings = BrokerSettings()
        self.brokers: dict[str, StaticBroker] = {}
        for name, group, broker_id in (("a0", GROUP, 0), ("a1", GROUP, 1), ("a2", GROUP, 2),
                                       ("b0", ESCAPE_GROUP, 0)):
            self.brokers[name] = StaticBroker(name, group, broker_id, self, settings)
        if self.pops is not None:
            for broker in self.brokers.values():
                self.pops.hold_topics(broker)
        # The ledger the invariants read.
        #: UNIQ_KEY of each delayed or timer message a0 acknowledged -> when.
        self.acked: dict[str, int] = {}
        #: UNIQ_KEY -> the broker that delivered it first.
        self.delivered: dict[str, str] = {}
        self.last_acting: str | None = None
        self.acting_terms = 0
        self.pre_onlines = 0
        self._puts: dict[int, str] = {}
        self._next = 0
        #: The consumer: its next offset per queue, and the broker its route names id 0.
        self.consumed = [0] * TOPIC_QUEUES
        self.routed_to: str | None = None
        self._route_query: int | None = None
        self._streams: dict[str, Stream | None] = {}

    # -- hooks of the nodes -------------------------------------------------------------

    def next_request_id(self) -> int:
        self._request_id += 1
        return self._request_id

    def violation(self, what: str) -> None:
        raise Violation(f"seed {self.seed}: {what} at {self.now} ms (replay: {self.replay})")

    @property
    def replay(self) -> str:
        """What replays this run: the sweep's command, or this run's options."""
        if self._options == {"chaos": True}:
            return f"python -m {MODULE} --seeds 1 --start {self.seed}"
        options = "".join(f", {k}={v!r}" for k, v in self._options.items())
        return f"{MODULE}.ActingSimulation({self.seed}{options}).run()"

    def group_members(self, group: str) -> list[StaticBroker]:
        return [b for b in self.brokers.values() if b.group == group]

    def on_acting(self, broker: StaticBroker, acting: bool) -> None:
        """A slave began (or ended) acting for its master."""
        if acting:
            self.last_acting = broker.name
            self.acting_terms += 1

    def on_slave_append(self, broker: StaticBroker) -> None:
        """A slave wrote its own commit log (not a copy of its master's)."""
        self.violation(f"slave {broker.name} (acting: {broker.acting}) appended to its own "
                       f"commit log")

    def on_escaped(self, broker: StaticBroker, term: object, message: EscapedMessage) -> None:
        """An acting slave's put was stored on another master."""
        if self.tx is not None:
            self.tx.escaped(broker, term, message)

    def on_delivered(self, broker: StaticBroker, key: str) -> None:
        self.delivered.setdefault(key, broker.name)

    def on_pre_online(self, master: StaticBroker, fetched: list[str], why: str) -> None:
        """The returning master goes online: its tables are the newest by DataVersion of
        those it fetched, and not behind the slave that acted last where that slave's
        table was the newest (every queue, with ``offsets_by_queue``)."""
        self.pre_onlines += 1
        for kind, own in master.tables().items():
            for name in fetched:
                theirs = self.brokers[name].tables()[kind]
                if theirs.newer_than(own):
                    self.violation(f"{master.name} went online ({why}) with its {kind} at "
                                   f"{own}, older than {name}'s {theirs}")
        slave = self.last_acting
        if slave is None or slave not in fetched:
            return
        theirs = self.brokers[slave].offsets
        if not self.offsets_by_queue and theirs.data_version != master.offsets.data_version:
            return  # the acting slave's table was not the newest (see ``offsets_by_queue``)
        for key, queues in theirs.offsets().items():
            topic, _, group = key.partition("@")
            for queue_id, offset in queues.items():
                stored = master.offsets.query(group, topic, queue_id)
                if stored is None or stored < offset:
                    self.violation(
                        f"{master.name} went online ({why}) with offset {stored} of {key} "
                        f"queue {queue_id}, behind {offset} of {slave}, which acted last")

    # -- the clients ------------------------------------------------------------------

    def _produce(self) -> None:
        if self.now >= CHAOS_MS or self.rng.random() >= self.p_put:
            return
        self._next += 1
        rid = self.next_request_id()
        key = f"ACT{self.seed:08d}{self._next:08d}"
        # Delay levels 1 to 3 (1, 5, 10 s) and timer messages 1.5 s and 4 s ahead, in turn.
        turn = self._next % 5
        header = {**send_header(key, self.now, delay_level=1 + turn if turn < 3 else 0,
                                timer_delay_ms=(1500, 4000)[turn - 3] if turn >= 3 else 0),
                  "e": str(self._next % TOPIC_QUEUES), "n": GROUP}
        self._puts[rid] = key
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields=header,
                                          body=b"delayed-%d" % self._next)
        self.network.send(PRODUCER, "a0", PutRequest(rid, request), self.now)

    def _consume(self) -> None:
        """Ask a name server for the route now and then; commit an offset to id 0."""
        if self.now % 200 == 0:
            namesrv = self.rng.choice(self.namesrv_names)
            stream = self._streams.get(namesrv)
            if stream is None or stream.closed:
                stream = self._streams[namesrv] = self.network.connect(CONSUMER, namesrv)
            if stream is not None:
                self._route_query = self.next_request_id()
                command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                  {"topic": TOPIC})
                self.network.send(CONSUMER, namesrv,
                                  NamesrvRequest(self._route_query, stream.id, command), self.now)
        if self.now % 100 == 0 and self.routed_to is not None and self.now < CHAOS_MS:
            queue_id = self.rng.randrange(TOPIC_QUEUES)
            self.consumed[queue_id] += 1
            fields = {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC,
                      "queueId": str(queue_id), "commitOffset": str(self.consumed[queue_id])}
            self.network.send(CONSUMER, self.routed_to, OffsetCommit(fields), self.now)

    def _route_answered(self, response: NamesrvResponse) -> None:
        if response.id != self._route_query or response.command.code != 0:
            return
        route = TopicRouteData.decode(response.command.body or b"")
        for broker in route.broker_datas:
            if broker.broker_name == GROUP:
                master = dict(broker.broker_addrs).get(0)
                self.routed_to = broker_of(master) if master is not None else None

    # -- faults -------------------------------------------------------------------------

    def crash(self, name: str, for_ms: int) -> None:
        node = self.brokers.get(name) or self.namesrvs[name]
        node.crash()
        self.down_until[name] = self.now + for_ms
        self.crashed_at[name] = self.now

    @property
    def shortest_down_ms(self) -> int:
        """How long a crashed broker stays down at least: with locks, longer than a client
        holds one, since a broker's locks are in memory (see ``clustersim_acting_locks``)."""
        return CLIENT_HOLD_MS + 500 if self.locks else 0

    def _chaos(self) -> None:
        rng = self.rng
        namesrvs = set(self.namesrvs)
        everyone = set(self.brokers) | namesrvs | {PRODUCER, CONSUMER, *CLIENTS}
        if self.p_crash and rng.random() < self.p_crash:
            up = [b for b in ("a0", "a1", "a2") if self.brokers[b].up]
            if up:
                target = "a0" if "a0" in up and rng.random() < 0.5 else rng.choice(up)
                self.crash(target, rng.randint(max(300, self.shortest_down_ms), 4000))
        if self.p_partition and rng.random() < self.p_partition:
            if self.network.blocked and rng.random() < 0.5:
                self.network.blocked.clear()
            else:
                slave = rng.choice(["a1", "a2"])
                kind = rng.randrange(5)
                if kind == 0:
                    self.network.partition({"a0"}, namesrvs)
                elif kind == 1:
                    self.network.partition({"a0"}, {"a1", "a2"})
                elif kind == 2:
                    self.network.partition({"a0"}, everyone)
                elif kind == 3:
                    self.network.partition({slave}, namesrvs)
                else:
                    self.network.partition({slave}, {"a0"})
        if self.p_crash_namesrv and rng.random() < self.p_crash_namesrv:
            up_ns = [n for n in sorted(self.namesrvs) if self.namesrvs[n].up]
            if up_ns:
                self.crash(rng.choice(up_ns), rng.randint(100, 2000))

    # -- driving ------------------------------------------------------------------------

    def step(self) -> None:
        self.now += STEP_MS
        if self.chaos and self.now < CHAOS_MS:
            self._chaos()
        for name, until in list(self.down_until.items()):
            if until <= self.now:
                del self.down_until[name]
                node = self.brokers.get(name) or self.namesrvs[name]
                if not node.up:
                    node.start()
        for src, dst, payload in self.network.due(self.now):
            if dst == PRODUCER and isinstance(payload, PutResponse):
                key = self._puts.pop(payload.id, None)
                if key is not None and payload.command.code == 0:
                    self.acked[key] = self.now
            elif dst == CONSUMER and isinstance(payload, NamesrvResponse):
                self._route_answered(payload)
            elif dst in CLIENTS and isinstance(payload, LockResponse):
                if self.orderly is not None:
                    self.orderly.receive(dst, payload)
            elif dst == TX_PRODUCER and self.tx is not None:
                self.tx.receive(src, payload)
            elif dst in self.brokers:
                self.brokers[dst].receive(src, payload)
            elif dst in self.namesrvs:
                self.namesrvs[dst].receive(src, payload)
        for broker in self.brokers.values():
            broker.step()
        for namesrv in self.namesrvs.values():
            namesrv.step()
        self._produce()
        self._consume()
        if self.orderly is not None:
            self.orderly.step()
        if self.pops is not None:
            self.pops.step(popping=self.now < CHAOS_MS)
        if self.tx is not None:
            self.tx.step(self.now < CHAOS_MS)
            if self.now % 1000 == 0:
                self.tx.check_logs()

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()

    def run_until(self, condition: Callable[[], bool], limit_ms: int, what: str) -> None:
        start = self.now
        while not condition():
            if self.now - start > limit_ms:
                self.violation(f"liveness: {what} not reached within {limit_ms} ms")
            self.step()

    def heal(self) -> None:
        """Every link whole, no datagram faults, every node restarted (a broker no sooner
        than ``shortest_down_ms`` after its crash)."""
        self.network.heal()
        for name in list(self.down_until):
            shortest = self.shortest_down_ms if name in self.brokers else 0
            self.down_until[name] = max(self.now, self.crashed_at[name] + shortest)

    def undelivered(self) -> list[str]:
        """The acknowledged delayed and timer messages not delivered yet."""
        return sorted(key for key in self.acked if key not in self.delivered)

    def master_routed(self) -> bool:
        master = self.brokers["a0"]
        return master.up and master.online and all(
            n.routed_master() == "a0" for n in self.namesrvs.values() if n.up)

    def run(self) -> SeedResult:
        """Chaos, then heal: the master back online, every delayed and timer message
        delivered."""
        try:
            if self.chaos:
                self.network.faults = self.faults
            self.run_for(CHAOS_MS)
            self.heal()
            self.run_until(self.master_routed, ONLINE_HEAL_LIMIT_MS,
                           "the master online and routed as id 0")
            self.run_until(lambda: not self.undelivered(), DELIVER_HEAL_LIMIT_MS,
                           "every acknowledged delayed message delivered")
            if self.pops is not None:
                pops = self.pops
                self.run_until(lambda: not pops.unresolved(), POP_HEAL_LIMIT_MS,
                               "every acknowledged pop acked or revived")
            if self.tx is not None:
                self.run_until(self.tx.all_ended, TX_HEAL_LIMIT_MS,
                               "every acknowledged transaction ended")
                self.tx.check_logs()
        except Violation as violation:
            return self._result(ok=False, violation=str(violation))
        return self._result(ok=True)

    def _result(self, ok: bool, violation: str = "") -> SeedResult:
        return SeedResult(seed=self.seed, ok=ok, violation=violation, now_ms=self.now,
                          acked=len(self.acked), delayed=len(self.acked),
                          transactions=len(self.tx.transactions) if self.tx else 0,
                          checked=self.tx.checked if self.tx else 0, module=MODULE)


def run_seed(seed: int) -> SeedResult:
    """Simulate one seed."""
    return ActingSimulation(seed).run()


def run_seeds(count: int, start: int = 0) -> SimSummary:
    """Simulate seeds ``start .. start + count - 1``."""
    return seeds.run_seeds(run_seed, count, start)


def main(argv: Sequence[str] | None = None) -> int:
    """``--seeds N [--start K]``: print failures with replay commands, then the tally."""
    return seeds.main("clustersim_acting", __doc__.splitlines()[0], run_seed,
                      lambda r: f"{r.now_ms} ms", argv)


if __name__ == "__main__":
    sys.exit(main())
