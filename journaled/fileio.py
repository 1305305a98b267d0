"""Every file-system operation the library performs goes through here.

One narrow seam makes crash and fault testing honest: a test can swap :data:`ops` for an object
that records each write/fsync/rename (to build power-loss states) or fails the Nth one (to inject
ENOSPC/EIO), without monkeypatching the standard library.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class FileOps:
    """Pass-through implementation over :mod:`os`.  Subclass to record or inject faults."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        """Write all of ``data`` (looping over short writes); return the byte count."""
        view = memoryview(data)
        total = len(view)
        done = 0
        while done < total:
            done += os.write(fd, view[done:])
        return total

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()


#: The active implementation; replace through :func:`use` in tests.
ops: FileOps = FileOps()


@contextlib.contextmanager
def use(impl: FileOps) -> Iterator[FileOps]:
    """Route all library file I/O through ``impl`` for the duration of the ``with`` block."""
    global ops
    old, ops = ops, impl
    try:
        yield impl
    finally:
        ops = old


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    temp file in the same directory (named with a leading dot, which no valid queue or reader
    name can produce), write, fsync, rename over, fsync the directory.
    """
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, f".{base}.tmp")
    fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        ops.write(fd, data)
        ops.fsync(fd)
    finally:
        ops.close(fd)
    ops.rename(tmp, path)
    ops.fsync_dir(directory or ".")
