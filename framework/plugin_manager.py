"""The plugin manager: discovery by entry point, explicit registration, look-ups.

Plugins are found through the entry-point group ``triomq`` (in-tree and
third-party alike). A host may register plugin objects itself and disable
discovered ones by entry-point name::

    pm = PluginManager.discover(disable={"transport_tcp"})
    pm.register(my_plugin, name="my_plugin")
    transport = pm.transport("inproc")

The provider look-ups (``transport``, ``log_store``, ``election_policy``,
``escape_bridge``) raise ``PluginError`` naming what is available when
nothing provides the name asked for. ``config_sections`` and ``roles`` are
what the role plugins add to the node's configuration (``triomq.config``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import pluggy

from triomq import hookspecs
from triomq.errors import PluginError
from triomq.transport import Transport

ENTRY_POINT_GROUP = "triomq"


@attrs.frozen
class PluginInfo:
    """One registered plugin, as ``triomq plugins`` shows it."""

    name: str
    module: str
    hooks: tuple[str, ...]
    distribution: str | None


class PluginManager:
    """A pluggy manager for the ``triomq`` hooks plus typed look-ups."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._distributions: dict[str, str] = {}

    @classmethod
    def discover(cls, disable: Iterable[str] = ()) -> PluginManager:
        """A manager holding every plugin found by entry point, less ``disable``."""
        pm = cls()
        pm.load_entry_points(disable=disable)
        return pm

    @property
    def hook(self) -> Any:
        """The pluggy hook relay: ``pm.hook.triomq_node_started(node=...)``."""
        return self._pm.hook

    def load_entry_points(self, disable: Iterable[str] = ()) -> None:
        """Register every entry point of group ``triomq`` not named in ``disable``.

        A plugin that fails to import raises PluginError naming the entry point
        and its distribution: a broken plugin is a deployment error, not
        something to skip silently.
        """
        disabled = set(disable)
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in disabled or self._pm.has_plugin(ep.name):
                continue
            dist = ep.dist.name if ep.dist is not None else None
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin {ep.name!r} ({ep.value}, from {dist or 'unknown distribution'}) "
                    f"failed to load: {type(exc).__name__}: {exc}"
                ) from exc
            self._pm.register(plugin, name=ep.name)
            if dist is not None:
                self._distributions[ep.name] = dist

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object (module, class instance) and return its name."""
        registered = self._pm.register(plugin, name=name)
        if registered is None:
            raise PluginError(f"plugin {name or plugin!r} is blocked or already registered")
        return registered

    def unregister(self, name: str) -> None:
        """Remove the plugin registered under ``name``; unknown names are an error."""
        if self._pm.unregister(name=name) is None:
            raise PluginError(f"no plugin named {name!r}; registered: {self._names()}")

    def _names(self) -> str:
        return ", ".join(sorted(n for n, _ in self._pm.list_name_plugin())) or "none"

    def plugins(self) -> list[PluginInfo]:
        """Every registered plugin with the hooks it implements, sorted by name."""
        infos = []
        for name, plugin in self._pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = tuple(sorted(c.name for c in self._pm.get_hookcallers(plugin) or ()))
            module = getattr(plugin, "__name__", None) or type(plugin).__module__
            infos.append(PluginInfo(name, module, hooks, self._distributions.get(name)))
        return sorted(infos, key=lambda i: i.name)

    # ------------------------------------------------------------------
    # Provider look-ups.

    def _providers(self, hook_name: str) -> dict[Any, Any]:
        # pluggy calls the last registered implementation first; keeping the
        # first value seen makes the last registration win.
        merged: dict[Any, Any] = {}
        for provided in getattr(self._pm.hook, hook_name)():
            for key, value in (provided or {}).items():
                merged.setdefault(key, value)
        return merged

    def _lookup(self, hook_name: str, what: str, key: Any) -> Any:
        providers = self._providers(hook_name)
        try:
            return providers[key]
        except KeyError:
            available = ", ".join(sorted(map(_show_key, providers))) or "none"
            raise PluginError(
                f"no plugin provides {what} {_show_key(key)!r}; available: {available}"
            ) from None

    def transport_schemes(self) -> list[str]:
        """The address schemes some plugin provides a transport for."""
        return sorted(self._providers("triomq_transport"))

    def transport(self, scheme: str, options: Mapping[str, Any] | None = None) -> Transport:
        """Build the transport for ``scheme`` with ``options``."""
        factory = self._lookup("triomq_transport", "transport scheme", scheme)
        return factory(dict(options or {}))

    def store_kinds(self) -> list[tuple[str, str]]:
        """Every ``(kind, scheme)`` some plugin provides a store for."""
        return sorted(self._providers("triomq_log_store"))

    def log_store(self, kind: str, scheme: str) -> Callable[..., Any]:
        """The factory ``(directory, options) -> store`` for ``kind`` and ``scheme``."""
        return self._lookup("triomq_log_store", "log store", (kind, scheme))

    def election_policy(self, name: str) -> Callable[..., Any]:
        """The election policy registered as ``name``."""
        return self._lookup("triomq_election_policy", "election policy", name)

    def escape_bridge(self, name: str) -> Callable[..., Any]:
        """The escape bridge factory registered as ``name``."""
        return self._lookup("triomq_escape_bridge", "escape bridge", name)

    # ------------------------------------------------------------------
    # What the role plugins contribute to the node's configuration.

    def config_sections(self) -> dict[str, type]:
        """Every plugin's configuration section, by table name (``{"broker": BrokerConfig}``)."""
        return dict(sorted(self._providers("triomq_config_sections").items()))

    def roles(self) -> list[str]:
        """Every role some plugin runs (the values of the ``role`` key besides 'standalone')."""
        return sorted({role for provided in self._pm.hook.triomq_roles()
                       for role in provided or ()})


def _show_key(key: Any) -> str:
    return ":".join(key) if isinstance(key, tuple) else str(key)
