"""A FIFO (or any file that is not a regular file) at a name the queue opens never blocks it
(issue 35, point 6): at a checkpoint's, the registry's, the settings file's or an ``external/``
bookmark's name, ``JournaledQueue(path)``, ``inspect_queue``, ``journaled stat``, ``journaled
check`` and a live owner's archiving and ``close()`` each return, and the name is skipped with a
log line saying it is not a regular file.  Each runs in a process of its own with a deadline: on
main they block."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from journaled import JournaledQueue
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)
DEADLINE = 30

NAMES = {
    "checkpoint": "jobs.read.r",
    "registry": "jobs.readers",
    "settings": "jobs.settings",
    "bookmark": os.path.join("external", "spy"),
}


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            env=ENV,
        )
    except subprocess.TimeoutExpired:
        return None


def _queue_with_fifo(tmp_path, where: str) -> str:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b"])
        r.commit(r.get(block=False))
    os.makedirs(os.path.join(path, "external"), exist_ok=True)
    target = os.path.join(path, NAMES[where])
    if os.path.lexists(target):
        os.unlink(target)
    os.mkfifo(target)
    return path


OPEN = """
import logging, sys
logging.basicConfig(level=logging.WARNING)
from journaled import JournaledQueue
with JournaledQueue(sys.argv[1]) as q:
    q.put(b"c")
    q.archive()
print("opened")
"""

INSPECT = """
import sys
from journaled.inspection import inspect_queue
inspect_queue(sys.argv[1])
print("inspected")
"""


@pytest.mark.parametrize("where", sorted(NAMES))
def test_a_fifo_at_a_name_the_queue_opens_never_blocks_it(tmp_path, where) -> None:
    path = _queue_with_fifo(tmp_path, where)
    results = {  # check first: the owner replaces a checkpoint or registry it cannot read
        "journaled check": _run(
            "import sys; from journaled.cli.main import main; sys.exit(main())", "check", path
        ),
        "JournaledQueue(path)": _run(OPEN, path),
        "inspect_queue": _run(INSPECT, path),
        "journaled stat": _run("from journaled.cli.main import main; main()", "stat", path),
    }
    blocked = [what for what, out in results.items() if out is None]
    assert not blocked, f"blocked for {DEADLINE} s: {blocked}"
    opened = results["JournaledQueue(path)"]
    assert opened is not None and opened.returncode == 0 and "opened" in opened.stdout, opened.stderr
    assert "not a regular file" in opened.stderr, opened.stderr
    checked = results["journaled check"]
    assert checked is not None and "Traceback" not in checked.stderr, checked.stderr
    if where == "checkpoint":  # reported, as a damaged checkpoint is
        assert checked.returncode == 1 and "not a regular file" in checked.stdout, checked.stdout
    shown = results["journaled stat"]
    assert shown is not None and "Traceback" not in shown.stderr, shown.stderr
    mode = os.lstat(os.path.join(path, NAMES[where])).st_mode
    if where in ("checkpoint", "registry"):  # skipped as damaged, then replaced by the owner's own
        assert stat.S_ISREG(mode)
    else:  # left where it was
        assert stat.S_ISFIFO(mode)


@pytest.mark.parametrize("where", ["checkpoint", "registry"])
def test_repair_leaves_a_fifo_at_a_checkpoint_or_registry_name_alone_and_never_blocks(
    tmp_path, where
) -> None:
    path = _queue_with_fifo(tmp_path, where)
    out = _run("import sys; from journaled.cli.main import main; sys.exit(main())", "repair", path)
    assert out is not None, f"blocked for {DEADLINE} s"
    assert out.returncode == 0 and "not a regular file" in out.stdout, out.stdout + out.stderr
    assert stat.S_ISFIFO(os.lstat(os.path.join(path, NAMES[where])).st_mode)  # never copied, moved


def test_a_fifo_dropped_into_external_of_a_live_owner_neither_stops_archiving_nor_close(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    out = _run(
        """
        import logging, os, sys
        logging.basicConfig(level=logging.WARNING)
        from journaled import JournaledQueue
        q = JournaledQueue(sys.argv[1])
        r = q.reader("r")
        q.put(b"a")
        os.makedirs(os.path.join(sys.argv[1], "external"), exist_ok=True)
        os.mkfifo(os.path.join(sys.argv[1], "external", "spy"))
        q.archive()
        r.commit(r.get(block=False))
        q.close()
        print("closed")
        """,
        path,
    )
    assert out is not None, f"blocked for {DEADLINE} s"
    assert out.returncode == 0 and "closed" in out.stdout, out.stderr
    assert "not a regular file" in out.stderr, out.stderr
