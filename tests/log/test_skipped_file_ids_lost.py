"""A journal file set aside at open (its header unreadable and not rebuilt) names the ids it held
(docs/format.md [F-19]: every RecoveryEvent carries them): those after the last record of the
file before it, up to the first id of the file after it.  It used to say ``ids_lost=None``."""

from __future__ import annotations

import logging

from journaled import Empty, JournaledQueue, QueueConfig
from journaled.format.record import header_size

CFG = QueueConfig(journal_size=4096)


def _fill(path: str, files: int = 4) -> list[tuple[str, int]]:
    """A queue of 300-byte items over ``files`` journal files; ``(path, first id)`` of each."""
    with JournaledQueue(path, CFG) as q:
        q.reader("r")
        while len(q.journal.files) < files:
            q.put(b"x" * 300)
        return [(jf.path, jf.first_id) for jf in q.journal.files]


def _zero_header(path: str) -> None:
    with open(path, "r+b") as f:
        f.write(bytes(header_size("q") + 40))  # the header and the first record's start


def _delivered(q: JournaledQueue) -> list[int]:
    r = q.reader("r")
    got = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return got
        got.append(item.id)
        r.commit(item)


def test_a_file_set_aside_names_the_ids_it_held(tmp_path, caplog) -> None:
    path = str(tmp_path / "q")
    files = _fill(path)
    victim, first = files[1]
    _zero_header(victim)
    with caplog.at_level(logging.WARNING, logger="journaled"):
        with JournaledQueue(path, CFG, name="q") as q:
            events = [e for e in q.recovery_report if e.action == "skipped-file"]
            got = _delivered(q)
            end = q.journal.next_id
    lost = (first, files[2][1] - 1)
    assert [(e.path, e.ids_lost) for e in events] == [(victim, lost)]
    assert sorted(set(range(1, end)) - set(got)) == list(range(lost[0], lost[1] + 1))
    assert any(f"ids lost: {lost}" in r.getMessage() for r in caplog.records)


def test_two_files_set_aside_in_a_row_each_name_the_whole_gap(tmp_path) -> None:
    path = str(tmp_path / "q")
    files = _fill(path, files=5)
    for victim, _first in files[1:3]:
        _zero_header(victim)
    with JournaledQueue(path, CFG, name="q") as q:
        events = [e for e in q.recovery_report if e.action == "skipped-file"]
    lost = (files[1][1], files[3][1] - 1)
    assert [(e.path, e.ids_lost) for e in events] == [(files[1][0], lost), (files[2][0], lost)]


def test_the_oldest_file_set_aside_has_no_known_start(tmp_path) -> None:
    """Nothing before it says where its ids began (older files may have been archived): the
    range is unknown, as for the newest file with none after it."""
    path = str(tmp_path / "q")
    files = _fill(path)
    _zero_header(files[0][0])
    with JournaledQueue(path, CFG, name="q") as q:
        events = [e for e in q.recovery_report if e.action == "skipped-file"]
    assert [(e.path, e.ids_lost) for e in events] == [(files[0][0], None)]
