"""Strict queue locks in the acting-master simulation: the brokers' lock cores and two clients.

With ``lock_in_strict_mode`` a broker asked to lock queues locks them in its
own ``LockTable`` and asks the other replicas of its group for the same
(``onlyThisBroker``), and grants only the queues a majority of the group's
three replicas granted (``lock_quorum``: ``wants_quorum``,
``peer_request_body``, ``quorum_locked``); an unlock goes to every replica
the same way. ``BrokerLocks`` pumps that for one broker (its locks are in
memory: a crash loses them).

``OrderlyClients`` are two orderly consumers of one queue: each locks it
(LOCK_BATCH_MQ) every ``RENEW_MS`` at the broker the route names the
group's id 0 (the acting slave while the master is gone), now and then
unlocks it and pauses, and takes itself to hold the queue for
``CLIENT_HOLD_MS`` from the send of a request the quorum granted, until it
sends an unlock or a renewal is refused (as RocketMQ's client does, with
its lock kept shorter than the brokers'). The invariant: at any time at
most one of them holds the queue. A broker's locks are in memory, so a
replica that granted one and came back at once could grant the queue again
with the other replicas' help; a run with locks keeps a crashed broker down
longer than a client holds a lock.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import attrs

from triomq.broker.consume.core.lock_body import LockBatchBody, parse_lock_batch
from triomq.broker.consume.core.lock_quorum import (
    lock_quorum,
    peer_request_body,
    quorum_locked,
    wants_quorum,
)
from triomq.broker.consume.core.lock_table import LockTable
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.route import dumps
from triomq.testing.clustersim_net import TaskGen, wait_for
from triomq.testing.clustersim_parts import GROUP, TOPIC

if TYPE_CHECKING:
    from triomq.testing.clustersim_acting import ActingSimulation
    from triomq.testing.clustersim_acting_broker import StaticBroker

#: The brokers' lock lifetime (RocketMQ's 60 s, scaled down) and the clients'.
LOCK_LIVE_MS = 6000
CLIENT_HOLD_MS = 3000
RENEW_MS = 500
#: How long a broker waits for its peers' grants.
PEER_TIMEOUT_MS = 300
LOCK_GROUP = "orderly-readers"
QUEUE = MessageQueue(TOPIC, GROUP, 0)
CLIENTS = ("o1", "o2")


@attrs.frozen
class LockRequest:
    """LOCK_BATCH_MQ or UNLOCK_BATCH_MQ with its body (an unlock is not answered)."""

    id: int
    body: bytes
    unlock: bool = False


@attrs.frozen
class LockResponse:
    """The queues granted."""

    id: int
    mqs: tuple[MessageQueue, ...]


class BrokerLocks:
    """One broker's queue locks, strict: a majority of the group grants."""

    def __init__(self, broker: StaticBroker) -> None:
        self.broker = broker
        self.table = LockTable(max_live_time=LOCK_LIVE_MS)
        #: Peers' answers to the locks this broker asked them for.
        self.answers: dict[int, tuple[MessageQueue, ...]] = {}

    def receive(self, src: str, request: LockRequest) -> None:
        broker = self.broker
        body = parse_lock_batch(request.body)
        peers = [b.name for b in broker.sim.group_members(broker.group) if b is not broker]
        total = len(peers) + 1
        quorum = wants_quorum(body, strict=True, total_replicas=total)
        if request.unlock:
            self.table.unlock_batch(body.consumer_group, body.mqs, body.client_id)
            if quorum:
                for peer in peers:
                    broker.sim.network.send(broker.name, peer, LockRequest(
                        0, peer_request_body(body), unlock=True), broker.sim.now)
            return
        own = self.table.try_lock_batch(body.consumer_group, body.mqs, body.client_id,
                                        broker.now_ms())
        if not quorum:
            self._answer(src, request.id, own)
            return
        broker.tasks.spawn(self._ask_peers(src, request.id, body, own, peers))

    def _ask_peers(self, src: str, rid: int, body: LockBatchBody, own: list[MessageQueue],
                   peers: list[str]) -> TaskGen:
        """The peers' grants, then the answer: what a majority of the group granted."""
        broker = self.broker
        asked = []
        for peer in peers:
            peer_rid = broker.sim.next_request_id()
            asked.append(peer_rid)
            broker.sim.network.send(broker.name, peer,
                                    LockRequest(peer_rid, peer_request_body(body)),
                                    broker.sim.now)
        until = broker.now_ms() + PEER_TIMEOUT_MS
        yield from wait_for(lambda: all(r in self.answers for r in asked)
                            or broker.now_ms() >= until)
        grants = [own, *(self.answers.pop(r) for r in asked if r in self.answers)]
        self._answer(src, rid, quorum_locked(body.mqs, grants, lock_quorum(len(peers) + 1)))

    def _answer(self, dst: str, rid: int, mqs: list[MessageQueue]) -> None:
        broker = self.broker
        broker.sim.network.send(broker.name, dst, LockResponse(rid, tuple(mqs)), broker.sim.now)


def lock_body(client: str) -> bytes:
    """A client's ``LockBatchRequestBody`` for the queue."""
    return dumps({"consumerGroup": LOCK_GROUP, "clientId": client, "onlyThisBroker": False,
                  "mqSet": [QUEUE.to_json()]})


class OrderlyClients:
    """Two orderly consumers of one queue, and the one-holder invariant."""

    def __init__(self, sim: ActingSimulation, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        #: Client -> until when (virtual ms) it holds the queue.
        self.holds_until = dict.fromkeys(CLIENTS, 0)
        self.paused_until = dict.fromkeys(CLIENTS, 0)
        #: Client -> (request id -> sent at); an unlock forgets those sent before it.
        self.pending: dict[str, dict[int, int]] = {c: {} for c in CLIENTS}
        self.grants = 0

    def step(self) -> None:
        sim = self.sim
        for index, client in enumerate(CLIENTS):
            if (sim.now + index * RENEW_MS // 2) % RENEW_MS or sim.now < self.paused_until[client]:
                continue
            broker = sim.routed_to
            if broker is None:
                continue
            if self.holds_until[client] > sim.now and self.rng.random() < 0.1:
                self.holds_until[client] = 0
                self.pending[client].clear()
                self.paused_until[client] = sim.now + self.rng.randint(500, 3000)
                sim.network.send(client, broker, LockRequest(0, lock_body(client), unlock=True),
                                 sim.now)
                continue
            rid = sim.next_request_id()
            self.pending[client][rid] = sim.now
            sim.network.send(client, broker, LockRequest(rid, lock_body(client)), sim.now)
        self.check()

    def receive(self, client: str, response: LockResponse) -> None:
        sent = self.pending[client].pop(response.id, None)
        if sent is None:
            return
        if QUEUE in response.mqs:
            self.grants += 1
            self.holds_until[client] = max(self.holds_until[client], sent + CLIENT_HOLD_MS)
        else:
            self.holds_until[client] = 0

    def check(self) -> None:
        """At most one client holds the queue."""
        holders = [c for c in CLIENTS if self.holds_until[c] > self.sim.now]
        if len(holders) > 1:
            self.sim.violation(f"clients {holders} both hold the lock of {QUEUE} "
                               f"(lock_in_strict_mode)")
