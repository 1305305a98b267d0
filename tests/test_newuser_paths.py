"""Wrong paths given to ``JournaledQueue``, as a new user writes them: an empty string (an unset
environment variable) is refused instead of turning the current directory into a queue, and a
file where the queue directory should be is called what it is."""

from __future__ import annotations

import os

import pytest

from journaled import JournaledQueue, QueueConfig


def test_an_empty_path_is_refused_and_the_current_directory_left_alone(tmp_path, monkeypatch) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="empty"):
        JournaledQueue("")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


@pytest.mark.parametrize("below", ["", "sub"])
def test_a_file_in_the_way_is_not_a_directory(tmp_path, below: str) -> None:
    afile = tmp_path / "queue"
    afile.write_bytes(b"not a queue")
    with pytest.raises(NotADirectoryError, match="not a directory") as exc:
        JournaledQueue(str(afile / below) if below else str(afile), QueueConfig(compression="zstd"))
    assert str(afile) in str(exc.value)
    assert afile.read_bytes() == b"not a queue"
