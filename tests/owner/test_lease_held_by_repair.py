"""Offline ``journaled repair`` owns the directory for its whole run (issue 36): it renews the
owner's lease while it works, so a repair longer than the lease's expiry does not let another host
take the directory over while it still rewrites files; and once its lease is lost it writes
nothing more.

The lease is made short (``EXPIRY`` 1 s, renewed every 0.1 s) and the repair slow (its scan takes
longer than the expiry plus the clock skew allowance); "another host" is a real process with
``JOURNALED_HOST_ID=beta`` trying to take the directory (``DirLock.acquire``: the lease gate).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.disk import lease
from journaled.errors import QueueDirectoryGone
from journaled.format.smallfiles import encode_crc_text
from journaled.offline import repair
from support.paths import ROOT

EXPIRY = 1.0

TAKE = textwrap.dedent(
    """
    import json, sys
    from journaled.disk.dirlock import DirLock
    from journaled.errors import QueueLocked
    try:
        lock = DirLock.acquire(sys.argv[1])
    except QueueLocked as exc:
        print(json.dumps({"refused": str(exc)}))
    else:
        print(json.dumps({"took_over": True}))
        lock.release()
    """
)


@pytest.fixture
def short_lease(monkeypatch):
    """This process's lease as ``JOURNALED_LEASE_EXPIRY=1`` would make it."""
    monkeypatch.setattr(lease, "EXPIRY", EXPIRY)
    monkeypatch.setattr(lease, "PERIOD", EXPIRY / 10)
    monkeypatch.setattr(lease, "CONFIRM", 2 * EXPIRY / 10 + 0.5)


@pytest.fixture
def damaged(tmp_path) -> str:
    """A queue whose one journal file has a record with a flipped byte (repair has work to do)."""
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="always", journal_size=1 << 20), name="q") as q:
        q.reader("r")
        for i in range(20):
            q.put(b"item-%02d" % i + b"." * 40)
    (journal,) = [p for p in glob.glob(os.path.join(path, "q.[0-9]*")) if p.rsplit(".", 1)[-1].isdigit()]
    with open(journal, "r+b") as f:
        f.seek(os.path.getsize(journal) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))
    return path


def slow_scan(monkeypatch, seconds: float, during=None) -> None:
    """Repair's scan takes ``seconds`` (as on a journal of many gigabytes); ``during`` runs in it."""
    real = repair.check_dir

    def check_dir(*args, **kwargs):
        deadline = time.monotonic() + seconds
        if during is not None:
            during()
        time.sleep(max(0.0, deadline - time.monotonic()))
        return real(*args, **kwargs)

    monkeypatch.setattr(repair, "check_dir", check_dir)


