"""The simulation's producer: the client's send flow pumped over virtual time.

Each send runs ``triomq.client.core.send_flow.SendFlow``, as
``triomq.client.Producer`` runs it over trio: the route from the name
servers (GET_ROUTEINFO_BY_TOPIC to each in turn, one fetch shared by the
sends that ask while it is under way, as the producer's ``_refresh``),
attempts on the routed master (SEND_MESSAGE_V2, answered by the brokers'
put core), retries on a refusal, route refreshes after no answer or a
stale master, and the pauses that wait out a failover, all within
``send_msg_timeout``. At most ``MAX_SENDS`` sends are under way at once.
In a run with delayed messages (``Simulation.delayed``), one message in
four carries a ``DELAY`` level (``delay_level``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.client.core.errors import NoRouteError
from triomq.client.core.publish import QueueSelector, TopicPublishInfo, publish_info
from triomq.client.core.send_flow import (
    FetchRoute,
    SendAction,
    SendAttempt,
    SendFailed,
    SendFlow,
    Sent,
    WaitForRetry,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import RouteDataError, TopicRouteData
from triomq.protocol.topic_rules import AUTO_CREATE_TOPIC
from triomq.testing.clustersim_namesrv import NamesrvRequest, NamesrvResponse, broker_of
from triomq.testing.clustersim_net import Stream
from triomq.testing.clustersim_parts import TOPIC, TOPIC_QUEUES, PutRequest, PutResponse

if TYPE_CHECKING:
    from triomq.testing.clustersim import Simulation

PRODUCER = "producer"
PRODUCER_GROUP = "sim-producer"
MAX_SENDS = 4
#: RocketMQ's ``sendMsgTimeout`` (s) and ``retryTimesWhenSendFailed``.
SEND_MSG_TIMEOUT = 3.0
RETRY_TIMES_WHEN_SEND_FAILED = 2
#: How long a name server has to answer a route fetch (ms).
ROUTE_TIMEOUT_MS = 1000


@attrs.define
class _Send:
    flow: SendFlow
    header: dict[str, str]
    body: bytes
    #: When a ``WaitForRetry`` ends (virtual s), if the send waits.
    wake: float | None = None


def send_header(unique_id: str, now_ms: int, delay_level: int = 0,
                timer_delay_ms: int = 0) -> dict[str, str]:
    """A ``SendMessageRequestHeaderV2`` as the producer sends it (queue and broker name
    set per attempt), with its message id (and its ``DELAY``, when delayed, its
    ``TIMER_DELAY_MS``, when a timer message)."""
    delay = f"DELAY\x01{delay_level}\x02" if delay_level else ""
    if timer_delay_ms:
        delay += f"TIMER_DELAY_MS\x01{timer_delay_ms}\x02"
    return {"a": PRODUCER_GROUP, "b": TOPIC, "c": AUTO_CREATE_TOPIC, "d": str(TOPIC_QUEUES),
            "f": "0", "g": str(now_ms), "h": "0",
            "i": f"UNIQ_KEY\x01{unique_id}\x02{delay}", "j": "0"}


def delay_level(body_number: int) -> int:
    """The delay level of the producer's message ``body_number`` when the run sends
    delayed ones: one in four, at levels 1 and 2 (1 s and 5 s) in turn."""
    return 0 if body_number % 4 != 1 else 1 + body_number // 4 % 2


def timer_delay_ms(body_number: int) -> int:
    """The ``TIMER_DELAY_MS`` of the producer's message ``body_number`` when the run
    sends delayed ones: another one in four, 1.5 s and 4 s in turn."""
    return 0 if body_number % 4 != 3 else (1500, 4000)[body_number // 4 % 2]


class SimProducer:
    """The producer: its sends, its attempts and its route fetch."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.selector = QueueSelector()
        self.info: TopicPublishInfo | None = None
        self.sends: list[_Send] = []
        #: Put request id -> (send, the address tried, deadline in virtual ms).
        self.attempts: dict[int, tuple[_Send, str, int]] = {}
        #: The route fetch under way: (request id, deadline), and the sends waiting on it.
        self.fetching: tuple[int, int] | None = None
        self.fetch_waiters: list[_Send] = []
        self.connections: dict[str, Stream] = {}
        self.next_namesrv = 0
        #: Sends ended with a stored message, and without one.
        self.sent = 0
        self.failed = 0

    def start_send(self, body_number: int, body: bytes) -> None:
        """Start sending ``body``."""
        sim = self.sim
        unique_id = f"SIM{body_number:012d}"
        flow = SendFlow(TOPIC, unique_id, self.info, self.selector, now=sim.now / 1000,
                        send_msg_timeout=SEND_MSG_TIMEOUT,
                        retry_times_when_send_failed=RETRY_TIMES_WHEN_SEND_FAILED)
        level = delay_level(body_number) if sim.delayed else 0
        timer = timer_delay_ms(body_number) if sim.delayed else 0
        send = _Send(flow, send_header(unique_id, sim.now, level, timer), body)
        self.sends.append(send)
        self._do(send, flow.start(sim.now / 1000))

    def step(self) -> None:
        """Attempts with no answer in time or whose broker died, a route fetch with no
        answer in time, pauses over."""
        now = self.sim.now
        down = self.sim.network.down
        for rid, (send, address, deadline) in list(self.attempts.items()):
            if broker_of(address) in down:  # its process died: the connection is reset
                del self.attempts[rid]
                self._do(send, send.flow.unanswered(
                    ConnectionResetError(f"connection to {address} reset"), now / 1000))
            elif now >= deadline:
                del self.attempts[rid]
                self._do(send, send.flow.unanswered(
                    TimeoutError(f"no answer from {address} within its timeout"), now / 1000))
        if self.fetching is not None and now >= self.fetching[1]:
            self._routed(None, "no name server answered the route fetch in time")
        for send in list(self.sends):
            if send.wake is not None and now / 1000 >= send.wake:
                send.wake = None
                self._do(send, send.flow.timer(now / 1000))

    def owns(self, rid: int) -> bool:
        """Whether put request ``rid`` is one of this producer's attempts."""
        return rid in self.attempts

    def answered(self, response: PutResponse) -> None:
        """A broker answered an attempt."""
        send, address, _ = self.attempts.pop(response.id)
        self._do(send, send.flow.answered(address, response.command, self.sim.now / 1000))

    def route_answered(self, response: NamesrvResponse) -> None:
        """A name server answered a route fetch (maybe one given up on)."""
        if self.fetching is None or response.id != self.fetching[0]:
            return
        command = response.command
        if command.code != ResponseCode.SUCCESS:
            self._routed(NoRouteError(f"no route to topic {TOPIC!r}: {command.remark}"), "")
            return
        try:
            route = TopicRouteData.decode(command.body)
        except RouteDataError as exc:
            self._routed(None, f"the route could not be read: {exc}")
            return
        self.info = publish_info(TOPIC, route)
        self._routed(self.info, "")

    # -- the sends' actions ----------------------------------------------------------

    def _do(self, send: _Send, action: SendAction) -> None:
        sim = self.sim
        if isinstance(action, SendAttempt):
            rid = sim.next_request_id()
            header = {**send.header, "e": str(action.queue.queue_id),
                      "n": action.queue.broker_name}
            request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, send.body)
            self.attempts[rid] = (send, action.address, sim.now + round(action.timeout * 1000))
            sim.network.send(PRODUCER, broker_of(action.address), PutRequest(rid, request),
                             sim.now)
        elif isinstance(action, FetchRoute):
            self.fetch_waiters.append(send)
            if self.fetching is None:
                self._fetch()
        elif isinstance(action, WaitForRetry):
            send.wake = action.until
        elif isinstance(action, Sent):
            self.sends.remove(send)
            self.sent += 1
        elif isinstance(action, SendFailed):
            self.sends.remove(send)
            self.failed += 1

    def _fetch(self) -> None:
        sim = self.sim
        names = sim.namesrv_names
        if not names:
            self._routed(NoRouteError("no name server to ask for the route"), "")
            return
        namesrv = names[self.next_namesrv % len(names)]
        self.next_namesrv += 1
        stream = self.connections.get(namesrv)
        if stream is None or stream.closed:
            stream = sim.network.connect(PRODUCER, namesrv)
            if stream is None:
                self._routed(None, f"name server {namesrv} unreachable")
                return
            self.connections[namesrv] = stream
        rid = sim.next_request_id()
        self.fetching = (rid, sim.now + ROUTE_TIMEOUT_MS)
        command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": TOPIC})
        sim.network.send(PRODUCER, namesrv, NamesrvRequest(rid, stream.id, command), sim.now)

    def _routed(self, outcome: TopicPublishInfo | NoRouteError | None, why: str) -> None:
        """The route fetch ended: publish info, no route, or (None) no answer."""
        self.fetching = None
        waiters, self.fetch_waiters = self.fetch_waiters, []
        now = self.sim.now / 1000
        for send in waiters:
            if isinstance(outcome, TopicPublishInfo):
                self._do(send, send.flow.routed(outcome, now))
            else:
                self._do(send, send.flow.not_routed(outcome or TimeoutError(why), now))
