"""Small durable-file helpers shared by stores, checkpoints and metadata files.

Blocking (fsync): trio code calls them through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import os

#: Suffix of the temporary file ``replace_atomically`` writes first.
TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``: readers and a crash see the old or the new file whole."""
    path = os.fspath(path)
    temp = path + TEMP_SUFFIX
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_directory(os.path.dirname(path) or ".")
