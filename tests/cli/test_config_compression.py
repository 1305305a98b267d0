"""``journaled config PATH queue --compression zstd|none``: stored with the queue like retention,
applied by the next owner to new put_many batches, shown by ``journaled config PATH``."""

from __future__ import annotations

import json
import subprocess
import sys

from journaled import JournaledQueue
from journaled.offline.scan import JournalScanner


def config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "config", *args], capture_output=True, text=True, timeout=120
    )


def test_compression_is_stored_shown_applied_and_removed(tmp_path) -> None:
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs) as q:
        q.put_many([b'{"msg":"plain"}'] * 50)
    on = config(jobs, "queue", "--compression", "zstd")
    assert on.returncode == 0, on.stderr
    assert "compression of new batches: zstd" in on.stdout
    shown = json.loads(config(jobs, "--json").stdout)
    assert shown["compression"] == "zstd" and shown["retention"] == {}
    assert "compression: zstd" in config(jobs).stdout
    with JournaledQueue(jobs) as q:  # the next owner applies what is stored
        q.put_many([b'{"msg":"compressed"}'] * 50)
    sizes = {r.size for r in JournalScanner(jobs).records()}
    assert len(sizes) == 2  # plain records and one unit's items (they take the unit's size)
    off = config(jobs, "queue", "--compression", "none", "--json")
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout)["compression"] is None
    assert [r.payload for r in JournalScanner(jobs).records()] == [b'{"msg":"plain"}'] * 50 + [
        b'{"msg":"compressed"}'
    ] * 50


def test_compression_needs_the_queue_target_and_a_known_codec(tmp_path) -> None:
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs) as q:
        q.reader("r")
    assert config(jobs, "reader", "r", "--compression", "zstd").returncode == 2
    assert config(jobs, "queue", "--compression", "lz4").returncode == 2
