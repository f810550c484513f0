"""RocketMQ's own controller (``rocketmq-controller`` 5.3.3 from Maven, a DLedger group of
one) asked by triomq's controller client: GET_METADATA_INFO reads as RocketMQ writes it.

Skipped, with the reason, without ``java`` or ``mvn`` or where Maven could not fetch
the jars; with both but the jars not resolved (``make rocketmq-server``, which ``make
test`` runs), the test fails saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from triomq.controller.client import ControllerClient
from triomq.testing.cluster import free_tcp_port, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rocketmq_server import CLASSPATH, HOST, START_WAIT, controller, unavailable_server

pytestmark = pytest.mark.skipif(unavailable_server() is not None,
                                reason=str(unavailable_server()))


async def test_triomqs_controller_client_reads_rocketmqs_controller_metadata(
        tmp_path: Path) -> None:
    if not CLASSPATH.exists():
        pytest.fail(f"{CLASSPATH} is missing: run `make rocketmq-server` (`make test` runs "
                    f"it)", pytrace=False)
    dledger = free_tcp_port()
    rocketmq = controller(tmp_path / "rocketmq", "n0", {"n0": dledger})
    await rocketmq.start()
    try:
        async with open_cluster(tmp_path, transport="tcp", controllers=0, brokers=0) as cluster:
            app = await cluster.start("app")
            client = ControllerClient(app.rpc, ["tcp://" + rocketmq.address])
            # DLedger elects its one member after its first election timeout.
            with trio.fail_after(START_WAIT):
                while not (metadata := await client.get_metadata()).is_leader:
                    await trio.sleep(0.1)
            assert (metadata.group, metadata.leader_id, metadata.peers) \
                == ("group1", "n0", (("n0", f"{HOST}:{dledger}"),))
    finally:
        await rocketmq.stop()
