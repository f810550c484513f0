"""The local escape bridge: the conformance suite, and what a master's own put flow adds."""

from __future__ import annotations

import pytest
from broker_nodes import Cluster

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.core.headers import parse_offset_msg_id
from triomq.broker.service import Broker
from triomq.errors import PluginError
from triomq.protocol.message import PROPERTY_CLUSTER, MessageRecord
from triomq.testing import EscapeBridgeConformance

MAX_MESSAGE_SIZE = 2048


class LocalTarget:
    """The ``"local"`` bridge of one broker, as the broker plugin provides it."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.bridge = broker.node.plugins.escape_bridge("local")(broker.node)
        self.max_message_size = broker.config.max_message_size

    async def stored(self, result: EscapeResult) -> MessageRecord:
        assert result.msg_id is not None
        _host, offset = parse_offset_msg_id(result.msg_id)
        return self.broker.log.read_record(offset)

    async def end_offset(self) -> int:
        return self.broker.log.max_offset


class TestLocalEscapeBridge(EscapeBridgeConformance):
    @pytest.fixture
    async def target(self, tmp_path):
        cluster = Cluster("inproc", tmp_path)
        async with cluster.broker("a", extra=f"max_message_size = {MAX_MESSAGE_SIZE}") as a:
            yield LocalTarget(a)

    @pytest.fixture
    async def masterless(self, tmp_path):
        cluster = Cluster("inproc", tmp_path)
        async with cluster.broker("s", broker_id=1, master="inproc://nobody-ha") as s:
            yield LocalTarget(s)


def put(topic: str = "escape-only") -> EscapedMessage:
    return EscapedMessage(topic=topic, queue_id=0, body=b"own")


async def test_a_slave_refuses_as_it_refuses_a_send(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("s", broker_id=1, master="inproc://nobody-ha") as s:
        result = await LocalTarget(s).bridge.put_message(put())
    assert result.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert result.remark == ("broker broker-a id 1 is slave, not master: messages go to the "
                             "master")


async def test_a_put_needs_no_topic_config_and_creates_none(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a:
        target = LocalTarget(a)
        result = await target.bridge.put_message(put())
        assert result.ok, result
        record = await target.stored(result)
        assert record.properties[PROPERTY_CLUSTER] == a.config.cluster_name
        assert record.store_host == record.born_host  # no born host: the store's
        assert a.topics.table.get("escape-only") is None


async def test_a_put_the_sync_state_set_is_too_small_for_is_refused_unstored(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="min_in_sync_replicas = 2") as a:
        end = a.log.max_offset
        result = await LocalTarget(a).bridge.put_message(put())
        assert (result.code, result.stored) == (ResponseCode.SYSTEM_ERROR, False)
        assert result.remark is not None and "in-sync replicas not enough" in result.remark
        assert a.log.max_offset == end


async def test_the_local_bridge_needs_a_running_broker(tmp_path):
    cluster = Cluster("inproc", tmp_path)
    async with cluster.client() as client:
        with pytest.raises(PluginError, match="runs no broker"):
            cluster.pm.escape_bridge("local")(client)
