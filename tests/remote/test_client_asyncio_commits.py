"""In a client process the asyncio forms commit off the event loop: an owner that stops answering
for a while (stopped, or handing over) holds up the commit, never the loop's other tasks."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from journaled import JournaledQueue
from support.child import Child

OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
q.reader("jobs")
q.put_many([b"a", b"b", b"c"])
q.sync()
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""

TICKS = 5


@pytest.fixture
def stoppable_owner(tmp_path):
    path = str(tmp_path / "q")
    owner = Child(OWNER, path)
    owner.wait_for_line("ready")
    yield path, owner.proc.pid
    os.kill(owner.proc.pid, signal.SIGCONT)
    owner.send("")
    owner.finish()


def wait_until_stopped(pid: int) -> None:
    """Return once every thread of ``pid`` is stopped: ``kill`` returns before a thread running
    on another CPU has stopped, and such a thread (the owner's connection polls for frames) could
    still answer the commit that follows."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
            except FileNotFoundError:
                continue  # a thread that ended
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} did not stop within 5 s")


class Stopper:
    """Stops the owner when asked; a ticker coroutine counts the loop's turns while it is
    stopped and continues it after :data:`TICKS` of them; a thread continues it anyway after
    a few seconds, so a blocked loop fails the test instead of hanging it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.stopped = threading.Event()
        self.ticks_while_stopped = 0
        self.ticks_this_stop = 0

    def stop_owner(self) -> None:
        self.ticks_this_stop = 0
        os.kill(self.pid, signal.SIGSTOP)
        wait_until_stopped(self.pid)
        self.stopped.set()
        self.safety = threading.Timer(5.0, self.resume)
        self.safety.daemon = True
        self.safety.start()

    def resume(self) -> None:
        self.safety.cancel()
        if self.stopped.is_set():
            self.stopped.clear()
            os.kill(self.pid, signal.SIGCONT)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            if self.stopped.is_set():
                self.ticks_while_stopped += 1
                self.ticks_this_stop += 1
                if self.ticks_this_stop >= TICKS:
                    self.resume()


def test_aprocess_commits_without_stopping_the_loop(stoppable_owner) -> None:
    path, pid = stoppable_owner
    stopper = Stopper(pid)
    seen: list[bytes] = []

    async def handle(item) -> None:
        seen.append(item.data)
        if len(seen) == 1:
            stopper.stop_owner()  # the commit that follows waits for the owner

    async def main() -> int:
        with JournaledQueue(path) as q:
            assert not q.is_owner
            ticker = asyncio.ensure_future(stopper.ticker())
            try:
                return await q.reader("jobs").aprocess(handle, timeout=0.5)
            finally:
                ticker.cancel()

    done = asyncio.run(main())
    assert stopper.ticks_while_stopped >= TICKS  # the loop ran while the commit waited
    assert done == 3 and seen == [b"a", b"b", b"c"]


def test_atransaction_and_async_for_commit_off_the_loop(stoppable_owner) -> None:
    path, pid = stoppable_owner
    stopper = Stopper(pid)

    async def main() -> list[bytes]:
        got = []
        with JournaledQueue(path) as q:
            r = q.reader("jobs")
            ticker = asyncio.ensure_future(stopper.ticker())
            try:
                async with r.atransaction(timeout=5) as item:
                    got.append(item.data)
                    stopper.stop_owner()
                first_pass = stopper.ticks_while_stopped
                async for item in r.aiter(timeout=0.5):
                    got.append(item.data)
                    if len(got) == 2:
                        stopper.stop_owner()  # the next step of the loop commits it
                assert first_pass >= TICKS
            finally:
                ticker.cancel()
        return got

    got = asyncio.run(main())
    assert got == [b"a", b"b", b"c"]
    assert stopper.ticks_while_stopped >= 2 * TICKS
    with JournaledQueue(path) as q:  # every commit landed
        assert q.reader("jobs").stats().backlog_items == 0
