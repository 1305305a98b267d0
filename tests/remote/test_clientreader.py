"""A reader in a client process offers what an owner's reader offers: batches, delays, rejects,
seeking, loops and the asyncio forms, each carried out by the owner with the same contract.
And queue objects sent to another process (pickled, as ``multiprocessing`` does with the spawn
start method) are opened there through the owner.

Real processes throughout: the owner is this test, each client a child Python process.
"""

from __future__ import annotations

import multiprocessing
import pickle
import subprocess
import sys
import textwrap
import time

import pytest

import journaled
from journaled import DeadLetter, JournaledQueue, ReaderConfig

TIMEOUT = 120


def client(code: str, *args: str) -> list[str]:
    """Run ``code`` in a child process (its queue is a client of ours); its output lines."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


PRELUDE = """
import sys, asyncio
from journaled import JournaledQueue, ReaderConfig, Empty, UnknownRead
q = JournaledQueue(sys.argv[1])
assert not q.is_owner
r = q.reader("r")
"""


def test_get_many_in_a_client_opens_several_reads_with_one_request(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b", b"c", b"d", b"e"])
        lines = client(
            PRELUDE
            + """
batch = r.get_many(3, timeout=30)
print([i.data.decode() for i in batch])
r.commit_many(batch[:2])
try:
    r.commit_many(batch[:2])
except UnknownRead:
    print("already committed")
r.abort(batch[2])
rest = r.get_many(10, timeout=30)
print([(i.data.decode(), i.error_count) for i in rest])
r.commit_many(iter(rest))
try:
    r.get_many(5, timeout=0.2)
except Empty:
    print("Empty")
try:
    r.get_many(0)
except ValueError:
    print("ValueError")
q.close()
""",
            d,
        )
        assert lines == [
            "['a', 'b', 'c']",
            "already committed",
            "[('c', 1), ('d', 0), ('e', 0)]",
            "Empty",
            "ValueError",
        ]
        s = r.stats()
        assert (s.committed, s.aborted, s.items_waiting, s.open_reads) == (5, 1, 0, 0)


def test_abort_with_delay_in_a_client_holds_the_item_back_and_lets_the_rest_through(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put_many([b"slow", b"next"])
        lines = client(
            PRELUDE
            + """
import time
first = r.get(timeout=30)
r.abort(first, delay=30)
second = r.get(timeout=30)
print(second.data.decode())
r.commit(second)
try:
    r.get(timeout=0.3)
except Empty:
    print("held back")
try:
    r.abort(r.get_many(1, timeout=0)[0] if False else first, delay=-1)
except ValueError:
    print("ValueError")
q.close()
""",
            d,
        )
        assert lines == ["next", "held back", "ValueError"]
        s = r.stats()
        assert s.items_delayed == 1 and s.aborted == 1 and s.committed == 1


def test_reject_in_a_client_sends_the_item_to_the_owners_dead_letter_with_the_reason(tmp_path):
    d = str(tmp_path / "q")
    dead: list[DeadLetter] = []
    with JournaledQueue(d) as q:
        r = q.reader("r", ReaderConfig(dead_letter=dead.append))
        q.put_many([b"poison", b"fine"])
        lines = client(
            PRELUDE
            + """
bad = r.get(timeout=30)
r.reject(bad, reason="cannot parse")
good = r.get(timeout=30)
r.commit(good)
try:
    r.commit(bad)
except UnknownRead:
    print("settled")
try:
    r.reject(good, reason=7)
except TypeError:
    print("TypeError")
q.close()
""",
            d,
        )
        assert lines == ["settled", "TypeError"]
        assert len(dead) == 1
        letter = dead[0]
        assert (letter.kind, letter.reason, letter.data, letter.id) == (
            "rejected",
            "cannot parse",
            b"poison",
            1,
        )
        assert r.stats().rejected == 1


def test_seek_in_a_client_moves_the_reader_and_takes_back_reads_open_in_every_process(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put_many([b"1", b"2", b"3", b"4"])
        mine = r.get(timeout=5)  # open in the owner's process when the client seeks
        lines = client(
            PRELUDE
            + """
item = r.get(timeout=30)
print(item.data.decode())
print(r.seek("latest"))
try:
    r.commit(item)
except UnknownRead:
    print("taken back")
print(r.seek(2))
print(r.get(timeout=30).data.decode())
try:
    r.seek("middle")
except ValueError:
    print("ValueError")
