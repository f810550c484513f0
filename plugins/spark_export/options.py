"""The data source's options, parsed and checked before Spark plans any job.

Options (names are case-insensitive, as Spark's are):

- ``path``: the store root (``load(STORE_DIR)``), which holds ``commitlog/``;
  for the controller tables, a controller's data directory.
- ``paths``: what Spark passes for ``load([DIR, ...])``, a JSON array: the
  data directories of several controllers (controller tables only).
- ``table``: ``messages`` (default), ``epochs`` (the epoch history),
  ``status`` (the log's bounds, confirm offset and tail state), or a
  controller table: ``syncStateSet``, ``masterHistory``,
  ``syncStateSetHistory`` (see ``controller_tables``).
- ``topics``: comma-separated topic names to keep (default: all).
- ``startingOffset``: a physical offset, ``earliest`` (default) or ``latest``.
- ``endingOffset``: a physical offset or ``latest`` (default; batch only).
- ``committedOnly``: ``true`` stops at the group's confirm offset, so data
  not yet replicated to the SyncStateSet is never read (default ``false``).
- ``maxBytesPerPartition``: the largest byte range one Spark task reads
  (default 64 MiB); the read is cut at record boundaries into ranges of
  equal size, a range may span segments.
- ``parallelism``: how many tasks Spark runs at once (default: the
  session's ``defaultParallelism`` as ``register(spark)`` found it, else 1).
  The number of ranges is a multiple of it, so that every task slot gets
  the same work and none idles at the end while another still reads.
- ``verifyCrc``: check each body's CRC while reading (default ``true``).

A record is read when it lies wholly in ``[startingOffset, endingOffset)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from triomq.plugins.spark_export.errors import SparkExportError

STORE_TABLES = ("messages", "epochs", "status")
CONTROLLER_TABLES = ("syncStateSet", "masterHistory", "syncStateSetHistory")
TABLES = STORE_TABLES + CONTROLLER_TABLES
_TABLE_NAMES = {name.lower(): name for name in TABLES}
DEFAULT_MAX_BYTES_PER_PARTITION = 64 << 20

_NAMES = ("path", "paths", "table", "topics", "startingOffset", "endingOffset", "committedOnly",
          "maxBytesPerPartition", "parallelism", "verifyCrc")
_CANONICAL = {name.lower(): name for name in _NAMES}


@attrs.frozen
class ReadOptions:
    """Checked options; offsets are ints, or ``"earliest"`` / ``"latest"`` still to resolve."""

    path: str
    table: str = "messages"
    paths: tuple[str, ...] = ()
    topics: frozenset[str] | None = None
    starting_offset: int | str = "earliest"
    ending_offset: int | str = "latest"
    committed_only: bool = False
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    parallelism: int = 1
    verify_crc: bool = True


def parse_options(options: Mapping[str, str], *, streaming: bool = False,
                  default_parallelism: int = 1) -> ReadOptions:
    """Check ``options``; ``SparkExportError`` names the first option at fault.

    ``default_parallelism`` is ``parallelism`` when the options do not set it.
    """
    given: dict[str, str] = {}
    for key, value in options.items():
        name = _CANONICAL.get(key.lower())
        if name is None:
            raise SparkExportError(
                key, f"unknown option of the triomq data source; known: {', '.join(_NAMES)}"
            )
        given[name] = str(value)
    table = _TABLE_NAMES.get(given.get("table", "messages").lower())
    if table is None:
        raise SparkExportError(
            "table", f"unknown table {given['table']!r}; known: {', '.join(TABLES)}"
        )
    paths = _paths(given)
    if not paths:
        raise SparkExportError("path", "no store root given: use load(STORE_DIR)")
    if len(paths) > 1 and table not in CONTROLLER_TABLES:
        raise SparkExportError(
            "path", f"table {table!r} reads one store root; {len(paths)} paths given")
    if streaming and table != "messages":
        raise SparkExportError("table", f"table {table!r} cannot be read as a stream")
    if streaming and "endingOffset" in given:
        raise SparkExportError("endingOffset", "a stream has no end; use it with spark.read")
    return ReadOptions(
        path=paths[0],
        table=table,
        paths=paths,
        topics=_topics(given.get("topics")),
        starting_offset=_offset(given, "startingOffset", "earliest", ("earliest", "latest")),
        ending_offset=_offset(given, "endingOffset", "latest", ("latest",)),
        committed_only=_bool(given, "committedOnly", False),
        max_bytes_per_partition=_positive(given, "maxBytesPerPartition",
                                          DEFAULT_MAX_BYTES_PER_PARTITION),
        parallelism=_positive(given, "parallelism", default_parallelism, "a number of tasks"),
        verify_crc=_bool(given, "verifyCrc", True),
    )


def _paths(given: Mapping[str, str]) -> tuple[str, ...]:
    paths = [given["path"]] if given.get("path") else []
    raw = given.get("paths")
    if raw:
        try:
            listed = json.loads(raw)
        except ValueError:
            listed = None
        if not isinstance(listed, list) or not all(isinstance(p, str) and p for p in listed):
            raise SparkExportError("paths", f"{raw!r} is not a JSON array of paths")
        paths += listed
    return tuple(paths)


def _topics(raw: str | None) -> frozenset[str] | None:
    if raw is None:
        return None
    names = [t.strip() for t in raw.split(",")]
    if not all(names):
        raise SparkExportError("topics", f"empty topic name in {raw!r}")
    return frozenset(names)


def _offset(given: Mapping[str, str], name: str, default: str, words: tuple[str, ...]
            ) -> int | str:
    raw = given.get(name, default).strip()
    if raw.lower() in words:
        return raw.lower()
    try:
        value = int(raw)
    except ValueError:
        raise SparkExportError(
            name, f"{raw!r} is not a physical offset or one of {', '.join(words)}"
        ) from None
    if value < 0:
        raise SparkExportError(name, f"{value} is negative")
    return value


def _bool(given: Mapping[str, str], name: str, default: bool) -> bool:
    raw = given.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise SparkExportError(name, f"{raw!r} is not true or false")


def _positive(given: Mapping[str, str], name: str, default: int,
              what: str = "a number of bytes") -> int:
    raw = given.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SparkExportError(name, f"{raw!r} is not {what}") from None
    if value <= 0:
        raise SparkExportError(name, f"{value} must be positive")
    return value
