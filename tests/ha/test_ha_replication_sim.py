"""Master and slave state machines driven against each other in a pure loop.

Several epochs, failovers and divergent tails; at the end every replica holds
the same bytes and the same epoch cache.
"""

from __future__ import annotations

import random

import pytest
from ha_sim import Link, Replica

from triomq.ha.core.epoch import EpochStart
from triomq.ha.core.slave import Truncate


@pytest.mark.parametrize("seed", range(8))
def test_failovers_end_with_identical_logs(seed):
    rng = random.Random(seed)
    a, b, c = Replica("a:1", 1), Replica("b:1", 2), Replica("c:1", 3)
    now = 0

    # Epoch 1: A is master, B and C follow.
    a.become_master(1)
    a.write(rng, 30)
    for slave in (b, c):
        Link(a, slave, rng, now).run(now)
    assert b.content() == c.content() == a.content()

    # A writes more; only B copies it; then A writes a tail nobody gets.
    a.write(rng, 10)
    Link(a, b, rng, now).run(now)
    a.write(rng, 5)
    acked_by_b = b.max_offset
    assert a.max_offset > acked_by_b > c.max_offset

    # Epoch 2: B takes over (A is gone). C is behind; it catches up.
    now += 100
    b.become_master(2)
    b.write(rng, 8)
    Link(b, c, rng, now).run(now)
    assert c.content() == b.content()

    # A rejoins as a slave: its unacked epoch-1 tail is cut at the handshake.
    link = Link(b, a, rng, now)
    link.run(now)
    first = a.actions[0]
    assert isinstance(first, Truncate)
    assert first.offset == acked_by_b
    assert a.content() == b.content()

    # Fast successive changes: B writes a tail in epoch 2 and dies before
    # anyone copies it; C becomes master in epoch 3, then dies at once with
    # its own unreplicated tail; A becomes master in epoch 4.
    b.write(rng, 4)
    now += 100
    c.become_master(3)
    c.write(rng, 3)
    now += 100
    a.become_master(4)
    a.write(rng, 6)
    for slave in (b, c):
        Link(a, slave, rng, now).run(now)
    assert a.content() == b.content() == c.content()
    assert [e.epoch for e in a.epochs] == [1, 2, 4]

    # Epoch 5: C is master again, several epochs ahead of nothing: all follow.
    now += 100
    c.become_master(5)
    c.write(rng, 12)
    for slave in (a, b):
        Link(c, slave, rng, now).run(now)
    assert a.content() == b.content() == c.content()
    assert [e.epoch for e in c.epochs] == [1, 2, 4, 5]


def test_slave_several_epochs_behind_records_each_epoch():
    rng = random.Random(1)
    m, s = Replica("m:1", 0), Replica("s:1", 1)
    m.become_master(1)
    m.write(rng, 5)
    Link(m, s, rng, 0).run(0)
    for epoch in (3, 4, 7):
        m.become_master(epoch)
        m.write(rng, 5)
    m.become_master(9)  # an epoch with no bytes yet
    link = Link(m, s, rng, 0, batch_size=1000)
    link.run(0)
    assert s.data == m.data
    assert [e.epoch for e in s.epochs] == [1, 3, 4, 7]
    # The empty epoch 9 reaches the slave with the next heartbeat.
    link.run(5000)
    assert s.content() == m.content()


def test_empty_epochs_in_the_middle_are_skipped():
    rng = random.Random(2)
    m, s = Replica("m:1", 0), Replica("s:1", 1)
    m.become_master(1)
    m.write(rng, 5)
    m.become_master(2)  # empty: the master changed again before writing
    m.become_master(3)
    m.write(rng, 5)
    Link(m, s, rng, 0).run(0)
    assert s.data == m.data
    assert EpochStart(2, m.epochs.find(2).start_offset) not in list(s.epochs)
    assert [e.epoch for e in s.epochs] == [1, 3]


def test_new_slave_syncing_from_the_last_segment():
    rng = random.Random(3)
    m, s = Replica("m:1", 0), Replica("s:1", 1)
    m.become_master(1)
    m.write(rng, 40)
    m.become_master(2)
    m.write(rng, 10)
    Link(m, s, rng, 0, sync_from_last_file=True).run(0)
    start = m.max_offset - m.max_offset % 256
    assert s.base == start
    assert bytes(s.data) == bytes(m.data[start:])
    assert s.epochs.last_epoch == 2


@pytest.mark.parametrize("seed", range(40))
def test_random_failovers_with_partial_replication_converge(seed):
    """Masters change at random while slaves hold arbitrary prefixes and private tails."""
    rng = random.Random(seed)
    replicas = [Replica(name, i) for i, name in enumerate(("a:1", "b:1", "c:1"), 1)]
    master, epoch, now = replicas[0], 1, 0
    master.become_master(epoch)
    master.write(rng, 5)
    for slave in replicas[1:]:
        Link(master, slave, rng, now).run(now)
    for _ in range(6):
        master.write(rng, rng.randint(0, 6))
        for slave in replicas:
            if slave is not master:
                link = Link(master, slave, rng, now)
                for _ in range(rng.randint(0, 30)):
                    link.step(now)
        now += 1000
        epoch += rng.randint(1, 3)
        master = rng.choice(replicas)
        master.become_master(epoch)
    master.write(rng, 3)
    for slave in replicas:
        if slave is not master:
            Link(master, slave, rng, now).run(now)
    # Slaves learn epochs from transfer headers, so an epoch in which the
    # master wrote nothing may be missing; every epoch owning bytes is there.
    for r in replicas:
        assert (r.base, r.data) == (master.base, master.data)
        assert owned(r) == owned(master)


def owned(replica: Replica) -> list:
    return [e for e in replica.epochs.entries(replica.max_offset) if e.start_offset < e.end_offset]
