"""triomq's pytest plugin (entry point ``pytest11``): fixtures for tests of
triomq itself, of host applications that embed it, and of third-party plugins.

Fixtures:

- ``triomq_plugins``: a ``PluginManager`` holding every discovered plugin.
- ``inproc_network``: a fresh, isolated in-process network (from the
  ``inproc`` transport plugin) for partitions, delays and dropped links;
  ``inproc_network_name`` is its name, for ``[transport.options.inproc] network``.
- ``temporary_node``: ``async with temporary_node(name=..., role=...) as node``
  runs a node whose store root is a fresh folder under ``tmp_path``.

It also keeps the reason of a ``pytest.skip("...")`` called in a trio test:
pytest-trio (0.8) re-raises such a skip without its message.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
from _pytest.outcomes import Skipped

from triomq.config import NodeConfig, StoreConfig
from triomq.plugin_manager import PluginManager
from triomq.runtime import Node, open_node


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Re-raise the test's own skip, with its reason, in place of a bare one."""
    try:
        return (yield)
    except Skipped as bare:
        group = bare.__context__
        if bare.msg or not isinstance(group, BaseExceptionGroup):
            raise
        leaves = list(_leaves(group))
        if len(leaves) != 1 or not isinstance(leaves[0], Skipped):
            raise
        raise leaves[0] from None


def _leaves(group: BaseExceptionGroup) -> Generator[BaseException, None, None]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


@pytest.fixture
def triomq_plugins() -> PluginManager:
    """Every plugin found by entry point; tests may register more on it."""
    return PluginManager.discover()


_networks = itertools.count()


@pytest.fixture
def inproc_network_name() -> str:
    """A network name no other test uses."""
    return f"pytest-{next(_networks)}"


@pytest.fixture
def inproc_network(triomq_plugins: PluginManager, inproc_network_name: str) -> Any:
    """The isolated in-process network named ``inproc_network_name``."""
    return triomq_plugins.transport("inproc", {"network": inproc_network_name}).network


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
