"""I/O fault injection: ENOSPC and EIO at the Nth open/write/fsync/rename/unlink, one-off and
persistent, for every N until the workload completes; plus a real full tmpfs when permitted."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from conftest import ready_items, scratch_dir
from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio
from journaled.errors import JournaledError, JournalIOError
from support.faults import FaultyOps

CFG = QueueConfig(sync="always", journal_size=400, checkpoint_interval=3600)
OUTCOMES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def fault_report():
    """JOURNALED_FAULT_REPORT=1 prints how every injected fault ended (figures for the notes)."""
    yield
    if os.environ.get("JOURNALED_FAULT_REPORT"):
        for k, v in sorted(OUTCOMES.items()):
            print(f"  {k}: {v}", file=sys.__stdout__)


pytestmark = pytest.mark.usefixtures("quiet")


@pytest.fixture
def fastdir(tmp_path):
    with scratch_dir("faults-", str(tmp_path)) as d:
        yield d


def workload(path: str, acked: dict[int, bytes], attempted: set[bytes], state: dict) -> None:
    """Open, create readers, put (rotating files), consume, checkpoint, remove a reader, close."""
    q = JournaledQueue(path, CFG, name="q")
    state["q"] = q
    q.reader("all")  # never consumed: the final drain checks every acknowledged item with it
    a = q.reader("a")
    q.reader("b")
    for i in range(9):
        data = b"item-%d-" % i + b"x" * 60
        attempted.add(data)
        state["in_put"] = True
        (item_id,) = q.put_many([data])
        state["in_put"] = False
        acked[item_id] = data
        if i % 3 == 2:
            for _ in range(2):
                a.commit(a.get(block=False))
            q.checkpoint()
    q.remove_reader("b")
    q.close()


def drain_all(path: str, name: str = "a") -> list[tuple[int, bytes]]:
    with JournaledQueue(path, QueueConfig(sync="always"), name="q") as q:
        r = q.reader(name)
        out = []
        for it in ready_items(r):
            out.append((it.id, it.data))
            r.commit(it)
        return out


SEED_ITEMS = {1: b"seed-1", 2: b"seed-2", 3: b"seed-3"}


def seeded(base: str) -> str:
    """A queue left by a crash: three acknowledged items and a garbage tail, so that opening it
    runs recovery (keep the tail aside, ftruncate, fsync) under the fault plan too."""
    path = os.path.join(base, "seed", "q")
    if not os.path.isdir(path):
        with JournaledQueue(path, CFG, name="q") as q:
            q.reader("all")
            for i, data in SEED_ITEMS.items():
                assert q.put(data) == i
        newest = sorted(p for p in os.listdir(path) if p.startswith("q.") and p[2:].isdigit())[-1]
        with open(os.path.join(path, newest), "ab") as f:
            f.write(b"\x07garbage-from-a-crash" * 3)
    return path


def one_run(base: str, kind: str, nth: int, err: int, persistent: bool) -> bool:
    """Run the workload with one fault plan; check the promises; return True if it injected."""
    path = os.path.join(base, f"{kind}-{nth}-{err}-{persistent}")
    shutil.copytree(seeded(base), path)
    faulty = FaultyOps(kind, nth, err, persistent)
    acked: dict[int, bytes] = dict(SEED_ITEMS)
    attempted: set[bytes] = set()
    state: dict = {"in_put": False}
    failure: BaseException | None = None
    with fileio.use(faulty):
        try:
            workload(path, acked, attempted, state)
        except BaseException as exc:  # noqa: BLE001 - classified below
            failure = exc
    if faulty.injected == 0:
        assert failure is None, failure
        return False
    OUTCOMES[f"injected {kind} {errno.errorcode[err]} {'persistent' if persistent else 'once'} (runs)"] += 1
    OUTCOMES[f"injected {kind} {errno.errorcode[err]} (failed calls)"] += faulty.injected
    if failure is not None:
        # a clear error carrying the injected errno; put always wraps it in JournalIOError
        assert isinstance(failure, OSError), repr(failure)
        assert failure.errno == err, repr(failure)
        if state["in_put"]:
            assert isinstance(failure, JournalIOError), repr(failure)
            OUTCOMES[f"{kind}:put raised JournalIOError"] += 1
        else:
            OUTCOMES[f"{kind}:{type(failure).__name__} from another call"] += 1
    else:
        OUTCOMES[f"{kind}:absorbed (logged, retried later)"] += 1
    q = state.get("q")
    if persistent and q is not None and not q.closed:
        # the disk is still full: a retried put either fails clearly or really wrote its record
        try:
            with fileio.use(faulty):
                new_id = q.put(b"while-broken")
            acked[new_id] = b"while-broken"
            OUTCOMES[f"{kind}:retry while still failing succeeded (op not on the put path)"] += 1
        except JournalIOError as exc:
            assert exc.errno in (err, None) or "close and reopen" in str(exc)
            OUTCOMES[f"{kind}:retry while still failing raised JournalIOError"] += 1
    faulty.heal()  # space is back / the device recovered
    if q is not None and not q.closed:
        # the same object works again unless a write/fsync failure poisoned it
        try:
            with fileio.use(faulty):
                new_id = q.put(b"after-heal")
            acked[new_id] = b"after-heal"
            OUTCOMES[f"{kind}:same queue usable after heal"] += 1
        except JournalIOError as exc:
            assert "close and reopen" in str(exc)
            OUTCOMES[f"{kind}:poisoned, reopen needed"] += 1
        try:
            q.close()
        except (JournaledError, OSError):
            pass
    if not os.path.isdir(path):
        return True
    got = dict(drain_all(path, "all"))
    for i, data in acked.items():
        assert got.get(i) == data, f"acked item {i} lost or changed after {kind}#{nth} {errno.errorcode[err]}"
    for i, data in got.items():
        known = (b"after-heal", b"while-broken", *SEED_ITEMS.values())
        assert data in attempted or data in known, f"item {i} was never put"
    # and it is writable again after a reopen
    with JournaledQueue(path, QueueConfig(sync="always"), name="q") as q:
        q.put(b"post")
    return True


@pytest.mark.parametrize("kind", ["write", "fsync", "rename", "open", "unlink", "ftruncate"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
def test_fault_at_every_nth_operation_loses_nothing_acknowledged(fastdir, kind, err, persistent):
    nth = 1
    while one_run(fastdir, kind, nth, err, persistent):
        nth += 1
        assert nth < 500, "workload never completed"
    assert nth > 1, f"no {kind} was ever injected"


def test_journal_io_error_is_an_oserror_with_errno(fastdir):
    path = os.path.join(fastdir, "q")
    with JournaledQueue(path, CFG, name="q") as q:
        with fileio.use(FaultyOps("fsync", 1, errno.EIO)):
            with pytest.raises(JournalIOError) as info:
                q.put(b"x")
        assert isinstance(info.value, OSError)
        assert info.value.errno == errno.EIO
        assert isinstance(info.value.__cause__, OSError)
        with pytest.raises(JournalIOError, match="close and reopen"):
            q.put(b"y")  # poisoned: a retried fsync could falsely report success


def test_faulty_ops_counts_and_heals():
    f = FaultyOps("rename", 2, errno.EIO, persistent=True)
    assert not f._maybe_fail("rename", "a")
    assert f._maybe_fail("rename", "a") and f._maybe_fail("rename", "a")
    f.heal()
    assert not f._maybe_fail("rename", "a")
    assert f.injected == 2
    with pytest.raises(ValueError):
        FaultyOps("chmod", 1)


def _mount_tmpfs(target: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", target], capture_output=True)
    return r.returncode == 0


def test_real_full_filesystem_raises_enospc_and_recovers(tmp_path):
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    if not _mount_tmpfs(mnt):
        pytest.skip("cannot mount a small tmpfs here (not root or no permission)")
    try:
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (512 * 1024))
        path = os.path.join(mnt, "q")
        acked: dict[int, bytes] = {}
        q = JournaledQueue(path, QueueConfig(sync="always", journal_size=256 * 1024), name="q")
        q.reader("a")
        with pytest.raises(JournalIOError) as info:
            for i in range(10_000):
                data = b"%06d" % i + os.urandom(4000)
                acked[q.put(data)] = data
        assert info.value.errno == errno.ENOSPC
        OUTCOMES["tmpfs:put raised JournalIOError(ENOSPC)"] += 1
        try:
            q.close()
        except (JournaledError, OSError):
            pass
        os.unlink(filler)  # space returns
        got = dict(drain_all(path, "a"))
        for i, data in acked.items():
            assert got.get(i) == data
        with JournaledQueue(path, QueueConfig(sync="always"), name="q") as q:
            q.put(b"works again")
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
