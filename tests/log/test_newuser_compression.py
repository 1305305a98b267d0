"""What a new user meets with ``QueueConfig(compression="zstd")`` on a machine without a zstd
binding: the open is refused before anything is created or stored, so the queue stays usable
once the setting is dropped from the program."""

from __future__ import annotations

import os

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.errors import CompressionUnavailable
from journaled.format import compressed


def test_a_refused_zstd_open_creates_no_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(compressed, "zstd", None)
    path = str(tmp_path / "new")
    with pytest.raises(CompressionUnavailable, match=r"journaled\[zstd\]"):
        JournaledQueue(path, QueueConfig(compression="zstd"), name="q")
    assert not os.path.exists(path), f"a refused open left {sorted(os.listdir(path))}"


def test_a_refused_zstd_open_stores_no_setting_and_the_queue_opens_without_it(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, name="q") as q:
        q.put_many([b"a", b"b"])
    before = sorted(os.listdir(path))
    monkeypatch.setattr(compressed, "zstd", None)
    with pytest.raises(CompressionUnavailable):
        JournaledQueue(path, QueueConfig(compression="zstd"), name="q")
    settings = os.path.join(path, "q.settings")
    assert not os.path.exists(settings) or "compression" not in open(settings).read(), open(settings).read()
    assert sorted(os.listdir(path)) == before
    with JournaledQueue(path, name="q") as q:  # the program without the setting: nothing stuck
        r = q.reader("r")
        assert [r.get(timeout=1).data for _ in range(2)] == [b"a", b"b"]


def test_turning_compression_off_opens_without_the_binding(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.put(b"plain")  # single puts stay plain: nothing compressed on disk
    monkeypatch.setattr(compressed, "zstd", None)
    with JournaledQueue(path, QueueConfig(compression="none"), name="q") as q:
        assert q.reader("r").get(timeout=1).data == b"plain"


def test_a_stored_zstd_setting_without_the_binding_says_how_to_turn_it_off(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.put(b"plain")
    monkeypatch.setattr(compressed, "zstd", None)
    with pytest.raises(CompressionUnavailable, match=r"journaled\[zstd\]") as exc:
        JournaledQueue(path, name="q")
    assert "stored" in str(exc.value) and "--compression none" in str(exc.value), str(exc.value)
