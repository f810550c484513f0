"""Fixtures of the broker tests."""

from __future__ import annotations

import pytest
from broker_nodes import Cluster
from trio.testing import MockClock


@pytest.fixture(params=["inproc", "tcp"])
def cluster(request, tmp_path) -> Cluster:
    """Broker nodes over the in-process transport, then over TCP."""
    return Cluster(request.param, tmp_path)


@pytest.fixture(params=["inproc", "tcp"])
def kind(request) -> str:
    """The in-process transport, then TCP (for tests that build their own ``Cluster``)."""
    return request.param


@pytest.fixture
def clock(kind: str) -> MockClock:
    """Mock time that jumps ahead when every task waits, over TCP too: a jump while a
    frame crosses the loopback (or a config file is written in a thread) moves time
    on to the broker's next timer; the secondary-message tests measure times by the
    broker's store times, which such a jump cannot put early or late."""
    return MockClock(autojump_threshold=0)
