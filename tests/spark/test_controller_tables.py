"""Controller tables in Spark: SyncStateSets and master history from real controller dirs."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
import trio

import triomq.plugins.broker
import triomq.plugins.controller_dledger
from triomq.controller.service import ControllerService, controller_of
from triomq.plugin_manager import PluginManager
from triomq.plugins.spark_export.cli import main
from triomq.plugins.spark_export.controller_tables import history
from triomq.testing.cluster import BROKER_NAME, Cluster, open_cluster

pytestmark = pytest.mark.spark

CONTROLLER = {"raft": {"tick_interval_ms": 20, "fsync": False}}
BROKER = {"ha_send_heartbeat_interval": 50, "flush_policy": "none",
          "all_ack_in_sync_state_set": True, "sync_flush_timeout": 2000}
STORE = {"options": {"segment_size": 65536}}


def _plugins() -> PluginManager:
    pm = PluginManager.discover(disable={"broker", "controller_dledger"})
    pm.register(triomq.plugins.broker, name="broker")
    pm.register(triomq.plugins.controller_dledger, name="controller_dledger")
    return pm


def _leader_group(services: dict[str, ControllerService]):
    leader = next((s for s in services.values() if s.raft.is_leader), None)
    return None if leader is None else leader.manager.group(BROKER_NAME)


async def _full_sync_state_set(cluster: Cluster, services: dict[str, ControllerService]) -> None:
    def done() -> bool:
        group = _leader_group(services)
        ids = {b.broker_id for b in cluster.brokers().values()}
        return group is not None and group.sync_state_set == ids
    await cluster.wait_for(done)


async def _settled(cluster: Cluster, services: dict[str, ControllerService]) -> None:
    def done() -> bool:
        status = [s.raft.status() for s in services.values()]
        return (len({(st["applied_index"], st["last_index"]) for st in status}) == 1
                and all(st["applied_index"] == st["commit_index"] for st in status))
    await cluster.wait_for(done)


async def _run_controllers(root, scheme: str = "mmap") -> dict:
    """Elect, let the SyncStateSet grow, fail the master over; stop; the controllers' state."""
    controller = {"raft": {**CONTROLLER["raft"], "store_scheme": scheme}}
    async with open_cluster(root, plugins=_plugins(), controller=controller, broker=BROKER,
                            store=STORE) as cluster:
        await cluster.start_controllers()
        services = {n: controller_of(cluster.node(n)) for n in cluster.controller_names}
        await cluster.start_brokers()
        first = await cluster.wait_master()
        first_id = cluster.broker(first).broker_id
        await _full_sync_state_set(cluster, services)
        epoch = cluster.broker(first).replicas.master_epoch
        await cluster.kill(first)
        second = await cluster.wait_master(epoch_above=epoch)
        second_id = cluster.broker(second).broker_id
        await cluster.wait_for(lambda: getattr(_leader_group(services), "master_epoch", 0)
                               == epoch + 1)
        for name in list(cluster.brokers()):
            await cluster.kill(name)
        await _settled(cluster, services)
        group = _leader_group(services)
        async with trio.open_nursery() as nursery:  # all at once: no election in between
            for name in cluster.controller_names:
                nursery.start_soon(cluster.kill, name)
    return {"group": group, "first": first_id, "second": second_id,
            "dirs": [os.path.join(root, n, "raft") for n in cluster.controller_names]}


@pytest.fixture(scope="module")
def controllers(tmp_path_factory):
    return trio.run(_run_controllers, tmp_path_factory.mktemp("controllers"))


def _table(spark, table, paths):
    return [r.asDict() for r in
            spark.read.format("triomq").option("table", table).load(paths).collect()]


