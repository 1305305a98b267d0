"""Archiving follows external bookmarks whenever they appear or move (issue 36, point 2), with
readers or without, within a bounded delay: the owner's lease thread notices ``external/``
changing (owner/engine.py) and wakes archiving.  The bookmark is written by another process, as a
Spark query does, after the owner opened."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from journaled import JournaledQueue, QueueConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAYLOAD = b"p" * 60
#: what the delay may be: one lease period to notice, one archiving pass, and a loaded machine
BOUND = 5.0


def bookmark_from_another_process(path: str, name: str, head: int) -> None:
    code = (
        "import sys; from journaled.disk.bookmarks import write_bookmark as w; "
        "w(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", code, path, name, str(head)], env=env, check=True, timeout=60)


def files_once(q: JournaledQueue, until: int, limit: float) -> tuple[int, float]:
    """Wait until the queue holds at most ``until`` journal files; (files, seconds waited)."""
    start = time.monotonic()
    while True:
        n = len(q.journal.files)
        if n <= until or time.monotonic() - start > limit:
            return n, time.monotonic() - start
        time.sleep(0.05)


def first_kept(q: JournaledQueue, head: int) -> int:
    """How many journal files stay once everything below ``head`` may go."""
    start = max(jf.first_id for jf in q.journal.files if jf.first_id <= head)
    return sum(1 for jf in q.journal.files if jf.first_id >= start)


@pytest.mark.parametrize("readers", [0, 1])
@pytest.mark.parametrize("sync", ["never", "always"])
def test_a_bookmark_that_appears_or_moves_after_open_is_followed_within_the_bound(
    tmp_path, readers: int, sync: str
) -> None:
    path = str(tmp_path / "q")
    os.makedirs(path, mode=0o700)
    if readers:  # a Spark query far behind when the owner opens
        bookmark_from_another_process(path, "spark", 1)
    # no checkpoint interval to wake archiving by chance: only the bookmark can
    cfg = QueueConfig(sync=sync, journal_size=1000, checkpoint_interval=3600.0)
    with JournaledQueue(path, cfg, name="q") as q:
        if readers:  # a reader that read everything and checkpointed it
            r = q.reader(
                "done",
            )
        ids = [q.put(PAYLOAD) for _ in range(120)]
        if readers:
            r.commit_many(r.get_many(1000))
            q.checkpoint()
        time.sleep(1.5)  # the owner's background passes ran: the bookmark holds everything
        before = len(q.journal.files)
        assert before >= 9
        target = ids[-1] - 20
        want = first_kept(q, target)
        bookmark_from_another_process(path, "spark", target)  # appears (readers=0) or moves
        after, delay = files_once(q, want, BOUND)
        print(f"readers={readers} sync={sync}: {before} -> {after} files in {delay:.2f} s")
        assert after <= want, (
            f"{before} -> {after} journal files {delay:.1f} s after the bookmark (want {want})"
        )
        bookmark_from_another_process(path, "spark", ids[-1] + 1)  # and moves again
        after2, delay2 = files_once(q, 1, BOUND)
        print(f"  moved: {after} -> {after2} files in {delay2:.2f} s")
        assert after2 == 1, f"{after} -> {after2} journal files {delay2:.1f} s after the bookmark moved"