q.close()
""",
            d,
        )
        assert lines == ["2", "5", "taken back", "2", "2", "ValueError"]
        with pytest.raises(journaled.UnknownRead):
            r.commit(mine)  # the client's seek took back the owner's own read too
        assert r.get(timeout=5).data == b"2"  # the client's open read went back when it left


def test_iter_and_process_in_a_client_commit_what_finished_and_abort_what_raised(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b", b"boom", b"c"])
        lines = client(
            PRELUDE
            + """
seen = []
for item in r.iter(timeout=0.5):
    seen.append(item.data.decode())
    if len(seen) == 2:
        break
print(seen)
def work(item):
    if item.data == b"boom" and item.error_count == 0:
        raise RuntimeError("first try fails")
    print("did", item.data.decode(), item.error_count, flush=True)
def failed(item, exc):
    print("failed", item.data.decode())
print("committed", r.process(work, timeout=0.5, on_error=failed))
q.close()
""",
            d,
        )
        assert lines == ["['a', 'b']", "did b 0", "failed boom", "did boom 1", "did c 0", "committed 3"]
        s = r.stats()
        assert (s.committed, s.aborted, s.items_waiting) == (4, 1, 0)


def test_break_out_of_iter_in_a_client_puts_the_item_back_before_the_next_get(tmp_path):
    # The iterator's finalizer cannot block, so the give-back goes out from a thread; the next
    # get must still find the item at the head, not the one after it.
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("r")
        lines = client(
            PRELUDE
            + """
out_of_order = 0
for n in range(40):
    q.put_many([b"first %d" % n, b"second %d" % n])
    for item in r.iter(timeout=30):
        first = item.data
        break
    again = r.get(timeout=30)
    out_of_order += again.data != first
    r.commit(again)
    r.commit(r.get(timeout=30))
print(out_of_order)
q.close()
""",
            d,
        )
        assert lines == ["0"]


def test_a_nan_timeout_is_refused_by_every_form_of_a_clients_read(tmp_path):
    # NaN compares false with everything: unchecked, a wait for it ends at once (or never)
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("r")
        q.put(b"waiting")  # a read that did not check would deliver it
        lines = client(
            PRELUDE
            + """
nan = float("nan")
async def atx():
    async with r.atransaction(timeout=nan):
        pass
async def ait():
    async for _ in r.aiter(timeout=nan):
        pass
forms = {
    "get": lambda: r.get(timeout=nan),
    "aget": lambda: asyncio.run(r.aget(timeout=nan)),
    "atransaction": lambda: asyncio.run(atx()),
    "aiter": lambda: asyncio.run(ait()),
    "aprocess": lambda: asyncio.run(r.aprocess(lambda item: None, timeout=nan)),
    "iter": lambda: list(r.iter(timeout=nan)),
    "process": lambda: r.process(lambda item: None, timeout=nan),
}
for name, call in forms.items():
    try:
        call()
        print(name, "accepted")
    except ValueError:
        print(name, "ValueError")
q.close()
""",
            d,
        )
        assert lines == [
            f"{name} ValueError"
            for name in ("get", "aget", "atransaction", "aiter", "aprocess", "iter", "process")
        ]
        assert q.reader("r").stats().items_waiting == 1


def test_a_clients_bad_reader_name_and_seek_raise_the_owners_errors(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("r")
        lines = client(
            PRELUDE
            + """
from journaled import InvalidName
for bad in (5, "../up", "a/b"):
    try:
        q.reader(bad)
    except InvalidName:
        print("InvalidName")
try:
    r.seek(float("nan"))
except ValueError as exc:
    print("ValueError", "finite" in str(exc))
q.close()
""",
            d,
        )
        assert lines == ["InvalidName"] * 3 + ["ValueError True"]
        assert q.readers() == ["r"]


def test_asyncio_reads_in_a_client_commit_abort_and_survive_cancellation(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        lines = client(
            PRELUDE
            + """
async def main():
    try:
        await asyncio.wait_for(r.aget(), 0.3)   # nothing there yet: cancelled while waiting
    except asyncio.TimeoutError:
        print("timed out")
    q.put_many([b"x", b"y", b"z"])
    async with r.atransaction(timeout=30) as item:
        print("txn", item.data.decode())
    try:
        async with r.atransaction(timeout=30) as item:
            raise RuntimeError
    except RuntimeError:
        print("aborted", item.data.decode())
    got = []
    async for item in r.aiter(timeout=0.5):
        got.append((item.data.decode(), item.error_count))
    print(got)
    q.put(b"w")
    print("processed", await r.aprocess(lambda item: None, timeout=0.5))
