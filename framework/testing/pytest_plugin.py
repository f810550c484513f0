"""triomq's pytest plugin (entry point ``pytest11``): fixtures for tests of
triomq itself, of host applications that embed it, and of third-party plugins.

Fixtures:

- ``triomq_plugins``: a ``PluginManager`` holding every discovered plugin.
- ``temporary_node``: ``async with temporary_node(name=..., role=...) as node``
  runs a node whose store root is a fresh folder under ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from framework.config import NodeConfig, StoreConfig
from framework.plugins import PluginManager
from framework.runtime import Node, open_node


@pytest.fixture
def triomq_plugins() -> PluginManager:
    """Every plugin found by entry point; tests may register more on it."""
    return PluginManager.discover()


@pytest.fixture
def temporary_node(
    tmp_path: Path, triomq_plugins: PluginManager,
) -> Callable[..., AbstractAsyncContextManager[Node]]:
    """A factory of nodes that keep their data under ``tmp_path/<name>``."""

    @asynccontextmanager
    async def make(name: str = "node", config: NodeConfig | None = None,
                   **fields: Any) -> AsyncIterator[Node]:
        base = config or NodeConfig(name=name, store=StoreConfig(path=str(tmp_path / name)))
        async with open_node(attrs.evolve(base, **fields), plugins=triomq_plugins) as node:
            yield node

    return make
