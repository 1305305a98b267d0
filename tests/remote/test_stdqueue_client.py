"""``journaled.Queue`` in a client process keeps its counts through the loss of the owner: an
item whose ``task_done`` (or ``nack``) raised :class:`~journaled.OwnerLost` is delivered again,
so it counts as waiting again, and ``join()`` waits for it.

Real processes: the owner is a child, killed with SIGKILL; this test is the client (and then
the next owner)."""

from __future__ import annotations

import threading

import pytest

import journaled
from support.child import Child

OWNER = """
import sys
import journaled
q = journaled.Queue(sys.argv[1])
for i in range(3):
    q.put({"job": i})
q.journal.sync()
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("settle", ["task_done", "nack"])
def test_a_fetch_lost_with_the_owner_counts_as_waiting_again_and_join_waits_for_it(tmp_path, settle):
    path = str(tmp_path / "jobs")
    owner = Child(OWNER, path)
    owner.wait_for_line("ready")
    q: journaled.Queue[dict[str, int]] = journaled.Queue(path)  # a client of the owner
    try:
        assert (q.qsize(), q.unfinished_tasks) == (3, 3)
        assert q.get(timeout=30) == {"job": 0}
        owner.kill()
        with pytest.raises(journaled.OwnerLost):
            getattr(q, settle)()
        assert (q.qsize(), q.unfinished_tasks) == (3, 3)  # job 0 waits again
        seen = []
        for _ in range(2):
            seen.append(q.get(timeout=30)["job"])
            q.task_done()
        assert sorted(seen) == [0, 1] and (q.qsize(), q.unfinished_tasks) == (1, 1)
        joined = threading.Event()
        threading.Thread(target=lambda: (q.join(), joined.set()), daemon=True).start()
        assert not joined.wait(0.5)  # job 2 is neither fetched nor done
        assert q.get(timeout=30) == {"job": 2}
        q.task_done()
        assert joined.wait(30)
    finally:
        q.close()
        owner.stop()
