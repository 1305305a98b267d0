"""Worker loops in a client survive a change of owner (issue 22, point 4).

Real processes: an owner child puts the jobs; worker children, clients of it, run
``reader.process`` (or ``aprocess``, ``iter``, ``aiter``, ``transaction``, ``atransaction``).
Each worker holds its first item inside its loop body until the owner is gone -- closed
normally, or killed with SIGKILL -- so that item's commit is certain to meet the loss.  Then the
loop must report the lost commit (``on_error``, else a WARNING), go on with the next owner (a
worker that takes the queue over, or another process that did), process every job at least once
and end only when asked: after ``IDLE`` seconds with nothing left.  The test waits on lines the
children print, never on fixed sleeps.
"""

from __future__ import annotations

import pytest

from journaled import JournaledQueue
from journaled.disk.dirlock import owner_pid
from support.child import Child

TIMEOUT = 120
JOBS = 30
IDLE = 2.0  # seconds without an item after which a worker's loop ends

OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
q.reader("w")
q.put_many([b"job-%d" % k for k in range(int(sys.argv[2]))])
q.sync()  # a kill -9 of this process must not take the jobs with it
print("ready", flush=True)
sys.stdin.readline()
q.close()
print("closed", flush=True)
"""

WORKER = """
import asyncio, logging, sys, time
from journaled import Empty, JournaledQueue, OwnerLost

logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="log %(levelname)s %(message)s")
d, mode, idle = sys.argv[1], sys.argv[2], float(sys.argv[3])
q = JournaledQueue(d)
r = q.reader("w")
print("client", not q.is_owner, flush=True)
held = False

def run(item):
    print("run", item.data.decode(), item.error_count, q.is_owner, flush=True)

def work(item):
    global held
    run(item)
    if not held:  # the first item: hold it until the owner is gone
        held = True
        print("holding", item.data.decode(), flush=True)
        sys.stdin.readline()
    time.sleep(0.01)

