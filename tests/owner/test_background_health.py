"""``stats().health`` while a background step fails, and the backoff that bounds its retries
(owner/engine.py, ``Step``; docs/design.md, "Faults that last").

``health.ok`` is False while any step (checkpointing, maintenance: spool adoption and archiving)
is failing, names it in ``failing``, and is True again once it works.  A failing step is retried
after 0.1 s, then twice as long each time up to 5 s: the number of attempts in a window of W
seconds is at most 1 + log2(W / 0.1 + 1), whatever the step's own interval.
"""

from __future__ import annotations

import errno
import math
import os
import threading
import time

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio
from journaled.owner import engine as engine_mod
from journaled.owner.engine import BACKOFF_FIRST, BACKOFF_MAX, Engine, Step
from support.faults import FaultyOps


def _wait_for(cond, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _max_attempts(window: float) -> int:
    """Most attempts a step failing all along can make in ``window`` seconds (before the cap)."""
    return 1 + math.floor(math.log2(window / BACKOFF_FIRST + 1))


def test_a_failing_steps_backoff_doubles_up_to_its_cap_and_resets_when_it_works():
    step = Step("q", "checkpoint")
    now = 100.0
    delays = []
    for _ in range(10):
        assert step.due(now)
        step.failed(OSError(errno.EIO, "boom"), now)
        delays.append(step.retry_at - now)
        assert not step.due(now) and not step.due(step.retry_at - 1e-6)
        now = step.retry_at
    assert delays == pytest.approx([min(BACKOFF_MAX, BACKOFF_FIRST * 2**k) for k in range(10)])
    assert delays[-1] == BACKOFF_MAX
    step.succeeded()
    assert step.failures == 0 and step.due(now)
    step.failed(OSError(errno.EIO, "boom"), now)
    assert step.retry_at - now == pytest.approx(BACKOFF_FIRST)  # a new outage starts over


class _Journal:
    """What the engine needs of a journal, healthy and idle."""

    dirty = False
    poisoned = None
    poisoned_since = None
    gone = False

    def sync(self) -> None:
        pass

    def check_home(self) -> None:
        pass


class _Flaky:
    """A step that fails (EIO) while ``broken`` is set, and counts its attempts."""

    def __init__(self) -> None:
        self.broken = threading.Event()
        self.broken.set()
        self.attempts = 0
        self.failed = 0

    def __call__(self) -> None:
        self.attempts += 1
        if self.broken.is_set():
            self.failed += 1
            raise OSError(errno.EIO, "injected")


@pytest.mark.parametrize("failing", ["checkpoint", "maintenance"])
def test_health_is_not_ok_while_a_background_step_fails_and_its_retries_are_bounded(failing, caplog):
    flaky = _Flaky()
    steps = {"checkpoint": lambda: None, "maintenance": lambda: None, failing: flaky}
    eng = Engine(
        "q",
        threading.Lock(),
        lambda: [],
        _Journal(),
        sync_interval=None,
        checkpoint_interval=0.01,  # without a backoff: 100 attempts a second
        checkpoint=steps["checkpoint"],
        maintain=steps["maintenance"],
        closing=lambda: False,
    )
    start = time.monotonic()
    eng.start()
    try:
        assert _wait_for(lambda: flaky.failed >= 3)
        health = eng.health()
        assert not health.ok and health.failing == (failing,)
        assert health.errors >= 3 and health.last_error.startswith(f"{failing}: ")
        assert health.poisoned is None  # a failing step never refuses puts
        time.sleep(1.0)  # a window for the retry rate (the bound below holds at any load)
        attempts = flaky.attempts
        window = time.monotonic() - start
        assert attempts <= _max_attempts(window), (attempts, window)
        flaky.broken.clear()
        assert _wait_for(lambda: eng.health().ok, timeout=BACKOFF_MAX * 3)
        assert eng.health().failing == ()
    finally:
        eng.stop()


def _plant_checkpoint_blocker(qpath: str) -> str:
    """A directory at the checkpoint's temporary name: every checkpoint of reader r fails."""
    blocker = os.path.join(qpath, ".q.read.r.tmp")
    assert _wait_for(lambda: _try_mkdir(blocker))
    return blocker


def _try_mkdir(path: str) -> bool:
    try:
        os.mkdir(path)
        return True
    except FileExistsError:  # the background is writing that checkpoint right now
        return False


def test_a_queue_whose_checkpoints_fail_is_not_healthy_until_they_work_again(tmp_path):
    qpath = str(tmp_path / "q")
    with JournaledQueue(qpath, QueueConfig(sync=0.02, checkpoint_interval=0.05), name="q") as q:
        r = q.reader("r")
        assert q.stats().health.ok
        blocker = _plant_checkpoint_blocker(qpath)
        q.put(b"a")
        r.commit(r.get(block=False))
        assert _wait_for(lambda: "checkpoint" in q.stats().health.failing)
        health = q.stats().health
        assert not health.ok and health.poisoned is None
        q.put(b"b")  # puts are still accepted
        os.rmdir(blocker)
        assert _wait_for(lambda: q.stats().health.ok)


def test_a_queue_whose_archiving_fails_is_not_healthy_until_it_works_again(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_mod, "BACKOFF_MAX", 0.2)  # recover quickly once healed
    qpath = str(tmp_path / "q")
    cfg = QueueConfig(sync="never", journal_size=400, checkpoint_interval=0.05)
    with JournaledQueue(qpath, cfg, name="q") as q:
        r = q.reader("r")
        faults = FaultyOps("unlink", 1, errno.EIO, persistent=True, path_filter=os.path.join(qpath, "q.1"))
        with fileio.use(faults):
            q.put_many([b"x" * 100] * 20)  # several files
            for _ in range(20):
                r.commit(r.get(block=False))
            assert _wait_for(lambda: "maintenance" in q.stats().health.failing)
            assert not q.stats().health.ok
            assert faults.injected >= 1
            faults.heal()
            assert _wait_for(lambda: q.stats().health.ok)


def test_an_archiving_pass_that_failed_is_retried_without_waiting_for_a_head_to_move(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_mod, "BACKOFF_MAX", 0.2)
    qpath = str(tmp_path / "q")
    cfg = QueueConfig(sync="never", journal_size=400, checkpoint_interval=0.05)
    with JournaledQueue(qpath, cfg, name="q") as q:
        r = q.reader("r")
        faults = FaultyOps("unlink", 1, errno.EIO, persistent=True, path_filter=os.path.join(qpath, "q.1"))
        with fileio.use(faults):
            q.put_many([b"x" * 100] * 20)
            for _ in range(20):
                r.commit(r.get(block=False))
            assert _wait_for(lambda: faults.injected >= 1)
            faults.heal()
            # nothing else happens: no put, no commit, the heads stay where they are
            assert _wait_for(lambda: len(q.journal.files) == 1, timeout=5.0)
