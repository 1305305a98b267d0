"""``journaled serve`` stops on SIGINT/SIGTERM whenever the signal comes: its handler only sets a
flag (``cli/serve.py`` ``StopSignals``).  It used to call ``threading.Event.set``, which waits for
the lock of the ``Event.wait`` the signal interrupted, in the same thread, for ever: a SIGTERM
right after the "serving" line hung it now and then (CI killed it after 60 s)."""

from __future__ import annotations

import os
import signal
import threading
import time

from journaled.cli.serve import StopSignals
from support.serving import serve_once


def test_a_stop_signal_during_a_wait_ends_it_at_once_and_close_puts_the_handlers_back():
    before = signal.getsignal(signal.SIGTERM)
    stop = StopSignals()
    try:
        assert not stop.wait(0.01)  # no signal: the wait times out
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        start = time.monotonic()
        assert stop.wait(60.0)
        assert time.monotonic() - start < 30  # woken by the signal, not by the 60 s timeout
        assert stop.is_set() and stop.wait(60.0)  # stays set: later waits return at once
        timer.join()
    finally:
        stop.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_serve_exits_0_on_a_sigterm_sent_the_moment_it_says_serving(tmp_path):
    # the moment the old handler deadlocked most often: the main loop just entering its wait
    for n in range(12):
        assert serve_once("--create", str(tmp_path / f"q{n}")).startswith("serving ")
