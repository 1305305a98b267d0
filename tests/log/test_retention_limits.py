"""Retention that does not need a reader (issue 22, point 3): ``QueueConfig(retention_age=...,
retention_bytes=...)`` archives journal files past a limit whoever is behind them; a reader
behind goes on at the first item kept and the gap is logged and counted.  The archiving pass is
called by the tests (``q.archive()``); time is a fake clock, never a sleep."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import pytest

import journaled.owner.readerfiles as readerfiles
from journaled import JournaledQueue, QueueConfig, ReaderConfig
from journaled.disk.settingsfile import load_settings


def started(jf) -> int:
    """When appending to journal file ``jf`` began, as retention counts it (docs/format.md,
    "retention_age"): the later of its name and its header's creation time."""
    return max(jf.ms, jf.header.created_ms)


NAME = "q"
PAYLOAD = b"p" * 40


def open_q(path: str, **kw: object) -> JournaledQueue:
    kw.setdefault("sync", "never")
    kw.setdefault("journal_size", 400)
    kw.setdefault("checkpoint_interval", 3600.0)
    return JournaledQueue(path, QueueConfig(**kw), name=NAME)  # type: ignore[arg-type]


def journal_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(path, e))
        for e in os.listdir(path)
        if e.startswith(f"{NAME}.") and e[len(NAME) + 1 :].isdigit()
    )


def test_retention_bytes_keeps_the_journal_under_the_limit_while_nobody_reads(tmpfs_qdir) -> None:
    with open_q(tmpfs_qdir, retention_bytes=1000) as q:
        for i in range(300):
            q.put(PAYLOAD)
            if i % 7 == 0:
                q.archive()
                # at most the limit, plus the file being written (journal_size 400)
                assert journal_bytes(tmpfs_qdir) <= 1000 + 400
        q.archive()
        files = list(q.journal.files)
        assert sum(jf.size for jf in files) <= 1000 or len(files) == 1  # right after a pass
        assert files[0].first_id > 200  # the oldest went, the newest stayed
        assert q.stats().journal_bytes <= 1000 + 400
    # no limit, no reader: everything is kept for the first reader (the rule before retention)
    other = tmpfs_qdir + "-none"
    with open_q(other) as q:
        for _ in range(300):
            q.put(PAYLOAD)
        q.archive()
        assert q.journal.files[0].first_id == 1


def test_retention_age_archives_files_whose_next_file_started_that_long_ago(tmpfs_qdir, monkeypatch) -> None:
    with open_q(tmpfs_qdir, retention_age=60) as q:
        for _ in range(60):
            q.put(PAYLOAD)
        files = list(q.journal.files)
        assert len(files) >= 4
        q.archive()  # real time: nothing is a minute old
        assert [jf.ms for jf in q.journal.files] == [jf.ms for jf in files]
        # the clock at exactly 60 s after file 2 started (its header's time: appending to it began
        # then; its name may be older, tests/log/test_spare_file_times.py): files 0 and 1 are past
        now = started(files[2]) + 60_000
        monkeypatch.setattr(readerfiles, "now_ms", lambda: now)
        q.archive()
        # files made within one millisecond started together: a run of them goes together
        kept = next(
            i for i in range(2, len(files)) if i == len(files) - 1 or started(files[i + 1]) > now - 60_000
        )
        assert [jf.ms for jf in q.journal.files] == [jf.ms for jf in files[kept:]]
        # a day later everything but the file being written is past
        monkeypatch.setattr(readerfiles, "now_ms", lambda: started(files[-1]) + 86_400_000)
        q.archive()
        assert [jf.ms for jf in q.journal.files] == [files[-1].ms]


def test_a_reader_behind_gets_a_reported_gap_then_the_kept_items(tmpfs_qdir, caplog) -> None:
    with open_q(tmpfs_qdir, retention_bytes=800) as q:
        r = q.reader("r", ReaderConfig(start="earliest"))
        for _ in range(3):
            q.put(PAYLOAD)
        for _ in range(3):
            r.commit(r.get(block=False))
        for _ in range(60):
            q.put(PAYLOAD)
        with caplog.at_level(logging.WARNING, logger="journaled"):
            q.checkpoint()
            q.archive()
        keep = q.journal.files[0].first_id
        assert keep > 4
        stats = q.stats().readers[0]
        assert stats.items_lost_to_retention == keep - 4  # ids 4..keep-1, never delivered
        assert stats.head == keep
        # reported as WARNINGs whose ranges cover exactly ids 4..keep-1 (the background thread,
        # woken by the checkpoint, may archive part of it before q.archive() does the rest)
        reported: list[int] = []
        for rec in caplog.records:
            m = re.search(r"items (\d+)\.\.(\d+) are past retention", rec.getMessage())
            if m and rec.levelno == logging.WARNING:
                reported.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        assert sorted(reported) == list(range(4, keep))
        got = [r.get(block=False) for _ in range(3)]
        assert [it.id for it in got] == [keep, keep + 1, keep + 2]
        # a reader that is not behind loses nothing
        q.checkpoint()
        q.archive()
        assert q.stats().readers[0].items_lost_to_retention == keep - 4


