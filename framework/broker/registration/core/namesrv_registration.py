"""A broker's registration with its name servers, as a state machine (sans-I/O).

``RegistrationFlow`` decides when the broker sends what to each name server
(a broker registers with all of them; they keep no state of their own):

- REGISTER_BROKER at once when the broker starts, when its role or id
  changes (``identify``) and when a topic changes (``topics_changed``), and
  every ``register_period`` in any case;
- BROKER_HEARTBEAT (the lightweight one) every ``heartbeat_interval`` in
  between, so the name server can drop a silent broker within its timeout
  (QUERY_DATA_VERSION instead with ``heartbeat_via_data_version``, for a
  name server that predates BROKER_HEARTBEAT: it counts a registered
  broker's query as a sign of life, and answers no DataVersion for a broker
  it forgot);
- a registration that failed is sent again after ``retry_interval``, and a
  heartbeat the name server refused (it forgot the broker: restarted, or
  timed it out) is followed by a registration at once.

The pump calls ``poll(now)`` when ``next_wakeup()`` comes or after any
input, sends what it returns (``Register``, ``Heartbeat``; the request
frames come from ``request_for``) and reports each outcome with ``replied``
(the answer, or None when none came; ``answered`` takes just whether it
succeeded). One request per name server is in flight at a time. Times are
milliseconds.
"""

from __future__ import annotations

import zlib

import attrs

from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import RegisterBrokerBody, dumps, encode_register_broker_body

__all__ = [
    "BrokerRegistrationInfo",
    "Heartbeat",
    "Register",
    "RegistrationFlow",
    "data_version_heartbeat_request",
    "heartbeat_request",
    "register_request",
    "request_for",
]

REGISTER_BROKER = 103
QUERY_DATA_VERSION = 322
BROKER_HEARTBEAT = 904
SUCCESS = 0


@attrs.frozen
class BrokerRegistrationInfo:
    """What a broker tells name servers about itself; addresses are ``host:port``."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str
    heartbeat_timeout_ms: int
    enable_acting_master: bool = False


@attrs.frozen
class Register:
    namesrv: str
    info: BrokerRegistrationInfo


@attrs.frozen
class Heartbeat:
    namesrv: str
    info: BrokerRegistrationInfo
    #: Sent as QUERY_DATA_VERSION, for a name server without BROKER_HEARTBEAT
    #: (RocketMQ's ``compatibleWithOldNameSrv``).
    via_data_version: bool = False


Output = Register | Heartbeat


@attrs.define
class _Namesrv:
    register_at: int = 0
    heartbeat_at: int = 0
    in_flight: bool = False
    registered: bool = False
    #: A registration was asked for while one was in flight: send another after it.
    again: bool = False


class RegistrationFlow:
    """When to register and heartbeat with each name server."""

    def __init__(self, namesrv_addresses: tuple[str, ...], *, register_period: int,
                 heartbeat_interval: int, retry_interval: int,
                 heartbeat_via_data_version: bool = False) -> None:
        self.register_period = register_period
        self.heartbeat_via_data_version = heartbeat_via_data_version
        self.heartbeat_interval = heartbeat_interval
        self.retry_interval = retry_interval
        self._servers = {address: _Namesrv() for address in namesrv_addresses}
        self.info: BrokerRegistrationInfo | None = None
        #: The group's master as the last accepted registration's answer named it
        #: (``host:port``; a slave copies its topics from there).
        self.master_address: str | None = None

    def identify(self, info: BrokerRegistrationInfo, now: int) -> None:
        """The broker's identity or role now; a change registers everywhere at once."""
        if info != self.info:
            self.info = info
            self._register_all(now)

    def topics_changed(self, now: int) -> None:
        self._register_all(now)

    def _register_all(self, now: int) -> None:
        for server in self._servers.values():
            server.register_at = now
            server.again = server.in_flight

    def registered(self, namesrv: str) -> bool:
        """Whether ``namesrv`` took the latest registration it was sent."""
        return self._servers[namesrv].registered

    def poll(self, now: int) -> list[Output]:
        """What to send now."""
        if self.info is None:
            return []
        out: list[Output] = []
        for address, server in self._servers.items():
            if server.in_flight:
                continue
            if server.register_at <= now:
                server.in_flight = True
                out.append(Register(address, self.info))
            elif server.registered and server.heartbeat_at <= now:
                server.in_flight = True
                out.append(Heartbeat(address, self.info, self.heartbeat_via_data_version))
        return out

    def replied(self, sent: Output, answer: RemotingCommand | None, now: int) -> None:
        """The name server's ``answer`` to ``sent``; None: it failed or timed out."""
        ok = answer is not None and answer.code == SUCCESS
        if ok and isinstance(sent, Heartbeat) and sent.via_data_version:
            assert answer is not None
            ok = bool(answer.body)  # no DataVersion held: the name server forgot the broker
        if ok and isinstance(sent, Register):
            assert answer is not None
            self.master_address = answer.ext_fields.get("masterAddr") or None
        self.answered(sent, ok, now)

    def answered(self, sent: Output, ok: bool, now: int) -> None:
        """The outcome of ``sent`` (``ok``: SUCCESS came back)."""
        server = self._servers[sent.namesrv]
        server.in_flight = False
        if isinstance(sent, Register):
            if sent.info != self.info:
                return  # superseded: the newer registration is already due
            server.registered = ok
            if server.again:  # it may predate a change: the next one goes now
                server.again = False
                server.register_at = now
            elif ok:
                server.register_at = now + self.register_period
            else:
                server.register_at = now + self.retry_interval
            if ok:
                server.heartbeat_at = now + self.heartbeat_interval
        elif isinstance(sent, Heartbeat):
            if ok:
                server.heartbeat_at = now + self.heartbeat_interval
            else:  # forgotten (restarted or timed out): register again now
                server.registered = False
                server.register_at = now

    def next_wakeup(self) -> int | None:
        """When ``poll`` next has something to send (None: only after an input)."""
        if self.info is None:
            return None
        times = [min(s.register_at, s.heartbeat_at) if s.registered else s.register_at
                 for s in self._servers.values() if not s.in_flight]
        return min(times, default=None)


