"""Hostile directories: planted symlinks and hard links, shared queue directories, directory
creation durability, and ``archive_dir`` on another file system or naming the queue itself.

The promises (docs/design.md, "Naming and the directory"): nothing inside a queue directory is
opened through a symbolic link, so a planted link makes the operation fail with
:class:`UnsafeDirectory` and the file it points to keeps every byte; a directory other users can
write to is refused unless ``QueueConfig(allow_shared_dir=True)``; every directory the library
creates is fsynced into its parent; archiving never forgets a journal file that is still on disk.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from journaled import JournaledQueue, QueueConfig, QueueLocked, UnsafeDirectory, spool_put
from journaled.disk import fileio
from journaled.disk.dirlock import LOCK_FILE
from journaled.disk.spoolfiles import SPOOL_DIR
from journaled.disk.spoolledger import LEDGER
from support.faults import FaultyOps

NAME = "q"
PAYLOAD = b"p" * 40
SECRET = b"precious bytes that journaled never wrote\n"


def open_q(path: str, **kw: object) -> JournaledQueue:
    kw.setdefault("sync", "never")
    kw.setdefault("checkpoint_interval", 3600.0)
    return JournaledQueue(path, QueueConfig(**kw), name=NAME)  # type: ignore[arg-type]


@pytest.fixture
def victim(tmp_path):
    """A file outside the queue directory that a planted link points to."""
    path = tmp_path / "victim"
    path.write_bytes(SECRET)
    return str(path)


def journal_files(path: str) -> list[str]:
    return sorted(
        (e for e in os.listdir(path) if e.startswith(f"{NAME}.") and e[len(NAME) + 1 :].isdigit()),
        key=lambda e: int(e.split(".")[1]),
    )


# ------------------------------------------------------------------------------ planted links
def test_symlink_planted_as_the_lock_file_is_refused_and_its_target_untouched(qdir, victim):
    os.makedirs(qdir, mode=0o700)
    os.symlink(victim, os.path.join(qdir, LOCK_FILE))
    with pytest.raises(UnsafeDirectory, match="symbolic link"):
        open_q(qdir)
    with open(victim, "rb") as f:
        assert f.read() == SECRET


def test_hard_linked_lock_file_is_locked_but_never_written(qdir, victim):
    os.makedirs(qdir, mode=0o700)
    os.link(victim, os.path.join(qdir, LOCK_FILE))
    with open_q(qdir) as q:
        q.put(PAYLOAD)
        with pytest.raises(QueueLocked):  # still excludes a second owner
            open_q(qdir)
    with open(victim, "rb") as f:
        assert f.read() == SECRET


@pytest.mark.parametrize("temp", [f".{NAME}.read.r.tmp", f".{NAME}.readers.tmp"])
def test_symlink_planted_as_a_checkpoint_temp_file_is_refused_and_its_target_untouched(qdir, victim, temp):
    with open_q(qdir) as q:
        r = q.reader("r")
        q.put(PAYLOAD)
        os.symlink(victim, os.path.join(qdir, temp))
        r.commit(r.get())
        with pytest.raises(UnsafeDirectory, match="symbolic link"):
            if temp.endswith("readers.tmp"):
                q.reader("another")
            else:
                q.checkpoint()
        with open(victim, "rb") as f:
            assert f.read() == SECRET
        os.unlink(os.path.join(qdir, temp))  # so that close can write its checkpoints


def test_leftover_regular_temp_file_is_replaced_not_written_through(qdir, victim):
    """A temp file left by a crash is ours to replace; a hard link planted under that name must
    not carry the write into the file it shares bytes with."""
    with open_q(qdir) as q:
        r = q.reader("r")
        q.put(PAYLOAD)
        os.link(victim, os.path.join(qdir, f".{NAME}.read.r.tmp"))
        r.commit(r.get())
        q.checkpoint()
    with open(victim, "rb") as f:
        assert f.read() == SECRET
    with open_q(qdir) as q:
        assert q.reader("r").head == 2


def test_symlinked_checkpoint_is_not_read_through(qdir, tmp_path):
    with open_q(qdir) as q:
        r = q.reader("r")
        q.put_many([PAYLOAD] * 3)
        for _ in range(3):
            r.commit(r.get())
    ckpt = os.path.join(qdir, f"{NAME}.read.r")
    outside = tmp_path / "outside-checkpoint"
    os.rename(ckpt, outside)
    os.symlink(outside, ckpt)
    with pytest.raises(UnsafeDirectory, match="symbolic link"):
        open_q(qdir)
    # nor by journaled check, which refuses it as it refuses a linked journal file
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "check", qdir], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "symbolic link" in out.stderr, out.stderr
    before = sorted(os.listdir(qdir))
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "repair", qdir], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "symbolic link" in out.stderr, out.stdout + out.stderr  # failed
    assert sorted(os.listdir(qdir)) == before  # no repair folder left behind
    assert os.readlink(ckpt) == str(outside)


def test_symlinked_journal_file_is_refused_at_open(qdir, tmp_path):
    with open_q(qdir, journal_size=400) as q:
        q.put_many([PAYLOAD] * 30)
    oldest = os.path.join(qdir, journal_files(qdir)[0])
    outside = tmp_path / "outside-journal"
    os.rename(oldest, outside)
    os.symlink(outside, oldest)
    with pytest.raises(UnsafeDirectory, match="symbolic link"):
        open_q(qdir)
    # nor by a repair, which fails before it keeps anything, and leaves no folder behind
    before = sorted(os.listdir(qdir))
    out = subprocess.run(
        [sys.executable, "-m", "journaled", "repair", qdir], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "symbolic link" in out.stderr, out.stdout + out.stderr  # failed
    assert sorted(os.listdir(qdir)) == before
    assert os.readlink(oldest) == str(outside)


def test_symlink_planted_as_the_spool_ledger_is_refused_and_its_target_untouched(qdir, victim):
    os.makedirs(os.path.join(qdir, SPOOL_DIR), mode=0o700)
    spool_put(qdir, [b"from another process"], key="batch-1")
    os.symlink(victim, os.path.join(qdir, SPOOL_DIR, LEDGER))
    with pytest.raises(UnsafeDirectory, match="symbolic link"):
        spool_put(qdir, [b"another batch"], key="batch-2")
    # the queue itself stays usable; adoption waits (exactly once needs the ledger)
    with open_q(qdir) as q:
        assert q.adopt_spool() == 0
    with open(victim, "rb") as f:
        assert f.read() == SECRET


def test_queue_directory_may_itself_be_a_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with open_q(str(link)) as q:
        q.put(PAYLOAD)
    assert journal_files(str(real))


# ------------------------------------------------------------------------------ shared dirs
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777, 0o730])
def test_directory_other_users_can_write_is_refused_unless_allowed(qdir, mode):
    os.makedirs(qdir)
    os.chmod(qdir, mode)
    with pytest.raises(UnsafeDirectory, match="allow_shared_dir=True"):
        open_q(qdir)
    assert os.listdir(qdir) == []  # refused before anything was created in it
    with open_q(qdir, allow_shared_dir=True) as q:
        q.put(PAYLOAD)


def test_directory_owned_by_another_user_is_refused_unless_allowed(qdir):
    os.makedirs(qdir, mode=0o700)
    if os.geteuid() != 0:
        pytest.skip("needs root to give the directory to another user")
    os.chown(qdir, 12345, -1)
    with pytest.raises(UnsafeDirectory, match="owned by uid 12345"):
        open_q(qdir)
    with open_q(qdir, allow_shared_dir=True) as q:
        q.put(PAYLOAD)


def test_group_readable_directory_is_accepted(qdir):
    os.makedirs(qdir)
    os.chmod(qdir, 0o755)
    with open_q(qdir) as q:
        q.put(PAYLOAD)


def test_new_queue_directory_is_created_private(tmp_path):
    qdir = str(tmp_path / "new")
    old = os.umask(0)
    try:
        with open_q(qdir):
            pass
    finally:
        os.umask(old)
    assert os.stat(qdir).st_mode & 0o777 == 0o700


# ------------------------------------------------------------------------------ new directories
class DirSyncs(fileio.FileOps):
    """Records every directory fsync, and which directories existed at that moment."""

    def __init__(self, watch: list[str]) -> None:
        self.watch = watch
        self.synced: list[tuple[str, frozenset[str]]] = []

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        present = frozenset(d for d in self.watch if os.path.isdir(d))
        self.synced.append((os.path.abspath(path), present))


def test_new_directories_are_fsynced_into_their_parent(tmp_path):
    parent = str(tmp_path / "parent")
    os.makedirs(parent, mode=0o700)
    qdir = os.path.join(parent, "q")
    arch_parent = str(tmp_path / "elsewhere")
    os.makedirs(arch_parent, mode=0o700)
    arch = os.path.join(arch_parent, "arch")
    rec = DirSyncs([qdir, arch])
    with fileio.use(rec):
        with open_q(qdir, archive_dir=arch):
            pass
    # each parent was fsynced after its new child existed
    assert any(p == parent and qdir in present for p, present in rec.synced)
    assert any(p == arch_parent and arch in present for p, present in rec.synced)


def test_a_new_spool_directory_is_fsynced_into_the_queue_directory(qdir):
    spool = os.path.join(qdir, SPOOL_DIR)
    rec = DirSyncs([spool])
    with fileio.use(rec):
        spool_put(qdir, [b"x"], key="k")
    assert any(p == os.path.abspath(qdir) and spool in present for p, present in rec.synced)


class OpLog(fileio.FileOps):
    """Records directory fsyncs, file fsyncs and renames in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.paths: dict[int, str] = {}

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.log.append(("fsync", self.paths.get(fd, "?")))

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        self.log.append(("fsync_dir", os.path.abspath(path)))

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        self.log.append(("rename", dst))


