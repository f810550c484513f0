"""The exception types shared across the kernel.

Each names what went wrong and where, so a user can act on it.
"""

from __future__ import annotations


class TriomqError(Exception):
    """Base of every error triomq raises on purpose."""


class ConfigError(TriomqError, ValueError):
    """A configuration value is unknown or invalid; ``path`` is the key path."""

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class PluginError(TriomqError, LookupError):
    """No plugin provides what was asked for, or a plugin failed to load."""


class ServiceCrashed(TriomqError):
    """A node service raised; the node was stopped. ``service`` names it."""

    def __init__(self, service: str, cause: BaseException) -> None:
        self.service = service
        super().__init__(f"service {service!r} crashed: {type(cause).__name__}: {cause}")
        self.__cause__ = cause
