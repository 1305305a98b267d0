"""A queue's life around the program's: ending without close(), being collected, fork(), and
opens that fail.

Where the claim is about processes, real processes do it: a script that ends without closing,
``os.fork`` and ``multiprocessing`` children.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref

import pytest

import journaled
from conftest import ready_items
from journaled import ForeignFile, JournaledQueue, QueueConfig, QueueForked, QueueLocked
from journaled.disk import lifecycle
from journaled.disk.dirlock import owner_pid
from support.paths import ROOT


def run_script(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def drain(path: str, reader: str = "r") -> list[bytes]:
    with JournaledQueue(path) as q:
        return [item.data for item in ready_items(q.reader(reader, journaled.ReaderConfig(start="earliest")))]


def journal_bytes(path: str) -> dict[str, bytes]:
    """Every file of the queue directory but the lock file, with its content."""
    out = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full) and name != ".journaled.lock":
            with open(full, "rb") as f:
                out[name] = f.read()
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------------------- ending
@pytest.mark.parametrize("sync", ["0.05", "60", "'never'", "'always'"])
def test_program_ending_without_close_keeps_every_put(tmp_path, sync):
    # sync=60: the flusher surely does not run before the end (0.05 may, by luck)
    d = str(tmp_path / "q")
    r = run_script(
        """
        import sys
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue(sys.argv[1], QueueConfig(sync=%s))
        q.put_many([b"item-%%d" %% i for i in range(1000)])
        q.put(b"last")
        """
        % sync,
        d,
    )
    assert r.returncode == 0, r.stderr
    assert drain(d) == [b"item-%d" % i for i in range(1000)] + [b"last"]


def test_stdlib_style_queue_never_closed_keeps_every_put(tmp_path):
    d = str(tmp_path / "q")
    r = run_script(
        """
        import sys, journaled
        q = journaled.Queue(sys.argv[1], config=journaled.QueueConfig(sync=60))
        for i in range(500):
            q.put({"n": i})
        """,
        d,
    )
    assert r.returncode == 0, r.stderr
    q = journaled.Queue(d)
    try:
        assert q.qsize() == 500
        assert [q.get_nowait()["n"] for _ in range(500)] == list(range(500))
    finally:
        q.close()


def test_program_dying_of_an_uncaught_exception_keeps_every_put(tmp_path):
    d = str(tmp_path / "q")
    r = run_script(
        """
        import sys
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue(sys.argv[1], QueueConfig(sync=60))
        q.put_many([b"x%d" % i for i in range(300)])
        raise RuntimeError("boom")
        """,
        d,
    )
    assert r.returncode == 1 and "RuntimeError: boom" in r.stderr
    assert drain(d) == [b"x%d" % i for i in range(300)]


def test_puts_of_threads_still_running_when_main_ends_are_kept(tmp_path):
    # the exit hook runs after non-daemon threads are joined: their late puts are kept too
    d = str(tmp_path / "q")
    r = run_script(
        """
        import sys, threading, time
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue(sys.argv[1], QueueConfig(sync=60))
        def late():
            time.sleep(0.3)
            q.put_many([b"late-%d" % i for i in range(100)])
        threading.Thread(target=late).start()
        """,
        d,
    )
    assert r.returncode == 0, r.stderr
    assert drain(d) == [b"late-%d" % i for i in range(100)]


def test_daemon_workers_blocked_in_get_end_quietly_with_the_program(tmp_path):
    # the stdlib's worker pattern: closing at exit must not wake them into tracebacks
    d = str(tmp_path / "q")
    r = run_script(
        """
        import sys, threading, time
        import journaled
        jobs = journaled.Queue(sys.argv[1] + "-jobs")
        results = journaled.Queue(sys.argv[1])
        def worker():
            while True:
                results.put(jobs.get())
                jobs.task_done()
        for _ in range(3):
            threading.Thread(target=worker, daemon=True).start()
        for i in range(10):
            jobs.put(i)
        jobs.join()
        time.sleep(0.1)
        """,
        d,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with journaled.Queue(d) as results:
        assert sorted(results.get_nowait() for _ in range(10)) == list(range(10))
        assert results.empty()


def test_program_ending_without_close_writes_final_checkpoints(tmp_path):
    d = str(tmp_path / "q")
    r = run_script(
        """
        import sys
        from journaled import JournaledQueue, QueueConfig
        q = JournaledQueue(sys.argv[1], QueueConfig(sync=60, checkpoint_interval=3600))
        rd = q.reader("r")
        q.put_many([b"%d" % i for i in range(10)])
        for _ in range(4):
            rd.commit(rd.get())
        """,
        d,
    )
    assert r.returncode == 0, r.stderr
    assert drain(d) == [b"%d" % i for i in range(4, 10)]  # the 4 commits are not replayed


def test_unclosed_queue_collected_warns_and_keeps_its_items(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d, QueueConfig(sync=3600))  # nothing reaches the disk on its own
    q.put_many([b"a", b"b", b"c"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del q
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and d in str(w.message) for w in caught), caught
    assert drain(d) == [b"a", b"b", b"c"]  # and the directory was released


def test_unclosed_queue_with_a_reader_is_collected_too_and_keeps_its_commits(tmp_path):
    # its reader cores hold the queue's reader files, which must hold the queue only weakly:
    # else the queue's own threads keep the whole of it alive, open and locked, for ever
    d = str(tmp_path / "q")
    q = JournaledQueue(d, QueueConfig(sync=3600))
    r = q.reader("r")
    q.put_many([b"a", b"b", b"c"])
    r.commit(r.get(block=False))

    def warned() -> bool:
        return any(issubclass(w.category, ResourceWarning) and d in str(w.message) for w in caught)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del q, r
        for _ in range(100):  # a background thread may hold it for a moment
            gc.collect()
            if warned():
                break
            time.sleep(0.1)
    assert warned(), caught
    deadline = time.monotonic() + 60
    while True:  # collected on one of its own threads, it is closed on another, a moment later
        try:
            assert drain(d) == [b"b", b"c"]  # the directory was released, the commit kept
            break
        except QueueLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_an_unclosed_queue_collected_on_a_daemon_thread_still_keeps_every_put_at_exit(tmp_path):
    # The collector may run on any thread, often one of the queue's own (daemons): the close
    # then runs on a thread of its own, which the interpreter must wait for at a normal exit.
    d = str(tmp_path / "q")
    r = run_script(
        """
        import gc, sys, threading, warnings
        from journaled import JournaledQueue
        from journaled.disk import lifecycle
        warnings.simplefilter("ignore", ResourceWarning)
        box = [JournaledQueue(sys.argv[1])]
        box[0].reader("r")
        box[0].put_many([b"item-%d" % i for i in range(50)])

        def drop():  # as a collection on one of the queue's own threads would
            lifecycle.mark_background()
            box.clear()
            gc.collect()
            closing = [t for t in threading.enumerate() if t.name == "journaled-close"]
            print("closing threads are daemons:", [t.daemon for t in closing])

        t = threading.Thread(target=drop, daemon=True)
        t.start()
        t.join()
        """,
        d,
    )
    assert r.returncode == 0, r.stderr
    assert "True" not in r.stdout, r.stdout  # [False], or [] when it was done already
    assert drain(d) == [b"item-%d" % i for i in range(50)]


def test_sigterm_made_a_normal_exit_keeps_every_put_as_docs_durability_says(tmp_path):
    # docs/durability.md: with signal.signal(SIGTERM, lambda *_: sys.exit(0)) a SIGTERM is a
    # normal exit, and the exit hook closes the queue (sync=3600: nothing reaches the disk
    # on its own in the meantime)
    d = str(tmp_path / "q")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import signal, sys, time
                signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
                from journaled import JournaledQueue, QueueConfig
                q = JournaledQueue(sys.argv[1], QueueConfig(sync=3600))
                q.reader("r")
                q.put_many([b"item-%d" % i for i in range(100)])
                print("ready", flush=True)
                while True:
                    time.sleep(1)
                """
            ),
            d,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    child.terminate()  # SIGTERM
    assert child.wait(timeout=60) == 0
    assert drain(d) == [b"item-%d" % i for i in range(100)]


