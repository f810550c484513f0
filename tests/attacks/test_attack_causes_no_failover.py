"""The 13.5 MB header attack against a controller-mode group: no failover, nothing lost.

Two broker replicas run as ``python -m triomq.cli broker`` processes with
``all_ack_in_sync_state_set``; three controllers and a name server run in
the test's process, over TCP. While a producer sends without pause, the
master is sent SEND_MESSAGE_V2 frames with 650,000 extFields (13.5 MB of
header) again and again. Each is refused from its length field, so the
master's loop keeps answering its controllers: the group keeps its master
and epoch, and every acknowledged message is in the master's queue.
"""

from __future__ import annotations

import contextlib
import struct
import sys
from pathlib import Path

import trio
from processes import NodeProcess, closed_by_peer
from test_oversize_requests import attack_header

from triomq.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from triomq.testing.cluster import BROKER_NAME, open_cluster
from triomq.testing.direct_send import DirectProducer, ServiceNotAvailable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))
from broker_processes import replica_sections

GET_MAX_OFFSET = 30


async def test_the_header_attack_causes_no_failover_and_loses_nothing(tmp_path) -> None:
    header = attack_header(650_000)
    frame = struct.pack(">iI", 4 + len(header) + 1, len(header)) + header + b"x"
    async with open_cluster(tmp_path, transport="tcp", brokers=0, namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        await cluster.start_controllers()
        client = await cluster.start("client")
        controllers_addresses = list(cluster.controller_addresses.values())
        namesrv = cluster.namesrv_addresses["n1"].removeprefix("tcp://")
        replicas = [NodeProcess("broker", f"b{i}", tmp_path,
                                replica_sections(tmp_path / f"b{i}", controllers_addresses,
                                                 namesrv)) for i in (1, 2)]
        controllers = ControllerClient(client.rpc, controllers_addresses)

        async def replica_info():
            with trio.fail_after(60):
                while True:
                    try:
                        info = await controllers.get_replica_info(BROKER_NAME)
                    except (ControllerError, ControllerUnavailable):
                        info = None  # no leader yet, or the group not registered yet
                    if info is not None and len(info.sync_state_set) == 2:
                        return info
                    await trio.sleep(0.05)

        try:
            for replica in replicas:
                await replica.start()
            before = await replica_info()
            master = next(r for r in replicas if r.address == before.master_address)
            producer = DirectProducer(client.rpc, master.address)
            with trio.fail_after(60):  # until the master has taken its role
                while True:
                    try:
                        await producer.send("t", b"first")
                        break
                    except ServiceNotAvailable:
                        await trio.sleep(0.05)
            acked = 1
            attacks = 0

            async def attack() -> None:
                # The frame is built once, up front: encoding it here would stall this
                # process's loop, where the controllers run.
                nonlocal attacks
                for _ in range(5):
                    stream = await trio.open_tcp_stream("127.0.0.1", master.port)
                    # Closed by the broker before the frame is all sent, most likely.
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stream.send_all(frame)
                    with trio.fail_after(30):
                        assert await closed_by_peer(stream)
                    await stream.aclose()
                    attacks += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack)
                while attacks < 5:
                    result = await producer.send("t", b"m%d" % acked)
                    assert result.queue_offset == acked
                    acked += 1
                    await trio.sleep(0.01)
            for _ in range(20):  # and the group keeps going afterwards
                assert (await producer.send("t", b"after")).queue_offset == acked
                acked += 1

            after = await replica_info()
            assert (after.master_address, after.master_epoch) == (
                before.master_address, before.master_epoch)
            answer = await client.rpc.invoke(master.address, GET_MAX_OFFSET,
                                             {"topic": "t", "queueId": "0"})
            assert int(answer.ext_fields["offset"]) == acked
            for replica in replicas:
                replica.check_running()
        finally:
            for replica in replicas:
                if replica.process is not None:
                    await replica.stop()
