"""Many processes, one queue: every process's ``JournaledQueue(path)`` works, served by the owner.

Real processes throughout (subprocesses running small scripts); synchronisation is by lines the
children print and by the queue itself, never by sleeping.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from journaled import JournaledQueue, QueueConfig, QueueLocked
from journaled.errors import UnknownRead

TIMEOUT = 120  # generous: a loaded 2-core machine


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    """A Python child running ``code`` (dedented) with ``args`` in ``sys.argv[1:]``."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str]) -> list[str]:
    """Wait for a child that must succeed; its output lines."""
    out, _ = child.communicate(timeout=TIMEOUT)
    assert child.returncode == 0, out
    return out.splitlines()


# ----------------------------------------------------------------------------- one client
def test_a_second_process_uses_the_queue_through_its_owner(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        assert q.is_owner
        r = q.reader("r")
        child = spawn(
            """
            import sys
            from journaled import JournaledQueue
            q = JournaledQueue(sys.argv[1])
            print(q.is_owner, q.put(b"one"), q.put_many([b"two", b"three"]), q.readers())
            r = q.reader("mine")
            item = r.get(timeout=60)
            r.commit(item)
            print(item.id, item.data.decode())
            q.close()
            """,
            d,
        )
        first = r.get(timeout=TIMEOUT)
        assert first.data == b"one"
        r.commit(first)
        lines = finish(child)
        assert lines == ["False 1 [2, 3] ['r']", "1 one"]
        assert [i.data for i in (r.get(timeout=5), r.get(timeout=5))] == [b"two", b"three"]
        assert q.reader("mine").stats().committed == 1


def test_a_second_open_in_the_owning_process_is_still_refused(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d):
        with pytest.raises(QueueLocked):
            JournaledQueue(d)


def test_reader_config_and_stats_travel_to_the_owner(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        child = spawn(
            """
            import sys
            from journaled import JournaledQueue, ReaderConfig
            q = JournaledQueue(sys.argv[1])
            r = q.reader("limited", ReaderConfig(max_items=2))
            q.put_many([b"a", b"b"])
            held = r.get(timeout=60)
            s = q.stats()
            print(s.clients[0].pid == __import__("os").getpid(), s.clients[0].open_reads)
            sys.stdout.flush()
            sys.stdin.readline()
            q.close()
            """,
            d,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "True {'limited': 1}"
        # the owner sees the client and the read it holds
        (client,) = q.stats().clients
        assert client.pid == child.pid and client.open_reads == {"limited": 1}
        assert q.reader("limited").config.max_items == 2
        child.stdin.write("\n")  # type: ignore[union-attr]
        finish(child)
        # closed with the read open: it was given back (once the owner saw the connection end;
        # a get made before that would be handed b"b" first)
        deadline = time.monotonic() + TIMEOUT
        while q.reader("limited").stats().aborted < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert q.reader("limited").get(timeout=TIMEOUT).data == b"a"
        assert q.stats().clients == ()


# ----------------------------------------------------------------------------- many processes
PRODUCER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
k, n = int(sys.argv[2]), int(sys.argv[3])
for i in range(0, n, 7):
    q.put_many([b"%d:%d" % (k, j) for j in range(i, min(n, i + 7))])
print("done", flush=True)
q.close()
"""

CONSUMER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
r = q.reader(sys.argv[2])
while True:
    item = r.get(timeout=120)
    r.commit(item)
    if item.data == b"STOP":
        break
    print(item.data.decode())
sys.stdout.flush()
q.close()
"""


def check_order(seen: list[str]) -> dict[int, list[int]]:
    """Per producer, the sequence numbers in the order one consumer saw them (must increase)."""
    per: dict[int, list[int]] = {}
    for line in seen:
        k, j = map(int, line.split(":"))
        per.setdefault(k, []).append(j)
    for seqs in per.values():
        assert seqs == sorted(seqs)
    return per


def test_four_producers_three_consumers_and_a_second_reader_get_every_item_exactly_once(tmp_path):
    d = str(tmp_path / "q")
    n = 300
    with JournaledQueue(d, QueueConfig(sync="never")) as q:
        q.reader("a")
        q.reader("b")
        consumers = [spawn(CONSUMER, d, "a") for _ in range(3)]
        other = spawn(CONSUMER, d, "b")
        producers = [spawn(PRODUCER, d, str(k), str(n)) for k in range(4)]
        for p in producers:
            assert finish(p) == ["done"]
        q.put_many([b"STOP"] * 3)  # one for each consumer of "a"; "b"'s consumer stops at the first
        seen_a = [finish(c) for c in consumers]
        seen_b = finish(other)
    expected = sorted(f"{k}:{j}" for k in range(4) for j in range(n))
    assert sorted(line for lines in seen_a for line in lines) == expected  # each to exactly one
    for lines in seen_a:
        check_order(lines)
    assert sorted(seen_b) == expected
    assert check_order(seen_b) == {k: list(range(n)) for k in range(4)}


# ----------------------------------------------------------------------------- a client dies
def test_reads_held_by_a_killed_client_are_delivered_again(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put_many([b"x", b"y", b"z", b"rest"])
        child = spawn(
            """
            import sys, time
            from journaled import JournaledQueue
            q = JournaledQueue(sys.argv[1])
            r = q.reader("r")
            print([r.get(timeout=60).data.decode() for _ in range(3)], flush=True)
            sys.stdin.readline()
            """,
            d,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "['x', 'y', 'z']"
        assert q.stats().clients[0].open_reads == {"r": 3}
        child.kill()  # SIGKILL: no close, no goodbye
        child.wait(timeout=TIMEOUT)
        # the owner's connection thread notices the end on its own time, and aborts the reads
        # after it forgot the session: a get made before would be handed an abort directly,
        # out of order
        deadline = time.monotonic() + TIMEOUT
        while (q.stats().clients or r.stats().aborted < 3) and time.monotonic() < deadline:
            time.sleep(0.01)
        back = [r.get(timeout=TIMEOUT) for _ in range(4)]
        assert [i.data for i in back] == [b"x", b"y", b"z", b"rest"]
        assert [i.error_count for i in back] == [1, 1, 1, 0]  # aborted: the consumer failed
        assert q.stats().clients == ()


def test_a_client_cannot_settle_a_read_it_does_not_hold(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put(b"mine")
        held = r.get(timeout=5)
        child = spawn(
            """
            import sys
            from journaled import JournaledQueue, UnknownRead
            q = JournaledQueue(sys.argv[1])
            try:
                q.reader("r").commit(1)
            except UnknownRead:
                print("refused")
            q.close()
            """,
            d,
        )
        assert finish(child) == ["refused"]
        r.commit(held)  # still ours
        with pytest.raises(UnknownRead):
            r.commit(held)


def test_items_put_by_a_client_under_the_default_policy_survive_the_owner_being_killed(tmp_path):
    d = str(tmp_path / "q")
    owner = spawn(
        """
        import sys
        from journaled import JournaledQueue
        q = JournaledQueue(sys.argv[1])
        q.reader("r")
        print("ready", flush=True)
        sys.stdin.readline()
        """,
        d,
    )
    assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
    client = spawn(
        """
        import sys
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue(sys.argv[1], QueueConfig(sync=3600.0))
        print(q.is_owner, q.put_many([b"%d" % i for i in range(50)])[-1], flush=True)
        sys.stdin.readline()
        """,
        d,
    )
    assert client.stdout is not None and client.stdout.readline().strip() == "False 50"
    owner.send_signal(signal.SIGKILL)  # acknowledged means handed to the OS: nothing is lost
    owner.wait(timeout=TIMEOUT)
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=TIMEOUT)
    with JournaledQueue(d) as q:
        r = q.reader("r")
        assert [r.get(timeout=5).data for _ in range(50)] == [b"%d" % i for i in range(50)]


# ----------------------------------------------------------------------------- a dedicated owner
def test_journaled_serve_holds_the_queue_for_others_and_hands_it_over_on_sigterm(tmp_path):
    d = str(tmp_path / "q")
    server = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", "--create", d], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"serving {d} (pid {server.pid})"
        q = JournaledQueue(d)
        assert not q.is_owner and q.owner_pid == server.pid
        r = q.reader("r")
        q.put(b"kept")
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=TIMEOUT) == 0
        assert r.get(timeout=TIMEOUT).data == b"kept"  # this process took the queue over
        assert q.is_owner
        q.close()
    finally:
        if server.poll() is None:
            server.kill()


def test_removing_a_reader_a_client_waits_on_leaves_its_other_reads_open(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("a")
        q.reader("b")
        q.put(b"held")
        child = spawn(
            """
            import sys
            from journaled import JournaledQueue, JournaledError
            q = JournaledQueue(sys.argv[1])
            a, b = q.reader("a"), q.reader("b")
            held = a.get(timeout=60)
            b.get(timeout=60)  # takes "held" on b too
            print("waiting", flush=True)
            try:
                b.get(timeout=60)
            except JournaledError as exc:
                print(type(exc).__name__, flush=True)
            a.commit(held)  # the read on "a" was not disturbed
            print("committed", flush=True)
            q.close()
            """,
            d,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "waiting"
        while q.reader("b").waiter_count == 0:  # until its get is in line at the owner
            time.sleep(0.001)
        q.remove_reader("b")
        lines = finish(child)
        assert lines[0] in ("QueueClosed", "UnknownReader") and lines[1] == "committed"
        assert q.reader("a").stats().committed == 1


def test_a_client_transaction_commits_or_aborts_at_the_owner(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put_many([b"fails", b"works"])
        child = spawn(
            """
            import sys
            from journaled import JournaledQueue
            q = JournaledQueue(sys.argv[1])
            r = q.reader("r")
            try:
                with r.transaction(timeout=60) as item:
                    raise RuntimeError(item.data)
            except RuntimeError:
                pass
            for _ in range(2):
                with r.transaction(timeout=60) as item:
                    print(item.data.decode(), item.error_count, flush=True)
            q.close()
            """,
            d,
        )
        assert finish(child) == ["fails 1", "works 0"]
        s = r.stats()
        assert (s.committed, s.aborted, s.items_waiting) == (2, 1, 0)


def test_journaled_queue_objects_pass_between_processes(tmp_path):
    import journaled

    d = str(tmp_path / "q")
    q = journaled.Queue(d)
    q.put({"job": 1})
    child = spawn(
        """
        import sys, journaled
        q = journaled.Queue(sys.argv[1])
        print(q.get(timeout=60)); q.task_done(); q.put(["from the child"]); q.close()
        """,
        d,
    )
    assert finish(child) == ["{'job': 1}"]
    assert q.get(timeout=5) == ["from the child"]
    q.task_done()
    q.close()


def test_a_client_naming_another_queue_of_the_owners_directory_is_refused_not_given_the_owners(tmp_path):
    # One owner locks the whole directory and serves the queue it opened.  A process naming the
    # other queue used to become a client of the owner's, its puts landing in the wrong queue.
    d = str(tmp_path / "q")
    for name in ("a", "b"):
        with JournaledQueue(d, name=name) as q:
            q.reader("r")
    code = """
        import sys
        from journaled import JournaledQueue, QueueLocked
        try:
            JournaledQueue(sys.argv[1], name="b").put(b"meant for b")
        except QueueLocked as exc:
            print("QueueLocked", exc)
        q = JournaledQueue(sys.argv[1], name="a")  # the queue it serves: a client, as ever
        print("client of", q.name, not q.is_owner)
        q.put(b"meant for a")
        q.close()
        from journaled.inspection import inspect_queue
        print("stat of b:", inspect_queue(sys.argv[1], "b").owner.error)
        """
    with JournaledQueue(d, name="a") as owner:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), d], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        refused, served, stat_b = done.stdout.splitlines()
        assert refused.startswith("QueueLocked") and "serves queue 'a', not 'b'" in refused
        assert served == "client of a True"
        assert owner.reader("r").get(timeout=10).data == b"meant for a"
        # nor are the owner's live figures shown as the other queue's (journaled stat, top)
        assert "serves queue 'a'" in stat_b
    with JournaledQueue(d, name="b") as b:
        assert len(b.reader("r")) == 0
