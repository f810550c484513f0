"""What the mixed-cluster tests share: RocketMQ brokers in controller mode, the group
as the controllers report it, sends through the name server and reading them back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from triomq.client import Message, Producer, SendStatus
from triomq.controller.client import ControllerClient
from triomq.controller.core.results import SyncStateData
from triomq.runtime import Node
from triomq.testing.cluster import BROKER_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat_cluster import read_until
from rocketmq_server import CLASSPATH, JavaServer, broker
from scenario_clients import TOPIC, WAIT

COUNT = 20


@pytest.fixture
def built() -> None:
    """The RocketMQ server's jars are resolved (a test using them fails without)."""
    if not CLASSPATH.exists():
        pytest.fail(f"{CLASSPATH} is missing: run `make rocketmq-server` (`make test` runs "
                    f"it)", pytrace=False)


async def group_state(client: ControllerClient, *, master_not: int | None = None,
                      in_sync: int) -> SyncStateData:
    """The group once it has a master (not ``master_not``) and ``in_sync`` replicas in its
    SyncStateSet, as the controllers report it."""
    with trio.fail_after(WAIT):
        while True:
            groups = await client.get_sync_state_data([BROKER_NAME])
            if groups:
                (group,) = groups
                if (group.master_broker_id not in (None, master_not)
                        and len(group.in_sync_replicas) == in_sync):
                    return group
            await trio.sleep(0.2)


async def send(app: Node, namesrv: str, prefix: str) -> dict[str, str]:
    """``COUNT`` acknowledged sends through the name server: their ids and bodies."""
    sent = {}
    async with Producer("mixed-producer", [namesrv]).start(app.connect) as producer:
        for i in range(COUNT):
            body = f"{prefix} {i}"
            result = await producer.send(Message(TOPIC, body.encode()))
            sent[result.msg_id] = body
    return sent


async def unacknowledged(app: Node, namesrv: str, body: str) -> None:
    """One send the master stores but cannot replicate (its slave is gone): answered
    FLUSH_SLAVE_TIMEOUT, it is the tail a new master's epochs truncate."""
    async with Producer("mixed-producer", [namesrv]).start(app.connect) as producer:
        result = await producer.send(Message(TOPIC, body.encode()))
    assert result.send_status == SendStatus.FLUSH_SLAVE_TIMEOUT, result


async def read_back(app: Node, namesrv: str, sent: dict[str, str]) -> None:
    """What the topic holds from its first offset is ``sent``: nothing lost, nothing
    unacknowledged, nothing twice."""
    got = await read_until(app, [namesrv], lambda got: sent.keys() <= {m.msg_id for m in got})
    bodies = sorted(m.body.decode() for m in got)
    assert bodies == sorted(sent.values()), (
        f"read {len(got)}, sent {len(sent)}; not sent: "
        f"{sorted(set(bodies) - set(sent.values()))}, twice: "
        f"{sorted(b for b in set(bodies) if bodies.count(b) > 1)}")
    assert {m.msg_id: m.body.decode() for m in got} == sent


def rocketmq_broker(home: Path, namesrv: str, controllers: str, **settings: object
                    ) -> JavaServer:
    """A RocketMQ broker in controller mode, as RocketMQ's quick start writes one: its id
    (-1) and role (SLAVE) are the controllers' to give. Its heartbeats time out after
    5 s (RocketMQ: 10 s), long enough for a JVM on a busy host, short for a test."""
    return broker(home, namesrv, name=BROKER_NAME, broker_id=-1, brokerRole="SLAVE",
                  enableControllerMode="true", controllerAddr=controllers,
                  allAckInSyncStateSet="true", controllerHeartBeatTimeoutMills=5000,
                  syncBrokerMetadataPeriod=1000, checkSyncStateSetPeriod=1000,
                  autoCreateTopicEnable="false", **settings)
