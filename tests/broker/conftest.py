"""Fixtures of the broker tests."""

from __future__ import annotations

import pytest
from broker_nodes import Cluster


@pytest.fixture(params=["inproc", "tcp"])
def cluster(request, tmp_path) -> Cluster:
    """Broker nodes over the in-process transport, then over TCP."""
    return Cluster(request.param, tmp_path)
