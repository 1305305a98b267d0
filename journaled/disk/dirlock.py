"""Who owns a queue directory: the lock file, ``flock`` on it, and the owner's pid.

The only module that knows the lock file's name.  A directory is owned by one open queue (or
one offline repair) at a time through ``flock(LOCK_EX)`` on ``.journaled.lock``: an open file
description lock, so a second owner in the same process is refused too.  The file holds the
owner's pid for error messages and ``journaled stat``; the lock, not the pid, decides.

Also here: :func:`prepare_queue_dir`, the open-time check that the directory is the user's own.

``fork()`` copies the descriptor, and an ``flock`` lives as long as *any* descriptor of its open
file description: a child that kept the copy would keep the lock after the parent released it.
So the child closes its copy at once (disk/lifecycle.py's fork hook).  That cannot release the
parent's lock: the parent still holds its own descriptor of the same description.  A parent that
releases and retakes its directory right after a fork may find the child not yet scheduled: a
lock that names this very process, which no longer holds it, is waited for (``FORK_GRACE``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable

from journaled.disk import fileio, lifecycle
from journaled.errors import QueueLocked, UnsafeDirectory

LOCK_FILE = ".journaled.lock"
_FLAGS = os.O_RDWR | os.O_CREAT
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)

#: Seconds an open waits for a lock this process released but a child forked from it still
#: holds until its fork hook runs (at once, once the child is scheduled).
FORK_GRACE = 2.0

#: (st_dev, st_ino) of the lock files this process holds (set operations are atomic under the
#: GIL; no lock, so the fork hook can never wait on one).
_held: set[tuple[int, int]] = set()


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
        st = os.fstat(fd)
        self._key = (st.st_dev, st.st_ino)
        _held.add(self._key)
        #: called (in order) by :meth:`release` just before the directory is given up, while
        #: this process still owns it (the socket server stops there); not in a forked child
        self.before_release: list[Callable[[], None]] = []
        lifecycle.track(self, None, DirLock.drop)  # in a forked child: drop the copy

    def on_release(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` in :meth:`release`, just before the directory is given up (after the
        hooks registered before it), while this process still owns it; never in a forked child."""
        self.before_release.append(hook)

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
            _take(fd, directory)
            # The pid is only informative.  A lock file with other names (a hard link: planted,
            # or a `cp -al` backup) is locked but never written: its bytes belong to those names.
            if st.st_nlink == 1:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return cls(directory, fd)
        except BaseException:
            os.close(fd)
            raise

    def release(self) -> None:
        """Give the directory up (closing the file releases the lock).  Idempotent."""
        hooks, self.before_release = self.before_release, []
        try:
            for hook in hooks:
                hook()
        finally:
            self.drop()

    def drop(self) -> None:
        """Close the lock file without the ``before_release`` hooks (a forked child's copy)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            lifecycle.untrack(self)
            _held.discard(self._key)
            os.close(fd)


def _take(fd: int, directory: str) -> None:
    """``flock(LOCK_EX)`` on ``fd`` or :class:`QueueLocked`; see ``FORK_GRACE``."""
    deadline = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in _BUSY:
                raise
        pid = _read_pid(fd)
        st = os.fstat(fd)
        if pid != os.getpid() or (st.st_dev, st.st_ino) in _held:
            raise QueueLocked(directory, pid)  # another process, or a second open in this one
        now = time.monotonic()
        if deadline is None:
            deadline = now + FORK_GRACE
        elif now >= deadline:
            raise QueueLocked(directory, pid)
        time.sleep(0.005)


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
