"""journaled.metrics: a prometheus_client collector whose every value comes from ``q.stats()``,
computed at scrape time, in the owning process or in a client of the owner (issue 24, point 1);
and the two stats fields it needed (``waiters``, ``oldest_uncommitted_age``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from journaled import JournaledQueue, QueueConfig, ReaderConfig
from journaled.errors import QueueClosed
from support.paths import ROOT

QUIET = QueueConfig(sync="never")
TIMEOUT = 120  # generous: a loaded 2-core machine


@pytest.fixture
def prom():
    return pytest.importorskip("prometheus_client")


def scrape(registry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The registry's exposition, parsed back: (sample name, sorted labels) -> value."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def collector_for(*queues):
    from prometheus_client import CollectorRegistry

    from journaled.metrics import QueueCollector

    registry = CollectorRegistry()
    collector = QueueCollector(queues)
    registry.register(collector)
    return registry, collector


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


# reader metric -> ReaderStats field, for the ones copied as they are
READER_FIELDS = {
    "journaled_reader_backlog_items": "backlog_items",
    "journaled_reader_backlog_bytes": "backlog_bytes",
    "journaled_reader_waiting_items": "items_waiting",
    "journaled_reader_waiting_bytes": "bytes_waiting",
    "journaled_reader_memory_items": "items_in_memory",
    "journaled_reader_memory_bytes": "bytes_in_memory",
    "journaled_reader_disk_items": "items_on_disk",
    "journaled_reader_disk_bytes": "bytes_on_disk",
    "journaled_reader_open_reads": "open_reads",
    "journaled_reader_open_bytes": "bytes_open",
    "journaled_reader_delayed_items": "items_delayed",
    "journaled_reader_waiters": "waiters",
    "journaled_reader_put_items_total": "put",
    "journaled_reader_delivered_items_total": "delivered",
    "journaled_reader_committed_items_total": "committed",
    "journaled_reader_aborted_items_total": "aborted",
    "journaled_reader_timed_out_items_total": "timed_out",
    "journaled_reader_expired_items_total": "expired",
    "journaled_reader_discarded_items_total": "discarded",
    "journaled_reader_dead_lettered_items_total": "dead_lettered",
    "journaled_reader_rejected_items_total": "rejected",
    "journaled_reader_lost_to_retention_items_total": "items_lost_to_retention",
}


def assert_exposition_matches(samples, st, owned: bool) -> None:
    """Every value of the exposition equals the snapshot's (ages: not newer than it)."""
    q = (("queue", st.name),)
    h = st.health
    expected = {
        "journaled_queue_up": 1,
        "journaled_queue_put_items_total": st.put,
        "journaled_queue_put_bytes_total": st.bytes_put,
        "journaled_queue_next_id": st.next_id,
        "journaled_queue_journal_files": st.journal_files,
        "journaled_queue_journal_bytes": st.journal_bytes,
        "journaled_queue_readers": len(st.readers),
        "journaled_queue_healthy": int(h.ok),
        "journaled_queue_poisoned": int(h.poisoned is not None),
        "journaled_queue_directory_gone": int(h.directory_gone),
        "journaled_queue_failing_steps": len(h.failing),
        "journaled_queue_background_errors_total": h.errors,
        "journaled_queue_poison_readers": len(h.poison_readers),
        "journaled_queue_clients": len(st.clients),
        "journaled_queue_client_connections": sum(c.connections for c in st.clients),
        "journaled_queue_owned": int(owned),
    }
    for name, value in expected.items():
        assert samples[(name, q)] == value, name
    for r in st.readers:
        labels = (("queue", st.name), ("reader", r.name))
        for name, field in READER_FIELDS.items():
            assert samples[(name, labels)] == getattr(r, field), (r.name, name)
        assert samples[("journaled_reader_full", labels)] == int(r.full)
        assert samples[("journaled_reader_poisoned", labels)] == int(r.poison is not None)
        assert samples[("journaled_reader_sinks_missing", labels)] == len(r.sinks_missing)
        for name, age in (
            ("journaled_reader_oldest_waiting_age_seconds", r.oldest_age),
            ("journaled_reader_oldest_uncommitted_age_seconds", r.oldest_uncommitted_age),
        ):
            assert (samples[(name, labels)] == 0) == (age is None), (r.name, name)
            if age is not None:  # the scrape came first: a younger or equal age
                assert samples[(name, labels)] <= age, (r.name, name)


