"""A real network file system for tests (issue 36): a private sshd on 127.0.0.1 and an sshfs
mount of a directory of this machine, with the mount options docs/design.md recommends ("Shared
and network filesystems").  The owner works through the real directory, "another host" through the
mount, where ``flock`` is local to the FUSE client.  Needs Debian's ``openssh-server`` and
``sshfs`` and ``/dev/fuse`` (``.ci/run`` would install them): :func:`mounted` skips the test and
says why where they are missing or the mount is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.paths import ROOT

SSHD = "/usr/sbin/sshd"
#: the mount options docs/design.md recommends ("Shared and network filesystems")
OPTIONS = "dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mounted(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(real directory, the same directory through an sshfs mount); unmounted and sshd stopped
    after.  Skips the calling test where the tools or FUSE are missing or the mount is refused."""
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


def env(host: str | None, **extra: str) -> dict[str, str]:
    """The environment of a child playing ``host`` (``JOURNALED_HOST_ID``; None: this host's name)
    with this checkout first on its path, plus ``extra`` variables."""
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)
    e.pop("JOURNALED_HOST_ID", None)
    if host is not None:
        e["JOURNALED_HOST_ID"] = host
    return e
