"""Deterministic simulation of controller mode: 3 Raft controllers, a broker group, name servers.

One seed drives one run: a virtual clock in 10 ms steps, three controllers
(``triomq.consensus.core.raft`` with the replicas-info state machine applied
on commit, served as ``triomq.controller.service`` does), one broker group
of 2 or 3 replicas running the broker-side flow of controller mode over the
real HA state machines (see ``clustersim_controller`` and
``clustersim_broker``), 1 or 2 name servers the brokers register with
(``clustersim_namesrv``), a producer running the client's send flow
(``clustersim_producer``: the route from the name servers, retries,
route refreshes and failover pauses) that sends synchronous puts
(SEND_MESSAGE_V2) to the topic's queues in turn, which the brokers serve
with the broker's put core (``clustersim_puts``; acked only when every
member of the SyncStateSet holds the message:
``all_ack_in_sync_state_set``), and a consumer group of 1 or 2 push
consumers (``clustersim_group``, ``clustersim_consumer``) that find the
brokers through the name servers, pull each queue (the brokers serve pulls
and consumer offsets: ``clustersim_pulls``) and store their offsets. The
seed picks the fault rates: datagram
drop and delay (hence reordering), partitions (controllers split, a broker
cut from the controllers only, a broker isolated, broker-broker and
producer-broker links, a name server cut from the brokers, a broker cut
from the name servers, one broker-name server link), broker, controller
and name-server crashes and restarts (a broker keeps its log, epoch file,
identity and topics, a crash may tear the write in progress; a controller
keeps its Raft disk; a name server keeps nothing; a broker loses the
consumer offsets stored since its last write of them; a consumer keeps
nothing), consumer-broker links cut, controller log compaction (snapshots
of the replicas-info state, installed on lagging followers), clock skew,
and whether unclean election is enabled. The name servers' and the
consumers' counts and faults come from random streams of their own.
``Simulation(seed, transactions=N)`` adds a transactional producer
(``clustersim_transactions``, a stream of its own too; its seeds replay
with ``python -m triomq.testing.clustersim_transactions``);
``Simulation(seed, pops=True)`` a pop consumer and the masters' revive
(``clustersim_pop``).

Invariants, checked throughout (a ``Violation`` names the seed's replay command; those
on the committed state and the logs are ``clustersim_invariants``):

- at most one broker per master epoch completes synchronous puts;
- no acknowledged message is lost: every acked message is in the log of
  every member of the committed SyncStateSet and of every later master.
  An unclean election (from outside the SyncStateSet, only with
  ``enable_elect_unclean_master``) is allowed to lose what was acked in the
  epochs before it: from then on those messages are reported as possibly
  lost (``SeedResult.possibly_lost``), not checked; messages acked after it
  are checked again;
- a master completes a put only over a set holding every member of the
  SyncStateSet committed in its epoch (an expand whose answer was lost
  included);
- SyncStateSet members hold logs equal to the master's up to its confirm offset;
- epochs never go backwards (controllers apply the same history; a broker's
  role epoch only grows while it runs);
- route safety, after every change of a name server's table: the broker it
  routes as id 0 (a client's GET_ROUTEINFO_BY_TOPIC) is the one the
  controllers committed as master of the epoch it registered with (its
  state version), that epoch is never older than one the same life of the
  name server routed as id 0 before, and no address is routed under two ids;
- consumption (``clustersim_group``): a pull is answered with whole records
  of the pulled queue, in queue order from the pulled offset, within the
  broker's confirm offset; one pull stream delivers a queue in increasing
  offsets; an offset a consumer commits never passes a message of its stream
  its listener has not consumed (at-least-once);
- with transactions (``clustersim_transactions``): a transaction resolves
  exactly once: no master's log holds two commits of one, or a commit of
  one its producer rolled back;
- liveness: once faults heal and every node is up, a master exists and a put
  (the producer's, through the name servers' route) completes within
  ``HEAL_LIMIT_MS`` of virtual time, then every name server routes that
  master as id 0 within ``NAMESRV_HEAL_LIMIT_MS``, and
  every delayed or timer message acked before healing (a run's producer
  sends some with ``Simulation.delayed``; the brokers' masters deliver them
  with the broker's schedule core, ``clustersim_schedule``, and timer core,
  ``clustersim_timer``) has been delivered to its topic (an acked put of a
  record with its ``UNIQ_KEY``) within ``DELIVER_HEAL_LIMIT_MS``, each
  timer message's delivery stored at or after its slot's end by the
  delivering master's clock (``TIMER_OUT_MS`` plus the precision), and the
  consumer group has consumed every
  acked message within ``CONSUME_HEAL_LIMIT_MS`` (duplicates allowed; not those an unclean
  election may have lost, nor those acked after it at queue offsets the
  history it replaced served consumers: the stored offsets may count them),
  and with transactions, every acknowledged one has ended (rolled back,
  committed or discarded) within ``TX_HEAL_LIMIT_MS``;
- with pops (``clustersim_pop``): no master revives a popped message whose ack
  was answered before its revive time, and once healed every popped message
  is acked or revived within ``POP_HEAL_LIMIT_MS``.

Replay one seed: ``python -m triomq.testing.clustersim --seeds 1 --start SEED``.
The test suite runs 120 seeds (about 30 s); a longer run, e.g. ``python -m
triomq.testing.clustersim --seeds 2000 --start 1000`` (about 5 minutes on
one core), is worth doing after any change to ``triomq.controller``,
``triomq.ha``, ``triomq.namesrv`` or the broker's controller mode or
name-server registration. Scenario tests drive a
``Simulation(seed, chaos=False)`` by hand (``tests/clustersim``), stalled
controllers among them (``stall_controllers``: a busy host's or a pause's,
what they are sent waiting for them).

Fidelity notes: the simulated nodes pump the same sans-I/O flows as the
trio drivers (the controller's core; the producer's send flow; the
broker's put core, controller-mode flow, leader-following calls, master
term, reconnect backoff and name-server registration; the name server's
core), but the HA address is the broker's
name, the store flushes synchronously, the topics never change (so slaves
copy nothing from their master; nor the delay offsets and the timer
checkpoint: a new master delivers the delayed and timer messages from its
own, at least once), name-server requests are datagrams on a
connection that carries no bytes itself (see ``clustersim_namesrv`` for
when a name server hears it close), so are consumers' requests, the
consumer group's members are the consumers running, and seeds replay only against the same
code (any change to the simulation or the framework reshuffles what a seed
does).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.client.core.message import MessageQueue
from triomq.client.core.pull import pull_header
from triomq.controller.core.requests import UpdateControllerConfig
from triomq.controller.core.service_core import Elected
from triomq.controller.core.wire import ReplicaInfo
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.remoting import RemotingCommand
from triomq.testing import seeds
from triomq.testing.clustersim_broker import SimBroker
from triomq.testing.clustersim_controller import (
    ControllerSettings,
    SimController,
    controller_name,
)
from triomq.testing.clustersim_group import CONSUME_HEAL_LIMIT_MS, ConsumerGroup
from triomq.testing.clustersim_invariants import Invariants, Violation
from triomq.testing.clustersim_namesrv import (
    NamesrvResponse,
    NamesrvSettings,
    SimNamesrv,
    namesrv_chaos,
    namesrv_name,
)
from triomq.testing.clustersim_net import NetFaults, Network
from triomq.testing.clustersim_parts import (
    GROUP,
    TOPIC,
    TOPIC_QUEUES,
    BrokerSettings,
    PutRequest,
    PutResponse,
)
from triomq.testing.clustersim_pop import POP_HEAL_LIMIT_MS, SimPops
from triomq.testing.clustersim_producer import MAX_SENDS, PRODUCER, SimProducer, send_header
from triomq.testing.clustersim_pulls import ConsumerRequest, ConsumerResponse
from triomq.testing.clustersim_transactions import TX_HEAL_LIMIT_MS, TX_PRODUCER, SimTxProducer
from triomq.testing.seeds import SimSummary

STEP_MS = 10
CHAOS_MS = 10_000
HEAL_LIMIT_MS = 15_000
#: After the put that follows healing: every name server routes the master as id 0.
NAMESRV_HEAL_LIMIT_MS = 5_000
#: Then every acked delayed message is delivered: the longest level the producer
#: uses (5 s) and a failover's worth.
DELIVER_HEAL_LIMIT_MS = 20_000
#: The brokers' timer_precision_ms (RocketMQ's default: the put core's).
TIMER_PRECISION_MS = 1000
#: The consumer group of a scenario's pulls (``pull``).
SCENARIO_GROUP = "scenario-reader"


@attrs.frozen
class SeedResult:
    """The outcome of one seed."""

    seed: int
    ok: bool
    violation: str = ""
    now_ms: int = 0
    acked: int = 0
    elections: int = 0
    possibly_lost: int = 0
    consumed: int = 0
    duplicates: int = 0
    #: Transactions begun, and the checks their producer answered.
    transactions: int = 0
    checked: int = 0
    #: Of ``acked``: delayed messages stored to wait (each delivery is acked too).
    delayed: int = 0
    #: The distinct messages of the topic acked (a delayed message delivered again by a
    #: new master is acked twice).
    topic_messages: int = 0
    module: str = "triomq.testing.clustersim"

    @property
    def replay(self) -> str:
        """The command that replays this seed."""
        return f"python -m {self.module} --seeds 1 --start {self.seed}"


class Simulation(Invariants):
    """One seeded run; scenario tests drive it by hand (``chaos=False``).

    ``replicas``, ``unclean``, ``namesrvs`` (how many name servers; 0: none)
    and ``consumers`` (how many members the consumer group has; 0: none, the
    default without name servers) fix what the seed would otherwise pick.
    """

    def __init__(self, seed: int, *, replicas: int | None = None, unclean: bool | None = None,
                 chaos: bool = True, broker_settings: BrokerSettings | None = None,
                 namesrvs: int | None = None, consumers: int | None = None,
                 transactions: int = 0, delayed: bool | None = None,
                 pops: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.now = 0
        self.network = Network(random.Random(rng.getrandbits(64)))
        self.chaos = chaos
        self.faults = NetFaults(drop=rng.choice([0.0, 0.01, 0.05]),
                                max_delay_ms=rng.choice([0, 5, 20, 40]))
        self.p_partition = rng.choice([0.0, 0.003, 0.008])
        self.p_crash_broker = rng.choice([0.0, 0.002, 0.005])
        self.p_crash_controller = rng.choice([0.0, 0.002, 0.004])
        self.p_put = rng.choice([0.1, 0.3])
        self.replicas = replicas if replicas is not None else rng.choice([2, 3])
        self.unclean = unclean if unclean is not None else rng.random() < 0.25
        self._request_id = 0
        super().__init__()  # the invariants' bookkeeping
        #: (virtual ms, controller id, result code, replica info) per committed election.
        self.elections: list[tuple[int, int, int, ReplicaInfo]] = []
        #: (virtual ms, broker, response code) per answered put.
        self.put_results: list[tuple[int, str, ResponseCode]] = []
        self.down_until: dict[str, int] = {}
        self.controller_ids = [1, 2, 3]
        settings = ControllerSettings(enable_elect_unclean_master=self.unclean)
        self.controllers = {
            i: SimController(i, self.controller_ids, self, random.Random(rng.getrandbits(64)),
                             settings) for i in self.controller_ids}
        # The name servers draw from a stream of their own, so the rest of a seed's
        # run does not depend on how many there are.
        self.namesrv_rng = random.Random(f"namesrv-{seed}")
        ns_rng = self.namesrv_rng
        count = namesrvs if namesrvs is not None else ns_rng.choice([1, 2])
        self.namesrv_names = tuple(namesrv_name(i) for i in range(1, count + 1))
        self.p_crash_namesrv = ns_rng.choice([0.0, 0.002, 0.004])
        self.p_partition_namesrv = ns_rng.choice([0.0, 0.003])
        # The transactional producer draws from a stream of its own too.
        self.tx = (SimTxProducer(self, random.Random(f"tx-{seed}"), transactions)
                   if transactions else None)
        if self.tx is not None:
            self.replay_module = "triomq.testing.clustersim_transactions"
        # A pop consumer and the masters' revive, from a stream of their own too.
        self.pops = SimPops(self, random.Random(f"pop-{seed}")) if pops else None
        # Delayed messages, too, from a stream of their own (a chaos run's choice).
        self.delayed = (delayed if delayed is not None
                        else chaos and random.Random(f"delayed-{seed}").random() < 0.5)
        self.brokers: dict[str, SimBroker] = {}
        for index in range(1, self.replicas + 1):
            self.brokers[f"b{index}"] = SimBroker(f"b{index}", self,
                                                   broker_settings or BrokerSettings())
        self.namesrvs = {name: SimNamesrv(name, self, NamesrvSettings(),
                                          random.Random(ns_rng.getrandbits(64)))
                         for name in self.namesrv_names}
        self.group = ConsumerGroup(self, consumers)
        self.producer = SimProducer(self)
        #: The puts of ``put``: request id -> (broker, sent at).
        self.outstanding: dict[int, tuple[str, int]] = {}
        #: The answers to ``pull``, by request id.
        self.pulled: dict[int, ConsumerResponse] = {}
        self.producing = True
        self._next_body = 0

    # -- hooks called by the nodes ----------------------------------------------------

    def next_request_id(self) -> int:
        """A fresh request id (unique across the whole run)."""
        self._request_id += 1
        return self._request_id

    def on_election(self, controller: SimController, elected: Elected) -> None:
        """A controller committed an election."""
        self.elections.append((self.now, controller.id, int(elected.code), elected.info))

    def maybe_crash_writing(self, broker: SimBroker, data: bytes) -> bool:
        """Sometimes crash a broker in the middle of a write, tearing it."""
        if not self.chaos or self.now >= CHAOS_MS or not self.p_crash_broker:
            return False
        if self.rng.random() >= self.p_crash_broker:
            return False
        self.crash_broker(broker.name, self.rng.randint(100, 2000),
                          torn=data[:self.rng.randrange(len(data))])
        return True

    # -- the producer ------------------------------------------------------------------

    def _produce(self) -> None:
        for rid, (_, sent) in list(self.outstanding.items()):
            if self.now - sent > 1_500:  # a put of ``put`` with no answer: given up
                del self.outstanding[rid]
        self.producer.step()
        if self.tx is not None:
            self.tx.step(self.producing and self.now < CHAOS_MS)
        if self.pops is not None:
            self.pops.step(self.producing and self.now < CHAOS_MS)
        if (not self.producing or len(self.producer.sends) >= MAX_SENDS
                or self.rng.random() >= self.p_put):
            return
        self._next_body += 1
        self.producer.start_send(self._next_body, b"msg-%d-%d" % (self.seed, self._next_body))

    def put(self, broker: str) -> int:
        """Send one synchronous put (SEND_MESSAGE_V2) to ``broker`` itself, with no route,
        retry or failover (a scenario's); return its request id."""
        rid = self.next_request_id()
        self._next_body += 1
        body = b"msg-%d-%d" % (self.seed, self._next_body)
        self.outstanding[rid] = (broker, self.now)
        # Queue after queue, as a producer's default queue selection goes.
        queue_id = self._next_body % TOPIC_QUEUES
        header = {**send_header(f"PUT{rid:012d}", self.now), "e": str(queue_id), "n": GROUP}
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields=header,
                                          body=body)
        self.network.send(PRODUCER, broker, PutRequest(rid, request), self.now)
        return rid

    def pull(self, broker: str, queue_id: int, offset: int) -> int:
        """Send one PULL_MESSAGE of the topic's queue ``queue_id`` from ``offset`` to
        ``broker``, answered at once (a scenario's); return its request id. The answer
        lands in ``pulled``."""
        rid = self.next_request_id()
        self.outstanding[rid] = (broker, self.now)
        queue = MessageQueue(TOPIC, GROUP, queue_id)
        fields = pull_header(SCENARIO_GROUP, queue, offset, 32,
                             SubscriptionData.build(TOPIC, "*", 0), suspend_ms=None,
                             with_subscription=True)
        request = ConsumerRequest(rid, RequestCode.PULL_MESSAGE, fields)
        self.network.send(PRODUCER, broker, request, self.now)
        return rid

    def _on_put_response(self, src: str, response: PutResponse) -> None:
        self.outstanding.pop(response.id, None)
        code = ResponseCode(response.command.code)
        self.put_results.append((self.now, src, code))
        if self.producer.owns(response.id):
            self.producer.answered(response)

    # -- faults ------------------------------------------------------------------------

    def crash_broker(self, name: str, for_ms: int, torn: bytes = b"") -> None:
        """Crash a broker (restarted after ``for_ms``)."""
        self.brokers[name].crash(torn)
        self.down_until[name] = self.now + for_ms

    def crash_controller(self, node_id: int, for_ms: int) -> None:
        """Crash a controller (restarted after ``for_ms``)."""
        self.controllers[node_id].crash()
        self.down_until[controller_name(node_id)] = self.now + for_ms

    def stall_controllers(self, node_ids: Sequence[int], for_ms: int) -> None:
        """Stall controllers (they run nothing for ``for_ms``; nothing they are sent is lost)."""
        for node_id in node_ids:
            self.controllers[node_id].stall(for_ms)

    def update_controller_config(self, values: Mapping[str, Any]) -> None:
        """UPDATE_CONTROLLER_CONFIG at every running controller (a restart forgets it)."""
        request = UpdateControllerConfig(dict(values))
        for controller in self.controllers.values():
            if controller.up:
                rid = self.next_request_id()
                controller._feed(lambda now, c=controller, r=rid: c.core.request(r, request, now))

    def crash_namesrv(self, name: str, for_ms: int) -> None:
        """Crash a name server (restarted, empty, after ``for_ms``)."""
        self.namesrvs[name].crash()
        self.down_until[name] = self.now + for_ms

    def namesrvs_route_master(self) -> bool:
        """Every running name server routes the current master as id 0."""
        master = self.master()
        return master is not None and all(
            n.routed_master() == master.name for n in self.namesrvs.values() if n.up)

    def leader(self) -> SimController | None:
        """The active controller with the highest term."""
        leaders = [c for c in self.controllers.values() if c.is_leader]
        return max(leaders, key=lambda c: c.raft.term) if leaders else None

    def master(self) -> SimBroker | None:
        """The broker the committed state names master, if it runs as master of that epoch."""
        group = self.group_state
        if group is None or group.master_address not in self.brokers:
            return None
        broker = self.brokers[group.master_address]
        ok = (broker.up and broker.term.role == "master"
              and broker.term.epoch == group.master_epoch)
        return broker if ok else None

    def _chaos(self) -> None:
        rng = self.rng
        names = (set(self.brokers) | {controller_name(i) for i in self.controller_ids}
                 | {PRODUCER} | set(self.namesrvs) | set(self.group.consumers))
        controllers = {controller_name(i) for i in self.controller_ids}
        if self.p_partition and rng.random() < self.p_partition:
            if self.network.blocked and rng.random() < 0.5:
                self.network.blocked.clear()
            else:
                broker = rng.choice(sorted(self.brokers))
                kind = rng.randrange(5)
                if kind == 0:
                    self.network.partition({rng.choice(sorted(controllers))}, names)
                elif kind == 1:  # a broker cut from the controllers, not from its clients
                    self.network.partition({broker}, controllers)
                elif kind == 2:
                    self.network.partition({broker}, names)
                elif kind == 3:
                    self.network.partition({broker}, set(self.brokers))
                else:
                    self.network.partition({PRODUCER}, {broker}, one_way=rng.random() < 0.5)
        if self.p_crash_broker and rng.random() < self.p_crash_broker:
            up = [b for b in sorted(self.brokers) if self.brokers[b].up]
            master = self.master()
            if master is not None and rng.random() < 0.5:
                self.crash_broker(master.name, rng.randint(100, 3000))
            elif up:
                self.crash_broker(rng.choice(up), rng.randint(100, 3000))
        if rng.random() < 0.005:
            self.controllers[rng.choice(self.controller_ids)].compact()
        if self.p_crash_controller and rng.random() < self.p_crash_controller:
            up_ids = [i for i in self.controller_ids if self.controllers[i].up]
            leader = self.leader()
            if leader is not None and rng.random() < 0.5:
                self.crash_controller(leader.id, rng.randint(100, 2000))
            elif up_ids:
                self.crash_controller(rng.choice(up_ids), rng.randint(100, 2000))
        namesrv_chaos(self)
        self.group.chaos()

    # -- driving -------------------------------------------------------------------------

    def step(self) -> None:
        """Advance the virtual clock by one step."""
        self.now += STEP_MS
        if self.chaos and self.now < CHAOS_MS:
            self._chaos()
        for name, until in list(self.down_until.items()):
            if until <= self.now:
                del self.down_until[name]
                if name in self.brokers and not self.brokers[name].up:
                    self.brokers[name].start()
                elif name in self.namesrvs and not self.namesrvs[name].up:
                    self.namesrvs[name].start()
                elif name in self.group.consumers and not self.group.consumers[name].up:
                    self.group.consumers[name].start()
                elif name.startswith("c") and not self.controllers[int(name[1:])].up:
                    self.controllers[int(name[1:])].start()
        for src, dst, payload in self.network.due(self.now):
            if dst == TX_PRODUCER and self.tx is not None:
                self.tx.receive(src, payload)
            elif dst == PRODUCER:
                if isinstance(payload, PutResponse):
                    self._on_put_response(src, payload)
                elif isinstance(payload, NamesrvResponse):
                    self.producer.route_answered(payload)
                elif isinstance(payload, ConsumerResponse):
                    self.outstanding.pop(payload.id, None)
                    self.pulled[payload.id] = payload
            elif dst in self.brokers:
                self.brokers[dst].receive(src, payload)
            elif dst in self.namesrvs:
                self.namesrvs[dst].receive(src, payload)
            elif dst in self.group.consumers:
                self.group.consumers[dst].receive(src, payload)
            elif dst.startswith("c"):
                self.controllers[int(dst[1:])].receive(src, payload)
        for controller in self.controllers.values():
            controller.step()
        for broker in self.brokers.values():
            broker.step()
        for namesrv in self.namesrvs.values():
            namesrv.step()
        for consumer in self.group.consumers.values():
            consumer.step()
        self._produce()
        if self.now % (STEP_MS * 10) == 0:
            self.check_prefixes()
            self.check_holders()
        if self.tx is not None and self.now % 1000 == 0:
            self.tx.check_logs()

    def run_for(self, ms: int) -> None:
        """Step for ``ms`` of virtual time."""
        end = self.now + ms
        while self.now < end:
            self.step()

    def run_until(self, condition: Callable[[], bool], limit_ms: int, what: str) -> int:
        """Step until ``condition()`` holds; a ``Violation`` after ``limit_ms``."""
        start = self.now
        while not condition():
            if self.now - start > limit_ms:
                self.violation(f"liveness: {what} not reached within {limit_ms} ms")
            self.step()
        return self.now - start

    def heal(self) -> None:
        """End every fault: links restored, datagram faults off, every node restarted."""
        self.network.heal()
        for name in list(self.down_until):
            self.down_until[name] = self.now

    def _puts_ok_since(self, since: int) -> bool:
        return any(at >= since and code == ResponseCode.SUCCESS
                   for at, _, code in self.put_results)

    def run(self) -> SeedResult:
        """Chaos, then heal and require a master and a completed put in bounded time."""
        try:
            self.network.faults = self.faults
            self.run_for(CHAOS_MS)
            self.heal()
            healed = self.now
            self.run_until(lambda: self._puts_ok_since(healed), HEAL_LIMIT_MS,
                           "a completed put after healing")
            self.run_until(self.namesrvs_route_master, NAMESRV_HEAL_LIMIT_MS,
                           "every name server routing the master as id 0")
            self.run_until(lambda: not self.undelivered(acked_by=healed),
                           DELIVER_HEAL_LIMIT_MS,
                           "every delayed and timer message acknowledged before healing delivered")
            self.check_timer_times(TIMER_PRECISION_MS)
            if self.group.consumers:
                self.run_until(lambda: not self.group.unconsumed(), CONSUME_HEAL_LIMIT_MS,
                               "every acknowledged message consumed")
            if self.tx is not None:
                self.run_until(self.tx.all_ended, TX_HEAL_LIMIT_MS,
                               "every acknowledged transaction ended")
                self.tx.check_logs()
            if self.pops is not None:
                self.run_until(lambda: not self.pops.unresolved(), POP_HEAL_LIMIT_MS,
                               "every popped message acked or revived")
            self.check_prefixes()
            self.check_holders()
        except Violation as violation:
            return self._result(ok=False, violation=str(violation))
        return self._result(ok=True)

    def _result(self, ok: bool, violation: str = "") -> SeedResult:
        return SeedResult(seed=self.seed, ok=ok, violation=violation, now_ms=self.now,
                          acked=len(self.acked), elections=len(self.elections),
                          possibly_lost=self.possibly_lost, consumed=len(self.group.deliveries),
                          duplicates=self.group.duplicates,
                          transactions=len(self.tx.transactions) if self.tx else 0,
                          checked=self.tx.checked if self.tx else 0, module=self.replay_module,
                          delayed=self.delayed_acked, topic_messages=self.topic_messages_acked)


def run_seed(seed: int) -> SeedResult:
    """Simulate one seed."""
    return Simulation(seed).run()


def run_seeds(count: int, start: int = 0) -> SimSummary:
    """Simulate seeds ``start .. start + count - 1``."""
    return seeds.run_seeds(run_seed, count, start)


def main(argv: Sequence[str] | None = None) -> int:
    """``--seeds N [--start K]``: print failures with replay commands, then the tally."""
    return seeds.main("clustersim", __doc__.splitlines()[0], run_seed,
                      lambda r: f"{r.now_ms} ms", argv)


if __name__ == "__main__":
    sys.exit(main())
