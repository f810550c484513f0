"""triomq: an embeddable trio framework for replicated message logs.

The embedding API, kept small::

    import framework

    config = framework.NodeConfig(name="n1", role="standalone")
    async with framework.open_node(config) as node:
        stream = await node.connect("inproc://n2")

- ``open_node`` / ``Node``: run a node's services in the host's trio program.
- ``NodeConfig`` and ``load_toml``: configuration built in code or from TOML.
- ``PluginManager`` and ``hookimpl``: discover plugins, register your own.
"""

from framework.config import NodeConfig, load_toml
from framework.errors import ConfigError, PluginError, ServiceCrashed, TriomqError
from framework.hookspecs import hookimpl
from framework.plugins import PluginManager
from framework.runtime import Node, open_node

__all__ = [
    "ConfigError",
    "Node",
    "NodeConfig",
    "PluginError",
    "PluginManager",
    "ServiceCrashed",
    "TriomqError",
    "hookimpl",
    "load_toml",
    "open_node",
]
