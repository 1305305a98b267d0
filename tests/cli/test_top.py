"""``journaled top``: a live view driven in a pseudo-terminal, its screen read back; rates from two
samples; a wrong path refused in one line; nothing owned or created."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time

import attrs
import pytest

from journaled import JournaledQueue, ReaderConfig
from journaled.cli.top import ReaderRow, Sample, render

TIMEOUT = 60.0
LEAVE_ALT_SCREEN = b"\x1b[?1049l"


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``journaled top ...`` on a pseudo-terminal of 120 columns; ``screen()`` is the last frame."""

    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        os.set_blocking(self.master, False)
        env = dict(os.environ, COLUMNS="120", LINES="40")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "journaled", "top", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,  # the pty becomes its controlling terminal: ^C is a SIGINT
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        self.out = b""

    def _read(self, seconds: float) -> None:
        ready, _, _ = select.select([self.master], [], [], seconds)
        if ready:
            try:
                self.out += os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the terminal
                pass

    def screen(self) -> str:
        frames = self.out.split(b"\x1b[H\x1b[2J")
        return frames[-1].decode(errors="replace") if len(frames) > 1 else ""

    def wait_for(self, pattern: str) -> str:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            frames = self.out.split(b"\x1b[H\x1b[2J")[1:]
            # a complete frame is one followed by the next (or the last one when the line ended)
            for frame in reversed(frames[:-1] or frames):
                text = frame.decode(errors="replace")
                if re.search(pattern, text, re.M):
                    return text
            self._read(0.2)
        raise AssertionError(f"no frame matched {pattern!r}; last screen:\n{self.screen()}")

    def press(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def ended(self) -> int:
        deadline = time.monotonic() + TIMEOUT
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        self._read(0.1)
        code = self.proc.wait(timeout=5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def busy_queue(tmp_path):
    path = str(tmp_path / "jobs")
    q = JournaledQueue(path)
    workers = q.reader("workers", ReaderConfig(max_errors=3))
    q.reader("audit")
    q.put_many([b"x" * 100] * 1000)
    for _ in range(10):
        workers.commit(workers.get(block=False))
    held = workers.get(block=False)
    yield path, q
    workers.release(held)
    q.close()


def test_top_shows_the_live_owners_figures_and_quits_on_q(busy_queue) -> None:
    path, q = busy_queue
    term = Terminal(path, "--interval", "0.2")
    try:
        screen = term.wait_for(r"^\s+workers\s+990\b")
        assert f"owner pid {os.getpid()}" in screen and "health ok" in screen
        assert re.search(r"^\s+audit\s+1,000\s", screen, re.M)
        workers_row = next(line for line in screen.splitlines() if line.strip().startswith("workers"))
        # backlog 990, one open read, nothing delayed or dead-lettered
        assert workers_row.split()[1:2] == ["990"] and workers_row.split()[-3:] == ["1", "0", "0"]
        assert "next id 1,001" in screen
        term.press(b"q")
        assert term.ended() == 0
        assert term.out.endswith(LEAVE_ALT_SCREEN) or LEAVE_ALT_SCREEN in term.out[-64:]
    finally:
        term.close()
    assert q.stats().clients == ()  # it held nothing and left nothing behind


def test_top_follows_commits_and_ctrl_c_restores_the_terminal(busy_queue) -> None:
    path, q = busy_queue
    term = Terminal(path, "--interval", "0.2")
    try:
        term.wait_for(r"^\s+workers\s+990\b")
        audit = q.reader("audit")
        for _ in range(500):
            audit.commit(audit.get(block=False))
        term.wait_for(r"^\s+audit\s+500\b")
        term.press(b"\x03")
        assert term.ended() == 0
        assert LEAVE_ALT_SCREEN in term.out[-64:]
    finally:
        term.close()


def test_top_reads_a_queue_nobody_owns_without_taking_it(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        r = q.reader("r")
        q.put_many([b"abc"] * 20)
        for _ in range(5):
            r.commit(r.get(block=False))
    before = sorted(os.listdir(path))
    done = subprocess.run(
        [sys.executable, "-m", "journaled", "top", path, "--once", "--interval", "0.1"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "files (nobody owns it)" in done.stdout
    assert re.search(r"^\s+r\s+15\s", done.stdout, re.M)
    assert "\x1b" not in done.stdout  # not a terminal: plain text
    assert sorted(os.listdir(path)) == before


@pytest.mark.parametrize("args", [["/nonexistent/queue"], ["{tmp}"], ["{tmp}", "--interval", "0"]])
def test_top_refuses_a_wrong_path_or_interval_in_one_line(tmp_path, args: list[str]) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "journaled", "top", *argv], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert os.listdir(tmp_path) == []


def uncounted(s: Sample) -> Sample:
    """``s`` as read from files: no live commit counter."""
    return attrs.evolve(s, readers=tuple(attrs.evolve(r, committed=None) for r in s.readers))


def test_rates_come_from_two_samples_and_commits_beat_settled_ids() -> None:
    def row(committed: int | None, settled: int) -> ReaderRow:
        return ReaderRow("r", 10, 1000, 1.0, 0, 0, 0, committed, settled)

    first = Sample(100.0, "/q", "q", "owner pid 1", "ok", 0, 1000, 1, 4096, (row(5, 990),))
    second = Sample(102.0, "/q", "q", "owner pid 1", "ok", 0, 1400, 1, 4096, (row(205, 1390),))
    lines = render([second], {"/q": first}, 1.0, 200)
    assert any("put/s 200.0" in line for line in lines)
    (reader_line,) = [line for line in lines if line.strip().startswith("r ")]
    assert reader_line.split()[4] == "100.0"  # (205 - 5) / 2 s, from the live counter
    offline = render([uncounted(second)], {"/q": uncounted(first)}, 1.0, 200)
    (reader_line,) = [line for line in offline if line.strip().startswith("r ")]
    assert reader_line.split()[4] == "200.0"  # (1390 - 990) / 2 s, from the settled ids
