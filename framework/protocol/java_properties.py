"""Configuration bodies as RocketMQ sends them: ``java.util.Properties`` text. Pure.

RocketMQ answers GET_*_CONFIG with ``name=value`` lines sorted by name
(``MixAll.properties2String``, no escaping) and reads UPDATE_*_CONFIG bodies
with ``Properties.load``, which also takes ``name: value`` and ``name
value``, ``#`` and ``!`` comments, backslash escapes (``\\t``, ``\\uXXXX``,
...) and lines continued by a trailing backslash. ``dump_properties`` writes
the first form, ``load_properties`` reads them all (as UTF-8, which is what
RocketMQ's tools send).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PropertiesError", "dump_properties", "load_properties"]


class PropertiesError(ValueError):
    """A body that is not properties text (bad UTF-8, a broken ``\\u`` escape)."""


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"
# A key ends at the first '=', ':' or blank that no backslash escapes.
_KEY_END = re.compile(r"(?<!\\)(?:\\\\)*[=:\s]")


def dump_properties(properties: Mapping[str, str]) -> bytes:
    """``name=value`` lines sorted by name, written as RocketMQ writes them."""
    return "".join(f"{name}={value}\n" for name, value in sorted(properties.items())).encode()


def _unescape(text: str) -> str:
    out = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        escaped = next(chars, "")
        if escaped == "u":
            digits = "".join(next(chars, "") for _ in range(4))
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"malformed \\uxxxx escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in re.split(r"\r\n|\r|\n", text):
        line = raw.lstrip(_BLANK)
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def load_properties(data: bytes) -> dict[str, str]:
    """The names and values of a properties body, as ``Properties.load`` reads them."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PropertiesError(f"not UTF-8 text: {exc}") from None
    properties = {}
    for line in _logical_lines(text):
        match = _KEY_END.search(line)
        key, rest = (line, "") if match is None else (line[:match.end() - 1],
                                                      line[match.end() - 1:])
        rest = rest.lstrip(_BLANK)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_BLANK)
        properties[_unescape(key)] = _unescape(rest)
    return properties
