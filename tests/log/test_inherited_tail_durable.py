"""An owner under ``sync="always"`` answers for records a killed owner left only in the page
cache (a client's retried put is told its ids from them), so it makes them durable at open
before it acknowledges anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio
from support.paths import ROOT


class SyncLog(fileio.FileOps):
    """Real operations; remembers the path of every descriptor fsynced or fdatasynced."""

    def __init__(self) -> None:
        self.synced: list[str] = []

    def fdatasync(self, fd: int) -> None:
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        super().fsync(fd)


def killed_writer(path: str) -> None:
    """A child owner puts 50 items under sync="never" (nothing fsynced) and is killed."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue({path!r}, QueueConfig(sync="never"))
        q.put_many([b"x" * 10] * 50)
        q.write_out()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize(("sync", "synced_at_open"), [("always", True), (3600.0, False)])
def test_an_owner_under_sync_always_syncs_the_newest_file_it_inherits(tmp_path, sync, synced_at_open) -> None:
    path = str(tmp_path / "q")
    killed_writer(path)
    ops = SyncLog()
    with fileio.use(ops):
        q = JournaledQueue(path, QueueConfig(sync=sync))
        at_open = list(ops.synced)
        q.close()
    newest = max(n for n in os.listdir(path) if n.startswith("q.") and n[2:].isdigit())
    journal_synced = any(os.path.basename(p) == newest for p in at_open)
    assert journal_synced is synced_at_open
