"""Name servers in the cluster simulation, and the brokers' registration with them.

``SimNamesrv`` pumps the name server's own core
(``triomq.namesrv.core.processor.NameServerCore``, as ``framework/namesrv/service.py``
does over trio): requests in, answers out, ``connection_closed`` and the scan
for silent brokers on this host's (skewed) clock. It keeps no state: a
restart starts from an empty route table.

``namesrv_chaos`` is their faults: crashes, and links cut to the brokers.

``SimRegistration`` is a broker's side: it pumps the broker's own
``RegistrationFlow`` (as ``framework/broker/registration/namesrv_client.py`` does) and
registers as the broker service does: a master as id 0 with its master epoch
as the DataVersion's state version (``TopicTable.bump``), a slave with its
own id.

A request and its answer are datagrams of the simulation's network (they
may be dropped, delayed, cut); each travels on a connection, a ``Stream``
carrying no bytes of its own, opened on a broker's first request to a name
server and again after it closed. A connection closes, as TCP's does, when
its broker crashes, when its name server crashes, or when a link between
them is cut. The name server hears of a close only when the close can reach
it: at once for a crash, once the link is whole again for a cut link; until
then the broker stays registered, and the scan drops it after its timeout
if it stays silent.

Addresses are ``host:port`` as RocketMQ's: ``<broker name>:10911`` (and
``:10912`` for HA); the route check maps them back to the simulated broker.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import attrs

from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.registration.core.namesrv_registration import (
    BrokerRegistrationInfo,
    Heartbeat,
    Register,
    RegistrationFlow,
    request_for,
)
from triomq.controller.core.wire import decode_epoch_cache
from triomq.namesrv.core.processor import NameServerCore
from triomq.namesrv.core.route_info import MasterVouch, RouteInfo
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import MASTER_ID
from triomq.testing.clustersim_net import Stream, TaskGen, wait_for
from triomq.testing.clustersim_parts import CLUSTER, GROUP, Term

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation
    from triomq.testing.clustersim_broker import SimBroker

BROKER_PORT, HA_PORT = 10911, 10912


@attrs.frozen
class NamesrvSettings:
    """A name server's timing (ms; ``NamesrvConfig``'s names)."""

    scan_not_active_broker_interval: int = 100
    #: For a broker that sends no timeout of its own (the simulated ones all do).
    broker_not_active_timeout: int = 1000
    #: How long a master has to answer a vouch's question (``VOUCH_TIMEOUT``).
    vouch_timeout: int = 100
    #: When a question that went unanswered may be asked again (``VOUCH_RETRY_MS``).
    vouch_retry: int = 500


@attrs.frozen
class NamesrvRequest:
    """A remoting request to a name server on connection ``connection`` (a stream id)."""

    id: int
    connection: int
    command: RemotingCommand = attrs.field(eq=False)


@attrs.frozen
class NamesrvResponse:
    """A name server's answer to request ``id``."""

    id: int
    command: RemotingCommand = attrs.field(eq=False)


@attrs.frozen
class EpochCacheRequest:
    """A name server's GET_BROKER_EPOCH_CACHE to a broker (a vouch's question)."""

    id: int
    command: RemotingCommand = attrs.field(eq=False)


@attrs.frozen
class EpochCacheResponse:
    """A broker's answer to ``EpochCacheRequest`` ``id``."""

    id: int
    command: RemotingCommand = attrs.field(eq=False)


def namesrv_name(index: int) -> str:
    """The network name of name server ``index`` (from 1)."""
    return f"n{index}"


def route_address(broker: str) -> str:
    """The address a simulated broker registers (``host:port``)."""
    return f"{broker}:{BROKER_PORT}"


def broker_of(address: str) -> str:
    """The simulated broker a registered address names."""
    return address.rpartition(":")[0]


