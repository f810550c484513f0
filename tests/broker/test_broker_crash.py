"""Real processes: a slave killed with SIGKILL right after its handshake truncation.

RocketMQ issue 10666: after the restart, the truncated tail must not come
back. The slave runs as ``python -m triomq.cli broker --config FILE``
(the broker plugin must be installed as an entry point); the master runs
in the test process.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import trio
from broker_nodes import Cluster, caught_up, image, wait_until

from triomq.ha.checkpoint import CHECKPOINT_FILE, load_epoch_checkpoint
from triomq.testing.direct_send import DirectProducer

SYNC_ALL = "all_ack_in_sync_state_set = true"


async def put(producer: DirectProducer, rng: random.Random, count: int) -> None:
    for _ in range(count):
        await producer.send("t", bytes([rng.randrange(256)]) * rng.randint(1, 700))


def open_store(cluster: Cluster, root) -> object:
    return cluster.pm.log_store("commitlog", "mmap")(str(root), {"segment_size": 4096})


async def start_slave(cluster: Cluster, master_ha: str, log_file) -> trio.Process:
    config = cluster.root / "b.toml"
    config.write_text(cluster.toml("b", broker_id=1, master=master_ha, epoch=3, extra=SYNC_ALL)
                      .replace('log_level = "WARNING"', 'log_level = "INFO"'))
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "triomq.cli", "broker", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=log_file)


def running(process: trio.Process, log_path) -> bool:
    """Fail at once, with the slave's log, if it exited (e.g. no broker entry point)."""
    if process.returncode is not None:
        log = log_path.read_text(errors="replace")
        raise AssertionError(f"the slave exited with {process.returncode}:\n{log}")
    return True


def acked(master) -> list[int]:
    tracker = master.replicas.ha_master.tracker
    return [progress.ack_offset for progress in tracker.slaves.values() if progress.connected]


async def test_slave_killed_right_after_truncation_keeps_no_stale_tail(tmp_path):
    rng = random.Random(11)
    cluster = Cluster("tcp", tmp_path)
    async with cluster.client() as client:
        # Epoch 1: a master, b slave; both hold the common prefix.
        async with (
            cluster.broker("a", extra=SYNC_ALL) as a,
            cluster.broker("b", broker_id=1, master=a.ha_address, extra=SYNC_ALL) as b,
        ):
            await wait_until(lambda: len(a.replicas.sync_state_set) == 2)
            await put(DirectProducer(client.rpc, a.node.address), rng, 10)
            await caught_up(a, b)
            cut = a.log.max_offset
        # Epoch 2: b alone as master writes a tail nobody else has.
        async with cluster.broker("b", epoch=2) as b:
            await put(DirectProducer(client.rpc, b.node.address), rng, 24)
            assert b.log.max_offset > cut + b.log.segment_size

        # Epoch 3: a is master; b, a real process, handshakes, truncates and is killed.
        async with cluster.broker("a", epoch=3, extra=SYNC_ALL) as a:
            with open(tmp_path / "b.log", "wb") as log_file:
                process = await start_slave(cluster, a.ha_address, log_file)
                try:
                    await wait_until(lambda: running(process, tmp_path / "b.log")
                                     and any(ack >= 0 for ack in acked(a)), timeout=60)
                finally:
                    process.kill()
                    await process.wait()
            assert process.returncode == -9

            # What the killed process left on disk, recovered from a copy.
            shutil.copytree(cluster.root / "b", tmp_path / "b-after-kill")
            store = await trio.to_thread.run_sync(open_store, cluster, tmp_path / "b-after-kill")
            try:
                assert store.max_offset == cut
                assert store.read(0, cut) == a.log.read(0, cut)
            finally:
                store.close()
            epochs = load_epoch_checkpoint(tmp_path / "b-after-kill")
            assert 2 not in [entry.epoch for entry in epochs]
            assert all(entry.start_offset <= cut for entry in epochs)

            # Restarted, b follows a; the logs end byte-identical.
            with open(tmp_path / "b.log", "ab") as log_file:
                process = await start_slave(cluster, a.ha_address, log_file)
                try:
                    await wait_until(lambda: running(process, tmp_path / "b.log")
                                     and len(a.replicas.sync_state_set) == 2, timeout=60)
                    await put(DirectProducer(client.rpc, a.node.address), rng, 6)
                    await wait_until(lambda: acked(a) == [a.log.max_offset])
                finally:
                    process.terminate()
                    await process.wait()
            assert process.returncode == 0
            expected = image(a)
            a_epochs = (cluster.root / "a" / CHECKPOINT_FILE).read_bytes()

    store = await trio.to_thread.run_sync(open_store, cluster, cluster.root / "b")
    try:
        assert (store.min_offset, store.read(store.min_offset, store.max_offset)) == expected
    finally:
        store.close()
    assert (cluster.root / "b" / CHECKPOINT_FILE).read_bytes() == a_epochs
    assert [e.epoch for e in load_epoch_checkpoint(cluster.root / "b")] == [1, 3]


def test_cli_rejects_a_bad_broker_config(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('role = "broker"\n[broker]\nbroker_id = 1\nha_listen_prot = 1\n')
    done = subprocess.run(
        [sys.executable, "-m", "triomq.cli", "broker", "--config", str(config)],
        capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 2
    assert "broker.ha_listen_prot: unknown key" in done.stderr