def test_unclosed_stdlib_style_queue_collected_warns_and_keeps_its_items(tmp_path):
    d = str(tmp_path / "q")
    q = journaled.Queue(d, config=QueueConfig(sync=3600))
    q.put("kept")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del q
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)]
    q = journaled.Queue(d)
    try:
        assert q.get_nowait() == "kept"
    finally:
        q.close()


def test_queue_collected_on_a_background_thread_holding_its_lock_is_closed_without_deadlock(tmp_path):
    # The queue's threads hold its lock but only a weak reference to it, so a collection they
    # trigger may finalize the queue while they hold its lock: closing must not wait on them.
    d = str(tmp_path / "q")
    q = JournaledQueue(d, QueueConfig(sync=3600))
    q.put(b"kept")
    lock = q._lock
    ref = weakref.ref(q)
    done = threading.Event()

    def engine_like():
        lifecycle.mark_background()
        with lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()  # finalizes the queue here, with its lock held
        done.set()

    del q
    t = threading.Thread(target=engine_like, daemon=True)
    t.start()
    assert done.wait(10), "collecting the queue deadlocked on its own lock"
    assert ref() is None
    for _ in range(500):  # the close runs on a thread of its own
        try:
            assert drain(d) == [b"kept"]
            break
        except QueueLocked:
            time.sleep(0.02)
    else:
        raise AssertionError("the collected queue was never closed")


