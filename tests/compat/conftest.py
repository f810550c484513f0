"""Fixtures of the tests running RocketMQ's own clients against triomq.

``cluster`` is ``compat_cluster.open_compat_cluster``'s cluster. Every test using
it, or ``refused_requests``, also fails if a node in the test's process answered
a request REQUEST_CODE_NOT_SUPPORTED or closed a connection over a bad frame.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat_cluster import CompatCluster, open_compat_cluster


@pytest.fixture
def refused_requests(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Nothing the client under test sends to the nodes in this process is refused."""
    caplog.set_level(logging.DEBUG, logger="triomq.rpc")
    yield
    records = caplog.get_records("call")
    codes = {int(m[1]) for r in records
             if (m := re.search(r"request code (\d+) not supported", r.getMessage()))}
    refused = [r.getMessage() for r in records
               if r.name == "triomq.rpc" and r.levelno >= logging.WARNING]
    assert not codes and not refused, (f"request codes answered REQUEST_CODE_NOT_SUPPORTED: "
                                       f"{sorted(codes)}; connections refused: {refused}")


@pytest.fixture
async def cluster(tmp_path: Path, refused_requests: None) -> AsyncIterator[CompatCluster]:
    async with open_compat_cluster(tmp_path) as cluster:
        yield cluster
