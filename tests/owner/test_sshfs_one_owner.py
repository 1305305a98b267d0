"""A real network file system (issue 36): a private sshd on 127.0.0.1 and an sshfs mount of a
directory of this machine.  The owner writes through the real directory, the other side works
through the mount, where ``flock`` is local to the FUSE client (it succeeds while the owner holds
the lock).  Needs Debian's ``openssh-server`` and ``sshfs`` and ``/dev/fuse`` (``.ci/run`` would
install them); skips and says why where they are missing or the mount is refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from support.dirstate import every_file
from support.sshfs import env, mounted


@pytest.fixture
def sshfs(tmp_path) -> Iterator[tuple[str, str]]:
    """(real directory, the same directory through an sshfs mount)."""
    with mounted(tmp_path) as dirs:
        yield dirs


OWNER = textwrap.dedent(
    """
    import json, os, sys
    from journaled import JournaledQueue, QueueConfig
    q = JournaledQueue(sys.argv[1], QueueConfig(sync="always", journal_size=1000), name="q")
    readers = sys.argv[2] == "reader"
    if readers:
        r = q.reader("r")
    ids = [q.put(b"x" * 60) for _ in range(100)]
    if readers:
        r.get_many(5)  # open reads and a checkpoint to rewrite: what the issue saw destroyed
        q.checkpoint()
    print(json.dumps({"pid": os.getpid(), "last": ids[-1]}), flush=True)
    for line in sys.stdin:
        print(json.dumps({"files": len(q.journal.files), "put": q.put(b"y")}), flush=True)
    """
)

OPENER = textwrap.dedent(
    """
    import json, sys
    from journaled import JournaledQueue, QueueConfig, QueueLocked
    try:
        q = JournaledQueue(sys.argv[1], QueueConfig(sync="always"), name="q")
    except QueueLocked as exc:
        print(json.dumps({"refused": str(exc), "host": getattr(exc, "host", None), "pid": exc.pid}))
    else:
        print(json.dumps({"opened": True, "is_owner": q.is_owner}))
        q.close()
    """
)


@pytest.fixture(params=["reader"])
def owner(sshfs, request):
    share, mnt = sshfs
    real, mounted = os.path.join(share, "q"), os.path.join(mnt, "q")
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, real, request.param],
        env=env(None),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
    yield real, mounted, proc, info
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=30)


@pytest.mark.parametrize("host", ["beta", None], ids=["another-host", "same-host-other-mount"])
def test_a_second_owner_through_sshfs_is_refused_and_changes_nothing(owner, host) -> None:
    real, mounted, proc, info = owner
    os.kill(proc.pid, signal.SIGSTOP)  # the directory stands still while we compare it
    try:
        before = every_file(real)
        out = subprocess.run(
            [sys.executable, "-c", OPENER, mounted],
            env=env(host),
            capture_output=True,
            text=True,
            timeout=120,
        )
        after = every_file(real)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert "refused" in result, f"opened through the mount while the owner lives: {result}"
    assert result["pid"] == info["pid"] and f"pid {info['pid']}" in result["refused"], result
    # the message says which: another host, or this host through another mount
    assert ("another mount" in result["refused"]) == (host is None), result
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [], f"the second owner changed {changed}"  # socket, lock, checkpoints: untouched
    proc.stdin.write("put\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    assert json.loads(proc.stdout.readline())["put"] == info["last"] + 1  # type: ignore[union-attr]


@pytest.mark.parametrize("owner", ["no reader"], indirect=True)
def test_archiving_follows_a_bookmark_written_through_the_mount(owner) -> None:
    real, mounted, proc, info = owner
    proc.stdin.write("put\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    before = json.loads(proc.stdout.readline())["files"]  # type: ignore[union-attr]
    assert before >= 5
    time.sleep(1.5)  # the owner's first background passes ran, with no bookmark yet
    code = (
        "import sys; from journaled.disk.bookmarks import write_bookmark as w; "
        "w(sys.argv[1], 'spark', int(sys.argv[2]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, mounted, str(info["last"] + 2)], env=env("beta"), check=True, timeout=60
    )
    start = time.monotonic()
    files = before
    while time.monotonic() - start < 5.0 and files > 1:
        time.sleep(0.1)
        proc.stdin.write("put\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        files = json.loads(proc.stdout.readline())["files"]  # type: ignore[union-attr]
    print(
        f"through sshfs: {before} -> {files} journal files "
        f"{time.monotonic() - start:.2f} s after the bookmark"
    )
    assert files == 1, f"{before} -> {files} journal files 5 s after a bookmark written through the mount"