def busy_queue(q) -> None:
    """Two readers in different states: committed, aborted, delayed, open, waiting."""
    a = q.reader("a")
    b = q.reader("b", ReaderConfig(max_memory=64))  # most of its backlog only on disk
    q.put_many([b"x" * 20] * 12)
    first = a.get(timeout=5)
    a.commit(first)
    second = a.get(timeout=5)
    a.abort(second, delay=600)  # parked: a delayed item
    a.get(timeout=5)  # left open
    b.reject(b.get(timeout=5), "bad")


# ------------------------------------------------------------------ the stats fields it needed
def test_stats_count_the_calls_blocked_in_get_as_waiters(qdir):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r")
        got = []
        t = threading.Thread(target=lambda: got.append(r.get(timeout=TIMEOUT)))
        t.start()
        wait_for(lambda: q.stats().readers[0].waiters == 1, "the get to wait")
        assert r.stats().waiters == 1
        q.put(b"x")
        t.join(TIMEOUT)
        assert got[0].data == b"x" and r.stats().waiters == 0


def test_oldest_uncommitted_age_counts_open_and_delayed_items_the_waiting_age_does_not(qdir):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r")
        assert r.stats().oldest_uncommitted_age is None
        q.put(b"a")
        held = r.get(timeout=5)
        low = time.time() - held.add_time
        st = r.stats()
        high = time.time() - held.add_time
        assert st.oldest_age is None  # nothing waits: the one item is open
        assert st.oldest_uncommitted_age is not None and low <= st.oldest_uncommitted_age <= high
        r.abort(held, delay=600)
        st = r.stats()
        assert st.items_delayed == 1 and st.oldest_uncommitted_age >= low
        q.put(b"b")
        newer = r.get(timeout=5)
        low = time.time() - held.add_time
        st = r.stats()
        high = time.time() - held.add_time
        # the delayed item, older than the open one, sets the age
        assert st.open_reads == 1 and low <= st.oldest_uncommitted_age <= high
        r.commit(newer)


# ------------------------------------------------------------------ the collector
def test_the_exposition_parses_and_every_value_equals_the_queue_stats(qdir, prom):
    with JournaledQueue(qdir, QUIET) as q:
        busy_queue(q)
        registry, _ = collector_for(q)
        samples = scrape(registry)
        st = q.stats()
        assert_exposition_matches(samples, st, owned=True)
        a = st.readers[0]
        assert (a.committed, a.items_delayed, a.open_reads, st.readers[1].rejected) == (1, 1, 1, 1)
        assert samples[("journaled_queue_owner_changes_total", (("queue", q.name),))] == 0


def test_metric_names_follow_prometheus_conventions(qdir, prom):
    from prometheus_client.parser import text_string_to_metric_families

    with JournaledQueue(qdir, QUIET) as q:
        busy_queue(q)
        registry, _ = collector_for(q)
        families = list(text_string_to_metric_families(prom.generate_latest(registry).decode()))
    assert len(families) >= 40
    for f in families:
        assert f.name.startswith(("journaled_queue_", "journaled_reader_")), f.name
        assert f.type in ("gauge", "counter"), f.name
        labels = {k for s in f.samples for k in s.labels}
        assert labels == ({"queue"} if f.name.startswith("journaled_queue_") else {"queue", "reader"})
        if f.type == "counter":
            assert all(s.name == f.name + "_total" for s in f.samples), f.name
        assert not f.name.endswith(("_ms", "_milliseconds", "_kb")), f.name


def test_every_metric_is_listed_in_docs_metrics_md(qdir, prom):
    from journaled.metrics import (
        BOOKMARK_METRICS,
        QUEUE_METRICS,
        READER_COUNTERS,
        READER_DERIVED,
        READER_GAUGES,
    )

    names = [m[2] for m in QUEUE_METRICS] + [m[1] for m in READER_DERIVED + BOOKMARK_METRICS]
    names += ["journaled_reader_" + m[0] for m in READER_GAUGES + READER_COUNTERS]
    doc = open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8").read()
    counters = {m[2] for m in QUEUE_METRICS if m[1] == "counter"}
    counters |= {"journaled_reader_" + m[0] for m in READER_COUNTERS}
    for name in names:
        shown = name + "_total" if name in counters else name
        assert f"`{shown}`" in doc, shown


