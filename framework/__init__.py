"""triomq: an embeddable trio framework for replicated message logs.

The embedding API, kept small::

    import triomq

    config = triomq.NodeConfig(name="n1", role="standalone")
    async with triomq.open_node(config) as node:
        stream = await node.connect("inproc://n2")

- ``open_node`` / ``Node``: run a node's services in the host's trio program.
- ``NodeConfig`` and ``load_toml``: configuration built in code or from TOML.
- ``PluginManager`` and ``hookimpl``: discover plugins, register your own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for type checkers (``X as X``: re-exported)
    from triomq.config import NodeConfig as NodeConfig
    from triomq.config import load_toml as load_toml
    from triomq.errors import ConfigError as ConfigError
    from triomq.errors import PluginError as PluginError
    from triomq.errors import ServiceCrashed as ServiceCrashed
    from triomq.errors import TriomqError as TriomqError
    from triomq.hookspecs import hookimpl as hookimpl
    from triomq.plugin_manager import PluginManager as PluginManager
    from triomq.runtime import Node as Node
    from triomq.runtime import open_node as open_node

#: Each name of the embedding API and the module it comes from. They are
#: imported on first use (PEP 562), so that importing one part of the
#: framework (a protocol codec in a Spark worker, say) does not load the
#: runtime, trio and every configuration with it.
_EXPORTS = {
    "ConfigError": "triomq.errors",
    "Node": "triomq.runtime",
    "NodeConfig": "triomq.config",
    "PluginError": "triomq.errors",
    "PluginManager": "triomq.plugin_manager",
    "ServiceCrashed": "triomq.errors",
    "TriomqError": "triomq.errors",
    "hookimpl": "triomq.hookspecs",
    "load_toml": "triomq.config",
    "open_node": "triomq.runtime",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'triomq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
