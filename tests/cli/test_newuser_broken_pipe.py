"""``journaled dump PATH | head``: when the reader of the output goes away, the command stops
quietly with the status a shell gives a pipe's writer (141), not an error line and the usage
status 2, which claims that nothing was changed (a ``config`` change is made before it prints)."""

from __future__ import annotations

import subprocess
import sys

from journaled import JournaledQueue, QueueConfig


def first_line_then_close(*args: str) -> tuple[str, int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "journaled", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline().decode()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    return line, proc.wait(timeout=120), err


def test_dump_of_a_compressed_queue_into_a_closed_pipe_stops_quietly(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd")) as q:
        q.put_many([b'{"level":"info","msg":"%05d"}' % i + b"." * 100 for i in range(5000)])
    line, status, err = first_line_then_close("dump", path)
    assert line.split()[0] == "1"
    assert (status, err) == (141, ""), (status, err)
