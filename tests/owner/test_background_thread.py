"""The queue's background thread (the owner's engine) outlives an unexpected error in one of
its maintenance steps: it logs the error and keeps checkpointing."""

from __future__ import annotations


def test_background_thread_survives_an_unexpected_error_and_keeps_checkpointing(tmp_path, caplog):
    import logging

    from journaled import JournaledQueue, QueueConfig

    q = JournaledQueue(str(tmp_path / "q"), QueueConfig(checkpoint_interval=0.05), name="q")
    try:
        r = q.reader("r")
        real_checkpoint = q.checkpoint
        calls = {"n": 0}

        def flaky_checkpoint() -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a bug in a maintenance step")
            real_checkpoint()

        q.checkpoint = flaky_checkpoint  # type: ignore[method-assign]
        caplog.set_level(logging.ERROR, logger="journaled")
        q.put(b"x")
        r.commit(r.get(timeout=5))
        import time

        deadline = time.monotonic() + 10
        while calls["n"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls["n"] >= 3, "the background thread stopped after the first error"
        import threading

        assert any(t.name == "journaled-q" and t.is_alive() for t in threading.enumerate())
        assert "failed unexpectedly" in caplog.text
    finally:
        q.close()
