"""A Python child process for whole-process tests, whose output lines are collected as they come
(and ``"<eof>"`` once its output ends), so a test can wait for what it printed."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

TIMEOUT = 120
EOF_LINE = "<eof>"


class Child:
    """``python -c code args...``; ``merge_stderr`` collects its error output among the lines."""

    def __init__(self, code: str, *args: str, merge_stderr: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else None,
            text=True,
        )
        self.lines: list[str] = []
        #: the last line came without its newline: the child died while writing it
        self.last_line_cut = False
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.last_line_cut = not line.endswith("\n")
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.lines.append(EOF_LINE)
            self.changed.notify_all()

    def wait_for(self, test: Callable[[list[str]], object], timeout: float = TIMEOUT) -> None:
        """Until ``test(lines)`` holds (or fail)."""
        with self.changed:
            assert self.changed.wait_for(lambda: test(self.lines), timeout), self.lines[-20:]

    def wait_for_line(self, prefix: str, timeout: float = TIMEOUT) -> None:
        """Until a line starting with ``prefix`` came (fail if the output ended without one)."""
        self.wait_for(lambda lines: any(ln.startswith(prefix) for ln in lines) or EOF_LINE in lines, timeout)
        assert any(ln.startswith(prefix) for ln in self.lines), self.lines[-20:]

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=TIMEOUT)
        self.thread.join(TIMEOUT)

    def finish(self) -> list[str]:
        """Its output lines, once it exited with status 0 (or fail)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        code = self.proc.wait(timeout=TIMEOUT)
        self.thread.join(TIMEOUT)
        assert code == 0, self.lines[-20:]
        return [ln for ln in self.lines if ln != EOF_LINE]

    def stop(self) -> None:
        """Kill it if it is still running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)


def killed_after(code: str, prefix: str, *args: str) -> list[str]:
    """Run ``code`` in a child, SIGKILL it once it prints a line starting with ``prefix``, and
    return that line's words after the prefix (what the child reported before it died)."""
    child = Child(code, *args)
    try:
        child.wait_for_line(prefix)
        child.kill()
    finally:
        child.stop()
    return next(ln for ln in child.lines if ln.startswith(prefix)).split()[1:]