def test_closed_queue_collected_gives_no_warning(tmp_path):
    q = JournaledQueue(str(tmp_path / "q"))
    q.put(b"x")
    q.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del q
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# ---------------------------------------------------------------------------------- fork
def _sleep_child(seconds: float) -> None:
    time.sleep(seconds)


def test_forked_child_does_not_keep_the_directory_lock(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d)
    q.put(b"before fork")
    pid = os.fork()
    if pid == 0:  # the child only sleeps, then leaves without any clean-up
        time.sleep(3)
        os._exit(0)
    try:
        q.close()
        with JournaledQueue(d) as again:  # the parent gets its own queue back at once
            assert [i.data for i in ready_items(again.reader("r"))] == [b"before fork"]
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_multiprocessing_fork_child_does_not_keep_the_directory_lock(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d)
    child = multiprocessing.get_context("fork").Process(target=_sleep_child, args=(3,))
    child.start()
    try:
        q.close()
        JournaledQueue(d).close()
    finally:
        child.kill()
        child.join()


FORK_SCRIPT = """
import os, sys, time
import journaled
from journaled import JournaledQueue, QueueConfig

d, out = sys.argv[1], sys.argv[2]
q = JournaledQueue(d, QueueConfig(sync=3600, checkpoint_interval=3600))
rd = q.reader("r")
q.put_many([b"one", b"two"])
q.sync()
# The maintenance thread, woken when the reader was made, writes out a dirty journal when it
# gets to run: under load that was after the put below (its buffer then reached the file before
# the kill -9, CI on Python 3.10). Let it run first, so only the kill decides the buffer's fate.
time.sleep(1.0)
q.put(b"buffered")  # in the parent's buffer only, when the child is forked
jobs = journaled.Queue(d + "-jobs", config=QueueConfig(sync=3600))
jobs.put("job")
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    results = []
    calls = [
        ("put", lambda: q.put(b"child")),
        ("put_many", lambda: q.put_many([b"child"])),
        ("sync", q.sync),
        ("checkpoint", q.checkpoint),
        ("archive", q.archive),
        ("get", lambda: rd.get(block=False)),
        ("commit", lambda: rd.commit(1)),
        ("reader", lambda: q.reader("other")),
        ("remove_reader", lambda: q.remove_reader("r")),
        ("stats", q.stats),
        ("run_policies", q.run_policies),
        ("adopt_spool", q.adopt_spool),
        ("Queue.put", lambda: jobs.put("child")),
        ("Queue.get", lambda: jobs.get(block=False)),
        ("Queue.task_done", jobs.task_done),
    ]
    for name, call in calls:
        try:
            call()
            results.append(name + ":ok")
        except Exception as exc:
            results.append(name + ":" + type(exc).__name__)
    os.write(w, (" ".join(results)).encode())
    os.close(w)
    sys.exit(0)  # a normal exit: atexit runs in the child
os.close(w)
with os.fdopen(r, "rb") as f:
    child_said = f.read().decode()
_, status = os.waitpid(pid, 0)
with open(out, "w") as f:
    f.write(child_said + "\\n" + str(status))
os.kill(os.getpid(), 9)  # the parent leaves its files exactly as the child left them
"""


