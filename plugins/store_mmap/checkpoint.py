"""The triomq checkpoint of an mmap commit log (``triomq_checkpoint.json``).

RocketMQ keeps its own binary ``checkpoint`` and an ``abort`` marker in the
store root; triomq leaves those alone and keeps this JSON file instead:

- ``clean``: the store was closed cleanly and ``max_offset`` is exact, so
  opening it scans nothing.
- ``recover_from``: a record boundary below which every record (and its
  consume-queue entry) is durable; an abnormal restart scans from here.

The file is replaced atomically (write, fsync, rename, fsync directory).
"""

from __future__ import annotations

import json
import os

import attrs

from triomq.durable_files import replace_atomically
from triomq.plugins.store_mmap.segments import read_json
from triomq.store import StoreCorruption

CHECKPOINT_FILE = "triomq_checkpoint.json"


@attrs.frozen
class Checkpoint:
    """The checkpoint's content."""

    clean: bool = False
    max_offset: int = 0
    dispatched: int = 0
    recover_from: int = 0

    @classmethod
    def load(cls, root: str) -> Checkpoint | None:
        """The checkpoint of the store at ``root``, ``None`` if there is none."""
        path = os.path.join(root, CHECKPOINT_FILE)
        doc = read_json(path)
        if doc is None:
            return None
        try:
            return cls(
                clean=bool(doc["clean"]),
                max_offset=int(doc["max_offset"]),
                dispatched=int(doc["dispatched"]),
                recover_from=int(doc["recover_from"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruption(path, 0, f"bad checkpoint field: {exc!r}") from None

    def save(self, root: str) -> None:
        """Replace the checkpoint of the store at ``root`` with this one, durably."""
        doc = attrs.asdict(self)
        replace_atomically(os.path.join(root, CHECKPOINT_FILE), json.dumps(doc).encode())
