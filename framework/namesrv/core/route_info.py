"""The name server's route table, pure: RocketMQ's ``RouteInfoManager``.

It holds, for every cluster, the broker groups in it; for every group
(``BrokerData``) the address of each broker id; for every topic the queue
data each group registered; and the live-broker table (last heartbeat,
the broker's own timeout, its DataVersion, its HA address, the connection
it registered on). Time comes in as ``now`` (ms) and nothing here does I/O:
the name-server driver feeds it requests, closed connections and scan
timer fires, and sends what it answers.

Rules kept from RocketMQ:

- A broker registers with its id; one address holds one id in a group
  (a slave promoted to master moves from its id to 0).
- Topic configs count from the master, or, when the group has no master,
  from its smallest id (the "prime slave"), and only when the broker's
  DataVersion changed, it registers first, or the topic lacks its queues.
- An id held by another live address with a newer state version is not
  taken over: a deposed master cannot push out the new one (controller-mode
  brokers register with their master epoch as the state version).
- Beyond RocketMQ, which checks only against a live holder: id 0 is not
  given to a registration older than the newest state version a master of
  the group vouched for since this name server started, even after that
  master left, so a deposed master cannot take the group back when the new
  one disconnects or falls silent (the routed master's epoch never goes back
  past a vouched one). A master vouches for its version by answering
  GET_BROKER_EPOCH_CACHE, at the address it registered, as the group's master
  at that epoch or a later one: the name server asks it (``take_vouches``,
  ``vouched``), one question per group at a time. A version nobody vouched
  for goes with its registration, so a forged one in a made-up address's
  name, or in the real master's, leaves nothing behind.
- No single registration locks the real master out: a state version more
  than ``STATE_VERSION_LEAD_LIMIT`` ahead of another outranks nothing (a
  master epoch moves by one per election, and the name server hears of the
  masters in between), so a forged far-ahead version neither keeps the live
  master out nor takes its place while it lives.
- A broker is dropped when its connection closes or when it stays silent
  longer than its timeout (``heartbeat_timeout_ms``, else the default).
- With ``support_acting_master``, a group without a master whose topics
  the prime slave registered read-only is routed with that slave as id 0
  (seed 003's acting master).

Where RocketMQ logs and ignores bad input, this raises ``RouteRefused``
with a response code and a remark naming what was wrong, before changing
anything.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs

from triomq.controller.core.wire import BrokerEpochCache
from triomq.errors import TriomqError
from triomq.protocol.route import (
    MASTER_ID,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicRouteData,
)
from triomq.protocol.topic_rules import SYNC_BROKER_MEMBER_GROUP_PREFIX, IllegalName, check_group

__all__ = [
    "DEFAULT_BROKER_TIMEOUT_MS",
    "MAX_VOUCHES_IN_FLIGHT",
    "STATE_VERSION_LEAD_LIMIT",
    "VOUCH_RETRY_MS",
    "BrokerKey",
    "BrokerRegistration",
    "MasterVouch",
    "MinBrokerIdChanged",
    "RegisterResult",
    "RouteInfo",
    "RouteRefused",
]

#: How far a state version may be ahead of another and still outrank it.
STATE_VERSION_LEAD_LIMIT = 64

#: How long after a question went unanswered, or was answered no, the same master
#: version may be asked about again (ms): a lost answer is not final, and a forger's
#: address is not asked at every registration.
VOUCH_RETRY_MS = 10_000

#: Questions out at once, over all groups: registrations naming made-up groups cannot
#: make the name server dial without bound.
MAX_VOUCHES_IN_FLIGHT = 16

#: RocketMQ's ``DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``: a broker that sends no timeout of its own.
DEFAULT_BROKER_TIMEOUT_MS = 120_000

#: The ``ResponseCode`` of every refusal (RocketMQ has none more specific); the remark says why.
SYSTEM_ERROR = 1


class RouteRefused(TriomqError):
    """A request the route table will not apply; nothing was changed."""

    def __init__(self, code: int, remark: str) -> None:
        self.code = code
        self.remark = remark
        super().__init__(remark)


@attrs.frozen
class BrokerKey:
    """A live broker: its cluster and its address (RocketMQ's ``BrokerAddrInfo``)."""

    cluster: str
    address: str


@attrs.frozen
class BrokerRegistration:
    """A REGISTER_BROKER request, decoded."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str = ""
    body: RegisterBrokerBody = attrs.field(
        factory=lambda: RegisterBrokerBody(DataVersion(), {}))
    heartbeat_timeout_ms: int | None = None
    #: None: a broker older than RocketMQ 5, which does not say.
    enable_acting_master: bool | None = None
    zone_name: str | None = None


@attrs.frozen
class MasterVouch:
    """A question for the master ``address`` registered: is it ``broker_name``'s master
    at ``state_version`` (its master epoch) or later? Asked with GET_BROKER_EPOCH_CACHE;
    ``RouteInfo.vouched`` takes the answer."""

    cluster: str
    broker_name: str
    address: str
    state_version: int


@attrs.frozen
class RegisterResult:
    """What a registration answers: the group's master, for a slave."""

    master_address: str | None = None
    ha_server_address: str | None = None


@attrs.frozen
class MinBrokerIdChanged:
    """NOTIFY_MIN_BROKER_ID_CHANGE to send to ``notify`` (acting-master groups only)."""

    broker_name: str
    min_broker_id: int
    min_broker_address: str
    offline_broker_address: str | None
    ha_broker_address: str | None
    notify: tuple[str, ...]


@attrs.define
class _LiveBroker:
    last_update_ms: int
    timeout_ms: int
    data_version: DataVersion
    ha_address: str
    connection: Hashable | None


@attrs.define
class _Group:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = attrs.field(factory=dict)
    enable_acting_master: bool = False
    zone_name: str | None = None

    def data(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.addrs),
                          self.enable_acting_master, self.zone_name)


