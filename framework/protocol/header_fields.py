"""A remoting command's header (``extFields``) read field by field, as RocketMQ's
Java decoders read it (pure).

Every value in ``extFields`` is a string. ``HeaderFields`` reads one as text,
an integer (Java's ``Long.parseLong``: an optional sign and ASCII digits,
nothing else, within the field's bounds), a boolean (``"true"`` or
``"false"``) or a set of broker ids (``"1;2;3"``), and names the request and
the field in what it raises: ``error`` (by default ``HeaderFieldError``),
made from the message, so that each role raises its own error type and
answers its own response code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from triomq.errors import TriomqError

__all__ = ["INT32", "INT64", "NON_NEGATIVE", "HeaderFieldError", "HeaderFields",
           "java_integer"]

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
NON_NEGATIVE = (0, INT64[1])


class HeaderFieldError(TriomqError, ValueError):
    """A header field is missing or malformed; the message names the request and field."""


def java_integer(raw: str) -> int | None:
    """``raw`` as Java's ``parseLong`` reads it (an optional sign, then ASCII
    digits: no spaces, no underscores, at most 19 digits); None if it does not."""
    digits = raw[1:] if raw[:1] in ("-", "+") else raw
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        return None
    return int(raw)


class HeaderFields:
    """Typed reads of ``fields``; ``where`` (e.g. the request's name) starts each error's
    message, and ``error`` makes the exception raised from the message."""

    __slots__ = ("error", "fields", "where")

    def __init__(self, fields: Mapping[str, str], where: str = "", *,
                 error: Callable[[str], Exception] = HeaderFieldError) -> None:
        self.fields = fields
        self.where = where
        self.error = error

    def fail(self, key: str, message: str) -> Exception:
        """The error for field ``key`` (to raise)."""
        prefix = f"{self.where}: " if self.where else ""
        return self.error(f"{prefix}header field {key!r}: {message}")

    def string(self, key: str) -> str:
        """A required, non-empty string."""
        value = self.fields.get(key, "")
        if not value:
            raise self.fail(key, "missing")
        return value

    def integer(self, key: str, bounds: tuple[int, int] = NON_NEGATIVE) -> int:
        """A required integer within ``bounds`` (by default non-negative)."""
        value = self.optional_integer(key, bounds)
        if value is None:
            raise self.fail(key, "missing")
        return value

    def optional_integer(self, key: str, bounds: tuple[int, int] = NON_NEGATIVE) -> int | None:
        """An integer within ``bounds``, or None when absent or empty."""
        raw = self.fields.get(key, "")
        if raw == "":
            return None
        value = java_integer(raw)
        if value is None or (value < 0 <= bounds[0]):
            kind = "a non-negative integer" if bounds[0] >= 0 else "an integer"
            raise self.fail(key, f"expected {kind}, got {raw[:40]!r}")
        if not bounds[0] <= value <= bounds[1]:
            raise self.fail(key, f"{value} is out of range [{bounds[0]}, {bounds[1]}]")
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        """``"true"`` or ``"false"`` (``default`` when absent or empty)."""
        raw = self.fields.get(key, "")
        if raw == "":
            return default
        if raw not in ("true", "false"):
            raise self.fail(key, f"expected 'true' or 'false', got {raw[:40]!r}")
        return raw == "true"

    def id_set(self, key: str) -> frozenset[int] | None:
        """Broker ids joined by ``;``, or None when absent or empty."""
        raw = self.fields.get(key, "")
        if raw == "":
            return None
        ids = []
        for part in raw.split(";"):
            if not part.isascii() or not part.isdigit() or len(part) > 18:
                raise self.fail(key, f"expected broker ids joined by ';', got {raw[:40]!r}")
            ids.append(int(part))
        return frozenset(ids)
