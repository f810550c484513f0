"""End to end: mmap commit logs, epoch files, real transports (inproc and TCP).

A master and two slaves replicate across several epochs, with failovers and
divergent tails; the commit logs and epoch files end byte-identical.
"""

from __future__ import annotations

import random

import pytest
import trio

from triomq.ha.checkpoint import CHECKPOINT_FILE, EpochCheckpointFile
from triomq.ha.core.role_change import RoleChange, ToMaster, ToSlave
from triomq.ha.master_driver import ApproveLocally, HAMaster, HAMasterConfig
from triomq.ha.slave_driver import HASlave, HASlaveConfig
from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.plugins.transport_inproc import InprocNetwork, InprocTransport
from triomq.plugins.transport_tcp.transport import TcpTransport
from triomq.protocol.message import MessageRecord
from triomq.testing.clustersim_parts import change_role


async def inline(function, *args):
    return function(*args)


def become_master(log, epochs, epoch: int):
    """The role change's epoch work (the simulation's inline driver), against real files."""
    return change_role(RoleChange(ToMaster(epoch, 0), confirmed=-1), log, epochs,
                       lambda: None).epochs


class Broker:
    def __init__(self, root, name: str, broker_id: int) -> None:
        self.root = root
        self.name = name
        self.broker_id = broker_id
        self.log = MmapCommitLog(str(root), segment_size=4096)
        self.epochs = EpochCheckpointFile(root)

    def put(self, rng: random.Random, count: int) -> None:
        for _ in range(count):
            body = bytes([rng.randrange(256)]) * rng.randint(1, 700)
            self.log.append(MessageRecord(topic="t", body=body, queue_id=rng.randrange(2)))

    def image(self) -> tuple[int, bytes, bytes]:
        log = self.log
        content = log.read(log.min_offset, log.max_offset - log.min_offset)
        return log.min_offset, content, (self.root / CHECKPOINT_FILE).read_bytes()


@pytest.fixture(params=["inproc", "tcp"])
def transport(request):
    if request.param == "inproc":
        return InprocTransport(InprocNetwork(seed=3)), "inproc://{name}-ha"
    return TcpTransport(), "tcp://127.0.0.1:0"


async def term(master: Broker, epoch: int, slaves: list[Broker], transport, rng) -> None:
    """One master term: the slaves follow until they hold everything the master wrote."""
    kind, address = transport
    epochs = become_master(master.log, master.epochs, epoch)
    ha = HAMaster(
        log=master.log,
        epochs=epochs,
        broker_id=master.broker_id,
        sync_state_set=frozenset({master.broker_id}),
        confirm_offset=master.log.max_offset,
        reporter=ApproveLocally(),
        config=HAMasterConfig(ha_transfer_batch_size=1000),
    )
    listener = await kind.listen(address.format(name=master.name))
    async with listener, trio.open_nursery() as nursery:
        await nursery.start(ha.run)

        async def accept() -> None:
            while True:
                nursery.start_soon(ha.serve, await listener.accept())

        nursery.start_soon(accept)
        for slave in slaves:
            change_role(RoleChange(ToSlave(master.name, epoch, slave.broker_id), confirmed=-1),
                        slave.log, slave.epochs, lambda: None)
            client = HASlave(
                log=slave.log,
                epoch_store=slave.epochs,
                broker_id=slave.broker_id,
                connect=lambda: kind.connect(listener.address),
                config=HASlaveConfig(ha_send_heartbeat_interval=50),
                offload=inline,
            )
            await nursery.start(client.run)
        for _ in range(4):
            master.put(rng, 5)
            ha.appended()
            await trio.sleep(0.01)
        with trio.fail_after(20):
            while any(s.log.max_offset != master.log.max_offset for s in slaves):
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_three_brokers_across_epochs(transport, tmp_path):
    rng = random.Random(42)
    a, b, c = (Broker(tmp_path / name, name, i) for i, name in enumerate("abc", 1))
    await term(a, 1, [b, c], transport, rng)
    a.put(rng, 6)  # a's tail that nobody copies; a fails
    await term(b, 2, [c], transport, rng)
    await term(b, 3, [a, c], transport, rng)  # a returns: its tail is cut at the handshake
    b.put(rng, 3)  # b's tail, lost
    await term(c, 5, [a, b], transport, rng)
    assert a.image() == b.image() == c.image()
    assert [e.epoch for e in c.epochs.load()] == [1, 2, 3, 5]
    assert c.log.max_offset > 2 * c.log.segment_size
    for broker in (a, b, c):
        broker.log.close()


class Killed(BaseException):
    """The slave process dies."""


class DieOnSave:
    def __init__(self, store: EpochCheckpointFile) -> None:
        self.store = store

    def load(self):
        return self.store.load()

    def save(self, cache) -> None:
        raise Killed


async def test_kill_right_after_truncation_leaves_no_stale_tail(tmp_path):
    """RocketMQ issue 10666: after a restart the truncated tail must not come back."""
    rng = random.Random(9)
    inproc = (InprocTransport(InprocNetwork(seed=1)), "inproc://{name}-ha")
    a, b = Broker(tmp_path / "a", "a", 1), Broker(tmp_path / "b", "b", 2)
    await term(a, 1, [b], inproc, rng)
    become_master(b.log, b.epochs, 2)
    b.put(rng, 8)  # b's private tail in epoch 2
    cut = a.log.max_offset
    b.epochs = DieOnSave(b.epochs)
    with pytest.raises(BaseExceptionGroup) as info:
        await term(a, 3, [b], inproc, rng)
    assert info.group_contains(Killed)
    assert b.log.max_offset == cut
    # Restart: reopen the store from disk without a clean close.
    b.log = MmapCommitLog(str(b.root), segment_size=4096)
    b.epochs = EpochCheckpointFile(b.root)
    assert b.log.max_offset == cut
    assert b.epochs.load().last_epoch == 2  # the kill came before the epoch file changed
    await term(a, 3, [b], inproc, rng)
    assert a.image() == b.image()
    for broker in (a, b):
        broker.log.close()