class RouteInfo:
    """The route table; every method runs to completion and returns what to send."""

    def __init__(self, *, support_acting_master: bool = False,
                 delete_topic_with_broker_registration: bool = False,
                 default_broker_timeout_ms: int = DEFAULT_BROKER_TIMEOUT_MS,
                 vouch_retry_ms: int = VOUCH_RETRY_MS) -> None:
        self.support_acting_master = support_acting_master
        self.vouch_retry_ms = vouch_retry_ms
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self.default_broker_timeout_ms = default_broker_timeout_ms
        self._topics: dict[str, dict[str, QueueData]] = {}
        self._groups: dict[str, _Group] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live: dict[BrokerKey, _LiveBroker] = {}
        self._notices: list[MinBrokerIdChanged] = []
        #: Moves with every change that may change a route; the encoded routes of
        #: an unchanged table are served from ``_route_bodies``.
        self.version = 0
        self._route_bodies: dict[str, bytes] = {}
        self._bodies_version = 0
        #: (cluster, group) -> the newest state version a master vouched for; kept when
        #: the group leaves (one per group this name server ever saw).
        self._master_versions: dict[tuple[str, str], int] = {}
        #: The questions to send, those out (one per group), and when one last went
        #: unanswered or was answered no.
        self._vouches: list[MasterVouch] = []
        self._vouching: dict[tuple[str, str], MasterVouch] = {}
        self._unvouched: dict[MasterVouch, int] = {}

    # -- registration -----------------------------------------------------------

    def register(self, reg: BrokerRegistration, now: int,
                 connection: Hashable | None = None) -> RegisterResult:
        """REGISTER_BROKER. Raises ``RouteRefused`` (nothing changed) for a bad one."""
        self._check_registration(reg)
        group = self._groups.get(reg.broker_name)
        first = group is None
        if group is None:
            group = _Group(reg.cluster, reg.broker_name)
        old_address = group.addrs.get(reg.broker_id)
        state_version = reg.body.data_version.state_version
        if old_address is not None and old_address != reg.address:
            holder = self._live.get(BrokerKey(reg.cluster, old_address))
            held_version = None if holder is None else holder.data_version.state_version
            if held_version is not None and _outranks(held_version, state_version):
                raise RouteRefused(SYSTEM_ERROR, (
                    f"broker {reg.broker_name} id {reg.broker_id}: held by {old_address} "
                    f"with state version {held_version}, newer than "
                    f"{reg.address}'s {state_version}"))
            if (held_version is not None and reg.broker_id == MASTER_ID
                    and state_version - held_version > STATE_VERSION_LEAD_LIMIT):
                raise RouteRefused(SYSTEM_ERROR, (
                    f"broker {reg.broker_name} id 0: {reg.address}'s state version "
                    f"{state_version} is more than {STATE_VERSION_LEAD_LIMIT} ahead of the "
                    f"live master {old_address}'s {held_version}"))
        newest = self._master_versions.get((reg.cluster, reg.broker_name))
        if (reg.broker_id == MASTER_ID and newest is not None
                and _outranks(newest, state_version)):
            raise RouteRefused(SYSTEM_ERROR, (
                f"broker {reg.broker_name} id 0: {reg.address}'s state version "
                f"{state_version} is older than {newest}, a master's of the group"))
        key = BrokerKey(reg.cluster, reg.address)
        held = self._live.get(key)
        if held is not None:
            self._check_same_address(reg, held, connection)

        self.version += 1
        self._groups[reg.broker_name] = group
        self._clusters.setdefault(reg.cluster, set()).add(reg.broker_name)
        group.enable_acting_master = bool(reg.enable_acting_master)
        group.zone_name = reg.zone_name
        previous_min = min(group.addrs, default=MASTER_ID)
        # One address holds one id: a slave that became master leaves its old id.
        for broker_id in [i for i, a in group.addrs.items()
                          if a == reg.address and i != reg.broker_id]:
            del group.addrs[broker_id]
        first = first or group.addrs.get(reg.broker_id) is None
        group.addrs[reg.broker_id] = reg.address

        is_master = reg.broker_id == MASTER_ID
        is_prime_slave = (reg.enable_acting_master is not None and not is_master
                          and reg.broker_id == min(group.addrs))
        if is_master or is_prime_slave:
            self._take_topics(reg, group, first, is_prime_slave, held)

        self._live[key] = _LiveBroker(
            now, reg.heartbeat_timeout_ms or self.default_broker_timeout_ms,
            reg.body.data_version, reg.ha_address, connection)
        if reg.broker_id < previous_min:
            self._min_id_changed(group, None, reg.ha_address)
        if is_master:
            self._ask_vouch(reg.cluster, reg.broker_name, now)
        return self._result(reg, group)

    # -- vouches ----------------------------------------------------------------

    def _ask_vouch(self, cluster: str, broker_name: str, now: int) -> None:
        """Ask the group's routed master to vouch for its version, if it is newer than
        the one remembered and no question about the group is out."""
        key = (cluster, broker_name)
        if key in self._vouching or len(self._vouching) >= MAX_VOUCHES_IN_FLIGHT:
            return
        group = self._groups.get(broker_name)
        address = None if group is None else group.addrs.get(MASTER_ID)
        live = None if address is None else self._live.get(BrokerKey(cluster, address))
        if address is None or live is None:
            return
        version = live.data_version.state_version
        if version <= self._master_versions.get(key, 0):
            return
        vouch = MasterVouch(cluster, broker_name, address, version)
        asked = self._unvouched.get(vouch)
        if asked is not None and now - asked < self.vouch_retry_ms:
            return
        self._unvouched.pop(vouch, None)
        self._vouching[key] = vouch
        self._vouches.append(vouch)

    def vouched_version(self, cluster: str, broker_name: str) -> int | None:
        """The newest state version a master of the group vouched for, if any."""
        return self._master_versions.get((cluster, broker_name))

    def take_vouches(self) -> list[MasterVouch]:
        """The questions to send now, oldest first."""
        vouches, self._vouches = self._vouches, []
        return vouches

    def vouched(self, vouch: MasterVouch, answer: BrokerEpochCache | None, now: int) -> None:
        """The answer to ``vouch``: the broker's epoch cache, or None if it gave none (no
        broker there, no answer in time, an error). It vouches if it is the group's
        master at the version asked about or later; the version is remembered then."""
        key = (vouch.cluster, vouch.broker_name)
        if self._vouching.get(key) != vouch:
            return
        del self._vouching[key]
        if answer is not None and _vouches_for(answer, vouch):
            if vouch.state_version > self._master_versions.get(key, -1):
                self._master_versions[key] = vouch.state_version
        else:
            self._unvouched = {v: t for v, t in self._unvouched.items()
                               if now - t < self.vouch_retry_ms}
            self._unvouched[vouch] = now
        self._ask_vouch(vouch.cluster, vouch.broker_name, now)

    @staticmethod
    def _check_same_address(reg: BrokerRegistration, held: _LiveBroker,
                            connection: Hashable | None) -> None:
        """A registration of an address already registered: its DataVersion may not go
        back, nor jump far ahead of a registration on another connection."""
        version, held_version = reg.body.data_version, held.data_version
        lead = version.state_version - held_version.state_version
        if held_version.newer_than(version) and -lead <= STATE_VERSION_LEAD_LIMIT:
            raise RouteRefused(SYSTEM_ERROR, (
                f"broker {reg.address}: DataVersion {version.key()} is older "
                f"than the registered {held_version.key()}"))
        if lead > STATE_VERSION_LEAD_LIMIT and held.connection != connection:
            raise RouteRefused(SYSTEM_ERROR, (
                f"broker {reg.address}: state version {version.state_version} is more than "
                f"{STATE_VERSION_LEAD_LIMIT} ahead of the registered "
                f"{held_version.state_version}"))

    def _check_registration(self, reg: BrokerRegistration) -> None:
        for what, name in (("cluster", reg.cluster), ("broker name", reg.broker_name)):
            try:
                check_group(name)
            except IllegalName as exc:
                raise RouteRefused(SYSTEM_ERROR, f"register broker: bad {what}: {exc}") from None
        if reg.broker_id < 0:
            raise RouteRefused(SYSTEM_ERROR,
                               f"register broker: broker id {reg.broker_id} is negative")
        if not _is_host_port(reg.address):
            raise RouteRefused(SYSTEM_ERROR, (f"register broker: brokerAddr {reg.address!r} "
                                              f"is not host:port"))
        group = self._groups.get(reg.broker_name)
        if group is not None and group.cluster != reg.cluster:
            raise RouteRefused(SYSTEM_ERROR, (
                f"register broker: group {reg.broker_name} belongs to cluster "
                f"{group.cluster}, not {reg.cluster}"))
        if reg.heartbeat_timeout_ms is not None and reg.heartbeat_timeout_ms <= 0:
            raise RouteRefused(SYSTEM_ERROR, (f"register broker: heartbeatTimeoutMillis "
                                              f"{reg.heartbeat_timeout_ms} is not positive"))

    def _take_topics(self, reg: BrokerRegistration, group: _Group, first: bool,
                     read_only: bool, held: _LiveBroker | None) -> None:
        table = reg.body.topic_config_table
        changed = first or held is None or held.data_version != reg.body.data_version
        if self.delete_topic_with_broker_registration and changed:
            for topic in [t for t, q in self._topics.items()
                          if reg.broker_name in q and t not in table]:
                self._remove_queues(topic, reg.broker_name)
        for config in table.values():
            queues = self._topics.get(config.topic_name)
            if changed or not queues or reg.broker_name not in queues:
                if read_only and group.enable_acting_master:
                    config = attrs.evolve(config, perm=config.perm & ~PERM_WRITE)
                self._topics.setdefault(config.topic_name, {})[reg.broker_name] = (
                    QueueData.of(reg.broker_name, config))

    def _result(self, reg: BrokerRegistration, group: _Group) -> RegisterResult:
        if reg.broker_id == MASTER_ID:
            return RegisterResult()
        master = group.addrs.get(MASTER_ID)
        live = None if master is None else self._live.get(BrokerKey(reg.cluster, master))
        if live is None:
            return RegisterResult()
        return RegisterResult(master, live.ha_address)

    def unregister(self, cluster: str, address: str, broker_name: str, broker_id: int) -> bool:
        """UNREGISTER_BROKER; whether the broker was registered."""
        group = self._groups.get(broker_name)
        known = BrokerKey(cluster, address) in self._live or (
            group is not None and address in group.addrs.values())
        self._drop(BrokerKey(cluster, address), broker_name, broker_id)
        return known

    def _drop(self, key: BrokerKey, broker_name: str, broker_id: int) -> None:
        self.version += 1
        self._live.pop(key, None)
        group = self._groups.get(broker_name)
        if group is None:
            return
        was_min = bool(group.addrs) and broker_id == min(group.addrs)
        for i in [i for i, a in group.addrs.items() if a == key.address]:
            del group.addrs[i]
        if not group.addrs:
            del self._groups[broker_name]
            names = self._clusters.get(key.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self._clusters[key.cluster]
            for topic in [t for t, q in self._topics.items() if broker_name in q]:
                self._remove_queues(topic, broker_name)
            return
        if group.enable_acting_master and MASTER_ID not in group.addrs:
            # The master left: its group's queues become read-only.
            for queues in self._topics.values():
                data = queues.get(broker_name)
                if data is not None:
                    queues[broker_name] = attrs.evolve(data, perm=data.perm & ~PERM_WRITE)
        if was_min:
            self._min_id_changed(group, key.address, None)

    def _remove_queues(self, topic: str, broker_name: str) -> None:
        queues = self._topics[topic]
        queues.pop(broker_name, None)
        if not queues:
            del self._topics[topic]

    def _min_id_changed(self, group: _Group, offline: str | None, ha: str | None) -> None:
        if not group.enable_acting_master or not group.addrs:
            return
        min_id = min(group.addrs)
        if offline is not None or len(group.addrs) == 1:
            notify = tuple(group.addrs.values())
        else:  # a new smallest id: tell the others
            notify = tuple(a for i, a in sorted(group.addrs.items()) if i != min_id)
        self._notices.append(MinBrokerIdChanged(group.broker_name, min_id,
                                                group.addrs[min_id], offline, ha, notify))

    def take_notices(self) -> list[MinBrokerIdChanged]:
        """The NOTIFY_MIN_BROKER_ID_CHANGE messages to send, oldest first."""
        notices, self._notices = self._notices, []
        return notices

    # -- liveness ---------------------------------------------------------------

    def heartbeat(self, cluster: str, address: str, now: int) -> None:
        """BROKER_HEARTBEAT (the lightweight one); ``RouteRefused`` if not registered."""
        if not self.touch(cluster, address, now):
            raise RouteRefused(SYSTEM_ERROR, (
                f"broker heartbeat: {address} of cluster {cluster} is not registered; "
                f"register first"))

    def connection_closed(self, connection: Hashable) -> list[BrokerKey]:
        """A broker's connection closed: it leaves the routes at once."""
        gone = [k for k, b in self._live.items() if b.connection == connection]
        for key in gone:
            self._drop_key(key)
        return gone

    def expire(self, now: int) -> list[BrokerKey]:
        """The scan: drop every broker silent for longer than its timeout."""
        gone = [k for k, b in self._live.items() if b.last_update_ms + b.timeout_ms < now]
        for key in gone:
            self._drop_key(key)
        return gone

    def next_expiry(self) -> int | None:
        """When the next silent broker would be dropped, if none speaks before."""
        return min((b.last_update_ms + b.timeout_ms + 1 for b in self._live.values()),
                   default=None)

    def _drop_key(self, key: BrokerKey) -> None:
        for group in list(self._groups.values()):
            if group.cluster != key.cluster:
                continue
            for broker_id, address in list(group.addrs.items()):
                if address == key.address:
                    self._drop(key, group.broker_name, broker_id)
                    return
        self._live.pop(key, None)

    def data_version(self, cluster: str, address: str) -> DataVersion | None:
        """The DataVersion the broker last registered (QUERY_DATA_VERSION)."""
        live = self._live.get(BrokerKey(cluster, address))
        return None if live is None else live.data_version

    def touch(self, cluster: str, address: str, now: int) -> bool:
        """A request from a registered broker counts as a heartbeat; whether it is one."""
        live = self._live.get(BrokerKey(cluster, address))
        if live is not None:
            live.last_update_ms = now
        return live is not None

    # -- queries ----------------------------------------------------------------

    def route_body(self, topic: str) -> bytes | None:
        """``topic_route(topic)`` encoded, kept until the table changes (the
        answers to route queries, which outnumber changes by far)."""
        if self._bodies_version != self.version:
            self._route_bodies.clear()
            self._bodies_version = self.version
        body = self._route_bodies.get(topic)
        if body is None:
            route = self.topic_route(topic)
            if route is None:
                return None  # not kept: unknown names must not grow the cache
            body = self._route_bodies[topic] = route.encode()
        return body

    def topic_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC; None when no live group holds the topic."""
        queues = self._topics.get(topic)
        if not queues:
            return None
        groups = [self._groups[n] for n in sorted(queues) if n in self._groups]
        if not groups:
            return None
        brokers = [g.data() for g in groups]
        queue_datas = [queues[g.broker_name] for g in groups]
        if self.support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            brokers = [self._acting(b, queues[b.broker_name]) for b in brokers]
        return TopicRouteData(tuple(queue_datas), tuple(brokers))

    @staticmethod
    def _acting(broker: BrokerData, queues: QueueData) -> BrokerData:
        addrs = dict(broker.broker_addrs)
        if (not addrs or MASTER_ID in addrs or not broker.enable_acting_master
                or queues.perm & PERM_WRITE):
            return broker
        addrs[MASTER_ID] = addrs.pop(min(addrs))
        return attrs.evolve(broker, broker_addrs=addrs)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo({n: g.data() for n, g in sorted(self._groups.items())},
                           {c: frozenset(ns) for c, ns in sorted(self._clusters.items())})

    def member_group(self, cluster: str, broker_name: str) -> BrokerMemberGroup:
        """GET_BROKER_MEMBER_GROUP: the group's registered ids and addresses;
        ``RouteRefused`` for a group no broker of ``cluster`` registered (or none of
        whose members is left)."""
        group = self._groups.get(broker_name)
        if group is None or group.cluster != cluster:
            raise RouteRefused(SYSTEM_ERROR, (
                f"get broker member group: no broker of group {broker_name!r} in cluster "
                f"{cluster!r} is registered"))
        return BrokerMemberGroup(cluster, broker_name, dict(group.addrs))

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        """GET_TOPICS_BY_CLUSTER: topics with queues on a group of ``cluster`` (none for
        a cluster not registered, as RocketMQ answers)."""
        names = self._clusters.get(cluster, set())
        return sorted(t for t, queues in self._topics.items() if names & queues.keys())

    def system_topics(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: RocketMQ lists every cluster's name and its
        groups' names (each is a topic its brokers create), and one broker's address
        to ask about them: the smallest id's of the first group."""
        names = set(self._clusters)
        for groups in self._clusters.values():
            names |= groups
        address = next((g.addrs[min(g.addrs)] for _, g in sorted(self._groups.items())
                        if g.addrs), None)
        return sorted(names), address

    def set_write_permission(self, broker_name: str, writable: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER (``writable`` false: the group's queues of every
        topic lose PERM_WRITE) and ADD_WRITE_PERM_OF_BROKER (they become read-write,
        whatever they were, as RocketMQ sets them); how many topics the group holds.

        The group's registrations keep the change until its DataVersion moves (a
        topic changed on the broker), as in RocketMQ."""
        count = 0
        for queues in self._topics.values():
            data = queues.get(broker_name)
            if data is None:
                continue
            perm = PERM_READ | PERM_WRITE if writable else data.perm & ~PERM_WRITE
            queues[broker_name] = attrs.evolve(data, perm=perm)
            count += 1
        if count:
            self.version += 1
        return count

    def topic_config(self, topic: str, broker_name: str) -> QueueData | None:
        return self._topics.get(topic, {}).get(broker_name)

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """DELETE_TOPIC_IN_NAMESRV (in one cluster, or everywhere); whether it was known."""
        queues = self._topics.get(topic)
        if queues is None:
            return False
        self.version += 1
        if cluster is None:
            del self._topics[topic]
            return True
        names = self._clusters.get(cluster, set())
        for name in names:
            queues.pop(name, None)
        if not queues:
            del self._topics[topic]
        return True

    def register_topic(self, topic: str, configs: dict[str, TopicConfig]) -> None:
        """Queue data for ``topic`` on groups that are registered (REGISTER_TOPIC_IN_NAMESRV)."""
        unknown = [n for n in configs if n not in self._groups]
        if unknown:
            raise RouteRefused(SYSTEM_ERROR, f"register topic {topic}: unknown broker "
                                             f"group(s) {', '.join(sorted(unknown))}")
        self.version += 1
        for name, config in configs.items():
            self._topics.setdefault(topic, {})[name] = QueueData.of(name, config)

    def snapshot(self) -> dict[str, Any]:
        """Everything held, as plain data (for tests and the admin tools)."""
        return {
            "topics": {t: {n: q.to_json() for n, q in qs.items()}
                       for t, qs in self._topics.items()},
            "groups": {n: g.data().to_json() for n, g in self._groups.items()},
            "live": {f"{k.cluster}/{k.address}": b.last_update_ms
                     for k, b in self._live.items()},
        }


def _vouches_for(answer: BrokerEpochCache, vouch: MasterVouch) -> bool:
    """Whether an epoch cache shows the group's master at the version asked about or later."""
    return (answer.cluster_name == vouch.cluster and answer.broker_name == vouch.broker_name
            and answer.broker_id == MASTER_ID
            and max((e.epoch for e in answer.epochs), default=-1) >= vouch.state_version)


def _outranks(version: int, other: int) -> bool:
    """Whether ``version`` is newer than ``other`` and not implausibly far ahead."""
    return 0 < version - other <= STATE_VERSION_LEAD_LIMIT


def _is_host_port(address: str) -> bool:
    """RocketMQ's ``host:port``, or an address with a scheme (an in-process broker's)."""
    if "://" in address:
        return bool(address.partition("://")[2])
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)
