"""A real network file system (issue 36): a private sshd on 127.0.0.1 and an sshfs mount of a
directory of this machine.  The owner writes through the real directory, the other side works
through the mount, where ``flock`` is local to the FUSE client (it succeeds while the owner holds
the lock).  Needs Debian's ``openssh-server`` and ``sshfs`` and ``/dev/fuse`` (``.ci/run`` would
install them); skips and says why where they are missing or the mount is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SSHD = "/usr/sbin/sshd"
#: the mount options docs/design.md recommends ("Shared and network filesystems")
OPTIONS = "dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshfs(tmp_path) -> Iterator[tuple[str, str]]:
    """(real directory, the same directory through an sshfs mount)."""
    missing = [p for p in ("/dev/fuse", SSHD) if not os.path.exists(p)]
    missing += [b for b in ("sshfs", "ssh-keygen") if shutil.which(b) is None]
    if missing:
        pytest.skip(
            f"no network file system here: {', '.join(missing)} missing "
            "(apt-get install sshfs openssh-server)"
        )
    share, mnt, keys = tmp_path / "share", tmp_path / "mnt", tmp_path / "keys"
    for d in (share, mnt, keys):
        d.mkdir(mode=0o700)
    for k in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / k)], check=True)
    port = _free_port()
    (keys / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys}/host\nAuthorizedKeysFile {keys}/user.pub\n"
        f"PidFile {keys}/sshd.pid\nUsePAM no\nStrictModes no\nPermitRootLogin yes\n"
        "PasswordAuthentication no\nSubsystem sftp internal-sftp\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(keys / "sshd_config")], stderr=subprocess.DEVNULL)
    try:
        user = os.environ.get("USER") or "root"
        login = (
            f"IdentityFile={keys}/user,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes"
        )
        cmd = ["sshfs", f"{user}@127.0.0.1:{share}", str(mnt), "-p", str(port), "-o", OPTIONS, "-o", login]
        for _ in range(50):  # sshd needs a moment to listen
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            if out.returncode == 0:
                break
            time.sleep(0.1)
        else:
            pytest.skip(f"sshfs mount refused here: {out.stderr.strip()}")
        try:
            yield str(share), str(mnt)
        finally:
            umount = shutil.which("fusermount3") or shutil.which("fusermount") or "umount"
            subprocess.run([umount, "-u", str(mnt)] if "fuser" in umount else [umount, str(mnt)], check=False)
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


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


def env(host: str | None) -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("JOURNALED_HOST_ID", None)
    if host is not None:
        e["JOURNALED_HOST_ID"] = host
    return e


def every_file(path: str) -> dict[str, tuple[int, int, bytes]]:
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            st = os.lstat(full)
            data = open(full, "rb").read() if os.path.isfile(full) and not os.path.islink(full) else b""
            found[os.path.relpath(full, path)] = (st.st_mode, st.st_mtime_ns, data)
    return found


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
