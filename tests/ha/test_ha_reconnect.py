"""A slave's reconnect backoff."""

from __future__ import annotations

import pytest

from triomq.ha.core.reconnect import Reconnect


def test_failed_tries_double_the_wait_up_to_the_maximum():
    reconnect = Reconnect(100, 500)
    assert [reconnect.delay_after(handshook=False) for _ in range(5)] == [100, 200, 400, 500, 500]


def test_a_completed_handshake_starts_over():
    reconnect = Reconnect(100, 5000)
    reconnect.delay_after(handshook=False)
    reconnect.delay_after(handshook=False)
    assert reconnect.delay_after(handshook=True) == 100
    assert reconnect.delay_after(handshook=False) == 200


def test_a_master_that_announces_itself_is_tried_now_and_the_doubling_starts_over():
    reconnect = Reconnect(100, 5000)
    for _ in range(8):
        reconnect.delay_after(handshook=False)
    reconnect.announced()
    assert reconnect.delay_after(handshook=False) == 100


def test_the_bounds_must_make_sense():
    with pytest.raises(ValueError):
        Reconnect(0, 10)
    with pytest.raises(ValueError):
        Reconnect(20, 10)
