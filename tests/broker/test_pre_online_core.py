"""A returning master's pre-online without an event loop: what it waits for, what it
takes back and when it registers."""

from __future__ import annotations

from triomq.broker.registration.core.pre_online import (
    RETRY_MS,
    Adopt,
    AnnounceHa,
    AskMembers,
    AwaitSlaves,
    Fetch,
    GoOnline,
    PreOnline,
)
from triomq.protocol.route import DataVersion

OWN = "tcp://10.0.0.1:10911"
# The slaves by address; HA names them by broker id (1 and 2).
S1, S2 = "tcp://10.0.0.2:10911", "tcp://10.0.0.3:10911"
OLD, NEW, NEWER = DataVersion(0, 5, 1), DataVersion(0, 9, 2), DataVersion(0, 12, 3)


def flow() -> PreOnline:
    f = PreOnline(own=OWN, versions={"consumer offsets": NEW, "delay offsets": OLD},
                  wait_ms=10_000)
    assert f.start(0) == [AskMembers(0)]
    return f


def test_it_takes_each_kind_from_the_slave_with_the_newest_then_registers() -> None:
    f = flow()
    slaves = frozenset({S1, S2})
    # It tells the slaves it is back before it waits for them.
    assert f.members({0: OWN, 1: S1, 2: S2}, 10) == [AnnounceHa(slaves),
                                                     AwaitSlaves(slaves, 10_000)]
    assert f.transferring(frozenset({1}), 20) == []  # S2 not back yet
    assert f.transferring(frozenset({1, 2}), 30) == [Fetch(S1), Fetch(S2)]
    assert f.fetched(S1, {"consumer offsets": NEWER, "delay offsets": OLD}, 40) == []
    actions = f.fetched(S2, {"consumer offsets": NEW, "delay offsets": NEW}, 50)
    assert actions[:2] == [Adopt("consumer offsets", S1), Adopt("delay offsets", S2)]
    assert isinstance(actions[2], GoOnline) and f.online


def test_nothing_newer_nothing_taken() -> None:
    f = flow()
    f.members({1: S1}, 0)
    assert f.transferring(frozenset({1}), 1) == [Fetch(S1)]
    (online,) = f.fetched(S1, {"consumer offsets": NEW, "delay offsets": OLD}, 2)
    assert isinstance(online, GoOnline)


def test_it_never_stays_isolated() -> None:
    # No slave alive: at once.
    f = flow()
    (online,) = f.members({0: OWN}, 0)
    assert isinstance(online, GoOnline) and "no slave" in online.why
    # No name server answers: it asks again until its deadline, then registers anyway.
    f = flow()
    assert f.members(None, 100) == [AskMembers(100 + RETRY_MS)]
    assert isinstance(f.members(None, 10_000)[0], GoOnline)
    # A slave that does not come back in time is left out; none back: online without.
    f = flow()
    f.members({1: S1, 2: S2}, 0)
    assert f.transferring(frozenset({2}), 10_000) == [Fetch(S2)]
    f = flow()
    f.members({1: S1}, 0)
    assert isinstance(f.transferring(frozenset(), 10_000)[0], GoOnline)
    # A slave that does not answer counts as having nothing newer.
    f = flow()
    f.members({1: S1}, 0)
    f.transferring(frozenset({1}), 1)
    (online,) = f.fetched(S1, None, 2)
    assert isinstance(online, GoOnline)
