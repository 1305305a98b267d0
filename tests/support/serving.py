"""``journaled serve`` run once as a real process, for the tests of its command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def serve_once(*args: str) -> str:
    """Run ``journaled serve``, wait for its "serving" line, stop it with SIGTERM; the line.
    The server must exit 0 within 60 s of the signal."""
    server = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", *args], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return line