class SimNamesrv:
    """One name server: a ``NameServerCore`` fed by the simulation's network and clock."""

    def __init__(self, name: str, sim: Simulation, settings: NamesrvSettings,
                 rng: random.Random) -> None:
        self.name = name
        self.sim = sim
        self.settings = settings
        self.rate = rng.choice([0.95, 1.0, 1.0, 1.05])
        self.offset = rng.randint(0, 10_000)
        self.lives = 0
        self.up = False
        self.start()

    def start(self) -> None:
        """Boot with an empty route table (a name server keeps no state)."""
        self.up = True
        self.lives += 1
        self.sim.network.down.discard(self.name)
        self.core = NameServerCore(RouteInfo(
            default_broker_timeout_ms=self.settings.broker_not_active_timeout,
            vouch_retry_ms=self.settings.vouch_retry))
        #: The connections brokers opened to this life of the name server.
        self.connections: dict[int, Stream] = {}
        self.next_scan = self.now_ms() + self.settings.scan_not_active_broker_interval
        #: The vouches' questions out: request id -> the vouch and when it times out.
        self.vouches: dict[int, tuple[MasterVouch, int]] = {}
        #: The newest master epoch (state version) a broker vouched for to this life.
        self.top_vouched_version = -1

    def crash(self) -> None:
        """Die: every connection to it closes; nothing is kept."""
        self.up = False
        self.sim.network.down.add(self.name)
        self.sim.network.break_streams()

    def now_ms(self) -> int:
        """This host's (skewed) clock."""
        return int(self.sim.now * self.rate) + self.offset

    def receive(self, src: str, payload: object) -> None:
        """A request arrived: the core answers it, on the connection it came on. Or a
        broker answered a vouch's question."""
        if not self.up:
            return
        if isinstance(payload, EpochCacheResponse):
            self._vouched(payload.id, payload.command)
            return
        if not isinstance(payload, NamesrvRequest):
            return
        stream = self.sim.network.streams.get(payload.connection)
        if stream is None or stream.server != self.name:
            return  # sent on a connection that closed meanwhile: TCP delivers nothing
        self.connections[stream.id] = stream
        answer = self.core.handle(payload.command, stream.id, self.now_ms())
        self.sim.network.send(self.name, src, NamesrvResponse(payload.id, answer), self.sim.now)
        self._ask_vouches()
        self.check_routes()

    def _ask_vouches(self) -> None:
        for vouch, command in self.core.take_vouches():
            rid = self.sim.next_request_id()
            self.vouches[rid] = (vouch, self.now_ms() + self.settings.vouch_timeout)
            self.sim.network.send(self.name, broker_of(vouch.address),
                                  EpochCacheRequest(rid, command), self.sim.now)

    def _vouched(self, rid: int, response: RemotingCommand | None) -> None:
        asked = self.vouches.pop(rid, None)
        if asked is None:
            return  # timed out already
        vouch = asked[0]
        if response is not None and response.code == 0:
            # The route invariant's own reading of the answer, not the core's.
            cache = decode_epoch_cache(response.body)
            if (cache.broker_id == MASTER_ID and cache.broker_name == vouch.broker_name
                    and cache.epochs and cache.epochs[-1].epoch >= vouch.state_version):
                self.top_vouched_version = max(self.top_vouched_version, vouch.state_version)
        self.core.vouched(vouch, response, self.now_ms())
        self._ask_vouches()

    def step(self) -> None:
        """Closes that reached it, then the scan for silent brokers when due."""
        if not self.up:
            return
        changed = False
        for stream_id, stream in list(self.connections.items()):
            if stream.closed and not self.sim.network.cut(stream.client, self.name):
                del self.connections[stream_id]
                self.core.connection_closed(stream_id)
                changed = True
        now = self.now_ms()
        for rid in [r for r, (_, until) in self.vouches.items() if now >= until]:
            self._vouched(rid, None)
        if now >= self.next_scan:
            self.core.scan(now)
            self.next_scan = now + self.settings.scan_not_active_broker_interval
            changed = True
        if changed:
            self.check_routes()

    # -- what clients are told ------------------------------------------------------------

    def routed(self) -> dict[int, str]:
        """Broker id -> address of the group as a client's route query gets it."""
        route = self.core.route.topic_route(GROUP)
        if route is None:
            return {}
        return next((dict(b.broker_addrs) for b in route.broker_datas
                     if b.broker_name == GROUP), {})

    def routed_master(self) -> str | None:
        """The simulated broker routed as id 0, if any."""
        address = self.routed().get(MASTER_ID)
        return None if address is None else broker_of(address)

    def check_routes(self) -> None:
        """Route safety (the simulation's doc): id 0 only for a master of the epoch it
        registered with, that epoch never older than one a broker vouched for to this
        life (a master answering GET_BROKER_EPOCH_CACHE at that epoch or a later one)."""
        routed = self.routed()
        if len(set(routed.values())) != len(routed):
            self.sim.violation(f"name server {self.name} routes an address under two ids: "
                               f"{routed}")
        address = routed.get(MASTER_ID)
        if address is None:
            return
        version = self.core.route.data_version(CLUSTER, address)
        if version is None:
            self.sim.violation(f"name server {self.name} routes {address} as id 0 without "
                               f"holding its registration")
            return
        epoch = version.state_version
        master = self.sim.epoch_masters.get(epoch)
        if master != broker_of(address):
            self.sim.violation(f"name server {self.name} routes {address} as id 0 with master "
                               f"epoch {epoch}, whose master is {master}")
        if epoch < self.top_vouched_version:
            self.sim.violation(f"name server {self.name} routes {address} as id 0 with master "
                               f"epoch {epoch}, older than epoch {self.top_vouched_version} "
                               f"a master vouched for")


