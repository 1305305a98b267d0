"""Every file-system operation the library performs goes through here.

One narrow seam makes crash and fault testing honest: a test can swap :data:`ops` for an object
that records each write/fsync/rename (to build power-loss states) or fails the Nth one (to inject
ENOSPC/EIO), without monkeypatching the standard library.

Nothing here follows a symbolic link inside the queue directory: every open adds
``O_NOFOLLOW``, and a link met there raises :class:`~journaled.errors.UnsafeDirectory` before a
byte is read or written (the directory itself may be a link: the user chose that path).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from journaled.errors import UnsafeDirectory

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_COPY_CHUNK = 1 << 20


def refused_link(path: str) -> UnsafeDirectory:
    """The error for a symbolic link met where journaled opens a file of its own."""
    return UnsafeDirectory(
        errno.ELOOP,
        "is a symbolic link; journaled never opens files in a queue directory through a link "
        "(remove it, or put the real file there)",
        path,
    )


def open_nofollow(path: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` with ``O_NOFOLLOW``/``O_CLOEXEC``; a link at ``path`` raises
    :class:`UnsafeDirectory` and nothing is opened."""
    try:
        return os.open(path, flags | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise refused_link(path) from None
        raise


class NotRegularFile(OSError):
    """A FIFO, a device or a socket where journaled reads a file of its own (a checkpoint, the
    registry, the settings file, a bookmark): never read (a FIFO would block the queue); each
    caller skips it as it skips a damaged file (a directory there stays ``IsADirectoryError``)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "is not a regular file (a FIFO, a device or a socket)", path)


def read_nofollow(path: str, size: int = -1) -> bytes:
    """Up to ``size`` bytes (``-1``: all) of the file at ``path``, a link refused
    (:class:`UnsafeDirectory`), a directory (``IsADirectoryError``) and anything else that is
    not a regular file too (:class:`NotRegularFile`), without blocking: it is opened
    ``O_NONBLOCK`` and checked with ``fstat`` before any read.
    The descriptor is closed whatever happens."""
    fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):  # refused as before: nothing could ever replace it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        return f.read(size)


class FileOps:
    """Pass-through implementation over :mod:`os`.  Subclass to record or inject faults."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return open_nofollow(path, flags, mode)

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

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        os.mkdir(path, mode)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_file(self, path: str) -> bytes:
        return read_nofollow(path)


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


def create_temp(tmp: str, mode: int = 0o600) -> int:
    """Create the temp file ``tmp`` afresh (``O_CREAT | O_EXCL | O_NOFOLLOW``) for writing.

    Temp names start with a dot, which no queue, reader or bookmark name can, so a regular file
    already there is one a crash left behind: its *name* is removed first, never written through
    (it could be a hard link to someone else's bytes).  A symbolic link there was planted: it is
    refused with :class:`UnsafeDirectory` and left alone.
    """
    try:
        st = os.lstat(tmp)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode):
            raise refused_link(tmp)
        ops.unlink(tmp)
    return ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    temp file in the same directory (named with a leading dot, which no valid queue or reader
    name can produce; see :func:`create_temp`), write, fsync, rename over (a link at ``path``
    is replaced, never followed), fsync the directory.
    """
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, f".{base}.tmp")
    fd = create_temp(tmp, mode)
    try:
        ops.write(fd, data)
        ops.fsync(fd)
    finally:
        ops.close(fd)
    ops.rename(tmp, path)
    ops.fsync_dir(directory or ".")


def make_dirs(path: str, mode: int = 0o700) -> bool:
    """Create directory ``path`` and any missing parents, each fsynced into its parent, so that
    after this returns a power cut cannot lose it.  ``path`` gets ``mode``, new parents ``0o777``
    (both less the umask, as ``os.makedirs``).  Return whether ``path`` was created."""
    if os.path.isdir(path):
        return False
    parent = os.path.dirname(os.path.abspath(path))
    if parent != os.path.abspath(path):
        make_dirs(parent, 0o777)
    try:
        ops.mkdir(path, mode)
    except FileExistsError:
        if os.path.isdir(path):
            return False  # another process made it first
        # "File exists" would not say what is wrong: a file (or a dangling link) is in the way
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (a file is in the way)", path) from None
    ops.fsync_dir(parent)
    return True


def copy_file(src: str, dst: str) -> None:
    """Durably place a byte-for-byte copy of ``src`` (same permission bits) at ``dst``; ``src``
    must be a regular file (:class:`NotRegularFile` otherwise, before anything is written).

    Through a temp file next to ``dst`` (:func:`create_temp`): write, fsync, rename over, fsync
    the directory.  A crash leaves ``dst`` absent or whole, never partial.
    """
    directory, base = os.path.split(dst)
    tmp = os.path.join(directory, f".{base}.tmp")
    src_fd = ops.open(src, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    try:
        src_mode = os.fstat(src_fd).st_mode
        if not stat.S_ISREG(src_mode):
            raise NotRegularFile(src)
        fd = create_temp(tmp, stat.S_IMODE(src_mode))
        try:
            offset = 0
            while chunk := ops.pread(src_fd, _COPY_CHUNK, offset):
                ops.write(fd, chunk)
                offset += len(chunk)
            ops.fsync(fd)
        except BaseException:
            ops.close(fd)
            with contextlib.suppress(OSError):
                ops.unlink(tmp)
            raise
        ops.close(fd)
    finally:
        ops.close(src_fd)
    ops.rename(tmp, dst)
    ops.fsync_dir(directory or ".")


def move_into(src: str, directory: str) -> str:
    """Move file ``src`` into ``directory`` under the same name; return the new path.

    A rename when both are on one file system (the caller fsyncs both directories).  Across
    file systems (``EXDEV``) the file is copied durably (:func:`copy_file`) and only then
    unlinked, so a failure at any point leaves ``src`` in place.
    """
    dst = os.path.join(directory, os.path.basename(src))
    try:
        ops.rename(src, dst)
        return dst
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    copy_file(src, dst)
    ops.unlink(src)
    return dst