def test_a_scrape_does_not_change_the_queue(qdir, prom):
    with JournaledQueue(qdir, QUIET) as q:
        busy_queue(q)
        before = q.stats()
        registry, _ = collector_for(q)
        for _ in range(3):
            scrape(registry)
        after = q.stats()
        for x, y in zip(before.readers, after.readers):
            assert (x.delivered, x.committed, x.open_reads, x.head) == (
                y.delivered,
                y.committed,
                y.open_reads,
                y.head,
            )
        assert (before.put, before.next_id) == (after.put, after.next_id)


def test_a_queue_closed_after_it_was_added_is_dropped_at_the_next_scrape(tmp_path, prom):
    kept = JournaledQueue(str(tmp_path / "kept"), QUIET)
    gone = JournaledQueue(str(tmp_path / "gone"), QUIET)
    try:
        registry, collector = collector_for(kept, gone)
        assert {k[1] for k in scrape(registry) if k[0] == "journaled_queue_up"} == {
            (("queue", "gone"),),
            (("queue", "kept"),),
        }
        gone.close()
        assert {k[1] for k in scrape(registry) if k[0] == "journaled_queue_up"} == {(("queue", "kept"),)}
        assert collector.queues == [kept]
        with pytest.raises(QueueClosed):
            collector.add(gone)
    finally:
        kept.close()
        gone.close()
    assert scrape(registry) == {}  # nothing left to report: an empty exposition, not an error


def test_two_queues_of_one_name_are_refused(tmp_path, prom):
    from journaled.metrics import QueueCollector

    with (
        JournaledQueue(str(tmp_path / "a" / "q"), QUIET) as a,
        JournaledQueue(str(tmp_path / "b" / "q"), QUIET) as b,
    ):
        collector = QueueCollector([a])
        collector.add(a)  # the same queue again: nothing changes
        with pytest.raises(ValueError, match="'q'"):
            collector.add(b)
        assert collector.queues == [a]


def test_register_adds_to_one_collector_per_registry(tmp_path, prom):
    from journaled.metrics import register, unregister

    registry = prom.CollectorRegistry()
    with JournaledQueue(str(tmp_path / "a"), QUIET) as a, JournaledQueue(str(tmp_path / "b"), QUIET) as b:
        first = register(a, registry=registry)
        assert register(b, registry=registry) is first  # no "duplicated timeseries" from a second
        assert {k[1] for k in scrape(registry) if k[0] == "journaled_queue_up"} == {
            (("queue", "a"),),
            (("queue", "b"),),
        }
        unregister(a, registry=registry)
        assert first.queues == [b]


def test_a_poisoned_queue_reports_it_with_when_it_happened(qdir, prom):
    with JournaledQueue(qdir, QUIET) as q:
        registry, _ = collector_for(q)
        labels = (("queue", q.name),)
        assert scrape(registry)[("journaled_queue_poisoned", labels)] == 0
        os.rename(qdir, qdir + ".moved")  # the directory is gone from under the queue
        try:
            wait_for(lambda: q.stats().health.poisoned is not None, "the queue to notice")
            samples = scrape(registry)
            h = q.stats().health
            assert samples[("journaled_queue_poisoned", labels)] == 1
            assert samples[("journaled_queue_directory_gone", labels)] == int(h.directory_gone) == 1
            assert samples[("journaled_queue_healthy", labels)] == 0
            assert samples[("journaled_queue_health_changed_timestamp_seconds", labels)] == h.poisoned_since
        finally:
            os.rename(qdir + ".moved", qdir)


CLIENT = """
    import sys
    from prometheus_client import CollectorRegistry, generate_latest
    from journaled import JournaledQueue
    from journaled.metrics import register
    q = JournaledQueue(sys.argv[1])
    assert not q.is_owner
    r = q.reader("a")
    q.put_many([b"from the client"] * 3)
    r.get(timeout=60)  # held open by this process while the owner is asked
    registry = CollectorRegistry()
    register(q, registry=registry)
    sys.stdout.write(generate_latest(registry).decode())
    print("<end>", flush=True)
    sys.stdin.readline()
    q.close()
"""


