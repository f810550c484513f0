"""The controller service's core with a hand-cranked Raft, for the core's tests."""

from __future__ import annotations

import itertools

from triomq.controller import ReplicasInfoManager, decode_event
from triomq.controller.core.config import ControllerConfig
from triomq.controller.core.election import default_election_policy
from triomq.controller.core.requests import (
    ApplyBrokerId,
    BrokerHeartbeat,
    ControllerRequest,
    GetNextBrokerId,
    RegisterBroker,
    Reply,
)
from triomq.controller.core.service_core import (
    Applied,
    ControllerCore,
    Leadership,
    Output,
    Propose,
    ReadBarrier,
)
from triomq.errors import PluginError

CLUSTER, GROUP = "DefaultCluster", "broker-a"
TIMEOUT, SCAN, INACTIVE = 1000, 100, 500


def policies(name: str):
    if name != "default":
        raise PluginError(f"no election policy {name!r}")
    return default_election_policy


def address(broker_id: int) -> str:
    return f"tcp://b{broker_id}:10911"


class Pump:
    """The core with a hand-cranked Raft: barriers pass and proposals apply on request."""

    def __init__(self, **settings: object) -> None:
        self.manager = ReplicasInfoManager()
        settings = {"scan_not_active_broker_interval": SCAN,
                    "broker_not_active_timeout": INACTIVE, "request_timeout": TIMEOUT,
                    **settings}
        config = ControllerConfig(node_id=1, peers={1: "tcp://c1:9878", 2: "tcp://c2:9878"},
                                  **settings)
        self.now = 0
        self.core = ControllerCore(config, self.manager, policies, self.now)
        self.ids = itertools.count(1)
        self.outputs: list[Output] = []
        self.settled: set[int] = set()

    def lead(self, term: int = 1, leader: int = 1) -> None:
        self.core.lead(Leadership(term, leader, f"tcp://c{leader}:9878" if leader else "",
                                  leader == 1))

    def request(self, request: ControllerRequest) -> int:
        request_id = next(self.ids)
        self.core.request(request_id, request, self.now)
        self.take()
        return request_id

    def take(self) -> None:
        self.outputs += self.core.drain()

    def of(self, kind: type) -> list:
        return [o for o in self.outputs if isinstance(o, kind)]

    def open(self, kind: type) -> list:
        """The Raft operations of ``kind`` not yet settled."""
        return [o for o in self.of(kind) if o.ticket not in self.settled]

    def reply(self, request_id: int) -> Reply | None:
        return next((r for r in self.of(Reply) if r.request_id == request_id), None)

    def settle(self, ticket: int, outcome) -> None:
        self.settled.add(ticket)
        self.core.settle(ticket, outcome, self.now)
        self.take()

    def pass_barriers(self) -> None:
        for barrier in self.open(ReadBarrier):
            self.settle(barrier.ticket, Applied())

    def commit(self) -> None:
        """Apply every open proposal, as Raft would once committed."""
        for proposal in self.open(Propose):
            changed = self.manager.apply(decode_event(proposal.data))
            self.settle(proposal.ticket, Applied(changed))

    def run(self) -> None:
        """Let Raft do everything asked of it until nothing is open."""
        while self.open(ReadBarrier) or self.open(Propose):
            self.pass_barriers()
            self.commit()

    def advance(self, ms: int) -> None:
        """``ms`` pass in one step (more than two scan intervals: a stall of the controller)."""
        self.now += ms
        self.core.fire(self.now)
        self.take()

    def run_for(self, ms: int) -> None:
        """``ms`` pass with the controller running: fired every scan interval."""
        end = self.now + ms
        while self.now < end:
            self.advance(min(SCAN, end - self.now))

    def join(self) -> int:
        """A broker registers (identity, registration, heartbeat) and asks to be master."""
        rid = self.request(GetNextBrokerId(CLUSTER, GROUP))
        self.run()
        broker_id = self.reply(rid).payload.next_broker_id
        for request in (ApplyBrokerId(CLUSTER, GROUP, broker_id, f"{address(broker_id)};check"),
                        RegisterBroker(CLUSTER, GROUP, broker_id, address(broker_id))):
            rid = self.request(request)
            self.run()
            assert self.reply(rid).ok, self.reply(rid)
        self.beat(broker_id)
        self.run()
        return broker_id

    def beat(self, broker_id: int) -> Reply:
        rid = self.request(BrokerHeartbeat(CLUSTER, GROUP, broker_id, address(broker_id),
                                           epoch=1, max_offset=100, confirm_offset=100))
        return self.reply(rid)
