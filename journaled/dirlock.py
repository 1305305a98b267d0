"""Who owns a queue directory: the lock file, ``flock`` on it, and the owner's pid.

The only module that knows the lock file's name.  A directory is owned by one open queue (or
one offline repair) at a time through ``flock(LOCK_EX)`` on ``.journaled.lock``: an open file
description lock, so a second owner in the same process is refused too.  The file holds the
owner's pid for error messages and ``journaled stat``; the lock, not the pid, decides.

Also here: :func:`prepare_queue_dir`, the open-time check that the directory is the user's own.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from journaled import fileio
from journaled.errors import QueueLocked, UnsafeDirectory

LOCK_FILE = ".journaled.lock"
_FLAGS = os.O_RDWR | os.O_CREAT


def prepare_queue_dir(directory: str, allow_shared: bool = False) -> None:
    """Create ``directory`` if it is missing (mode ``0o700``, fsynced into its parent), then
    refuse it with :class:`UnsafeDirectory` if another user owns it or its mode bits let its
    group or others write to it (a sticky world-writable directory such as ``/tmp`` included),
    unless ``allow_shared``.  Whoever can write the directory can plant files the queue reads:
    journal records, checkpoints, spool batches (which ``journaled.Queue`` unpickles)."""
    fileio.make_dirs(directory, 0o700)
    st = os.stat(directory)  # follows a link: the user named this path
    if allow_shared:
        return
    how = (
        "; other users could plant files the queue reads (spool batches are unpickled by "
        "journaled.Queue).  Use a private directory, or pass QueueConfig(allow_shared_dir=True) "
        "if every user who can write to it is trusted"
    )
    if st.st_uid != os.geteuid():
        why = f"queue directory is owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"queue directory is writable by its group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    else:
        return
    raise UnsafeDirectory(errno.EPERM, why + how, directory)


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
        path = os.path.join(directory, LOCK_FILE)
        fd = fileio.open_nofollow(path, _FLAGS, 0o600)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise UnsafeDirectory(errno.EPERM, "lock file is not a regular file", path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise QueueLocked(directory, pid) from None
            raise
        # The pid is only informative.  A lock file with other names (a hard link: planted, or
        # a `cp -al` backup) is locked but never written: its bytes belong to those names too.
        if st.st_nlink == 1:
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
