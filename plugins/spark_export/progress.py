"""Progress of ``triomq export parquet``: messages and bytes done, rate, time left.

On a terminal a rich progress bar shows it (``terminal_bar``). Elsewhere (a
log file, a pipe, a scheduler's capture) ``ProgressLines`` gives a plain
line at most every ``interval`` seconds; it is told the time (``now``) with
every update instead of reading a clock, so an export shorter than the
interval prints none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import attrs

#: ``progress(done_bytes, total_bytes, messages)``, called as batches are read.
Progress = Callable[[int, int, int], None]

#: Seconds between two plain progress lines.
LINE_INTERVAL = 10.0


def size_text(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps it at or above 1."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def duration_text(seconds: float) -> str:
    """``h:mm:ss``."""
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@attrs.define
class ProgressLines:
    """Plain progress lines, one per ``interval`` seconds at most."""

    interval: float = LINE_INTERVAL
    _start: float | None = None
    _last: float = 0.0

    def update(self, now: float, done: int, total: int, messages: int) -> str | None:
        """The line to print at ``now``, or None when the last was too recent."""
        if self._start is None:
            self._start = self._last = now
            return None
        if now - self._last < self.interval:
            return None
        self._last = now
        elapsed = now - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        share = f" ({100 * done // total}%)" if total else ""
        left = duration_text((total - done) / rate) if rate > 0 else "unknown"
        return (f"exporting: {messages:,} messages, {size_text(done)} of {size_text(total)}"
                f"{share}, {size_text(rate)}/s, {left} left")


@contextlib.contextmanager
def terminal_bar(console) -> Iterator[Progress]:
    """A rich progress bar on ``console``: messages, bytes, rate and time left."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = ("[progress.description]{task.description}", BarColumn(),
               TextColumn("{task.fields[messages]:,} messages"), DownloadColumn(binary_units=True),
               TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("exporting", total=None, messages=0)

        def update(done: int, total: int, messages: int) -> None:
            bar.update(task, completed=done, total=total, messages=messages)

        yield update