asyncio.run(main())
q.close()
""",
            d,
        )
        assert lines == ["timed out", "txn x", "aborted y", "[('y', 1), ('z', 0)]", "processed 1"]
        s = r.stats()
        assert (s.committed, s.aborted, s.open_reads, s.items_waiting) == (4, 1, 0, 0)


def work_in_a_spawned_child(jobs: journaled.Queue[dict[str, int]], results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    job = jobs.get(timeout=60)
    jobs.put({"done": job["n"]})
    jobs.task_done()
    results.put(jobs.journal.is_owner)
    jobs.close()


def test_a_queue_passed_to_a_spawned_child_is_used_there_through_its_owner(tmp_path):
    d = str(tmp_path / "q")
    jobs: journaled.Queue[dict[str, int]] = journaled.Queue(d)
    jobs.put({"n": 7})
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=work_in_a_spawned_child, args=(jobs, results))
    child.start()
    assert results.get(timeout=TIMEOUT) is False  # a client: the parent still owns the directory
    child.join(TIMEOUT)
    assert child.exitcode == 0
    assert jobs.get(timeout=5) == {"done": 7}
    jobs.task_done()
    jobs.close()


def test_a_pickled_queue_opens_by_path_and_becomes_owner_where_the_directory_is_free(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d, name="jobs")
    q.put(b"kept")
    data = pickle.dumps(q)
    q.close()
    again = pickle.loads(data)
    try:
        assert again.is_owner and again.name == "jobs" and again.path == q.path
        assert again.reader("r").get(timeout=5).data == b"kept"
    finally:
        again.close()


def test_a_get_many_reply_never_exceeds_what_one_frame_carries(tmp_path, monkeypatch):
    from journaled.item import new_item
    from journaled.remote import handlers, protocol

    monkeypatch.setattr(protocol, "MAX_PAYLOAD", 10)
    items = [new_item(i, b"x" * 4, time.time(), None, 0) for i in range(1, 6)]
    kept, rest = handlers.fit_reply(items)
    assert [i.id for i in kept] == [1, 2] and [i.id for i in rest] == [3, 4, 5]
    big = [new_item(1, b"x" * 50, time.time(), None, 0)]
    assert handlers.fit_reply(big) == (big, [])  # one item always goes, whatever its size


def test_journaled_stat_shows_the_owners_health_and_each_connected_process_with_its_open_reads(tmp_path):
    import json
    import os

    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("r")
        q.put_many([b"a", b"b"])
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent("""
                import sys
                from journaled import JournaledQueue
                q = JournaledQueue(sys.argv[1])
                q.reader("r").get(timeout=60)
                print("holding", flush=True)
                sys.stdin.read()
                """),
                d,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
            stat = subprocess.run(
                [sys.executable, "-m", "journaled", "stat", "--json", d],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            assert stat.returncode == 0, stat.stderr
            live = json.loads(stat.stdout)["owner"]
            assert live["health"]["ok"] is True
            assert live["clients"] == [{"pid": holder.pid, "connections": 1, "open_reads": {"r": 1}}]
            text = subprocess.run(
                [sys.executable, "-m", "journaled", "stat", d],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            ).stdout
            assert "health: ok" in text
            assert f"client pid {holder.pid}: 1 connection(s), open reads: r 1" in text
        finally:
            holder.communicate("", timeout=TIMEOUT)
        assert q.reader("r").stats().open_reads == 0  # its read went back when it left
    closed = subprocess.run(
        [sys.executable, "-m", "journaled", "stat", "--json", d],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert json.loads(closed.stdout)["owner"] is None and os.path.isdir(d)


def test_an_item_handed_to_a_client_survives_a_kill_9_of_the_owner_that_had_not_synced_it(tmp_path):
    import os
    import signal

    d = str(tmp_path / "q")
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
            import sys
            from journaled import JournaledQueue, QueueConfig
            q = JournaledQueue(sys.argv[1], QueueConfig(sync=3600))  # puts stay in its buffer
            q.reader("r")
            q.put(b"held by a client")
            print("ready", flush=True)
            sys.stdin.read()
            """),
            d,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        q = JournaledQueue(d)
        assert not q.is_owner
        item = q.reader("r").get(timeout=30)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(TIMEOUT)
        assert q.put(b"after the kill") == 2  # this process took over: id 1 is not given again
        r = q.reader("r")
        again = r.get(timeout=5)
        assert (again.id, again.data) == (item.id, item.data) == (1, b"held by a client")
        q.close()
    finally:
        owner.kill()
        owner.wait(TIMEOUT)
