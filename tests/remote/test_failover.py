"""Owner failover: when the owning process closes or dies, a remaining one takes the queue over.

Real processes, real ``kill -9``; the test waits on lines the children print (collected by one
thread per child) and on the lock's holder, never on fixed sleeps.
"""

from __future__ import annotations

import re
import time

from journaled import JournaledQueue
from journaled.disk.dirlock import owner_pid
from support.child import Child

TIMEOUT = 120


def test_when_the_owner_closes_a_client_takes_over_and_others_follow(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d)
    q.reader("r")
    child = Child(
        """
        import sys
        from journaled import JournaledQueue
        q = JournaledQueue(sys.argv[1])
        print(q.is_owner, q.put(b"from the client"), flush=True)
        sys.stdin.readline()
        i = q.put(b"after the owner left")
        print(q.is_owner, i, flush=True)
        sys.stdin.readline()
        q.close()
        """,
        d,
    )
    child.wait_for(lambda lines: lines == ["False 1"])
    q.close()
    child.send("go")
    child.wait_for(lambda lines: len(lines) == 2)
    assert child.lines[1] == "True 2"  # it owns the directory now, and served its own put
    assert owner_pid(d) == child.proc.pid
    q2 = JournaledQueue(d)  # this process is now the client
    assert not q2.is_owner
    r = q2.reader("r")
    assert [r.get(timeout=5).data, r.get(timeout=5).data] == [b"from the client", b"after the owner left"]
    child.finish()  # the child's close hands the directory back to us
    assert q2.put(b"third") == 3
    assert q2.is_owner
    q2.close()


PRODUCER = """
import sys
from journaled import JournaledQueue, OwnerLost
q = JournaledQueue(sys.argv[1])
k, n = int(sys.argv[2]), int(sys.argv[3])
print("open", "owner" if q.is_owner else "client", flush=True)
sys.stdin.readline()
for j in range(n):
    try:
        q.put(b"%d:%d" % (k, j))
        print("ack", j, flush=True)
    except OwnerLost as exc:
        assert exc.outcome_unknown, exc
        print("unknown", j, flush=True)
print("done", flush=True)
sys.stdin.readline()
q.close()
"""

CONSUMER = """
import sys
from journaled import JournaledQueue, OwnerLost
q = JournaledQueue(sys.argv[1])
r = q.reader("a")
print("open", "owner" if q.is_owner else "client", flush=True)
while True:
    item = r.get(timeout=120)
    print(item.data.decode(), item.id, flush=True)
    try:
        r.commit(item)
    except OwnerLost:
        pass  # the read was lost with the owner: it is delivered again
    if item.data == b"STOP":
        break
q.close()
"""


