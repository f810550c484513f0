"""Fixtures of the controller-service tests: an embedded controller-mode cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from controller_service_helpers import controller_plugins

from triomq.testing.cluster import Cluster, open_cluster

#: Fast timers so that failovers take a fraction of a second; a put waits the default
#: 5 s for its acks (2 s ran out during a busy host's stalls).
CONTROLLER = {"raft": {"tick_interval_ms": 20, "fsync": False}}
BROKER = {"ha_send_heartbeat_interval": 50, "flush_policy": "none",
          "all_ack_in_sync_state_set": True}
STORE = {"options": {"segment_size": 65536}}


@pytest.fixture
def make_cluster(tmp_path: Path) -> Callable[..., AbstractAsyncContextManager[Cluster]]:
    """``async with make_cluster(transport=..., brokers=..., controller={...}) as cluster``."""

    @asynccontextmanager
    async def make(*, transport: str = "inproc", brokers: int = 3,
                   controller: dict[str, Any] | None = None,
                   broker: dict[str, Any] | None = None) -> AsyncIterator[Cluster]:
        async with open_cluster(tmp_path, transport=transport, brokers=brokers,
                                plugins=controller_plugins(),
                                controller={**CONTROLLER, **(controller or {})},
                                broker={**BROKER, **(broker or {})}, store=STORE) as cluster:
            yield cluster

    return make
