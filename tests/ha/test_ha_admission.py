"""The HA port's admission (``triomq.ha.core.admission``): handshake-less connections give
way, one connection per slave, replicas of the group always get in."""

from __future__ import annotations

import pytest

from triomq.ha.core.admission import Admitted, HAAdmission, RefuseHandshake


def test_a_newcomer_takes_the_slot_of_the_oldest_connection_without_a_handshake():
    admission = HAAdmission(max_connections=3)
    assert [admission.opened(key) for key in ("a", "b", "c")] == [Admitted()] * 3
    assert admission.opened("d") == Admitted(("a",))
    assert admission.opened("e") == Admitted(("b",))
    assert (admission.held, admission.handshaking) == (3, 3)
    # The slot given up is gone: its close later changes nothing.
    admission.closed("a")
    assert admission.held == 3


def test_a_flood_without_handshakes_never_keeps_a_slave_from_its_handshake():
    admission = HAAdmission(max_connections=4)
    admission.opened("slave")
    for flood in range(3):  # fewer newcomers than slots before its handshake arrives
        admission.opened(flood)
    assert admission.handshaking == 4
    assert admission.handshaken("slave", 1) == Admitted()
    for flood in range(3, 1000):
        closed = admission.opened(flood).close
        assert "slave" not in closed
    assert admission.held == 4


def test_a_second_connection_of_a_slave_replaces_the_first():
    admission = HAAdmission(max_connections=8)
    admission.opened("first")
    assert admission.handshaken("first", 1) == Admitted()
    admission.opened("second")
    assert admission.handshaken("second", 1) == Admitted(("first",))
    # The first's end does not drop the second's slave.
    admission.closed("first")
    admission.opened("third")
    assert admission.handshaken("third", 1) == Admitted(("second",))
    assert admission.held == 1


def test_unknown_slaves_leave_a_slot_for_handshakes_and_known_ones_always_get_in():
    admission = HAAdmission(max_connections=3)
    admission.remember({0, 1, 2})
    for key, made_up in (("x", 7), ("y", 8)):
        admission.opened(key)
        assert admission.handshaken(key, made_up) == Admitted()
    admission.opened("z")
    refused = admission.handshaken("z", 9)
    assert isinstance(refused, RefuseHandshake)
    assert "broker 9 is no known replica" in refused.reason
    # A known replica takes the oldest unknown slave's slot...
    admission.opened("s1-conn")
    assert admission.handshaken("s1-conn", 1) == Admitted(("x",))
    admission.opened("s2-conn")
    assert admission.handshaken("s2-conn", 2) == Admitted(("y",))
    # ...and when only known ones are left, it is admitted over the cap.
    admission.opened("m-conn")
    assert admission.handshaken("m-conn", 0) == Admitted()
    assert admission.held == 3
    admission.opened("late")
    assert isinstance(admission.handshaken("late", 10), RefuseHandshake)


def test_a_handshake_needs_an_open_connection():
    admission = HAAdmission(max_connections=2)
    with pytest.raises(ValueError, match="not waiting for a handshake"):
        admission.handshaken("nobody", 1)
    with pytest.raises(ValueError, match=">= 2"):
        HAAdmission(max_connections=1)