def test_queue_used_in_a_forked_child_raises_and_writes_nothing(tmp_path):
    d = str(tmp_path / "q")
    out = str(tmp_path / "out")
    run_script(FORK_SCRIPT, d, out)
    with open(out) as f:
        said, status = f.read().split("\n")
    assert status == "0"
    results = dict(r.split(":") for r in said.split())
    assert results == dict.fromkeys(results, "QueueForked"), results
    assert set(results) >= {"put", "sync", "checkpoint", "get", "Queue.put"}
    # the child wrote nothing, flushed nothing at its exit: the parent's kill -9 lost its buffer
    assert drain(d) == [b"one", b"two"]
    with journaled.Queue(d + "-jobs") as jobs:
        assert jobs.qsize() == 0  # its put was buffered in the parent too


def test_close_in_a_forked_child_touches_nothing_and_the_parent_keeps_working(tmp_path):
    d = str(tmp_path / "q")
    q = JournaledQueue(d, QueueConfig(sync=3600))
    q.put_many([b"a", b"b"])
    q.sync()
    q.put(b"c")  # buffered in the parent
    before = journal_bytes(d)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            q.close()  # a with-block left in the child: harmless
            if journal_bytes(d) != before:
                code = 3
            try:
                q.put(b"child")
                code = 4
            except QueueForked:
                pass
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert journal_bytes(d) == before
    q.put(b"d")
    q.close()
    assert drain(d) == [b"a", b"b", b"c", b"d"]


def test_queue_forked_is_a_queue_closed():
    assert issubclass(QueueForked, journaled.QueueClosed)


# ---------------------------------------------------------------------------------- failed opens
def _broken_queue(tmp_path, label: str, obstacle: str, **config):
    """A queue directory (with a reader, registry removed) whose open fails at ``obstacle``
    (made a directory), and how to open it."""
    d = str(tmp_path / label)
    with JournaledQueue(d) as q:
        q.reader("r")
    os.remove(os.path.join(d, label + ".readers"))
    os.makedirs(os.path.join(d, obstacle))
    return d, (lambda: JournaledQueue(d, QueueConfig(**config)))


def test_failed_opens_leak_no_descriptor_and_release_the_directory(tmp_path):
    cases = [
        # found after the journal opened: archive_dir is a file, the registry cannot be rewritten
        _broken_queue(tmp_path, "archive", "x", archive_dir="x/file"),
        _broken_queue(tmp_path, "registry", ".registry.readers.tmp"),
        # a damaged directory: a directory named like a journal file (not ours: refused), and a
        # checkpoint that is a directory
        _broken_queue(tmp_path, "journal", "journal.99999999999999"),
        _broken_queue(tmp_path, "checkpoint", "checkpoint.read.s"),
    ]
    open(os.path.join(cases[0][0], "x", "file"), "wb").close()
    for _d, attempt in cases:
        with pytest.raises((OSError, ForeignFile)):
            attempt()  # warm-up: lazily opened descriptors (e.g. logging) are not leaks
    before = open_fds()
    for _ in range(10):
        for _d, attempt in cases:
            with pytest.raises((OSError, ForeignFile)):
                attempt()
    assert open_fds() == before
    assert [owner_pid(d) for d, _attempt in cases] == [None] * len(cases)  # no lock left behind


def test_open_refused_by_the_lock_leaks_nothing(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d):
        with pytest.raises(QueueLocked):
            JournaledQueue(d)
        before = open_fds()
        for _ in range(20):
            with pytest.raises(QueueLocked):
                JournaledQueue(d)
            with pytest.raises(QueueLocked):
                journaled.Queue(d)
        assert open_fds() == before


def test_failed_open_of_a_stdlib_style_queue_leaks_nothing(tmp_path):
    d = str(tmp_path / "q")
    JournaledQueue(d).close()
    (tmp_path / "q" / "not-a-dir").write_bytes(b"")
    cfg = QueueConfig(archive_dir="not-a-dir")
    with pytest.raises(OSError):
        journaled.Queue(d, config=cfg)
    before = open_fds()
    for _ in range(20):
        with pytest.raises(OSError):
            journaled.Queue(d, config=cfg)
    assert open_fds() == before
    journaled.Queue(d).close()