def _identity_fields(info: BrokerRegistrationInfo) -> dict[str, str]:
    return {"brokerName": info.broker_name, "brokerAddr": info.address,
            "clusterName": info.cluster, "brokerId": str(info.broker_id)}


def register_request(info: BrokerRegistrationInfo, topics: TopicTable, *,
                     compressed: bool = True) -> RemotingCommand:
    """REGISTER_BROKER as RocketMQ 5's broker sends it (compressed body by default)."""
    body = encode_register_broker_body(
        RegisterBrokerBody(topics.data_version, topics.configs()), compressed=compressed)
    fields = {**_identity_fields(info), "haServerAddr": info.ha_address,
              "heartbeatTimeoutMillis": str(info.heartbeat_timeout_ms),
              "enableActingMaster": "true" if info.enable_acting_master else "false",
              "compressed": "true" if compressed else "false",
              "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
    return RemotingCommand.request(REGISTER_BROKER, fields, body)


def heartbeat_request(info: BrokerRegistrationInfo) -> RemotingCommand:
    """BROKER_HEARTBEAT, the lightweight one."""
    fields = _identity_fields(info)
    fields["heartbeatTimeoutMills"] = str(info.heartbeat_timeout_ms)
    return RemotingCommand.request(BROKER_HEARTBEAT, fields)


def data_version_heartbeat_request(info: BrokerRegistrationInfo,
                                   topics: TopicTable) -> RemotingCommand:
    """QUERY_DATA_VERSION as a heartbeat (RocketMQ's ``sendHeartbeatViaDataVersion``):
    a name server counts it as one from a registered broker."""
    return RemotingCommand.request(QUERY_DATA_VERSION, _identity_fields(info),
                                   dumps(topics.data_version.to_json()))


def request_for(sent: Output, topics: TopicTable) -> RemotingCommand:
    """The request frame that carries ``sent`` (a registration with ``topics``)."""
    if isinstance(sent, Register):
        return register_request(sent.info, topics)
    if sent.via_data_version:
        return data_version_heartbeat_request(sent.info, topics)
    return heartbeat_request(sent.info)