async def awork(item):
    global held
    run(item)
    if not held:
        held = True
        print("holding", item.data.decode(), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await asyncio.sleep(0.01)

def on_error(item, exc):
    unknown = exc.outcome_unknown if isinstance(exc, OwnerLost) else None
    print("error", item.data.decode(), type(exc).__name__, unknown, flush=True)

async def main():
    if mode == "aprocess":
        return await r.aprocess(awork, timeout=idle, on_error=on_error)
    if mode == "aiter":
        items = r.aiter(idle)
        async for item in items:
            await awork(item)
        return items.lost
    lost = 0
    while True:  # atransaction
        t = r.atransaction(idle)
        try:
            async with t as item:
                await awork(item)
        except Empty:
            return lost
        lost += t.lost is not None

if mode == "process":
    result = r.process(work, timeout=idle, on_error=on_error)
elif mode == "iter":
    items = r.iter(idle)
    for item in items:
        work(item)
    result = items.lost
elif mode == "transaction":
    result = 0
    while True:
        t = r.transaction(idle)
        try:
            with t as item:
                work(item)
        except Empty:
            break
        result += t.lost is not None
else:
    result = asyncio.run(main())
print("returned", result, flush=True)
q.close()
"""


def runs(lines: list[str]) -> list[tuple[str, int, bool]]:
    """The worker's ``run`` lines: (job, error count, whether the worker owned the queue)."""
    out = []
    for ln in lines:
        if ln.startswith("run "):
            _, job, errors, owner = ln.split()
            out.append((job, int(errors), owner == "True"))
    return out


CASES = [
    # (loop, how the owner goes, who takes the queue over)
    ("process", "close", "worker"),
    ("process", "kill", "worker"),
    ("process", "kill", "other"),
    ("aprocess", "close", "other"),
    ("aprocess", "kill", "worker"),
    ("iter", "kill", "worker"),
    ("aiter", "close", "other"),
    ("transaction", "close", "worker"),
    ("atransaction", "kill", "other"),
]


@pytest.mark.parametrize(("mode", "end", "successor"), CASES, ids=["-".join(c) for c in CASES])
def test_a_worker_loop_goes_on_through_a_change_of_owner(tmp_path, mode, end, successor):
    d = str(tmp_path / "q")
    owner = Child(OWNER, d, str(JOBS), merge_stderr=True)
    workers: list[Child] = []
    successor_queue = None
    try:
        owner.wait_for_line("ready")
        workers = [Child(WORKER, d, mode, str(IDLE), merge_stderr=True) for _ in range(2)]
        for w in workers:
            w.wait_for_line("holding")  # its first job is in its loop body, under the first owner
            assert "client True" in w.lines
        if end == "close":
            owner.send("close")
            assert "closed" in owner.finish()
        else:
            owner.kill()
        if successor == "other":
            # another process owns the queue before any worker notices: they go on as its clients
            successor_queue = JournaledQueue(d)
            assert successor_queue.is_owner
        for w in workers:
            w.send("go")
        outputs = [w.finish() for w in workers]
    finally:
        for child in [owner, *workers]:
            child.stop()

    held = {ln.split()[1] for out in outputs for ln in out if ln.startswith("holding")}
    assert len(held) == 2
    done = [r for out in outputs for r in runs(out)]
    # every job processed at least once; each held job once more, after the loss of its commit
    assert {job for job, _, _ in done} == {f"job-{k}" for k in range(JOBS)}
    for job in held:
        again = [r for r in done if r[0] == job]
        assert len(again) >= 2, (job, again)
        assert again[-1][1] == 0  # a read lost with its owner is not counted as an error
    for k, out in enumerate(outputs):
        assert not any("Traceback" in ln for ln in out), out
        # a worker that took the queue over may refuse, while it closes, the other's reconnection
        out = outputs[k] = [ln for ln in out if not (ln.startswith("log WARNING") and "refused a" in ln)]
        assert out[-1].startswith("returned")  # the loop ended by itself: nothing for IDLE seconds
        mine = next(ln.split()[1] for ln in out if ln.startswith("holding"))
        if mode in ("process", "aprocess"):
            # the lost commit went to on_error, as an OwnerLost; nothing was logged instead
            assert f"error {mine} OwnerLost False" in out, out
            assert not any(ln.startswith("log") for ln in out), out
        else:
            # no on_error in these shapes: the lost commit is a WARNING, and counted by the loop
            assert any(ln.startswith("log WARNING") and "lost with the queue's owner" in ln for ln in out)
            assert out[-1] == "returned 1", out
    if mode in ("process", "aprocess"):
        # the loop's count is of commits that landed: each job exactly once
        assert sum(int(out[-1].split()[1]) for out in outputs) == JOBS
    if successor == "other":
        assert successor_queue is not None
        assert all(not is_owner for _, _, is_owner in done)  # served by the other process throughout
    else:
        assert any(is_owner for _, _, is_owner in done)  # a worker took the queue over
    queue = successor_queue if successor_queue is not None else JournaledQueue(d)
    try:
        assert queue.is_owner and owner_pid(d) is not None
        stats = next(r for r in queue.stats().readers if r.name == "w")
        assert stats.items_waiting == 0 and stats.open_reads == 0, stats
    finally:
        queue.close()


DYING_OWNER = """
import os, socket, sys
from journaled.remote import protocol as proto
from journaled.remote.transport import FrameReader, send_frame, socket_address
d = sys.argv[1]
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
with open(os.path.join(d, ".journaled.lock"), "w") as lock:  # a client talks to the lock's owner only
    lock.write(str(os.getpid()))
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(socket_address(fd, d))
listener.listen(1)
print("listening", flush=True)
conn, _ = listener.accept()
hello, _ = FrameReader(conn).read()
send_frame(conn, {"ok": True, "owner": os.getpid(), "name": "q"})
request, _ = FrameReader(conn).read()
print("got", request["op"], flush=True)
os._exit(0)  # dies with the request received and not answered
"""


@pytest.mark.parametrize(
    ("header", "is_put", "unknown"),
    [
        ({"op": "commit", "reader": "w", "id": 1}, False, True),
        ({"op": "commit_many", "reader": "w", "ids": [1, 2]}, False, True),
        ({"op": "abort", "reader": "w", "id": 1}, False, True),
        ({"op": "put_many", "lens": [1], "ttl": None, "expire_at": None}, True, True),
        ({"op": "get", "reader": "w", "block": True, "timeout": 1.0}, False, False),
    ],
    ids=["commit", "commit_many", "abort", "put_many", "get"],
)
def test_a_settling_request_received_by_an_owner_that_died_unanswered_has_an_unknown_outcome(
    tmp_path, header, is_put, unknown
):
    """``OwnerLost.outcome_unknown`` says whether the lost request may have been carried out:
    for a commit it tells a worker whether the item may be committed after all."""
    from journaled.errors import OwnerLost
    from journaled.remote.connections import Link

    d = tmp_path / "q"
    d.mkdir(mode=0o700)
    owner = Child(DYING_OWNER, str(d), merge_stderr=True)
    try:
        owner.wait_for_line("listening")
        link = Link(str(d))
        with pytest.raises(OwnerLost) as lost:
            link.call(header, b"x" if is_put else b"", is_put=is_put)
        assert lost.value.outcome_unknown is unknown, lost.value
        assert f"got {header['op']}" in owner.finish()
        assert link.dead
    finally:
        owner.stop()


def test_a_commit_many_caught_by_a_change_of_owner_is_not_sent_again_and_its_items_come_back(tmp_path):
    """The reads of a ``commit_many`` died with the owner that noticed it: the call raises
    ``OwnerLost`` (the next owner never knew those reads: sent again, it answered
    ``UnknownRead``) and the items are delivered again, uncounted."""
    from journaled.errors import OwnerLost

    d = str(tmp_path / "q")
    owner = Child(OWNER, d, "3", merge_stderr=True)
    try:
        owner.wait_for_line("ready")
        q = JournaledQueue(d)
        assert not q.is_owner
        r = q.reader("w")
        items = r.get_many(3, timeout=5)
        owner.send("close")
        assert "closed" in owner.finish()
        with pytest.raises(OwnerLost) as lost:
            r.commit_many(items)  # the first call to notice: this process takes the queue over
        assert not lost.value.outcome_unknown  # the closing owner carried nothing of it out
        assert q.is_owner
        again = r.get_many(3, timeout=5)
        assert [(it.data, it.error_count) for it in again] == [(b"job-0", 0), (b"job-1", 0), (b"job-2", 0)]
        r.commit_many(again)
        q.close()
    finally:
        owner.stop()
