"""A lease takeover through a real network file system (issue 36): host alpha owns a queue through
the real directory and is killed (``kill -9``: its host "dies"); host beta, opening through an
sshfs mount of it (tests/support/sshfs.py), is refused while alpha's lease is fresh, naming host
and pid, takes over once it expired, and finds every item alpha acknowledged; it deletes nothing it
cannot verify (alpha's socket stays).  The other way round: alpha, restarted while beta owns the
queue, is refused the same way, and opens at once after beta closed.

Both hosts run with ``JOURNALED_LEASE_EXPIRY=2`` (disk/lease.py), so the takeover comes 2 s +
``MAX_CLOCK_SKEW`` after alpha's last renewal, plus beta's confirmation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from journaled.disk import lease
from support.sshfs import env, mounted

EXPIRY = 2.0  # JOURNALED_LEASE_EXPIRY of both hosts
PERIOD = EXPIRY / 10
CONFIRM = 2 * PERIOD + 0.5

ALPHA = textwrap.dedent(
    """
    import json, os, sys
    from journaled import JournaledQueue, QueueConfig
    q = JournaledQueue(sys.argv[1], QueueConfig(sync="always", journal_size=8192), name="q")
    r = q.reader("r")
    print(json.dumps({"pid": os.getpid()}), flush=True)
    i = 0
    while True:  # each id printed was acknowledged: put returned, synced
        if i == 20:
            opened = r.get_many(5, block=False)  # reads alpha holds when it dies
        print(q.put(b"alpha-%06d" % i), flush=True)
        i += 1
    """
)

BETA = textwrap.dedent(
    """
    import json, os, sys, time
    from journaled import Empty, JournaledQueue, QueueConfig, QueueLocked
    refusals, first = 0, None
    started = time.monotonic()
    while True:
        try:
            q = JournaledQueue(sys.argv[1], QueueConfig(sync="always", journal_size=8192), name="q")
            break
        except QueueLocked as exc:
            refusals += 1
            if first is None:
                first = [time.monotonic() - started, str(exc), getattr(exc, "host", None), exc.pid]
            time.sleep(0.1)
    took = time.monotonic() - started
    r = q.reader("r")
    items = []
    while True:
        try:
            got = r.get_many(1000, block=False)
        except Empty:
            break
        items += [[it.id, it.data.decode()] for it in got]
        r.commit_many(got)
    ids = [q.put(b"beta-%d" % k) for k in range(3)]
    print(json.dumps({"pid": os.getpid(), "is_owner": q.is_owner, "took": took, "refusals": refusals,
                      "first": first, "items": items, "put": ids}), flush=True)
    sys.stdin.readline()  # hold the queue until told
    q.close()
    print(json.dumps({"closed": True}), flush=True)
    """
)

REOPEN = textwrap.dedent(
    """
    import json, sys
    from journaled import Empty, JournaledQueue, QueueConfig, QueueLocked
    try:
        q = JournaledQueue(sys.argv[1], QueueConfig(sync="always"), name="q")
    except QueueLocked as exc:
        print(json.dumps({"refused": str(exc), "host": getattr(exc, "host", None), "pid": exc.pid}))
    else:
        r, got = q.reader("r"), []
        while True:
            try:
                got.append(r.get(block=False).data.decode())
            except Empty:
                break
        print(json.dumps({"is_owner": q.is_owner, "items": got}))
        q.close()
    """
)


@pytest.fixture
def sshfs(tmp_path) -> Iterator[tuple[str, str]]:
    with mounted(tmp_path) as dirs:
        yield dirs


def run(script: str, path: str, host: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, path],
        env=env(host, JOURNALED_LEASE_EXPIRY=str(EXPIRY)),
        stdout=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def test_a_killed_owner_is_taken_over_through_sshfs_only_after_its_lease_expired_losing_nothing(
    sshfs,
) -> None:
    share, mnt = sshfs
    real, mounted_q = os.path.join(share, "q"), os.path.join(mnt, "q")
    alpha = run(ALPHA, real, "alpha")
    beta = None
    try:
        assert alpha.stdout is not None
        alpha_pid = json.loads(alpha.stdout.readline())["pid"]
        acked: list[int] = []
        while len(acked) < 300:
            acked.append(int(alpha.stdout.readline()))
        os.kill(alpha_pid, signal.SIGKILL)  # alpha's host "dies" in the middle of its puts
        killed = time.monotonic()
        alpha.wait(timeout=10)
        acked += [int(line) for line in alpha.stdout.read().split()]  # printed before the kill
        sock = os.lstat(os.path.join(real, ".journaled.sock")).st_ino
        files_before = set(os.listdir(real))

        beta = run(BETA, mounted_q, "beta", stdin=subprocess.PIPE)
        assert beta.stdout is not None
        result = json.loads(beta.stdout.readline())
        took_over = time.monotonic() - killed
        print(
            f"through sshfs: {len(acked)} acknowledged puts; beta refused {result['refusals']} times "
            f"(the first: {result['first'][:2] if result['first'] else None}), owner "
            f"{took_over:.1f} s after the kill (its open loop {result['took']:.1f} s); it read "
            f"{len(result['items'])} items"
        )
        # refused while alpha's lease was fresh, with the documented error naming host and pid
        assert result["first"], f"host beta opened at once, {took_over:.1f} s after alpha died: {result}"
        refused_in, message, host, pid = result["first"]
        assert host == "alpha" and pid == alpha_pid and refused_in < 2.0, result["first"]
        assert f"is owned by alpha pid {alpha_pid} (lease renewed" in message, message
        assert f"it can be taken over once the lease is {EXPIRY + lease.MAX_CLOCK_SKEW:g}s old" in message
        # ... and took over once it had expired: not before, not much after
        window = EXPIRY + lease.MAX_CLOCK_SKEW
        assert result["is_owner"] is True, result
        assert window - PERIOD - 0.5 <= took_over <= window + CONFIRM + 10, (
            f"took over after {took_over:.1f} s"
        )
        # every acknowledged item is there (replay over loss): the 5 reads alpha held came back too
        datas = {i: d for i, d in result["items"]}
        assert len(datas) == len(result["items"]), "an item was delivered twice"
        missing = [i for i in acked if i not in datas]
        assert missing == [], f"{len(missing)} acknowledged items lost after the takeover: {missing[:10]}"
        assert all(d == "alpha-%06d" % (i - 1) for i, d in datas.items()), "an item came back altered"
        assert result["put"] == [max(datas) + 1, max(datas) + 2, max(datas) + 3]  # ids go on, none reused
        # alpha's socket cannot be verified from beta's host: never deleted
        assert os.lstat(os.path.join(real, ".journaled.sock")).st_ino == sock
        gone = sorted(files_before - set(os.listdir(real)))
        # nothing of alpha's is removed but a temp file of a write the kill cut short (".NAME.tmp")
        assert all(n.startswith(".") and n.endswith(".tmp") for n in gone), f"removed by beta: {gone}"

        # the other way round: alpha restarts on its host while beta owns the queue: refused
        again = run(REOPEN, real, "alpha")
        out, _ = again.communicate(timeout=120)
        reply = json.loads(out)
        assert reply.get("host") == "beta" and reply.get("pid") == result["pid"], reply
        assert f"is owned by beta pid {result['pid']} (lease renewed" in reply["refused"], reply
        # once beta closed (its lease released) alpha opens at once, and finds beta's puts
        beta.stdin.write("close\n")  # type: ignore[union-attr]
        beta.stdin.flush()  # type: ignore[union-attr]
        assert json.loads(beta.stdout.readline()) == {"closed": True}
        t0 = time.monotonic()
        again = run(REOPEN, real, "alpha")
        out, _ = again.communicate(timeout=120)
        reopened = time.monotonic() - t0
        reply = json.loads(out)
        assert reply.get("is_owner") is True, reply
        assert reply["items"] == ["beta-0", "beta-1", "beta-2"], reply
        assert reopened < CONFIRM + 10, f"alpha reopened only after {reopened:.1f} s"
    finally:
        for proc in (alpha, beta):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
