"""journaled.Queue beyond CPython's own tests: durability, task_done, serializers, closing."""

from __future__ import annotations

import json
import os
import pickle
import queue as stdlib_queue
import subprocess
import sys
import textwrap
import threading
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journaled
from journaled import (
    BytesSerializer,
    JsonSerializer,
    PickleSerializer,
    Queue,
    QueueClosed,
    QueueConfig,
    SerializationError,
)


def run_child(code: str) -> None:
    """Run ``code`` in a fresh interpreter (the "crash" there is a real process exit)."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=120)


def test_queue_is_exported_and_speaks_stdlib_exceptions(qdir):
    with Queue(qdir, maxsize=1) as q:
        q.put("a")
        with pytest.raises(stdlib_queue.Full):
            q.put_nowait("b")
        assert q.get() == "a"
        with pytest.raises(stdlib_queue.Empty):
            q.get_nowait()
    assert journaled.Queue is Queue


def test_fetched_but_not_task_done_items_are_redelivered_after_a_crash(qdir):
    run_child(
        f"""
        import os, journaled
        q = journaled.Queue({qdir!r}, config=journaled.QueueConfig(sync="always"))
        for i in range(5):
            q.put({{"n": i}})
        assert q.get() == {{"n": 0}}
        assert q.get() == {{"n": 1}}
        q.task_done()                 # commits n=0 (this thread's oldest open read)
        q.journal.checkpoint()        # make that commit durable before the crash
        os._exit(0)                   # crash: no close, n=1 is still fetched-but-not-done
        """
    )
    with Queue(qdir) as q:
        assert q.qsize() == 4
        assert q.unfinished_tasks == 4
        assert [q.get_nowait() for _ in range(4)] == [{"n": i} for i in range(1, 5)]


def test_clean_close_also_redelivers_unfinished_items_in_order(qdir):
    with Queue(qdir) as q:
        for i in range(4):
            q.put(i)
        assert q.get() == 0
        assert q.get() == 1
        q.task_done()
    with Queue(qdir) as q:
        assert [q.get_nowait() for _ in range(3)] == [1, 2, 3]


def test_task_done_commits_the_calling_threads_oldest_read_first(qdir):
    with Queue(qdir) as q:
        q.put("main-1")
        q.put("other")
        q.put("main-2")
        assert q.get() == "main-1"
        got = []
        t = threading.Thread(target=lambda: got.append(q.get()))
        t.start()
        t.join()
        assert got == ["other"]
        assert q.get() == "main-2"
        q.task_done()  # main thread's oldest: main-1
        q.task_done()  # main thread's next: main-2, although "other" is older
        open_ids = list(q.reader.core.open)
        assert [q.reader.core.open[i].data for i in open_ids] == [pickle.dumps("other")]
        q.task_done()  # main has none left: falls back to the oldest of all
        assert q.unfinished_tasks == 0
        with pytest.raises(ValueError, match="too many times"):
            q.task_done()


def test_join_returns_when_every_fetched_item_is_task_done(qdir):
    with Queue(qdir) as q:
        for i in range(20):
            q.put(i)
        seen = []

        def worker() -> None:
            while True:
                x = q.get()
                if x is None:
                    q.task_done()
                    return
                seen.append(x)
                q.task_done()

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        q.join()
        assert sorted(seen) == list(range(20))
        for _ in threads:
            q.put(None)
        q.join()
        for t in threads:
            t.join(30)
        assert q.reader.stats().open_reads == 0


def test_negative_timeouts_are_checked_exactly_where_the_stdlib_checks_them(qdir):
    with Queue(qdir, maxsize=0) as q:
        q.put(1, timeout=-1)  # unbounded: the stdlib never looks at put's timeout
        assert q.get(block=False, timeout=-1) == 1  # non-blocking: timeout ignored
        with pytest.raises(ValueError):
            q.get(timeout=-0.5)
        q.maxsize = 5
        with pytest.raises(ValueError):
            q.put(3, timeout=-1)  # bounded and blocking: checked even when not full
        assert q.qsize() == 0


def test_raising_maxsize_wakes_a_blocked_put(qdir):
    with Queue(qdir, maxsize=1) as q:
        q.put("a")
        done = threading.Event()

        def putter() -> None:
            q.put("b")
            done.set()

        t = threading.Thread(target=putter)
        t.start()
        assert not done.wait(0.05)  # blocked: the queue is full (no timing is asserted)
        q.maxsize = 2
        t.join(30)
        assert done.is_set()
        assert q.qsize() == 2


def test_close_wakes_blocked_put_get_and_join_with_queue_closed(tmp_path):
    full = Queue(str(tmp_path / "full"), maxsize=1)
    empty = Queue(str(tmp_path / "empty"))
    full.put("a")
    errors: list[BaseException] = []

    def call(fn) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [
        threading.Thread(target=call, args=(lambda: full.put("b"),)),
        threading.Thread(target=call, args=(full.join,)),
        threading.Thread(target=call, args=(empty.get,)),
    ]
    for t in threads:
        t.start()
    while empty.reader.stats().open_reads == 0 and not empty.reader.core.waiters:
        threading.Event().wait(0.01)  # let the getter reach its wait (not a timing assertion)
    full.close()
    empty.close()
    for t in threads:
        t.join(30)
    assert len(errors) == 3
    assert all(isinstance(e, QueueClosed) for e in errors), errors
    with pytest.raises(QueueClosed):
        full.put("late")


@pytest.mark.parametrize(
    "serializer, value",
    [
        (pickle, {"a": (1, 2.5, None)}),
        (PickleSerializer(protocol=2), [b"x", "y"]),
        (json, {"a": [1, "é", None]}),
        (JsonSerializer(sort_keys=True), {"b": 1, "a": [True]}),
        (BytesSerializer(), b"\x00raw\xff"),
    ],
)
def test_serializers_round_trip_through_the_disk(qdir, serializer, value):
    with Queue(qdir, serializer=serializer) as q:
        q.put(value)
    with Queue(qdir, serializer=serializer) as q:
        assert q.get_nowait() == value


def test_json_serializer_stores_compact_utf8(qdir):
    with Queue(qdir, serializer=JsonSerializer()) as q:
        q.put({"k": "é"})
        raw = q.reader.get(block=False)
    assert raw.data == '{"k":"é"}'.encode()


def test_an_unserializable_item_raises_and_writes_nothing(qdir):
    with Queue(qdir, maxsize=2) as q:
        with pytest.raises(SerializationError) as info:
            q.put(lambda: None)
        assert info.value.__cause__ is not None
        with pytest.raises(SerializationError):
            q.put(threading.Lock())
        assert q.qsize() == 0
        assert q.journal.journal.next_id == q.reader.head
    with Queue(qdir, serializer=BytesSerializer()) as q:
        with pytest.raises(SerializationError):
            q.put("not bytes")
        assert q.qsize() == 0


def test_an_undecodable_payload_raises_but_stays_fetched_until_task_done(qdir):
    with Queue(qdir, serializer=BytesSerializer()) as q:
        q.put(b"\xff not json")
        q.put(b'{"ok":1}')
    with Queue(qdir, serializer=json) as q:
        with pytest.raises(SerializationError) as info:
            q.get_nowait()
        assert info.value.item is not None and info.value.item.data == b"\xff not json"
        assert q.unfinished_tasks == 2
        assert q.qsize() == 1
        q.task_done()  # drops the bad payload for good
        assert q.get_nowait() == {"ok": 1}
        q.task_done()
        assert q.unfinished_tasks == 0


def test_queue_reopens_on_a_named_reader_with_its_config(qdir):
    with Queue(qdir, reader="workers", config=QueueConfig(sync="never")) as q:
        q.put(1)
        assert q.reader.name == "workers"
        assert q.journal.readers() == ["workers"]


# ---------------------------------------------------------------- model-based
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 99)),
        st.just(("get",)),
        st.just(("task_done",)),
        st.just(("reopen",)),
    ),
    max_size=30,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, maxsize=st.integers(0, 4))
def test_queue_matches_a_model_through_reopens(tmp_path_factory, ops, maxsize):
    """Non-blocking calls against a model: FIFO, maxsize, task_done, and at-least-once reopen
    (unfinished fetched items come back first, in put order)."""
    path = str(tmp_path_factory.mktemp("model"))
    waiting: deque[int] = deque()  # values put, not yet fetched
    fetched: list[tuple[int, int]] = []  # (id, value) fetched, not yet task_done, fetch order
    q = Queue(path, maxsize=maxsize)
    try:
        for op in ops:
            if op[0] == "put":
                if maxsize and len(waiting) >= maxsize:
                    with pytest.raises(stdlib_queue.Full):
                        q.put_nowait(op[1])
                else:
                    q.put_nowait(op[1])
                    waiting.append(op[1])
            elif op[0] == "get":
                if not waiting:
                    with pytest.raises(stdlib_queue.Empty):
                        q.get_nowait()
                else:
                    assert q.get_nowait() == waiting.popleft()
                    fetched.append(_last_fetched(q))
            elif op[0] == "task_done":
                if not fetched:
                    with pytest.raises(ValueError):
                        q.task_done()
                else:
                    q.task_done()
                    fetched.pop(0)
            else:
                q.close()
                q = Queue(path, maxsize=maxsize)
                waiting = deque(v for _, v in sorted(fetched)) + waiting
                fetched = []
            assert q.qsize() == len(waiting)
            assert q.empty() == (not waiting)
            assert q.full() == (0 < maxsize <= len(waiting))
            assert q.unfinished_tasks == len(waiting) + len(fetched)
    finally:
        q.close()


def _last_fetched(q: Queue) -> tuple[int, int]:
    """(item id, value) of the read the last ``get`` opened."""
    item_id = next(reversed(q._open))
    return (item_id, pickle.loads(q.reader.core.open[item_id].data))


def test_pickle_module_and_json_module_satisfy_the_serializer_protocol():
    # also checked statically by tests/test_typing.py (journaled.Queue's default is the module)
    assert pickle.loads(journaled.serializers.dumps(pickle, (1, "a"))) == (1, "a")
    assert journaled.serializers.dumps(json, [1]) == b"[1]"
    assert os.path.basename(journaled.stdqueue.__file__) == "stdqueue.py"


def test_guide_python_ecosystem_example_runs_as_written(tmp_path):
    import re
    from pathlib import Path

    guide = (Path(__file__).parent.parent / "docs" / "guide.md").read_text()  # moved from the README
    section = guide.split("## Like `queue.Queue`", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, timeout=120)
