"""Epoch cache and the truncation algorithm, including KIP-101 / KIP-279 style divergences."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.ha.core.epoch import EpochCache, EpochEntry, EpochStart, find_consistent_point
from triomq.ha.core.errors import EpochError


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(EpochStart(e, s) for e, s in pairs)


def test_entries_close_the_last_epoch_at_the_given_end():
    c = cache((1, 0), (3, 100), (4, 100), (6, 250))
    assert c.entries() == (
        EpochEntry(1, 0, 100),
        EpochEntry(3, 100, 100),
        EpochEntry(4, 100, 250),
        EpochEntry(6, 250, None),
    )
    assert c.entries(300)[-1] == EpochEntry(6, 250, 300)
    assert c.last == EpochStart(6, 250)
    assert c.last_epoch == 6
    assert EpochCache().last is None
    assert EpochCache().last_epoch is None
    assert EpochCache().entries(5) == ()


def test_find_and_entry_at():
    c = cache((1, 0), (3, 100), (4, 100), (6, 250))
    assert c.find(3) == EpochEntry(3, 100, 100)
    assert c.find(6) == EpochEntry(6, 250, None)
    assert c.find(2) is None
    assert c.entry_at(0) == EpochEntry(1, 0, 100)
    assert c.entry_at(99) == EpochEntry(1, 0, 100)
    assert c.entry_at(100) == EpochEntry(4, 100, 250)  # empty epoch 3 skipped
    assert c.entry_at(10**9) == EpochEntry(6, 250, None)
    assert cache((2, 50)).entry_at(10) is None


@pytest.mark.parametrize(
    "pairs",
    [
        [(1, 0), (1, 10)],  # epoch repeated
        [(2, 0), (1, 10)],  # epoch goes back
        [(1, 10), (2, 5)],  # start goes back
        [(-1, 0)],
        [(1, -5)],
    ],
)
def test_order_is_enforced(pairs):
    with pytest.raises(EpochError):
        cache(*pairs)


def test_append():
    c = cache((1, 0)).append(2, 10).append(5, 10)
    assert list(c) == [EpochStart(1, 0), EpochStart(2, 10), EpochStart(5, 10)]
    with pytest.raises(EpochError, match="does not follow"):
        c.append(5, 20)
    with pytest.raises(EpochError, match="starts at 5"):
        c.append(6, 5)


def test_truncate_suffix_drops_epochs_starting_at_or_after_the_cut():
    c = cache((1, 0), (2, 100), (3, 150))
    assert c.truncate_suffix(150) == cache((1, 0), (2, 100))
    assert c.truncate_suffix(151) == c
    assert c.truncate_suffix(100) == cache((1, 0))
    assert c.truncate_suffix(0) == EpochCache()


def test_truncate_prefix_drops_epochs_wholly_below_the_min_offset():
    c = cache((1, 0), (2, 100), (3, 100), (4, 150))
    assert c.truncate_prefix(99) == c
    assert c.truncate_prefix(100) == cache((3, 100), (4, 150))
    assert c.truncate_prefix(120) == cache((3, 100), (4, 150))
    assert c.truncate_prefix(150) == cache((4, 150))
    assert c.truncate_prefix(10**6) == cache((4, 150))  # the open epoch stays


# -- the truncation algorithm ---------------------------------------------------


def point(local: EpochCache, local_max: int, master: EpochCache, master_max: int) -> int | None:
    return find_consistent_point(local.entries(local_max), master.entries(master_max))


@pytest.mark.parametrize(
    ("name", "local", "local_max", "master", "master_max", "expected"),
    [
        ("same history, slave behind", [(1, 0), (2, 100)], 120, [(1, 0), (2, 100)], 300, 120),
        ("same history, equal", [(1, 0)], 80, [(1, 0)], 80, 80),
        # KIP-101: the slave holds unacked data of an old master; the new
        # master's term began before that data.
        ("unacked tail of old master", [(1, 0)], 150, [(1, 0), (2, 100)], 200, 100),
        # KIP-279: fast successive master changes; the slave's epoch 2 was a
        # short term whose writes nobody else has.
        ("lost short term", [(1, 0), (2, 100)], 120, [(1, 0), (3, 100)], 180, 100),
        (
            "two lost terms in a row",
            [(1, 0), (2, 100), (3, 110)],
            130,
            [(1, 0), (4, 100), (5, 140)],
            200,
            100,
        ),
        (
            "slave several epochs behind",
            [(1, 0)],
            50,
            [(1, 0), (2, 100), (3, 200), (4, 300)],
            400,
            50,
        ),
        (
            "stale master rejoining as slave",
            [(1, 0), (2, 100), (4, 300)],
            380,
            [(1, 0), (2, 100), (3, 250), (5, 260)],
            500,
            250,
        ),
        (
            "slave's empty newest epoch",
            [(1, 0), (2, 100)],
            100,
            [(1, 0), (2, 100), (3, 150)],
            200,
            100,
        ),
        ("same epoch, different start", [(1, 0), (2, 90)], 150, [(1, 0), (2, 100)], 200, 90),
        ("nothing shared", [(1, 0)], 50, [(2, 0)], 80, None),
        ("empty local", [], 0, [(1, 0)], 10, None),
    ],
)
def test_consistent_point(name, local, local_max, master, master_max, expected):
    assert point(cache(*local), local_max, cache(*master), master_max) == expected, name


def test_consistent_point_needs_closed_ends():
    with pytest.raises(ValueError, match="closed"):
        find_consistent_point(cache((1, 0)).entries(), cache((1, 0)).entries(5))


@st.composite
def histories(draw):
    """A master history and a slave that followed it for a while, then diverged."""
    epochs = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=6)))
    sizes = draw(st.lists(st.integers(0, 50), min_size=len(epochs), max_size=len(epochs)))
    starts, offset = [], 0
    for epoch, size in zip(epochs, sizes, strict=True):
        starts.append((epoch, offset))
        offset += size
    master, master_max = cache(*starts), offset
    # The slave copied a prefix of the master's log ...
    copied = draw(st.integers(0, master_max))
    local = master.truncate_suffix(copied + 1) if copied else master.truncate_suffix(1)
    local_max = copied
    # ... then was master itself for a few private epochs the master never saw.
    shared = copied
    last = local.last_epoch or 0
    for _ in range(draw(st.integers(0, 3))):
        last += draw(st.integers(1, 3))
        if master.find(last) is not None:
            break
        local = local.append(last, local_max)
        local_max += draw(st.integers(0, 30))
    return local, local_max, master, master_max, shared


@given(histories())
def test_consistent_point_is_the_shared_prefix(history):
    local, local_max, master, master_max, shared = history
    cp = point(local, local_max, master, master_max)
    if len(local) == 0:
        assert cp is None
    else:
        assert cp == shared
