"""A flood of handshake-less HA connections cannot keep a restarted slave out.

Two broker replicas of a controller-mode group run as ``python -m triomq.cli
broker`` processes; three controllers and a name server run in the test's
process, over TCP. The slave is killed and shrunk out of the SyncStateSet.
While 80 connections are opened against the master's HA port as fast as they
are closed (none sends a handshake: more than the port's 64 slots), the
slave is started again: it gets its slot, catches up, and the controller's
SyncStateSet names it again while the flood goes on.
"""

from __future__ import annotations

import trio
from processes import NodeProcess, closed_by_peer
from test_attack_causes_no_failover import replica_sections

from triomq.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from triomq.testing.cluster import BROKER_NAME, open_cluster

FLOOD = 80


def ha_port(replica: NodeProcess) -> int:
    line = next(line for line in replica.config.read_text().splitlines()
                if line.startswith("ha_listen_port"))
    return int(line.split("=")[1])


async def test_a_restarted_slave_gets_back_in_through_a_connection_flood(tmp_path) -> None:
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

        async def replica_info(members: int):
            with trio.fail_after(90):
                while True:
                    try:
                        info = await controllers.get_replica_info(BROKER_NAME)
                    except (ControllerError, ControllerUnavailable):
                        info = None  # no leader yet, or the group not registered yet
                    if info is not None and len(info.sync_state_set) == members:
                        return info
                    await trio.sleep(0.05)

        try:
            for replica in replicas:
                await replica.start()
            before = await replica_info(2)
            master = next(r for r in replicas if r.address == before.master_address)
            slave = next(r for r in replicas if r is not master)
            assert slave.process is not None
            slave.process.kill()
            await slave.process.wait()
            await replica_info(1)

            opened = 0
            port = ha_port(master)

            async def flood() -> None:
                nonlocal opened
                while True:
                    try:
                        stream = await trio.open_tcp_stream("127.0.0.1", port)
                    except OSError:
                        await trio.sleep(0)
                        continue
                    opened += 1
                    try:
                        await closed_by_peer(stream)  # reopened as soon as it is closed
                    finally:
                        await stream.aclose()

            async with trio.open_nursery() as nursery:
                for _ in range(FLOOD):
                    nursery.start_soon(flood)
                with trio.fail_after(60):
                    while opened < 2 * FLOOD:  # the port is full, and churning
                        await trio.sleep(0.01)
                await slave.start()
                after = await replica_info(2)
                assert after.master_address == before.master_address
                assert opened > 3 * FLOOD  # the flood went on all along
                nursery.cancel_scope.cancel()
            for replica in replicas:
                replica.check_running()
        finally:
            for replica in replicas:
                if replica.process is not None and replica.process.returncode is None:
                    await replica.stop()