def test_repair_backup_is_durable_before_the_original_is_rewritten(qdir):
    from journaled.offline.repair import repair_dir

    with open_q(qdir, sync="always") as q:
        q.reader("r")
        q.put_many([PAYLOAD] * 5)
    (name,) = journal_files(qdir)
    path = os.path.join(qdir, name)
    with open(path, "r+b") as f:
        at = os.path.getsize(path) - len(PAYLOAD) - 30  # in the last record's CRC (salted: any byte)
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))  # flipped, so it is damage whatever the byte was
    rec = OpLog()
    with fileio.use(rec):
        backup, _ = repair_dir(qdir, "salvage", NAME)
    backup = os.path.abspath(backup)
    copy = os.path.join(backup, name)
    rewrite = rec.log.index(("rename", path))
    before = rec.log[:rewrite]
    assert ("fsync_dir", os.path.abspath(qdir)) in before  # the new backup directory's entry
    assert ("rename", copy) in before and ("fsync_dir", backup) in before  # the copy, durably


# ------------------------------------------------------------------------------ archive_dir
@pytest.mark.parametrize("bad", ["", ".", "./", "sub/.."])
def test_archive_dir_naming_the_queue_directory_is_refused_in_the_config(bad):
    with pytest.raises(ValueError, match="archive_dir"):
        QueueConfig(archive_dir=bad)


