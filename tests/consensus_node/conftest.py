"""Fixtures of the Raft driver's tests."""

from __future__ import annotations

import pytest
from trio.testing import MockClock


@pytest.fixture
def raft_clock() -> MockClock:
    """A mock clock that jumps ahead only once the run has been idle for a moment.

    The driver persists in worker threads; an instant autojump would let
    virtual time race ahead while a thread runs (an fsync "taking" seconds)
    and cause elections nobody meant.
    """
    return MockClock(autojump_threshold=0.02)
