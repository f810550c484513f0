"""A pull the store cannot serve is answered SYSTEM_ERROR naming why, whether it is
answered at once or after being held, and the broker goes on serving pulls."""

from __future__ import annotations

import errno

import pytest
import trio
from broker_nodes import Cluster, wait_until
from test_pull import CREATE, SUBSCRIPTION, SUSPEND, pull, records

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.testing.direct_send import DirectProducer

UNREADABLE = "the store could not be read (EIO); see the broker's log"


def failing_read(offset: int, size: int) -> bytes:
    raise OSError(errno.EIO, "Input/output error", "/srv/store/commitlog/00000000000000000000")


async def test_an_unreadable_store_answers_system_error_at_once_and_after_a_hold(
        tmp_path, autojump_clock, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        call, address = client.rpc.invoke, a.node.address
        await call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE)
        producer = DirectProducer(client.rpc, address)
        await producer.send("orders", b"m0", queue_id=0)
        read = a.log.read
        monkeypatch.setattr(a.log, "read", failing_read)
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(0))
        # The server's file names stay in its log.
        assert (answer.code, answer.remark, answer.body) == (ResponseCode.SYSTEM_ERROR,
                                                             UNREADABLE, b"")
        answers = []

        async def long_poll() -> None:
            answers.append(await call(address, RequestCode.PULL_MESSAGE,
                                      pull(1, flags=SUBSCRIPTION | SUSPEND), timeout=60))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await wait_until(lambda: len(a.pulls.holds) == 1)
            await producer.send("orders", b"m1", queue_id=0)  # its put reads nothing back
        assert (answers[0].code, answers[0].remark) == (ResponseCode.SYSTEM_ERROR, UNREADABLE)
        assert len(a.pulls.holds) == 0
        monkeypatch.setattr(a.log, "read", read)
        answer = await call(address, RequestCode.PULL_MESSAGE, pull(0))
        assert [r.body for r in records(answer.body)] == [b"m0", b"m1"]
