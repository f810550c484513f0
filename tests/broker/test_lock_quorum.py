"""Strict queue locks' rules without an event loop: who is asked, what a majority grants."""

from __future__ import annotations

import json

from triomq.broker.consume.core.lock_body import LockBatchBody, parse_lock_batch
from triomq.broker.consume.core.lock_quorum import (
    lock_quorum,
    peer_request_body,
    quorum_locked,
    wants_quorum,
)
from triomq.protocol.message_queue import MessageQueue

Q0, Q1, Q2 = (MessageQueue("orders", "broker-a", q) for q in range(3))
BODY = LockBatchBody("cg", "c1", (Q0, Q1, Q2))


def test_a_majority_of_the_groups_replicas() -> None:
    assert [lock_quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_only_a_strict_broker_asks_the_others_and_never_for_a_peers_request() -> None:
    assert wants_quorum(BODY, strict=True, total_replicas=3)
    assert not wants_quorum(BODY, strict=False, total_replicas=3)
    assert not wants_quorum(BODY, strict=True, total_replicas=1)  # a majority of one
    peer = parse_lock_batch(peer_request_body(BODY))
    assert peer == LockBatchBody("cg", "c1", (Q0, Q1, Q2), only_this_broker=True)
    assert not wants_quorum(peer, strict=True, total_replicas=3)
    assert json.loads(peer_request_body(BODY))["onlyThisBroker"] is True


def test_a_queue_is_locked_where_a_majority_granted_it() -> None:
    own, peer_one, peer_two = {Q0, Q1}, {Q0, Q2}, {Q1}
    assert quorum_locked(BODY.mqs, [own, peer_one, peer_two], 2) == [Q0, Q1]
    # A replica that did not answer grants nothing: Q0 alone has two grants.
    assert quorum_locked(BODY.mqs, [own, peer_one], 2) == [Q0]
    assert quorum_locked(BODY.mqs, [own], 2) == []
    # A grant counts once per replica, and an unasked queue never.
    assert quorum_locked((Q0,), [[Q0, Q0], [Q2, Q2]], 2) == []
