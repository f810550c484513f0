"""Mixed name services: RocketMQ's broker with triomq's name server, and triomq's brokers
with RocketMQ's name server (``rocketmq_server.py``, RocketMQ 5.3.3 from Maven).

Each side's broker registers with the other side's name server, which routes
triomq's client and RocketMQ's Java client to it: every message they send is
read back through the same name server from the queue and offset its send's
answer named. No request is answered REQUEST_CODE_NOT_SUPPORTED (``conftest.py``).

Skipped, with the reason, without ``java`` or ``mvn`` or where Maven could not
fetch the jars; with both but the jars not resolved (``make rocketmq-server``
and ``make rocketmq-java``, which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from triomq.client import Message, Producer
from triomq.protocol.route import loads
from triomq.runtime import Node
from triomq.testing.cluster import BROKER_NAME, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat_cluster import read_until
from rocketmq_server import CLASSPATH, broker, namesrv, unavailable_server
from scenario_clients import (
    QUEUES,
    TOPIC,
    WAIT,
    create_topic,
    java_argv,
    require_java_build,
    unavailable_java,
)

pytestmark = [
    pytest.mark.skipif(unavailable_server() is not None, reason=str(unavailable_server())),
    pytest.mark.skipif(unavailable_java() is not None, reason=str(unavailable_java())),
]

COUNT = 8
GET_BROKER_CLUSTER_INFO = 106


@pytest.fixture(autouse=True)
def built() -> None:
    if not CLASSPATH.exists():
        pytest.fail(f"{CLASSPATH} is missing: run `make rocketmq-server` (`make test` runs "
                    f"it)", pytrace=False)
    require_java_build("rocketmq-5")


async def java_send(home: Path, namesrv_address: str) -> list[dict[str, Any]]:
    """RocketMQ's Java client sends ``COUNT`` messages, routed by ``namesrv_address``."""
    argv = java_argv("rocketmq-5", home, "send", "--namesrv", namesrv_address, "--topic",
                     TOPIC, "--group", "java-producer", "--count", str(COUNT), "--modes",
                     "sync")
    with trio.fail_after(WAIT):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True,
                                      check=False)
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.splitlines()]


async def routed_sends(app: Node, home: Path, namesrv_address: str,
                       broker_address: str) -> None:
    """triomq's producer and RocketMQ's Java client send through the name server to the
    broker at ``broker_address``; triomq's consumer, routed the same way, reads every
    message from the queue and offset its answer named."""
    namesrv_url = "tcp://" + namesrv_address
    sent: dict[str, tuple[int, int, str]] = {}
    async with Producer("triomq-producer", [namesrv_url]).start(app.connect) as producer:
        for i in range(COUNT):
            result = await producer.send(Message(TOPIC, f"triomq {i}".encode(), tags="TagA"))
            assert result.message_queue.broker_name == BROKER_NAME
            sent[result.msg_id] = (result.message_queue.queue_id, result.queue_offset,
                                   f"triomq {i}")
    for line in await java_send(home, namesrv_address):
        assert (line["sendStatus"], line["brokerName"], line["storeHost"]) \
            == ("SEND_OK", BROKER_NAME, broker_address)
        sent[line["msgId"]] = (line["queueId"], line["queueOffset"], f"sync {line['i']}")
    got = await read_until(app, [namesrv_url], lambda got: sent.keys() <= {m.msg_id for m in got})
    assert {m.msg_id: (m.queue_id, m.queue_offset, m.body.decode()) for m in got} == sent


async def test_a_rocketmq_broker_registers_with_triomqs_name_server(
        tmp_path: Path, refused_requests: None) -> None:
    async with open_cluster(tmp_path, transport="tcp", controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        (names,) = cluster.namesrv_addresses.values()
        app = await cluster.start("app")
        rocketmq = broker(tmp_path / "rocketmq", names.removeprefix("tcp://"),
                          name=BROKER_NAME)
        await rocketmq.start()
        try:
            await create_topic(app, "tcp://" + rocketmq.address, names, TOPIC, QUEUES)
            # The cluster RocketMQ's broker said it belongs to, with its address.
            answer = await app.rpc.invoke(names, GET_BROKER_CLUSTER_INFO, {})
            assert answer.code == 0, answer.remark
            info = loads(answer.body)
            assert info["clusterAddrTable"] == {"DefaultCluster": [BROKER_NAME]}
            assert info["brokerAddrTable"][BROKER_NAME]["brokerAddrs"] == {"0": rocketmq.address}
            await routed_sends(app, tmp_path / "java", names.removeprefix("tcp://"),
                               rocketmq.address)
        finally:
            await rocketmq.stop()


async def test_triomq_brokers_register_with_rocketmqs_name_server(
        tmp_path: Path, refused_requests: None) -> None:
    names = namesrv(tmp_path / "rocketmq")
    await names.start()
    try:
        async with open_cluster(tmp_path, transport="tcp",
                                broker={"namesrv_addr": ["tcp://" + names.address]}) as cluster:
            await cluster.start_controllers()
            await cluster.start_brokers()
            master = await cluster.wait_master(timeout=60)
            app = await cluster.start("app")
            master_address = cluster.node(master).address
            await create_topic(app, master_address, "tcp://" + names.address, TOPIC, QUEUES)
            await routed_sends(app, tmp_path / "java", names.address,
                               master_address.removeprefix("tcp://"))
    finally:
        await names.stop()
