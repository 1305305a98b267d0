"""FileOps implementations for crash and fault testing (install with ``fileio.use(...)``).

* :class:`RecordingOps` performs every operation for real and also logs it, by inode, as the
  sequence a power-loss model needs (create/rename/unlink of directory entries, writes with their
  offsets, truncations, fsyncs of files and directories), plus markers the workload adds ("this
  put was acknowledged").  :mod:`journaled.powerloss` turns such a log into crash states.
* :class:`FaultyOps` fails the Nth operation of a kind with an errno (ENOSPC, EIO, ...), once or
  persistently until :meth:`FaultyOps.heal`, the way SQLite's I/O-error loops do.

Both are deliberately small and dependency-free so scripts and tests can share them.
"""

from __future__ import annotations

import errno as _errno
import os
from collections import Counter
from typing import Any

import attrs

from journaled.disk.fileio import FileOps

#: Operation kinds that FaultyOps can fail (fsync covers fsync, fdatasync and fsync_dir).
FAULT_KINDS = ("open", "write", "fsync", "rename", "unlink", "ftruncate")


@attrs.frozen
class Op:
    """One recorded operation.

    ``kind`` is one of ``create``, ``rename``, ``unlink`` (directory entries, by ``ino``),
    ``write`` (``data`` at ``offset`` of ``ino``), ``truncate`` (``ino`` to ``size``),
    ``fsync`` (data and size of ``ino``), ``fsync_dir`` (entries of ``directory``) or ``mark``
    (a workload event in ``info``; not a file-system operation).
    """

    kind: str
    ino: int = -1
    directory: str = ""
    name: str = ""
    dst_directory: str = ""
    dst_name: str = ""
    offset: int = 0
    size: int = 0
    data: bytes = b""
    info: Any = None


@attrs.define
class _OpenFile:
    ino: int
    append: bool
    pos: int = 0