def test_archive_dir_resolving_to_the_queue_directory_is_refused_at_open(qdir, tmp_path):
    os.makedirs(qdir, mode=0o700)
    with pytest.raises(ValueError, match="archive_dir"):
        open_q(qdir, archive_dir=qdir)
    alias = tmp_path / "alias"
    alias.symlink_to(qdir)
    with pytest.raises(ValueError, match="archive_dir"):
        open_q(qdir, archive_dir=str(alias))
    with open_q(qdir):  # the refusal left the directory free
        pass


def _fill_and_pass(q: JournaledQueue, n: int = 30) -> None:
    """Put ``n`` items over several files and commit them all (not yet checkpointed, so
    nothing is archivable until the caller's ``q.checkpoint()``)."""
    r = q.reader("r")
    q.put_many([PAYLOAD] * n)
    for _ in range(n):
        r.commit(r.get())


@pytest.fixture
def other_fs(tmp_path):
    """A directory on a freshly mounted tmpfs (another file system than ``tmp_path``)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir(mode=0o700)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    cmd = ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mnt)]
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_archive_dir_on_another_file_system_receives_the_files_byte_for_byte(qdir, other_fs):
    os.makedirs(qdir, mode=0o700)
    assert os.stat(qdir).st_dev != os.stat(other_fs).st_dev
    arch = os.path.join(other_fs, "archive")
    with open_q(qdir, journal_size=400, archive_dir=arch) as q:
        _fill_and_pass(q)
        before = {name: open(os.path.join(qdir, name), "rb").read() for name in journal_files(qdir)}
        q.checkpoint()
        q.archive()  # returns after the background thread's own pass, if it started one first
        kept = journal_files(qdir)
        assert len(kept) == 1  # only the active file is left
        moved = sorted(os.listdir(arch), key=lambda e: int(e.split(".")[1]))
        assert moved == sorted(set(before) - set(kept), key=lambda e: int(e.split(".")[1]))
        for name in moved:
            with open(os.path.join(arch, name), "rb") as f:
                assert f.read() == before[name]
        assert [os.path.basename(jf.path) for jf in q.journal.files] == kept


def test_archive_that_fails_keeps_the_file_in_the_journal(qdir, tmp_path):
    arch = str(tmp_path / "arch")
    with open_q(qdir, journal_size=400, archive_dir=arch) as q:
        _fill_and_pass(q)
        on_disk = journal_files(qdir)
        assert len(on_disk) > 2
        # every move of a journal file fails (the checkpoint's own renames do not)
        journal_prefix = os.path.join(qdir, f"{NAME}.1")
        faults = FaultyOps("rename", 1, errno.EIO, persistent=True, path_filter=journal_prefix)
        with fileio.use(faults):
            q.checkpoint()
            for _ in range(2):  # the second returns after any background pass queued behind the first
                with pytest.raises(OSError):
                    q.archive()
        assert faults.injected >= 2
        # every file still on disk is still in the journal's list, so a later pass archives it,
        # and none is lost: a background pass that ran before the faults were in place may have
        # archived some (it did once in CI, between the listing above and ``fileio.use``)
        left = journal_files(qdir)
        assert [os.path.basename(jf.path) for jf in q.journal.files] == left
        archived = sorted(os.listdir(arch)) if os.path.isdir(arch) else []
        assert sorted(left + archived) == sorted(on_disk) and len(left) > 1
        q.archive()
        assert len(journal_files(qdir)) == 1
        assert sorted(os.listdir(arch)) == sorted(set(on_disk) - set(journal_files(qdir)))
