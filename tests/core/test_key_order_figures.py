"""Key order's figures (issue 39, point 1): how many items wait behind a busy key, and the
oldest such wait, in ``stats()``, the metrics, ``journaled stat`` and ``journaled top``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from journaled import Empty, JournaledQueue, ReaderConfig
from journaled.metrics import QueueCollector


@pytest.fixture
def held(tmp_path):
    """A queue whose reader has key a's first item open: a's other two wait behind it (lined up
    as gets meet them: the last get finds nothing else to deliver)."""
    q = JournaledQueue(str(tmp_path / "q"))
    r = q.reader("r", ReaderConfig(key_order=True))
    for i, key in enumerate([b"a", b"a", b"b", b"a"]):
        q.put(b"item %d" % i, key=key)
    first = r.get(block=False)
    other = r.get(block=False)  # b's item: a's are held back, b is not
    assert (first.key, other.key) == (b"a", b"b")
    with pytest.raises(Empty):
        r.get(block=False)
    yield q, r, first
    q.close()


def test_stats_count_the_items_behind_a_busy_key_as_waiting_in_memory(held):
    q, r, first = held
    (st,) = q.stats().readers
    assert st.items_behind_keys == 2
    assert st.oldest_key_wait is not None and st.oldest_key_wait >= 0.0
    assert st.items_waiting == 2 and st.items_in_memory == 2 and st.items_on_disk == 0
    assert st.bytes_in_memory == 2 * len(b"item 0")
    r.commit(first)  # a's next one can go: one is left behind it
    (st,) = q.stats().readers
    assert st.items_behind_keys == 1


def test_a_reader_without_key_order_has_nothing_behind_keys(tmp_path):
    with JournaledQueue(str(tmp_path / "q")) as q:
        r = q.reader("r")
        q.put_many([b"x", b"y"], keys=[b"a", b"a"])
        r.get(block=False)
        (st,) = q.stats().readers
        assert (st.items_behind_keys, st.oldest_key_wait) == (0, None)


def test_the_metrics_show_the_items_behind_keys_and_the_oldest_wait(held):
    q, _r, _first = held
    text = QueueCollector([q]).exposition().decode()
    assert 'journaled_reader_behind_key_items{queue="q",reader="r"} 2.0' in text
    assert 'journaled_reader_oldest_key_wait_seconds{queue="q",reader="r"}' in text


def _journaled(*args: str) -> str:
    """Run the ``journaled`` command in another process (this one is the live owner it asks)."""
    env = dict(os.environ, COLUMNS="200")  # top's FLAGS column is the last: room for it
    done = subprocess.run(
        [sys.executable, "-m", "journaled", *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_stat_and_top_show_them_from_the_live_owner(held):
    q, _r, _first = held
    (reader,) = json.loads(_journaled("stat", "--json", q.path))["readers"]
    assert reader["items_behind_keys"] == 2 and reader["oldest_key_wait_s"] >= 0.0
    assert "behind a busy key (key order) 2, the oldest waiting" in _journaled("stat", q.path)
    assert "2 behind keys (" in _journaled("top", "--once", q.path)
