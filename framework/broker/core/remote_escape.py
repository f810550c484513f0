"""One message's escape to a master of another group of the cluster (pure).

An acting slave's remote escape (RocketMQ's ``EscapeBridge.putMessageToRemoteBroker``)
sends the message as a producer would, SEND_MESSAGE_V2 to a master of
another group of its cluster that routes the message's topic with write
permission. ``RemoteEscape`` is that flow: it asks for the topic's route,
then sends to those groups' masters in name order (so that the puts of an
acting term land on one master while the route holds) until one stores the
message, at most ``RETRIES`` of them; the queue is the message's own where
that group has it, else the message's queue modulo the group's write
queues. It is pumped by the ``remote`` bridge and by the acting-master
simulation alike.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.core.headers import SendHeader, encode_send_header
from triomq.protocol.message import PROPERTY_UNIQ_KEY
from triomq.protocol.route import TopicRouteData

__all__ = ["RETRIES", "EscapeTarget", "Escaped", "QueryRoute", "RemoteEscape", "SendTo",
           "escape_targets", "send_fields"]

MASTER_ID = 0
PERM_WRITE = 2
#: Masters a put is tried on before it is refused (the caller retries later).
RETRIES = 3


@attrs.frozen
class EscapeTarget:
    """A master to send an escaped message to, and the queue it goes to there."""

    broker_name: str
    address: str
    queue_id: int


def escape_targets(route: TopicRouteData, *, own_group: str, cluster: str,
                   queue_id: int) -> list[EscapeTarget]:
    """The masters of ``cluster`` other than ``own_group``'s that take writes of the
    route's topic, in group-name order."""
    queues = {q.broker_name: q for q in route.queue_datas
              if q.perm & PERM_WRITE and q.write_queue_nums > 0}
    targets = []
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        data = queues.get(broker.broker_name)
        address = broker.broker_addrs.get(MASTER_ID)
        if (data is None or address is None or broker.broker_name == own_group
                or broker.cluster != cluster):
            continue
        queue = queue_id if queue_id < data.write_queue_nums else queue_id % data.write_queue_nums
        targets.append(EscapeTarget(broker.broker_name, address, queue))
    return targets


def send_fields(message: EscapedMessage, *, producer_group: str, queue_id: int,
                unique_id: str, now_ms: int) -> Mapping[str, str]:
    """SEND_MESSAGE_V2's header for ``message`` to ``queue_id``; a message without a
    ``UNIQ_KEY`` gets ``unique_id``, as a producer gives each message one."""
    properties = dict(message.properties)
    properties.setdefault(PROPERTY_UNIQ_KEY, unique_id)
    return encode_send_header(SendHeader(
        topic=message.topic, producer_group=producer_group, queue_id=queue_id,
        sys_flag=message.sys_flag, born_timestamp=message.born_timestamp or now_ms,
        flag=message.flag, properties=properties, reconsume_times=message.reconsume_times))


@attrs.frozen
class QueryRoute:
    """Ask the name servers, in turn until one answers, for ``topic``'s route."""

    topic: str


@attrs.frozen
class SendTo:
    """Send SEND_MESSAGE_V2 with ``fields`` and the message's body to ``target``'s master."""

    target: EscapeTarget
    fields: Mapping[str, str]


@attrs.frozen
class Escaped:
    """The escape is over: ``result`` says whether and where the message was stored."""

    result: EscapeResult


EscapeStep = QueryRoute | SendTo | Escaped


class RemoteEscape:
    """The escape of ``message`` from group ``own_group`` of ``cluster``.

    ``enabled`` is ``enable_remote_escape``: off, nothing is sent. Every
    refusal is SERVICE_NOT_AVAILABLE with a remark saying why (the last
    master's, when each refused), and the caller retries later.
    """

    def __init__(self, message: EscapedMessage, *, enabled: bool, own_group: str, cluster: str,
                 producer_group: str, unique_id: str) -> None:
        self.message = message
        self.enabled = enabled
        self.own_group = own_group
        self.cluster = cluster
        self.producer_group = producer_group
        self.unique_id = unique_id
        self._targets: list[EscapeTarget] = []
        self._sent: EscapeTarget  # the last SendTo's

    def start(self) -> EscapeStep:
        if not self.enabled:
            return _refused("enable_remote_escape is off: no escape to another group's master")
        return QueryRoute(self.message.topic)

    def routed(self, route: TopicRouteData | None, now_ms: int) -> EscapeStep:
        """The topic's route (None: no name server gave one)."""
        if route is None:
            return _refused(f"no name server routes topic {self.message.topic}")
        self._targets = escape_targets(route, own_group=self.own_group, cluster=self.cluster,
                                       queue_id=self.message.queue_id)[:RETRIES]
        if not self._targets:
            return _refused(f"no master of another group of cluster {self.cluster} takes "
                            f"topic {self.message.topic}")
        return self._send(now_ms)

    def answered(self, result: EscapeResult, now_ms: int) -> EscapeStep:
        """The last ``SendTo``'s master answered ``result``."""
        if result.stored or not self._targets:
            return Escaped(result)
        return self._send(now_ms)

    def failed(self, reason: str, now_ms: int) -> EscapeStep:
        """The last ``SendTo`` got no answer (its connection failed or timed out)."""
        return self.answered(_refused(f"{self._sent.broker_name} ({self._sent.address}): "
                                      f"{reason}").result, now_ms)

    def _send(self, now_ms: int) -> SendTo:
        self._sent = target = self._targets.pop(0)
        return SendTo(target, send_fields(self.message, producer_group=self.producer_group,
                                          queue_id=target.queue_id, unique_id=self.unique_id,
                                          now_ms=now_ms))


def _refused(remark: str) -> Escaped:
    return Escaped(EscapeResult(ResponseCode.SERVICE_NOT_AVAILABLE, remark))