def test_a_client_process_collector_reports_the_owner_figures(qdir, prom):
    from prometheus_client.parser import text_string_to_metric_families

    with JournaledQueue(qdir, QUIET) as q:
        busy_queue(q)
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CLIENT), qdir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            text = "".join(iter(child.stdout.readline, "<end>\n"))
            st = q.stats()  # the client still connected, its read still open
            samples = {}
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
            assert_exposition_matches(samples, st, owned=False)
            assert len(st.clients) == 1 and st.clients[0].open_reads == {"a": 1}
            assert st.put == 15 and st.readers[0].open_reads == 2
            child.stdin.write("done\n")
            child.stdin.flush()
            assert child.wait(timeout=TIMEOUT) == 0
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


class Unreachable:
    """A queue whose owner cannot be asked right now (stats raise, as during a hand-over)."""

    name, closed = "unreachable", False

    def stats(self):
        from journaled.errors import JournaledError

        raise JournaledError("the owner left; taking over")


def test_a_queue_whose_stats_fail_reports_up_0_and_the_others_are_still_scraped(qdir, prom):
    with JournaledQueue(qdir, QUIET) as q:
        q.put(b"x")
        registry, _ = collector_for(q, Unreachable())
        samples = scrape(registry)
        assert samples[("journaled_queue_up", (("queue", "unreachable"),))] == 0
        assert not [
            k for k in samples if k[1] == (("queue", "unreachable"),) and k[0] != "journaled_queue_up"
        ]
        assert samples[("journaled_queue_up", (("queue", q.name),))] == 1
        assert samples[("journaled_queue_put_items_total", (("queue", q.name),))] == 1


def test_a_client_that_takes_the_queue_over_reports_it_owns_it_and_one_change_of_owner(tmp_path, prom):
    d = str(tmp_path / "q")
    server = subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", "--create", d],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("serving ")
        q = JournaledQueue(d)
        try:
            r = q.reader("r")
            q.put(b"kept")
            registry, _ = collector_for(q)
            labels = (("queue", "q"),)
            before = scrape(registry)
            assert before[("journaled_queue_owned", labels)] == 0
            assert before[("journaled_queue_owner_changes_total", labels)] == 0
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=TIMEOUT) == 0
            assert r.get(timeout=TIMEOUT).data == b"kept"  # this process took the queue over
            after = scrape(registry)
            assert after[("journaled_queue_owned", labels)] == 1
            assert after[("journaled_queue_owner_changes_total", labels)] == q.generation == 1
            rl = (("queue", "q"), ("reader", "r"))
            assert after[("journaled_reader_put_items_total", rl)] == 1  # the reader's counters went on
            assert after[("journaled_reader_open_reads", rl)] == 1
        finally:
            q.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_external_bookmarks_report_their_head_and_the_lag_journaled_stat_shows(qdir, prom):
    from journaled.disk.bookmarks import write_bookmark
    from journaled.inspection import inspect_queue

    cfg = QueueConfig(sync="never", journal_size=400)
    with JournaledQueue(qdir, cfg) as q:
        registry, _ = collector_for(q)
        q.put_many([b"x" * 40] * 30)  # several journal files
        assert not any(k[0].startswith("journaled_bookmark") for k in scrape(registry))
        write_bookmark(qdir, "spark-query", 12)
        write_bookmark(qdir, "caught-up", q.stats().next_id)
        q.sync()
        got = scrape(registry)
        shown = {b.name: b.lag for b in inspect_queue(qdir).external_readers}
    labels = lambda b: (("bookmark", b), ("queue", "q"))  # noqa: E731
    assert got[("journaled_bookmark_head", labels("spark-query"))] == 12
    assert got[("journaled_bookmark_lag_items", labels("spark-query"))] == 31 - 12 == shown["spark-query"]
    assert got[("journaled_bookmark_lag_items", labels("caught-up"))] == 0 == shown["caught-up"]