def test_kill_9_of_the_owner_during_puts_and_gets_loses_no_acknowledged_put(tmp_path):
    d = str(tmp_path / "q")
    owner = Child(
        """
        import sys
        from journaled import JournaledQueue
        q = JournaledQueue(sys.argv[1])
        q.reader("a")
        print("ready", flush=True)
        sys.stdin.readline()
        """,
        d,
    )
    owner.wait_for(lambda lines: lines == ["ready"])
    n = 3000
    consumers = [Child(CONSUMER, d)]
    producers = {k: Child(PRODUCER, d, str(k), str(n)) for k in range(3)}
    # Every producer is a client of the first owner before anything is killed.  One that opened
    # the queue after its owner died would own it from the start, and an owner's own puts follow
    # its sync policy (the last <= 0.05 s of them die with it under kill -9: docs/durability.md);
    # a client's acknowledged put is in the OS, and stays so after it takes the queue over.
    for c in [*consumers, *producers.values()]:
        c.wait_for(lambda lines: len(lines) >= 1)
        assert c.lines[0] == "open client", c.lines
    for p in producers.values():
        p.send("go")
    victim = owner
    moves = []
    for _round in range(2):
        seen = sum(len(c.lines) for c in consumers)
        consumers[-1].wait_for(lambda lines, seen=seen: sum(len(c.lines) for c in consumers) >= seen + 100)
        old = victim.proc.pid
        start = time.monotonic()
        victim.kill()
        while owner_pid(d) in (None, old, -1):
            assert time.monotonic() - start < 30, "nobody took the queue over"
            time.sleep(0.005)
        moves.append(time.monotonic() - start)
        new = owner_pid(d)
        everyone = {c.proc.pid: c for c in [*consumers, *producers.values()]}
        assert new in everyone
        victim = everyone[new]
        if victim in consumers:
            consumers.append(Child(CONSUMER, d))  # the next round kills this consumer
    print("ownership moved after", moves)
    assert max(moves) < 5.0, moves  # typically milliseconds: the lock is free once the owner is dead
    for p in producers.values():
        p.wait_for(lambda lines: lines[-1:] in (["done"], ["<eof>"]))
    alive = [c for c in consumers if c.proc.poll() is None]
    with JournaledQueue(d) as q:
        q.put_many([b"STOP"] * len(alive))  # one for each consumer still running
        for p in producers.values():
            if p.proc.poll() is None:
                p.finish()
        for c in alive:
            c.wait_for(lambda lines: any(ln.startswith("STOP") for ln in lines) or "<eof>" in lines)
            assert any(ln.startswith("STOP") for ln in c.lines), (q.stats(), owner_pid(d), moves)
            c.finish()
        assert q.stats().health.ok

    def complete(child: Child) -> list[str]:
        """Its lines, without the first (``open``) and the end marker, nor a last one the kill
        cut short.  A whole last line counts: a killed consumer that printed an item got it (and
        may have committed it: then it is never delivered again)."""
        lines = [ln for ln in child.lines[1:] if ln != "<eof>"]
        return lines[:-1] if child.last_line_cut else lines

    ids: dict[str, set[int]] = {}
    for c in consumers:
        for line in complete(c):
            if line.startswith("STOP"):
                continue
            m = re.fullmatch(r"(\d+):(\d+) (\d+)", line)
            assert m is not None, line  # nothing corrupt: only what producers put
            assert 0 <= int(m[1]) < 3 and 0 <= int(m[2]) < n
            ids.setdefault(f"{m[1]}:{m[2]}", set()).add(int(m[3]))
    for k, p in producers.items():
        acked = [int(ln.split()[1]) for ln in complete(p) if ln.startswith("ack ")]
        missing = [j for j in acked if f"{k}:{j}" not in ids]
        assert not missing, missing[:5]  # every acknowledged put delivered
        order = [ids[f"{k}:{j}"] for j in acked]
        assert all(len(s) == 1 for s in order), "an acknowledged item was delivered under two ids"
        flat = [min(s) for s in order]
        assert flat == sorted(flat)  # and stored in put order, so delivered in put order


def test_a_get_waiting_when_the_owner_closes_continues_on_the_next_owner(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d)
    q.reader("r")
    child = Child(
        """
        import sys
        from journaled import JournaledQueue
        q = JournaledQueue(sys.argv[1])
        r = q.reader("r")
        print("waiting", flush=True)
        item = r.get(timeout=120)  # in flight at the first owner, answered by this very process
        r.commit(item)
        print(q.is_owner, item.data.decode(), flush=True)
        sys.stdin.readline()
        q.close()
        """,
        d,
    )
    child.wait_for(lambda lines: lines == ["waiting"])
    while q.reader("r").waiter_count == 0:  # until its get is in line at the owner
        time.sleep(0.001)
    q.close()
    start = time.monotonic()
    while owner_pid(d) != child.proc.pid:  # it noticed, and took the directory over
        assert time.monotonic() - start < TIMEOUT
        time.sleep(0.005)
    with JournaledQueue(d) as client:
        assert not client.is_owner
        client.put(b"for the waiting get")
        child.wait_for(lambda lines: len(lines) == 2)
        assert child.lines[1] == "True for the waiting get"
        child.finish()
