"""The ``container`` escape bridge: the conformance suite, over brokers of one process."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from acting_nodes import Groups, SlaveBridgeTarget, create_topic

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.service import Broker
from triomq.testing import EscapeBridgeConformance
from triomq.testing.cluster import open_cluster

MAX_MESSAGE_SIZE = 2048


def container_target(slave: Broker, master: Broker | None) -> SlaveBridgeTarget:
    """Slave ``a1``'s ``container`` bridge, onto master ``b0``."""
    return SlaveBridgeTarget("container", slave, master, max_message_size=MAX_MESSAGE_SIZE)


@asynccontextmanager
async def slave_beside(tmp_path, *masters: str):
    async with open_cluster(tmp_path, controllers=0, brokers=0, namesrvs=1) as cluster:
        groups = Groups(cluster, max_message_size=MAX_MESSAGE_SIZE)
        # No name server runs: nothing makes the slave act; the bridge is called directly.
        for name in masters:
            await groups.start(name)
        await groups.start("a1")
        yield cluster


class TestContainerEscapeBridge(EscapeBridgeConformance):
    @pytest.fixture
    async def target(self, tmp_path):
        async with slave_beside(tmp_path, "b0") as cluster:
            yield container_target(cluster.broker("a1"), cluster.broker("b0"))

    @pytest.fixture
    async def masterless(self, tmp_path):
        async with slave_beside(tmp_path) as cluster:
            yield container_target(cluster.broker("a1"), None)


async def test_it_puts_on_the_first_master_by_name_and_never_on_itself(tmp_path):
    async with slave_beside(tmp_path, "c0", "b0") as cluster:
        target = container_target(cluster.broker("a1"), cluster.broker("b0"))
        result = await target.bridge.put_message(
            EscapedMessage(topic="escaped", queue_id=0, body=b"x"))
        assert result.ok, result
        assert (await target.stored(result)).body == b"x"
        assert cluster.broker("c0").log.max_offset == 0
        assert cluster.broker("a1").log.max_offset == 0


async def test_with_no_master_in_the_process_it_refuses_and_says_so(tmp_path):
    async with slave_beside(tmp_path) as cluster:
        target = container_target(cluster.broker("a1"), None)
        result = await target.bridge.put_message(
            EscapedMessage(topic="escaped", queue_id=0, body=b"x"))
    assert (result.code, result.stored) == (ResponseCode.SERVICE_NOT_AVAILABLE, False)
    assert result.remark == "no master of cluster DefaultCluster runs in this process to escape to"


async def test_it_prefers_a_master_that_holds_the_topic(tmp_path):
    async with slave_beside(tmp_path, "b0", "c0") as cluster:
        client = await cluster.start("client")
        await create_topic(client, cluster.node("c0").address, "orders")
        target = container_target(cluster.broker("a1"), cluster.broker("c0"))
        result = await target.bridge.put_message(
            EscapedMessage(topic="orders", queue_id=1, body=b"o"))
        assert result.ok, result
        assert (await target.stored(result)).topic == "orders"
        assert cluster.broker("b0").log.max_offset == 0