def test_the_limits_are_stored_and_an_explicit_value_changes_them(tmpfs_qdir, caplog) -> None:
    settings = os.path.join(tmpfs_qdir, f"{NAME}.settings")
    with caplog.at_level(logging.INFO, logger="journaled"):
        with open_q(tmpfs_qdir, retention_bytes=1000, retention_age=3600.5):
            pass
    assert any("queue settings changed" in rec.getMessage() for rec in caplog.records)
    assert load_settings(settings).queue == {"retention_age": 3600.5, "retention_bytes": 1000}
    with open_q(tmpfs_qdir):  # None keeps what is stored
        pass
    assert load_settings(settings).queue == {"retention_age": 3600.5, "retention_bytes": 1000}
    with open_q(tmpfs_qdir, retention_bytes=2000, retention_age=-1):  # a value replaces, -1 removes
        pass
    assert load_settings(settings).queue == {"retention_bytes": 2000}
    with open_q(tmpfs_qdir, retention_bytes=-1):
        pass
    assert load_settings(settings).queue == {}
    with open(settings, "rb") as f:
        assert b"queue" not in f.read()  # no limit: no line


def test_the_limits_survive_a_reopen_by_another_process(tmpfs_qdir) -> None:
    code = (
        "import sys\n"
        "from journaled import JournaledQueue, QueueConfig\n"
        "q = JournaledQueue(sys.argv[1], QueueConfig(retention_bytes=1000, journal_size=400), name='q')\n"
        "q.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, tmpfs_qdir], check=True, timeout=60)
    with open_q(tmpfs_qdir) as q:  # defaults: the stored limit applies
        for _ in range(300):
            q.put(PAYLOAD)
        q.archive()
        assert q.stats().journal_bytes <= 1000 + 400
        assert q.journal.files[0].first_id > 200


def test_a_stored_queue_line_this_version_cannot_apply_gives_no_limit(tmpfs_qdir, caplog) -> None:
    from journaled.format.smallfiles import encode_crc_text

    with open_q(tmpfs_qdir):
        pass
    with open(os.path.join(tmpfs_qdir, f"{NAME}.settings"), "wb") as f:
        f.write(encode_crc_text("journaled-settings 1", ["queue " + json.dumps({"retention_bytes": -5})]))
    with caplog.at_level(logging.WARNING, logger="journaled"):
        with open_q(tmpfs_qdir) as q:
            for _ in range(100):
                q.put(PAYLOAD)
            q.archive()
            assert q.journal.files[0].first_id == 1  # never archive more than asked
    assert any("not applied" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"retention_age": 0}, ValueError),
        ({"retention_age": -2}, ValueError),
        ({"retention_age": float("nan")}, ValueError),
        ({"retention_age": float("inf")}, ValueError),
        ({"retention_age": "1h"}, TypeError),
        ({"retention_age": True}, TypeError),
        ({"retention_bytes": 0}, ValueError),
        ({"retention_bytes": 1.5}, TypeError),
        ({"retention_bytes": True}, TypeError),
        ({"retention_bytes": -1.0}, TypeError),
    ],
)
def test_bad_limits_raise_typed_errors(kw: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error, match="retention_"):
        QueueConfig(**kw)  # type: ignore[arg-type]


def test_good_limits() -> None:
    assert QueueConfig(retention_age=0.5, retention_bytes=1).retention_bytes == 1
    assert QueueConfig(retention_age=-1, retention_bytes=-1).retention_age == -1
    assert QueueConfig().retention_age is None


def test_an_open_read_in_the_gap_is_taken_back_and_the_pass_keeps_looking(tmpfs_qdir) -> None:
    """As by a seek: a read of an archived item is no longer open (committing it raises
    ``UnknownRead``).  With a limit set the background pass runs again without a head moving."""
    from journaled.errors import UnknownRead

    with open_q(tmpfs_qdir, retention_bytes=800) as q:
        r = q.reader("r")
        q.put(PAYLOAD)
        held = r.get(block=False)
        for _ in range(60):
            q.put(PAYLOAD)
        q.archive()
        assert q._files.archive_wanted  # time passes and puts grow the journal: look again
        assert q.stats().readers[0].open_reads == 0
        with pytest.raises(UnknownRead):
            r.commit(held)
        assert r.get(block=False).id == q.journal.files[0].first_id
    with open_q(tmpfs_qdir + "-plain") as q:
        q.reader("r")
        q.archive()
        assert not q._files.archive_wanted  # no limit, no bookmark: only a moved head asks again
