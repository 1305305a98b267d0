"""A reader running without one of its stored sinks is flagged in its stats and the queue's
health, and the flag clears once a process passes the sink again."""

import warnings

import pytest

from journaled import JournaledQueue, ReaderConfig


def keep(item: object) -> None:
    """A callable sink: only the process that passes it has it."""


def test_a_reader_without_its_stored_callable_sink_is_flagged_until_given_it(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        q.reader("jobs", ReaderConfig(max_errors=3, dead_letter=keep))
        stats = q.stats()
        assert stats.readers[0].sinks_missing == () and stats.health.ok
    with pytest.warns(UserWarning, match="cannot be provided"), JournaledQueue(d) as q:
        q.reader("jobs")
        stats = q.stats()
        assert stats.readers[0].sinks_missing == ("dead_letter",)
        assert stats.health.sinkless_readers == ("jobs",) and not stats.health.ok
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            q.reader("jobs", ReaderConfig(max_errors=3, dead_letter=keep))
        stats = q.stats()
        assert stats.readers[0].sinks_missing == ()
        assert stats.health.sinkless_readers == () and stats.health.ok
