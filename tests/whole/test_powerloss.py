"""Simulated power loss: crash states built from recorded operation logs (journaled.powerloss)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from conftest import scratch_dir
from journaled.disk import fileio
from support import powerloss as pl
from support.faults import RecordingOps
from support.paths import TESTS


@pytest.fixture
def fastdir(tmp_path):
    """States are fsync-heavy and thrown away: use tmpfs when there is one."""
    with scratch_dir("pl-", str(tmp_path)) as d:
        yield d


pytestmark = pytest.mark.usefixtures("quiet")  # thousands of expected recovery warnings


def test_power_loss_at_every_point_of_every_workload_keeps_every_promise(fastdir):
    st = pl.campaign(fastdir, list(pl.WORKLOADS), seed=5, per_point=12)
    v = st.verdict
    assert v.errors == []
    assert (v.lost, v.corrupt, v.order, v.redelivered_beyond) == (0, 0, 0, 0)
    assert (v.unusable, v.reader_lost, v.reader_resurrected) == (0, 0, 0)
    assert st.states > 10000 and st.distinct > 1200
    assert st.acked > 150
    for kind in ("create", "write", "fsync", "fsync_dir", "rename", "unlink"):
        assert st.op_counts.get(kind, 0) > 0, kind


class NoDirFsync(RecordingOps):
    """A library that forgot its directory fsyncs (ALICE's most common vulnerability)."""

    def fsync_dir(self, path: str) -> None:
        pass


def test_the_model_catches_a_missing_directory_fsync(fastdir):
    root = os.path.join(fastdir, "rec", "q")
    os.makedirs(root)
    rec = NoDirFsync(root)
    cfg = pl.wl_always(root, rec, random.Random(1))
    v = pl.Verdict()
    for n, state in enumerate(pl.crash_states(rec, random.Random(2), 3)):
        if state.model != "strict" or state.point < len(rec.log) // 2:
            continue
        d = os.path.join(fastdir, f"s{n}", "q")
        state.materialize(d)
        pl.check_state(d, cfg, pl.promises(rec, state.point), v)
    assert v.reader_lost + v.lost > 0


def test_fsynced_writes_survive_and_unsynced_ones_may_not(fastdir):
    root = os.path.join(fastdir, "d")
    os.makedirs(root)
    rec = RecordingOps(root)
    with fileio.use(rec):
        fd = fileio.ops.open(os.path.join(root, "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        fileio.ops.write(fd, b"durable")
        fileio.ops.fsync(fd)
        fileio.ops.fsync_dir(root)
        fileio.ops.write(fd, b"+maybe")
        fileio.ops.close(fd)
    rng = random.Random(0)
    none = pl.crash_state(rec, len(rec.log), "strict", "none", "whole", rng)
    every = pl.crash_state(rec, len(rec.log), "strict", "all", "whole", rng)
    torn = pl.crash_state(rec, len(rec.log), "strict", "all", "torn", rng)
    assert none.files[(".", "f")] == b"durable"
    assert every.files[(".", "f")] == b"durable+maybe"
    assert torn.files[(".", "f")].startswith(b"durable") and len(torn.files[(".", "f")]) < 13
    # before the directory fsync the new entry itself may vanish (strict model)
    early = pl.crash_state(rec, 3, "strict", "none", "whole", rng)
    assert (".", "f") not in early.files


def test_rename_is_durable_only_after_the_directory_fsync(fastdir):
    root = os.path.join(fastdir, "d")
    os.makedirs(root)
    rec = RecordingOps(root)
    with fileio.use(rec):
        fileio.write_atomic(os.path.join(root, "ck"), b"v1")
    # log: create tmp, write, fsync, rename, fsync_dir
    kinds = [op.kind for op in rec.log]
    assert kinds == ["create", "write", "fsync", "rename", "fsync_dir"]
    rng = random.Random(0)
    before_dir_sync = pl.crash_state(rec, 4, "strict", "none", "whole", rng)
    assert (".", "ck") not in before_dir_sync.files
    after = pl.crash_state(rec, 5, "strict", "none", "whole", rng)
    assert after.files == {(".", "ck"): b"v1"}


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_recording_matches_strace(tmp_path):
    """The seam sees every durability-relevant syscall the library makes on the queue dir."""
    qdir = tmp_path / "q"
    code = f"""
import os, sys
sys.path.insert(0, {TESTS!r})
from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio
from support.faults import RecordingOps
os.makedirs({str(qdir)!r})
rec = RecordingOps({str(qdir)!r})
with fileio.use(rec):
    config = QueueConfig(sync="always", journal_size=600, checkpoint_interval=3600)
    with JournaledQueue({str(qdir)!r}, config, name="q") as q:
        r = q.reader("a")
        for i in range(30):
            q.put(b"x" * 40)
        for i in range(10):
            r.commit(r.get(block=False))
        q.checkpoint()
        q.remove_reader("a")
c = rec.counts()
print("COUNTS", c["write"], c["fsync"] + 0, c["fsync_dir"], c["rename"], c["unlink"], c["truncate"])
"""
    trace = tmp_path / "trace"
    out = subprocess.run(
        [
            "strace",
            "-f",
            "-y",
            "-qq",
            "-o",
            str(trace),
            "-e",
            "trace=write,fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat,ftruncate",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0 and "ptrace" in (out.stderr or ""):
        pytest.skip(f"strace cannot trace here: {out.stderr.strip()[:200]}")
    assert out.returncode == 0, out.stderr[-2000:]
    counts = [int(x) for x in out.stdout.split("COUNTS")[1].split()]
    q = str(qdir)
    lines = trace.read_text().splitlines()

    def n(prefix: tuple[str, ...], pred) -> int:
        return sum(
            1
            for ln in lines
            if any(f" {p}(" in ln or ln.split(" ", 1)[-1].startswith(p + "(") for p in prefix) and pred(ln)
        )

    on_file = lambda ln: f"<{q}/" in ln and ".journaled.lock" not in ln  # noqa: E731
    on_dir = lambda ln: f"<{q}>" in ln  # noqa: E731
    writes = n(("write",), on_file)
    fsyncs = n(("fsync", "fdatasync"), on_file)
    dir_fsyncs = n(("fsync",), on_dir)
    renames = n(("rename", "renameat", "renameat2"), lambda ln: q in ln)
    unlinks = n(
        ("unlink", "unlinkat"), lambda ln: q in ln and ".journaled.sock" not in ln
    )  # the socket holds no data
    assert min(counts[:5]) > 0, counts
    assert writes == counts[0]
    assert fsyncs == counts[1]
    assert dir_fsyncs == counts[2]
    assert renames == counts[3]
    assert unlinks == counts[4]