def take_from_beta(path: str) -> dict[str, object]:
    env = dict(
        os.environ,
        JOURNALED_HOST_ID="beta",
        JOURNALED_LEASE_EXPIRY=str(EXPIRY),
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    out = subprocess.run(
        [sys.executable, "-c", TAKE, path], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_repair_renews_its_lease_so_another_host_cannot_take_over_while_it_runs(
    damaged, short_lease, monkeypatch
) -> None:
    window = EXPIRY + lease.MAX_CLOCK_SKEW  # a lease older than this may be taken over
    ages: list[float] = []
    attempts: list[dict[str, object]] = []

    def meanwhile() -> None:
        # another host tries once the lease would have expired without renewals, and the lease's
        # age is sampled all along
        start = time.monotonic()
        while time.monotonic() - start < window + 1.5:
            held = lease.read_lease(damaged)
            if held is not None:
                ages.append(held.age())
            time.sleep(0.1)
        attempts.append(take_from_beta(damaged))

    watcher = threading.Thread(target=meanwhile)
    slow_scan(monkeypatch, window + 4.0, during=watcher.start)
    backup, actions = repair.repair_dir(damaged)
    watcher.join()
    print(f"repair ran {window + 4.0:.1f} s; lease age seen at most {max(ages):.2f} s; beta: {attempts}")
    assert attempts and "refused" in attempts[0], (
        f"host beta took the directory over while repair ran: {attempts}; "
        f"the lease's age reached {max(ages):.1f} s (valid for {window:g} s)"
    )
    assert "owned by" in str(attempts[0]["refused"]) and f"pid {os.getpid()}" in str(attempts[0]["refused"])
    assert max(ages) < 1.0, f"the lease was not renewed while repair ran: {max(ages):.1f} s old"
    assert backup and any(a.startswith("rewrote") for a in actions), actions
    after = lease.read_lease(damaged)
    assert after is not None and after.released and after.pid == os.getpid()


def test_repair_whose_lease_was_taken_over_writes_nothing_more(damaged, short_lease, monkeypatch) -> None:
    """A host with a skewed clock (or a bug) wrote its own lease while repair scanned: repair stops
    with ``LeaseLost`` before its first write; no backup is made, no file rewritten."""

    def snapshot() -> dict[str, bytes]:
        return {
            os.path.relpath(os.path.join(root, f), damaged): open(os.path.join(root, f), "rb").read()
            for root, _dirs, files in os.walk(damaged)
            for f in files
            if not f.startswith(".journaled.")
        }

    before = snapshot()

    def another_host_writes_its_lease() -> None:
        time.sleep(0.3)
        lines = ["host beta", "boot b", "pid 4242", "token 00112233aabbccdd",
                 f"renewed_ms {int(time.time() * 1000)}", "period_ms 100", "expiry_ms 1000",
                 "released 0"]  # fmt: skip
        tmp = os.path.join(damaged, ".journaled.lease.planted")
        with open(tmp, "wb") as f:
            f.write(encode_crc_text("journaled-lease 1", lines))
        os.replace(tmp, os.path.join(damaged, ".journaled.lease"))

    slow_scan(monkeypatch, 1.5, during=another_host_writes_its_lease)
    with pytest.raises(QueueDirectoryGone, match="taken over: the directory is now owned by beta pid 4242"):
        repair.repair_dir(damaged)
    assert snapshot() == before, "repair wrote after its lease was taken over"
    held = lease.read_lease(damaged)
    assert held is not None and held.host == "beta" and not held.released  # beta's, left alone


def test_the_lease_expiry_knob_is_written_into_the_lease_and_honoured_by_other_hosts(tmp_path) -> None:
    """``JOURNALED_LEASE_EXPIRY`` sets the owner's expiry and period; another host judges the lease
    by the expiry written in it, whatever its own setting."""
    path = str(tmp_path / "q")
    code = textwrap.dedent(
        """
        import json, sys
        from journaled import JournaledQueue, QueueConfig
        from journaled.disk import lease
        q = JournaledQueue(sys.argv[1], QueueConfig(sync="never"), name="q")
        print(json.dumps([lease.EXPIRY, lease.PERIOD, lease.CONFIRM]), flush=True)
        sys.stdin.read()
        """
    )
    env = dict(
        os.environ,
        JOURNALED_HOST_ID="alpha",
        JOURNALED_LEASE_EXPIRY="2.5",
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, path], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert json.loads(proc.stdout.readline()) == [2.5, 0.25, 1.0]  # type: ignore[union-attr]
        held = lease.read_lease(path)
        assert held is not None and (held.expiry, held.period) == (2.5, 0.25)
        assert held.valid_for() == 2.5 + lease.MAX_CLOCK_SKEW and held.confirm_wait() == lease.CONFIRM
        assert held.live(now=held.renewed + 7.4) and not held.live(now=held.renewed + 7.6)
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=30)
    bad = subprocess.run(
        [sys.executable, "-c", "import journaled.disk.lease"],
        env=dict(env, JOURNALED_LEASE_EXPIRY="0.1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "JOURNALED_LEASE_EXPIRY='0.1'" in bad.stderr, bad.stderr
    assert "from 0.5 to 3600" in bad.stderr and "ValueError" in bad.stderr


def test_taking_over_from_an_owner_with_a_longer_period_keeps_the_new_lease_fresh(
    damaged, short_lease, monkeypatch
) -> None:
    """The taker waits two of the previous owner's periods before confirming (here 2 x 2 s + 0.5
    s, far beyond its own 1 s expiry): it renews its own lease meanwhile, so that lease is never
    stale, neither to a third host nor to repair's own check, which would otherwise stop it at its
    first write."""
    os.remove(os.path.join(damaged, ".journaled.lease"))
    lines = ["host alpha", "boot a", "pid 4242", "token 00112233aabbccdd",
             f"renewed_ms {int((time.time() - 60) * 1000)}", "period_ms 2000", "expiry_ms 20000",
             "released 0"]  # fmt: skip
    with open(os.path.join(damaged, ".journaled.lease"), "wb") as f:
        f.write(encode_crc_text("journaled-lease 1", lines))
    monkeypatch.setenv(lease.HOST_ENV, "beta")
    ages: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            held = lease.read_lease(damaged)
            if held is not None and held.host == "beta":
                ages.append(held.age())

    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.monotonic()
    try:
        backup, actions = repair.repair_dir(damaged)
    finally:
        stop.set()
        sampler.join()
    took = time.monotonic() - t0
    print(f"repair took over in {took:.1f} s; beta's lease seen at most {max(ages):.2f} s old")
    assert took >= 2 * 2.0 + 0.5  # the previous owner's two periods, not this process's CONFIRM
    assert backup and any(a.startswith("rewrote") for a in actions), actions
    assert max(ages) < EXPIRY, f"the new lease went {max(ages):.1f} s without renewal while confirming"
