"""Strict, stable JSON for controller events and snapshots.

Events become Raft log entries and snapshots are compared byte for byte, so
the encoding is canonical (sorted keys, no spaces, ASCII) and the decoding
refuses anything it did not write: unknown or missing keys, wrong types,
negative or oversized integers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Set
from typing import Any, NoReturn

from triomq.errors import TriomqError

#: Broker ids, epochs and counters are Java ``long``/``int`` values, never negative.
MAX_INT = 2**63 - 1


def dump(obj: Mapping[str, Any]) -> bytes:
    """Encode ``obj`` canonically."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("ascii")


def load_object(data: bytes, what: str, error: type[TriomqError]) -> dict[str, Any]:
    """Decode ``data`` as one JSON object; raise ``error`` naming ``what`` otherwise."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise error(f"{what}: expected bytes, got {type(data).__name__}")
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise error(f"{what}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise error(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


class FieldReader:
    """Reads typed fields of one decoded object; errors name the object and the key."""

    def __init__(self, obj: Any, where: str, error: type[TriomqError]) -> None:
        self._error = error
        self.where = where
        if not isinstance(obj, dict):
            self.fail(f"expected an object, got {type(obj).__name__}")
        self._obj: dict[str, Any] = obj

    def fail(self, message: str) -> NoReturn:
        """Raise the reader's error about its object."""
        raise self._error(f"{self.where}: {message}")

    def expect_keys(self, keys: Set[str], optional: Set[str] = frozenset()) -> None:
        """Require exactly ``keys``, and any of ``optional``."""
        present = set(self._obj)
        missing = sorted(keys - present)
        unknown = sorted(present - keys - optional)
        if missing or unknown:
            self.fail(f"missing keys {missing}, unknown keys {unknown}")

    def raw(self, key: str) -> Any:
        """The value at ``key`` as decoded."""
        return self._obj[key]

    def optional(self, key: str) -> Any:
        """The value at ``key`` as decoded, ``None`` when absent (fastjson leaves nulls out)."""
        return self._obj.get(key)

    def string(self, key: str) -> str:
        """A string field."""
        value = self._obj[key]
        if not isinstance(value, str):
            self.fail(f"{key!r} must be a string, got {type(value).__name__}")
        return value

    def integer(self, key: str) -> int:
        """A non-negative integer field."""
        return self.check_integer(self._obj[key], key)

    def optional_integer(self, key: str) -> int | None:
        """A non-negative integer field that may be null."""
        value = self._obj[key]
        return None if value is None else self.check_integer(value, key)

    def check_integer(self, value: Any, key: str) -> int:
        """Check that ``value`` (found at ``key``) is a non-negative integer in range."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{key!r} must be an integer, got {type(value).__name__}")
        if not 0 <= value <= MAX_INT:
            self.fail(f"{key!r} out of range: {value}")
        return value

    def id_set(self, key: str) -> frozenset[int]:
        """A set of broker ids, written as a strictly increasing list."""
        value = self.list(key)
        ids = [self.check_integer(item, key) for item in value]
        if ids != sorted(set(ids)):
            self.fail(f"{key!r} must be strictly increasing, got {ids}")
        return frozenset(ids)

    def optional_id_set(self, key: str) -> frozenset[int] | None:
        """A set of broker ids, or null."""
        return None if self._obj[key] is None else self.id_set(key)

    def list(self, key: str) -> list[Any]:
        """A list field."""
        value = self._obj[key]
        if not isinstance(value, list):
            self.fail(f"{key!r} must be a list, got {type(value).__name__}")
        return value
