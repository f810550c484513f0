"""Fixtures of the client tests."""

from __future__ import annotations

import pytest
from trio.testing import MockClock


@pytest.fixture(params=["inproc", "tcp"])
def transport(request) -> str:
    """The in-process transport, then TCP."""
    return request.param


@pytest.fixture
def clock(transport: str) -> MockClock | None:
    """Mock time that jumps ahead when every task waits, over the in-process transport;
    real time over TCP, whose sockets do not wait on a mock clock."""
    return MockClock(autojump_threshold=0) if transport == "inproc" else None


@pytest.fixture
def autojump(transport: str) -> MockClock:
    """Mock time that jumps ahead when every task waits, over TCP too: a jump while a
    frame crosses the loopback (or a file is written in a thread) moves time on to the
    next timer; the secondary-message tests measure times by the broker's store times,
    which such a jump cannot put early or late."""
    return MockClock(autojump_threshold=0)
