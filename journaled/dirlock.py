"""Who owns a queue directory: the lock file, ``flock`` on it, and the owner's pid.

The only module that knows the lock file's name.  A directory is owned by one open queue (or
one offline repair) at a time through ``flock(LOCK_EX)`` on ``.journaled.lock``: an open file
description lock, so a second owner in the same process is refused too.  The file holds the
owner's pid for error messages and ``journaled stat``; the lock, not the pid, decides.
"""

from __future__ import annotations

import errno
import fcntl
import os

from journaled.errors import QueueLocked

LOCK_FILE = ".journaled.lock"
_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _read_pid(fd: int) -> int | None:
    try:
        pid = int(os.pread(fd, 32, 0).decode().strip() or 0)
    except (ValueError, OSError, UnicodeDecodeError):
        return None
    return pid or None


class DirLock:
    """Exclusive ownership of a queue directory (see the module docstring)."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd = fd

    @classmethod
    def acquire(cls, directory: str) -> DirLock:
        """Take the directory, or raise :class:`QueueLocked` naming the current owner's pid."""
        fd = os.open(os.path.join(directory, LOCK_FILE), _FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise QueueLocked(directory, pid) from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, fd)

    def release(self) -> None:
        """Give the directory up (closing the file releases the lock).  Idempotent."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def owner_pid(directory: str) -> int | None:
    """The pid of the process holding ``directory`` now, or ``None`` if nobody holds it."""
    try:
        fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
