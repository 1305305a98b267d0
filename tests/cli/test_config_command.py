"""``journaled config``: a queue's stored reader settings, shown without owning, changed only
where named, live at a running owner."""

import json
import os
import subprocess
import sys

from journaled import JournaledQueue, QueueConfig, ReaderConfig

TIMEOUT = 120


def config(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", "config", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
    )


def listing(path: str) -> dict[str, tuple[int, int]]:
    # the lease is left out: a live owner renews it every second
    return {
        e: (os.lstat(os.path.join(path, e)).st_mtime_ns, os.lstat(os.path.join(path, e)).st_size)
        for e in os.listdir(path)
        if "journaled.lease" not in e
    }


def test_config_shows_the_stored_settings_without_touching_the_directory(tmp_path):
    jobs, dead = str(tmp_path / "jobs"), str(tmp_path / "dead")
    # no periodic checkpoint while the directory is compared: the owner's own writes are not the
    # command's (a new reader's checkpoint is rewritten about a second after it was made)
    quiet = QueueConfig(checkpoint_interval=3600.0)
    with JournaledQueue(dead) as d, JournaledQueue(jobs, quiet) as q:
        q.reader("workers", ReaderConfig(max_errors=5, retry_delay=0.5, dead_letter=d))
        q.reader("audit")
        before = listing(jobs)
        shown = config(jobs, "--json")  # a live owner: read from the file, no lock, no request
        assert listing(jobs) == before
    assert shown.returncode == 0, shown.stderr
    readers = json.loads(shown.stdout)["readers"]
    assert readers["workers"]["max_errors"] == 5 and readers["workers"]["retry_delay"] == 0.5
    assert readers["workers"]["dead_letter"] == {"queue": "../dead"}
    assert readers["audit"]["max_errors"] is None
    text = config(jobs).stdout
    assert "reader audit: the defaults" in text and "reader workers: its own settings" in text
    assert "retention: none" in text


def test_config_shows_the_stored_retention_limits(tmp_path):
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs, QueueConfig(retention_bytes=1 << 20)) as q:
        q.reader("r")
    shown = config(jobs, "--json")
    assert json.loads(shown.stdout)["retention"] == {"retention_bytes": 1 << 20}
    assert "retention: retention_bytes 1048576" in config(jobs).stdout


def test_a_wrong_path_is_refused_and_never_created(tmp_path):
    missing = str(tmp_path / "nope")
    out = config(missing, "reader", "r", "--max-errors", "2")
    assert out.returncode == 2 and "does not exist" in out.stderr
    assert not os.path.exists(missing)


def test_a_change_without_an_owner_is_stored_and_keeps_what_it_did_not_name(tmp_path):
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(str(tmp_path / "dead")) as d, JournaledQueue(jobs) as q:
        q.reader("workers", ReaderConfig(max_errors=5, dead_letter=d))
    out = config(jobs, "reader", "workers", "--max-errors", "3", "--retry-delay", "0.25")
    assert out.returncode == 0, out.stderr
    assert "no owner was running" in out.stdout
    with JournaledQueue(jobs) as q:
        r = q.reader("workers")
        assert (r.config.max_errors, r.config.retry_delay) == (3, 0.25)
        assert r.config.dead_letter is not None  # not named: still the dead-letter queue
        assert q.reader_settings("workers")["dead_letter"] == {"queue": "../dead"}


def test_a_change_reaches_a_running_owner_at_once(tmp_path):
    jobs, dead = str(tmp_path / "jobs"), str(tmp_path / "dead")
    os.mkdir(dead, 0o700)
    with JournaledQueue(dead), JournaledQueue(jobs) as q:
        r = q.reader("workers")
        out = config(
            "jobs", "reader", "workers", "--max-errors", "2", "--dead-letter", "dead", cwd=str(tmp_path)
        )
        assert out.returncode == 0, out.stderr
        assert "the owner (live)" in out.stdout
        assert r.config.max_errors == 2
        assert r.config.dead_letter is not None
        assert q.reader_settings("workers")["dead_letter"] == {"queue": "../dead"}
        q.put(b"poison")
        for _ in range(2):
            r.abort(r.get(timeout=30))
    with JournaledQueue(dead) as d:
        assert d.reader("letters").get(timeout=5).data.endswith(b"poison")


def test_an_unknown_reader_or_no_setting_is_a_usage_error(tmp_path):
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs) as q:
        q.reader("workers")
    assert "no reader 'ghost'" in config(jobs, "reader", "ghost", "--max-errors", "2").stderr
    nothing = config(jobs, "reader", "workers")
    assert nothing.returncode == 2 and "at least one setting" in nothing.stderr
    bad = config(jobs, "reader", "workers", "--max-errors", "x")
    assert bad.returncode == 2 and "not a number" in bad.stderr


def test_queue_retention_is_stored_without_an_owner_and_removed_with_none(tmp_path):
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs, QueueConfig(retention_bytes=1 << 30)) as q:
        q.put(b"x")
    set_age = config(jobs, "queue", "--retention-age", "3600")
    assert set_age.returncode == 0, set_age.stderr
    assert "retention_age 3600" in set_age.stdout and "retention_bytes 1073741824" in set_age.stdout
    removed = config(jobs, "queue", "--retention-bytes", "none", "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["retention"] == {"retention_age": 3600.0}
    with JournaledQueue(jobs) as q:  # the next owner applies what is stored
        q.put(b"y")
    shown = json.loads(config(jobs, "--json").stdout)
    assert shown["retention"] == {"retention_age": 3600.0}


def test_queue_retention_is_refused_while_another_process_owns_the_queue(tmp_path):
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs, QueueConfig(retention_age=60.0)):
        refused = config(jobs, "queue", "--retention-age", "10")
    assert refused.returncode == 1 and "another process owns" in refused.stdout
    assert json.loads(config(jobs, "--json").stdout)["retention"] == {"retention_age": 60.0}


def test_retention_options_need_the_queue_target_and_valid_numbers(tmp_path):
    jobs = str(tmp_path / "jobs")
    with JournaledQueue(jobs) as q:
        q.reader("r")
    for args in (
        ("reader", "r", "--retention-age", "5"),
        ("queue",),
        ("queue", "--retention-age", "-5"),
        ("queue", "--retention-bytes", "1.5"),
        ("queue", "--retention-age", "soon"),
    ):
        done = config(jobs, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
    assert json.loads(config(jobs, "--json").stdout)["retention"] == {}