class SimRegistration:
    """A broker's registration with every name server: the flow's pump, one life long."""

    def __init__(self, broker: SimBroker, namesrvs: tuple[str, ...]) -> None:
        self.broker = broker
        settings = broker.settings
        self.flow = RegistrationFlow(namesrvs,
                                     register_period=settings.register_name_server_period,
                                     heartbeat_interval=settings.broker_heartbeat_interval,
                                     retry_interval=settings.namesrv_retry_interval)
        self.connections: dict[str, Stream] = {}
        self.answers: dict[int, RemotingCommand] = {}

    def role_taken(self, term: Term, topics: TopicTable) -> None:
        """Tell the name servers, as ``BrokerService.role_changed`` does."""
        broker, now = self.broker, self.broker.now_ms()
        if term.role == "master":
            topics.bump(now, term.epoch)
            self.flow.topics_changed(now)
        self.flow.identify(BrokerRegistrationInfo(
            CLUSTER, GROUP, MASTER_ID if term.role == "master" else broker.broker_id,
            route_address(broker.name), f"{broker.name}:{HA_PORT}",
            broker.settings.broker_not_active_timeout), now)

    def poll(self) -> None:
        """Start a task for every request the flow sends now."""
        for sent in self.flow.poll(self.broker.now_ms()):
            self.broker.tasks.spawn(self._send(sent))

    def _send(self, sent: Register | Heartbeat) -> TaskGen:
        broker = self.broker
        network = broker.sim.network
        request = request_for(sent, broker.topics)
        stream = self.connections.get(sent.namesrv)
        if stream is None or stream.closed:
            stream = network.connect(broker.name, sent.namesrv)
        answer = None
        if stream is not None:  # else refused: the name server is down or cut off
            self.connections[stream.server] = stream
            rid = broker.sim.next_request_id()
            network.send(broker.name, stream.server, NamesrvRequest(rid, stream.id, request),
                         broker.sim.now)
            until = broker.now_ms() + broker.settings.namesrv_request_timeout
            yield from wait_for(lambda: rid in self.answers or stream.closed
                                or broker.now_ms() >= until)
            answer = self.answers.pop(rid, None)
        self.flow.replied(sent, answer, broker.now_ms())


def namesrv_chaos(sim: Simulation) -> None:
    """Maybe crash a name server, or cut name servers from brokers (from their own
    random stream, ``sim.namesrv_rng``)."""
    rng = sim.namesrv_rng
    namesrvs = set(sim.namesrvs)
    if not namesrvs:
        return
    if sim.p_partition_namesrv and rng.random() < sim.p_partition_namesrv:
        broker = rng.choice(sorted(sim.brokers))
        kind = rng.randrange(3)
        if kind == 0:  # a name server cut from every broker
            sim.network.partition({rng.choice(sorted(namesrvs))}, set(sim.brokers))
        elif kind == 1:  # a broker cut from the name servers only
            sim.network.partition({broker}, namesrvs)
        else:
            sim.network.partition({broker}, {rng.choice(sorted(namesrvs))},
                                   one_way=rng.random() < 0.5)
    if sim.p_crash_namesrv and rng.random() < sim.p_crash_namesrv:
        up = [n for n in sorted(namesrvs) if sim.namesrvs[n].up]
        if up:
            sim.crash_namesrv(rng.choice(up), rng.randint(100, 3000))
