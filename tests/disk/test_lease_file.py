"""The lease file's edge cases (disk/lease.py): what a damaged, released, planted or old-boot
lease means to an open.  Hosts are played with ``JOURNALED_HOST_ID`` in this process."""

from __future__ import annotations

import os
import time

import pytest

from journaled import JournaledQueue, QueueConfig, QueueLocked
from journaled.disk import lease
from journaled.format.smallfiles import encode_crc_text


def plant(path: str, host: str, boot: str, *, age: float = 0.0, released: bool = False) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    lines = [f"host {host}", f"boot {boot}", "pid 4242", "token 00112233aabbccdd",
             f"renewed_ms {int((time.time() - age) * 1000)}", "period_ms 1000", "expiry_ms 10000",
             f"released {int(released)}"]  # fmt: skip
    with open(os.path.join(path, ".journaled.lease"), "wb") as f:
        f.write(encode_crc_text("journaled-lease 1", lines))


def test_a_damaged_fresh_lease_refuses_another_host_and_nothing_is_created(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "q")
    os.makedirs(path, mode=0o700)
    with open(os.path.join(path, ".journaled.lease"), "wb") as f:
        f.write(b"not a lease at all\n")
    monkeypatch.setenv(lease.HOST_ENV, "beta")
    with pytest.raises(QueueLocked, match="lease file damaged"):
        JournaledQueue(path, QueueConfig(sync="never"))
    assert sorted(os.listdir(path)) == [".journaled.lease"]  # not even the lock file


def test_a_released_lease_of_another_host_is_taken_over_after_the_confirmation(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "q")
    plant(path, "alpha", "some-boot", released=True)
    monkeypatch.setenv(lease.HOST_ENV, "beta")
    t0 = time.monotonic()
    with JournaledQueue(path, QueueConfig(sync="never")) as q:
        took = time.monotonic() - t0
        assert q.is_owner
        now = lease.read_lease(path)
        assert now is not None and now.host == "beta" and now.pid == os.getpid() and not now.released
    assert lease.CONFIRM <= took < lease.CONFIRM + 5
    after = lease.read_lease(path)
    assert after is not None and after.released  # a clean close lets the next host in at once


def test_a_live_lease_of_this_host_from_an_earlier_boot_is_taken_over(tmp_path) -> None:
    """Its owner died with that boot: no refusal, though it was renewed a moment ago (the
    confirmation still runs: another host may be taking it over at the same time)."""
    path = str(tmp_path / "q")
    plant(path, lease.identity().host, "a-boot-before-this-one")
    with JournaledQueue(path, QueueConfig(sync="never")) as q:
        assert q.is_owner
        now = lease.read_lease(path)
        assert now is not None and now.boot == lease.identity().boot


def test_a_link_planted_at_the_lease_name_is_replaced_never_followed(tmp_path) -> None:
    path = str(tmp_path / "q")
    os.makedirs(path, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    os.symlink(victim, os.path.join(path, ".journaled.lease"))
    with JournaledQueue(path, QueueConfig(sync="never")):
        assert not os.path.islink(os.path.join(path, ".journaled.lease"))
    assert victim.read_bytes() == b"keep me"


def test_an_owner_killed_and_not_yet_reaped_by_its_parent_is_taken_over_at_once(tmp_path) -> None:
    """A process killed with SIGKILL stays a zombie until its parent waits for it (a supervisor
    slow to reap, a container whose init never does).  Its pid still answers ``kill(pid, 0)``, but
    a zombie holds no lock and writes nothing: with its ``flock`` free, the next process on this
    host takes the directory over at once, instead of refusing it as owned through another mount
    until the lease expires."""
    import signal
    import subprocess
    import sys

    from support.paths import ROOT

    path = str(tmp_path / "q")
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import journaled, sys; q = journaled.JournaledQueue({path!r}); "
            "print('open', flush=True); sys.stdin.read()",
        ],  # fmt: skip
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == b"open\n"
        os.kill(owner.pid, signal.SIGKILL)
        # not reaped: wait until the kernel made it a zombie (state Z), without waiting for it
        deadline = time.monotonic() + 10
        while _state(owner.pid) != "Z":
            assert time.monotonic() < deadline, _state(owner.pid)
            time.sleep(0.01)
        with JournaledQueue(path) as q:
            assert q.put(b"after") == 1
    finally:
        owner.kill()
        owner.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()
