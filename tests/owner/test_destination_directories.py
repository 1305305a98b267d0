"""A dead-letter or expiry destination given by its directory is a queue's directory, an empty
directory or a missing one: a directory that holds other things (a typo: ``dead_letter="~"``) is
refused through the API as ``journaled config`` and ``serve`` refuse it, and is never turned into
a queue, neither when it is set nor when a stored destination is opened later."""

from __future__ import annotations

import os
import warnings

import pytest

from journaled import JournaledQueue
from journaled.owner.destinations import destination_problem


def listing(path: str) -> list[str]:
    return sorted(os.listdir(path))


@pytest.fixture
def home(tmp_path):
    d = tmp_path / "home"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    return str(d)


def test_a_destination_holding_other_things_is_refused_and_left_untouched(tmp_path, home):
    with JournaledQueue(str(tmp_path / "q")) as q:
        q.reader("r")
        before = q.reader_settings("r")
        for field in ("dead_letter", "expire_to"):
            with pytest.raises(ValueError, match="holds no journaled queue and is not empty"):
                q.set_reader_settings("r", {field: home})
        assert q.reader_settings("r") == before  # nothing changed
    assert listing(home) == ["notes.txt"]


def test_a_destination_of_several_queues_or_a_file_is_refused(tmp_path):
    two = tmp_path / "two"
    for name in ("a", "b"):
        JournaledQueue(str(two), name=name).close()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with JournaledQueue(str(tmp_path / "q")) as q:
        q.reader("r")
        with pytest.raises(ValueError, match="holds several queues"):
            q.set_reader_settings("r", {"dead_letter": str(two)})
        with pytest.raises(ValueError, match="not a directory"):
            q.set_reader_settings("r", {"dead_letter": str(a_file)})


def test_an_empty_directory_or_a_queue_is_taken_and_receives_dead_letters(tmp_path):
    empty = tmp_path / "dead"
    empty.mkdir()
    existing = tmp_path / "other"
    JournaledQueue(str(existing)).close()
    for dest in (str(empty), str(existing)):
        assert destination_problem(dest) is None
    with JournaledQueue(str(tmp_path / "q")) as q:
        r = q.reader("r")
        q.set_reader_settings("r", {"dead_letter": str(empty), "max_errors": 1})
        q.put(b"poison")
        item = r.get(timeout=5)
        r.abort(item)
        q.run_policies()
        assert r.stats().dead_lettered == 1
    with JournaledQueue(str(empty)) as dead:
        assert dead.stats().next_id > 1  # the dead letter arrived in the new queue


def test_a_stored_destination_that_now_holds_other_things_is_not_opened(tmp_path):
    dest = tmp_path / "dead"
    dest.mkdir()
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("r")
        q.set_reader_settings("r", {"dead_letter": str(dest)})
    # the destination's files are removed and something else put in its place
    for name in os.listdir(dest):
        path = dest / name
        if path.is_dir():
            for sub in path.iterdir():
                sub.unlink()
            path.rmdir()
        else:
            path.unlink()
    (dest / "photo.jpg").write_bytes(b"\xff\xd8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with JournaledQueue(d) as q:
            q.reader("r")
            stats = q.stats()
            assert stats.readers[0].sinks_missing == ("dead_letter",)
            assert not stats.health.ok
    assert listing(str(dest)) == ["photo.jpg"]
