"""Files named like journal files that are not ours, and directories holding two queues.

A FIFO is never blocked on (it is looked at with ``O_NONBLOCK`` and judged by ``fstat``), a
zero-filled file with a name we never give (``q.7``) is not ours, and neither is ever read as a
journal, renamed or deleted.  Journal files of a second queue (files ``p.<digits>`` whose bytes
prove them journal files of ``p``: docs/format.md, section 1, [F-1]) make the directory two queues': an
open without a name raises ``InvalidName`` and changes nothing; ``name=`` picks one of them.
"""

from __future__ import annotations

import os
import stat
import threading

import pytest

from conftest import ready_items as ready
from journaled import ForeignFile, InvalidName, JournaledQueue, QueueConfig, ReaderConfig
from journaled.log import state as log_state
from journaled.log.journal import detect_queue_name

CFG = QueueConfig(sync="always", checkpoint_interval=3600.0)


def _make_queue(path: str, name: str, n: int = 3) -> None:
    with JournaledQueue(path, CFG, name=name) as q:
        q.put_many([b"%s-%d" % (name.encode(), k) for k in range(n)])


def _snapshot(path: str) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        st = os.lstat(full)
        if stat.S_ISFIFO(st.st_mode):
            out[entry] = "fifo"
        elif stat.S_ISREG(st.st_mode) and not entry.startswith("."):
            with open(full, "rb") as f:
                out[entry] = f.read()
    return out


def _open_in_thread(path: str, **kw: object) -> BaseException | None:
    """Open and close the queue on another thread; fail if it blocks (a FIFO opened blocking
    waits for a writer forever)."""
    result: list[BaseException | None] = []

    def run() -> None:
        try:
            JournaledQueue(path, CFG, **kw).close()  # type: ignore[arg-type]
            result.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "opening the queue blocked"
    return result[0]


@pytest.mark.parametrize("ms", [7, 1999999999999])
def test_a_fifo_named_like_a_journal_file_is_refused_without_blocking_and_left_alone(qdir, ms):
    _make_queue(qdir, "q")
    os.mkfifo(os.path.join(qdir, f"q.{ms}"))
    before = _snapshot(qdir)
    exc = _open_in_thread(qdir, name="q")
    assert isinstance(exc, ForeignFile) and f"q.{ms}" in str(exc)
    assert _snapshot(qdir) == before


def test_a_fifo_named_like_another_queues_journal_names_no_queue_and_blocks_nothing(qdir):
    _make_queue(qdir, "q")
    os.mkfifo(os.path.join(qdir, "p.1999999999999"))
    before = _snapshot(qdir)
    assert detect_queue_name(qdir) == "q"
    assert _open_in_thread(qdir) is None
    assert _open_in_thread(qdir, name="q") is None
    after = _snapshot(qdir)
    assert after["p.1999999999999"] == "fifo"
    assert {k: v for k, v in after.items() if k.startswith("q.1")} == {
        k: v for k, v in before.items() if k.startswith("q.1")
    }


def test_a_zero_filled_file_with_a_name_we_never_give_is_not_ours_and_never_touched(qdir):
    _make_queue(qdir, "q")
    with open(os.path.join(qdir, "q.7"), "wb") as f:
        f.write(bytes(4096))
    before = _snapshot(qdir)
    with pytest.raises(ForeignFile, match="q.7"):
        JournaledQueue(qdir, CFG, name="q")
    assert _snapshot(qdir) == before
    assert not [e for e in os.listdir(qdir) if e.endswith(".damaged")]


def test_a_zero_filled_file_named_like_another_queues_journal_names_no_queue(qdir):
    _make_queue(qdir, "q")
    zeros = os.path.join(qdir, "p.1999999999999")
    with open(zeros, "wb") as f:
        f.write(bytes(4096))
    assert detect_queue_name(qdir) == "q"
    with JournaledQueue(qdir, CFG, name="q") as q:
        q.put(b"more")
    with open(zeros, "rb") as f:
        assert f.read() == bytes(4096)


def test_journals_of_two_queues_raise_invalid_name_unless_a_name_picks_one(tmp_path):
    qdir = str(tmp_path / "d")
    _make_queue(qdir, "q")
    _make_queue(str(tmp_path / "other"), "p")
    for entry in os.listdir(tmp_path / "other"):
        if entry.startswith("p.") and entry[2:].isdigit():
            os.rename(tmp_path / "other" / entry, os.path.join(qdir, entry))
    before = _snapshot(qdir)
    with pytest.raises(InvalidName, match=r"several queues \['p', 'q'\]"):
        detect_queue_name(qdir)
    with pytest.raises(InvalidName, match="several queues"):
        JournaledQueue(qdir, CFG)
    assert _snapshot(qdir) == before  # refused before anything was created or changed
    with JournaledQueue(qdir, CFG, name="p") as p:  # name= picks one; the other is left alone
        assert [it.data for it in ready(p.reader("r", ReaderConfig(start="earliest")))] == [
            b"p-0",
            b"p-1",
            b"p-2",
        ]
    assert {k: v for k, v in _snapshot(qdir).items() if k.startswith("q.")} == {
        k: v for k, v in before.items() if k.startswith("q.")
    }


def test_a_readers_checkpoint_named_with_digits_is_not_a_second_queue(qdir):
    # "q.read.7" matches the journal pattern of a queue called "q.read"; its bytes say otherwise
    with JournaledQueue(qdir, CFG, name="q") as q:
        q.reader("7")
        q.put(b"x")
    assert os.path.exists(os.path.join(qdir, "q.read.7"))
    assert detect_queue_name(qdir) == "q"
    with JournaledQueue(qdir, CFG, name="q") as q:
        assert q.reader("7").get(block=False).data == b"x"


class FixedClock:
    """A clock stopped at ``ms``."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def time(self) -> float:
        return self.ms / 1000.0

    def time_ns(self) -> int:
        return self.ms * 1_000_000


def test_a_rotation_into_a_name_taken_by_a_fifo_takes_the_next_name_and_leaves_the_fifo(qdir, monkeypatch):
    with JournaledQueue(qdir, QueueConfig(sync="always", journal_size=4096), name="q") as q:
        q.put(b"a" * 3000)
        at = q.journal.files[-1].ms + 1000
        # the journal's clock (log/state.py, compiled: its module attribute is the seam) says ``at``
        monkeypatch.setattr(log_state, "CLOCK", FixedClock(at))
        os.mkfifo(os.path.join(qdir, f"q.{at}"))
        q.put(b"b" * 3000)  # rotates: q.<at> is taken
        assert [f.ms for f in q.journal.files][-1] == at + 1
        assert q.stats().health.ok
    assert stat.S_ISFIFO(os.lstat(os.path.join(qdir, f"q.{at}")).st_mode)
