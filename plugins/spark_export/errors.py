"""The errors of the Spark export plugin; each names the option or path at fault."""

from __future__ import annotations

from triomq.errors import TriomqError


class SparkExportError(TriomqError, ValueError):
    """A store, option or offset the Spark reader or the exporter cannot accept.

    ``where`` is the option name (``"startingOffset"``) or the path at fault.
    """

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        super().__init__(f"{where}: {message}")


class CorruptLogError(TriomqError):
    """A record before the end of the log is bad: ``path``, ``offset`` and ``reason``.

    A bad tail (the last records of the log) is not an error: readers stop
    before it and report it. A bad record with more log after it is.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: corrupt record at offset {offset}: {reason}")