def test_sync_state_set_table_equals_the_controllers_state(spark, controllers):
    group = controllers["group"]
    (row,) = _table(spark, "syncStateSet", controllers["dirs"])
    assert row["commitBasis"] == "quorum"
    assert {k: row[k] for k in ("clusterName", "brokerName", "masterBrokerId", "masterAddress",
                                "masterEpoch", "syncStateSetEpoch")} == {
        "clusterName": group.cluster_name, "brokerName": group.broker_name,
        "masterBrokerId": group.master_broker_id, "masterAddress": group.master_address,
        "masterEpoch": group.master_epoch, "syncStateSetEpoch": group.sync_state_set_epoch}
    assert row["syncStateSet"] == sorted(group.sync_state_set)
    assert row["brokerAddresses"] == group.addresses


def test_master_history_lists_each_election_with_its_raft_position(spark, controllers):
    group = controllers["group"]
    history = _table(spark, "masterHistory", controllers["dirs"])
    assert [(h["brokerId"], h["masterEpoch"], h["event"]) for h in history[:2]] == [
        (controllers["first"], 1, "ElectMaster"), (controllers["second"], 2, "ElectMaster")]
    assert (history[-1]["brokerId"], history[-1]["masterEpoch"]) == (
        group.master_broker_id, group.master_epoch)
    indexes = [h["raftIndex"] for h in history]
    assert indexes == sorted(indexes) and all(h["raftTerm"] >= 1 for h in history)
    (state,) = _table(spark, "syncStateSet", controllers["dirs"])
    assert indexes[-1] <= state["committedIndex"]


def test_sync_state_set_history_ends_at_the_current_set(spark, controllers):
    group = controllers["group"]
    changes = _table(spark, "syncStateSetHistory", controllers["dirs"])
    epochs = [c["syncStateSetEpoch"] for c in changes]
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)
    assert (changes[-1]["syncStateSet"], changes[-1]["syncStateSetEpoch"]) == (
        sorted(group.sync_state_set), group.sync_state_set_epoch)


def test_one_controller_dir_reads_only_what_its_snapshot_holds(spark, controllers):
    # Raft keeps no commit index on disk: one log alone proves nothing past its
    # snapshot, and these controllers took none (fewer entries than snapshot_entries).
    assert _table(spark, "syncStateSet", controllers["dirs"][0]) == []
    assert _table(spark, "masterHistory", controllers["dirs"][0]) == []


def test_the_export_command_writes_the_tables_spark_reads(spark, controllers, tmp_path):
    assert main(["export", "controller", str(tmp_path), *controllers["dirs"]]) == 0
    for table in ("syncStateSet", "masterHistory", "syncStateSetHistory"):
        exported = pq.read_table(tmp_path / f"{table}.parquet").to_pylist()
        read = _table(spark, table, controllers["dirs"])
        for row in exported:
            if "brokerAddresses" in row:
                row["brokerAddresses"] = dict(row["brokerAddresses"])
        assert exported == read


@pytest.mark.parametrize("table", ["syncStateSet", "masterHistory"])
def test_a_dir_that_is_not_a_controller_dir_fails_before_any_job(spark, tmp_path, table):
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("bad-controller-dir", "bad input must not start a job")
    with pytest.raises(Exception, match=f"{tmp_path}: is not a controller data directory"):
        spark.read.format("triomq").option("table", table).load(str(tmp_path)).collect()
    assert tracker.getJobIdsForGroup("bad-controller-dir") == []
    spark.sparkContext.setJobGroup("other", "")


def test_lmdb_controller_dirs_read_through_the_lmdb_store_plugin(tmp_path):
    ran = trio.run(_run_controllers, tmp_path, "lmdb")
    found = history(ran["dirs"])
    assert found.commit.basis == "quorum"
    assert found.groups[BROKER_NAME] == ran["group"]
    assert [(m.broker_id, m.master_epoch) for m in found.master_changes[:2]] == [
        (ran["first"], 1), (ran["second"], 2)]


def test_controller_tables_are_not_streams(spark, controllers):
    query = (spark.readStream.format("triomq").option("table", "masterHistory")
             .load(controllers["dirs"][0]).writeStream.format("noop").start())
    with pytest.raises(Exception, match="cannot be read as a stream"):
        query.processAllAvailable()
    query.stop()
