"""Which bridge an escape goes through, and which master the ``container`` bridge takes."""

from __future__ import annotations

import pytest

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.container_escape import Candidate, container_master, no_master
from triomq.broker.core.escape_bridge import (
    EscapedMessage,
    EscapeResult,
    Fallback,
    FallbackEscapeBridge,
)

REFUSED = EscapeResult(ResponseCode.SERVICE_NOT_AVAILABLE, "none here")
TIMED_OUT = EscapeResult(ResponseCode.FLUSH_SLAVE_TIMEOUT, "slow", msg_id="M", queue_id=0,
                         queue_offset=1)


def test_the_first_bridge_that_stores_the_message_ends_the_search() -> None:
    order = Fallback(["container", "remote", "third"])
    assert order.first() == 0
    assert order.tried(REFUSED) == 1
    # Stored, though its replication wait timed out: the next would store it twice.
    assert order.tried(TIMED_OUT) == TIMED_OUT


def test_refused_everywhere_the_answer_is_the_last_refusal_naming_each() -> None:
    order = Fallback(["container", "remote"])
    order.tried(REFUSED)
    last = EscapeResult(ResponseCode.SYSTEM_BUSY, None)
    assert order.tried(last) == EscapeResult(
        ResponseCode.SYSTEM_BUSY, "container: none here; remote: 2")  # no remark: its code


async def test_the_fallback_bridge_tries_its_bridges_in_order() -> None:
    calls = []

    class Bridge:
        def __init__(self, name: str, result: EscapeResult) -> None:
            self.name, self.result = name, result

        async def put_message(self, message: EscapedMessage) -> EscapeResult:
            calls.append(self.name)
            return self.result

    bridge = FallbackEscapeBridge([("a", Bridge("a", REFUSED)), ("b", Bridge("b", TIMED_OUT)),
                                   ("c", Bridge("c", REFUSED))])
    assert await bridge.put_message(EscapedMessage("t", 0, b"x")) == TIMED_OUT
    assert calls == ["a", "b"]
    with pytest.raises(ValueError, match="at least one bridge"):
        FallbackEscapeBridge([])


def _broker(name: str, *, holds: bool, master: bool = True,
            cluster: str = "DefaultCluster") -> Candidate:
    return Candidate(name, cluster, f"broker-{name[0]}", master, holds)


def test_the_container_bridge_takes_the_first_master_by_name_holding_the_topic() -> None:
    def choose(*candidates: Candidate) -> str | None:
        return container_master(candidates, cluster="DefaultCluster", own_group="broker-a")

    assert choose(_broker("c0", holds=True), _broker("b1", holds=False),
                  _broker("b0", holds=True)) == "b0"
    # None holds it (a system topic): the first by name.
    assert choose(_broker("c0", holds=False), _broker("b0", holds=False)) == "b0"
    # Never a slave, another cluster's master, nor its own group's master (in its
    # pre-online the slave acts beside it: the output would come back in its own log).
    assert choose(_broker("a0", holds=True), _broker("b1", holds=True, master=False),
                  _broker("b0", holds=True, cluster="other")) is None
    assert no_master("DefaultCluster") == EscapeResult(
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "no master of cluster DefaultCluster runs in this process to escape to")
