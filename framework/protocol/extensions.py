"""The optional C extensions of ``triomq.protocol``, loaded one way.

Each is built by ``pip install`` when a C compiler is there; without one,
or with ``TRIOMQ_NO_SPEEDUPS=1`` in the environment, callers run their
pure-Python versions, which give the same results. ``_speedups`` folds
CRC-32 with 512-bit carry-less multiplications where the CPU has them
(VPCLMULQDQ, AVX-512), else 128 bits at a time; ``TRIOMQ_NO_VPCLMULQDQ=1``
keeps it to the latter (same results).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def optional_extension(name: str) -> ModuleType | None:
    """``triomq.protocol.<name>`` if it is built and not disabled, else None."""
    if os.environ.get("TRIOMQ_NO_SPEEDUPS"):
        return None
    try:
        return importlib.import_module(f"triomq.protocol.{name}")
    except ImportError:
        return None
