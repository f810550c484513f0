"""``triomq admin`` against a running cluster over TCP."""

from __future__ import annotations

import io
import json

from controller_service_helpers import (
    controller_plugins,
    controllers,
    group_at,
    put,
    wait_full_sync_state_set,
    wait_leader,
)

from triomq.broker.replication.replicas_manager import BrokerRole
from triomq.cli import build_parser
from triomq.plugins.controller_dledger.cli import run_admin
from triomq.testing.cluster import BROKER_NAME


async def test_admin_commands(make_cluster):
    parser = build_parser(controller_plugins())
    # Not a failover test: a busy machine stalling the brokers' heartbeats past the
    # default 500 ms must not elect another master under the epochs it checks.
    async with make_cluster(transport="tcp",
                            controller={"broker_not_active_timeout": 3000}) as cluster:
        await cluster.start_controllers()
        await cluster.start_brokers()
        master = await cluster.wait_master()
        await wait_full_sync_state_set(cluster, master)
        node = await cluster.start("admin")
        controller_args = [a for address in cluster.controller_addresses.values()
                           for a in ("--controller", address)]

        async def admin(*argv: str) -> tuple[int, str]:
            out = io.StringIO()
            args = parser.parse_args(["admin", *argv, *controller_args])
            code = await run_admin(args, node.rpc, out)
            return code, out.getvalue()

        async def admin_json(*argv: str) -> dict:
            code, text = await admin(*argv, "--json")
            assert code == 0, text
            return json.loads(text)

        leader = await wait_leader(cluster)
        leader_address = cluster.controller_addresses[leader].removeprefix("tcp://")
        metadata = await admin_json("get-controller-metadata")
        assert metadata["leaderAddress"] == leader_address  # as RocketMQ writes it
        assert metadata["group"] == "DefaultControllerGroup"
        assert [p["leader"] for p in metadata["peers"]].count(True) == 1
        code, table = await admin("get-controller-metadata")
        assert code == 0 and f"leader {metadata['leaderId']} ({leader_address})" in table

        master_id = cluster.broker(master).broker_id
        data = await admin_json("get-sync-state-set", "--broker-name", BROKER_NAME)
        assert (data["masterBrokerId"], data["masterEpoch"]) == (master_id, 1)
        assert data["masterAddress"] == cluster.broker(master).node.address.removeprefix(
            "tcp://")
        assert [(r["brokerId"], r["alive"]) for r in data["inSyncReplicas"]] == [
            (1, True), (2, True), (3, True)]
        assert data["notInSyncReplicas"] == []
        code, table = await admin("get-sync-state-set", "--broker-name", BROKER_NAME)
        assert code == 0 and "master epoch 1" in table and "inSyncStateSet" in table
        code, text = await admin("get-sync-state-set", "--broker-name", "broker-x")
        assert code == 1 and "CONTROLLER_BROKER_METADATA_NOT_EXIST" in text

        await put(node, cluster.broker(master), b"one message")
        epochs = await admin_json("get-broker-epoch", "--broker-name", BROKER_NAME)
        assert [r["brokerId"] for r in epochs["replicas"]] == [1, 2, 3]
        for replica in epochs["replicas"]:
            assert replica["maxOffset"] > 0  # every put was acknowledged by all three
            # The open epoch ends at the log's end, as mqadmin shows it.
            assert replica["epochs"] == [{"epoch": 1, "startOffset": 0,
                                          "endOffset": replica["maxOffset"]}]

        # Designate a slave: it becomes the master of epoch 2, the old master its slave.
        slave = next(n for n in cluster.broker_names if n != master)
        slave_id = cluster.broker(slave).broker_id
        data = await admin_json("elect-master", "--broker-name", BROKER_NAME,
                                "--broker-id", str(slave_id))
        assert (data["masterBrokerId"], data["masterEpoch"]) == (slave_id, 2)
        await cluster.wait_for(lambda: cluster.masters() == [slave]
                               and cluster.broker(master).replicas.role is BrokerRole.SLAVE)
        code, text = await admin("elect-master", "--broker-name", BROKER_NAME,
                                 "--broker-id", "99")
        assert code == 1 and "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED" in text

        # Clean a dead replica's metadata (alive ones are refused).
        gone = next(n for n in cluster.broker_names if n not in (master, slave))
        gone_id = cluster.broker(gone).broker_id
        code, text = await admin("clean-broker-metadata", "--broker-name", BROKER_NAME,
                                 "--broker-ids", str(gone_id))
        assert code == 1 and "still alive" in text
        await cluster.kill(gone)
        leader = await wait_leader(cluster)
        service = controllers(cluster)[leader]
        await cluster.wait_for(lambda: not service.heartbeats.is_active(
            service.now_ms(), service.config.broker_not_active_timeout, "DefaultCluster",
            BROKER_NAME, gone_id))
        data = await admin_json("clean-broker-metadata", "--broker-name", BROKER_NAME,
                                "--broker-ids", str(gone_id))
        assert data == {"brokerName": BROKER_NAME, "cleaned": [gone_id]}
        assert group_at(cluster, leader).broker_ids == {master_id, slave_id}
