"""Fixtures for the controller's pure-core tests."""

from __future__ import annotations

import pytest
from controller_helpers import Harness


@pytest.fixture
def h() -> Harness:
    """A fresh replicas-info manager with a hand-set live-info table."""
    return Harness()
