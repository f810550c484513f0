"""Test helpers for triomq: pytest fixtures, conformance suites and deterministic simulation.

The conformance suites a third-party plugin runs against itself, imported
from here on first use (they load pytest, which a node never needs)::

    from triomq.testing import TransportConformance, RpcConformance
    from triomq.testing import CommitLogSuite, EntryLogSuite, MetaStoreSuite
    from triomq.testing import EscapeBridgeConformance

The fixtures (``temporary_node``, ``inproc_network``, ``inproc_network_name``,
``triomq_plugins``) come from ``triomq.testing.pytest_plugin``, which pytest
loads by itself once triomq is installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # ``X as X``: re-exported, for type checkers
    from triomq.testing.escape_bridge_suite import (
        EscapeBridgeConformance as EscapeBridgeConformance,
    )
    from triomq.testing.rpc_suite import RpcConformance as RpcConformance
    from triomq.testing.store_suite import CommitLogSuite as CommitLogSuite
    from triomq.testing.store_suite import EntryLogSuite as EntryLogSuite
    from triomq.testing.store_suite import MetaStoreSuite as MetaStoreSuite
    from triomq.testing.transport_suite import TransportConformance as TransportConformance

_EXPORTS = {
    "CommitLogSuite": "triomq.testing.store_suite",
    "EntryLogSuite": "triomq.testing.store_suite",
    "EscapeBridgeConformance": "triomq.testing.escape_bridge_suite",
    "MetaStoreSuite": "triomq.testing.store_suite",
    "RpcConformance": "triomq.testing.rpc_suite",
    "TransportConformance": "triomq.testing.transport_suite",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'triomq.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
