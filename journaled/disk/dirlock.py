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

Across hosts (a shared or network file system) ``flock`` proves nothing: the owner's lease
(disk/lease.py) decides, and is checked before anything in the directory is written.  The lock
file names the owner's host and boot id besides its pid (docs/format.md, section 9); a lock
held under another host's name (NFS passes locks between clients: a stopped host's kernel may
keep it) is judged by the lease, never by the lock.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import time
from collections.abc import Callable

from journaled.disk import fileio, lease, lifecycle
from journaled.errors import QueueLocked, UnsafeDirectory

log = logging.getLogger("journaled")

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


#: The pid line is padded to this many bytes: readers that parse the first 32 bytes as a
#: decimal pid (older versions, remote/connections.py) still read it.
_PID_WIDTH = 32


def _read_pid(fd: int) -> int | None:
    try:
        pid = int(os.pread(fd, _PID_WIDTH, 0).decode().strip() or 0)
    except (ValueError, OSError, UnicodeDecodeError):
        return None
    return pid or None


def _read_host(fd: int) -> tuple[str | None, str | None]:
    """The ``host`` and ``boot`` lines of the lock file (``None`` where absent: an older owner)."""
    try:
        text = os.pread(fd, 1024, 0).decode("ascii", "replace")
    except OSError:
        return None, None
    found: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(" ")
        found[key] = value.strip()
    return found.get("host"), found.get("boot")


def _content(me: lease.Identity) -> bytes:
    return f"{me.pid:<{_PID_WIDTH - 1}}\nhost {me.host}\nboot {me.boot}\n".encode("ascii")


class DirLock:
    """Exclusive ownership of a queue directory (see the module docstring)."""

    def __init__(self, directory: str, fd: int, holder: lease.LeaseHolder | None = None) -> None:
        self.directory = directory
        self._fd = fd
        #: this owner's lease (renewed by owner/engine.py); None for an object built by hand
        self.lease = holder
        #: the previous owner was on another host (or boot), or unknown: its socket cannot be
        #: verified from here and is never deleted (remote/server.py)
        self.foreign_before = False
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
        """Take the directory, or raise :class:`QueueLocked` naming the current owner's pid
        (:class:`~journaled.disk.lease.OwnedElsewhere`, naming its host too, when a process on
        another host holds a live lease).  Nothing in the directory is written (not even the
        lock file created) before the lease check passed."""
        me = lease.identity()
        lease.refuse_if_foreign(directory, me, lease.read_lease(directory))
        path = os.path.join(directory, LOCK_FILE)
        fd = fileio.open_nofollow(path, _FLAGS, 0o600)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise UnsafeDirectory(errno.EPERM, "lock file is not a regular file", path)
        try:
            locked = _take(fd, directory, me)
            previous = lease.read_lease(directory)  # again: another host may have just taken it
            lease.refuse_if_foreign(directory, me, previous, locked)
            holder = lease.LeaseHolder(directory, me)
            old_host, old_boot = _read_host(fd)
            holder.take(previous)
            # The pid is only informative.  A lock file with other names (a hard link: planted,
            # or a `cp -al` backup) is locked but never written: its bytes belong to those names.
            if st.st_nlink == 1:
                os.ftruncate(fd, 0)
                os.pwrite(fd, _content(me), 0)
            made = cls(directory, fd, holder)
            made.foreign_before = (
                previous is not None and not me.same_machine(previous.host, previous.boot)
            ) or (old_host is not None and not me.same_machine(old_host, old_boot))
            return made
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
            try:
                if self.lease is not None and self._fd >= 0:
                    self.lease.release()  # another host may take over at once
            finally:
                self.drop()

    def drop(self) -> None:
        """Close the lock file without the ``before_release`` hooks (a forked child's copy)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            lifecycle.untrack(self)
            _held.discard(self._key)
            os.close(fd)


def _take(fd: int, directory: str, me: lease.Identity) -> bool:
    """``flock(LOCK_EX)`` on ``fd`` or :class:`QueueLocked`; see ``FORK_GRACE``.  A lock held
    under another host's name is the lease's to judge: refused while that host's lease is live,
    else taken over without the ``flock`` (logged).  True if the ``flock`` was taken."""
    deadline = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in _BUSY:
                raise
        pid = _read_pid(fd)
        host, boot = _read_host(fd)
        if host is not None and not me.same_machine(host, boot):
            current = lease.read_lease(directory)
            if current is not None and me.same_machine(current.host, current.boot):
                raise QueueLocked(directory, current.pid)  # a process of this host took it meanwhile
            lease.refuse_if_foreign(directory, me, current)
            log.warning(
                "queue directory %s: its lock is held under host %s (pid %s), whose lease expired; "
                "taking the directory over without the lock",
                directory,
                host,
                pid,
            )
            return False
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