class RecordingOps(FileOps):
    """Perform operations for real and log them by inode for the power-loss model.

    ``root`` is the directory tree the model covers; files already there when recording starts
    make up :attr:`initial` (treated as fully durable).  Only regular files directly inside
    directories under ``root`` are modelled, which is all a queue directory holds.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.log: list[Op] = []
        self._next_ino = 1
        self.names: dict[tuple[str, str], int] = {}  # (relative dir, name) -> inode
        self.initial: dict[int, bytes] = {}
        self.initial_names: dict[tuple[str, str], int] = {}
        self._fds: dict[int, _OpenFile] = {}
        for dirpath, _dirs, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for f in files:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    data = fh.read()
                ino = self._new_ino()
                self.names[(rel, f)] = ino
                self.initial[ino] = data
        self.initial_names = dict(self.names)

    def _new_ino(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        return ino

    def _key(self, path: str) -> tuple[str, str] | None:
        full = os.path.abspath(path)
        if not full.startswith(self.root + os.sep) and full != self.root:
            return None
        directory, name = os.path.split(full)
        return os.path.relpath(directory, self.root), name

    def mark(self, info: Any) -> None:
        """Record a workload event (e.g. ``("acked", ids)``) at the current point of the log."""
        self.log.append(Op("mark", info=info))

    # ------------------------------------------------------------------ FileOps
    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        key = self._key(path)
        existed = os.path.exists(path)
        fd = super().open(path, flags, mode)
        if key is None:
            return fd
        ino = self.names.get(key)
        if ino is None or not existed:
            ino = self._new_ino()
            self.names[key] = ino
            self.log.append(Op("create", ino, key[0], key[1]))
        elif flags & os.O_TRUNC and flags & (os.O_WRONLY | os.O_RDWR):
            self.log.append(Op("truncate", ino, size=0))
        self._fds[fd] = _OpenFile(ino, bool(flags & os.O_APPEND))
        return fd

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        super().close(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        of = self._fds.get(fd)
        offset = os.fstat(fd).st_size if of is not None and of.append else (of.pos if of else 0)
        n = super().write(fd, data)
        if of is not None:
            self.log.append(Op("write", of.ino, offset=offset, data=bytes(data)))
            of.pos = offset + n
        return n

    def _sync(self, fd: int) -> None:
        of = self._fds.get(fd)
        if of is not None:
            self.log.append(Op("fsync", of.ino))

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._sync(fd)

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self._sync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        super().ftruncate(fd, size)
        of = self._fds.get(fd)
        if of is not None:
            self.log.append(Op("truncate", of.ino, size=size))

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        ks, kd = self._key(src), self._key(dst)
        if ks is None or kd is None:
            return
        ino = self.names.pop(ks, None)
        if ino is None:
            return
        self.names[kd] = ino
        self.log.append(Op("rename", ino, ks[0], ks[1], kd[0], kd[1]))

    def unlink(self, path: str) -> None:
        super().unlink(path)
        key = self._key(path)
        if key is None:
            return
        ino = self.names.pop(key, None)
        if ino is not None:
            self.log.append(Op("unlink", ino, key[0], key[1]))

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        key = self._key(os.path.join(path, "x"))
        if key is not None:
            self.log.append(Op("fsync_dir", directory=key[0]))

    def counts(self) -> Counter[str]:
        """How many operations of each kind were recorded."""
        return Counter(op.kind for op in self.log)


class FaultyOps(FileOps):
    """Fail the ``nth`` operation of ``kind`` (1-based) with ``OSError(err)``.

    ``persistent=True`` keeps failing every later operation of that kind until :meth:`heal`
    (a full disk that stays full); otherwise only the one operation fails.  A failing write
    first writes half of its data, as a real short write on a full disk does.  ``path_filter``
    limits the faults to paths containing that string (fd-based operations are matched by the
    path they were opened with).
    """

    def __init__(
        self,
        kind: str,
        nth: int,
        err: int = _errno.EIO,
        persistent: bool = False,
        path_filter: str | None = None,
    ) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {FAULT_KINDS}, got {kind!r}")
        self.kind = kind
        self.nth = nth
        self.err = err
        self.persistent = persistent
        self.path_filter = path_filter
        self.seen = 0
        self.injected = 0
        self.healed = False
        self._paths: dict[int, str] = {}

    def heal(self) -> None:
        """Stop injecting (the disk has space again / the device recovered)."""
        self.healed = True

    def _maybe_fail(self, kind: str, path: str | None) -> bool:
        if kind != self.kind or self.healed:
            return False
        if self.path_filter is not None and (path is None or self.path_filter not in path):
            return False
        self.seen += 1
        if self.seen == self.nth or (self.persistent and self.seen > self.nth):
            self.injected += 1
            return True
        return False

    def _raise(self, path: str | None) -> None:
        raise OSError(self.err, os.strerror(self.err), path)

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if self._maybe_fail("open", path):
            self._raise(path)
        fd = super().open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        super().close(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        path = self._paths.get(fd)
        if self._maybe_fail("write", path):
            half = len(data) // 2
            if half:
                os.write(fd, memoryview(data)[:half])
            self._raise(path)
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if self._maybe_fail("fsync", self._paths.get(fd)):
            self._raise(self._paths.get(fd))
        super().fsync(fd)

    def fdatasync(self, fd: int) -> None:
        if self._maybe_fail("fsync", self._paths.get(fd)):
            self._raise(self._paths.get(fd))
        super().fdatasync(fd)

    def fsync_dir(self, path: str) -> None:
        if self._maybe_fail("fsync", path):
            self._raise(path)
        super().fsync_dir(path)

    def ftruncate(self, fd: int, size: int) -> None:
        if self._maybe_fail("ftruncate", self._paths.get(fd)):
            self._raise(self._paths.get(fd))
        super().ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        if self._maybe_fail("rename", src):
            self._raise(src)
        super().rename(src, dst)

    def unlink(self, path: str) -> None:
        if self._maybe_fail("unlink", path):
            self._raise(path)
        super().unlink(path)


class FailingOpens(FileOps):
    """Fail every ``open`` for which ``which(path, flags)`` is true with ``OSError(err)`` (EMFILE:
    the process is out of descriptors) until :meth:`heal`; every other operation runs for real.
    ``failed`` counts the opens refused."""

    def __init__(self, which: Any, err: int = _errno.EMFILE) -> None:
        self.which = which
        self.err = err
        self.failed = 0
        self.healed = False

    def heal(self) -> None:
        """Descriptors are free again."""
        self.healed = True

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if not self.healed and self.which(path, flags):
            self.failed += 1
            raise OSError(self.err, os.strerror(self.err), path)
        return super().open(path, flags, mode)


def new_journal_file(name: str) -> Any:
    """For :class:`FailingOpens`: the creation of a new journal file of queue ``name``."""

    def which(path: str, flags: int) -> bool:
        base = os.path.basename(path)
        return bool(flags & os.O_CREAT) and base.startswith(name + ".") and base[len(name) + 1 :].isdigit()

    return which


def journal_file_read(name: str) -> Any:
    """For :class:`FailingOpens`: opening a journal file of queue ``name`` for reading."""

    def which(path: str, flags: int) -> bool:
        base = os.path.basename(path)
        writing = flags & (os.O_WRONLY | os.O_RDWR)
        return not writing and base.startswith(name + ".") and base[len(name) + 1 :].isdigit()

    return which
