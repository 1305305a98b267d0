"""Durable reader settings in one process (docs/design.md, "Durable settings"): the stored form
round-trips every config, an explicit change is stored and logged, a reopen without a config
applies what is stored, a sink this process cannot provide suspends its policy (items kept),
and a damaged or planted settings file is reported, kept, and never crashes an open."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journaled import Empty, JournaledQueue, ReaderConfig, UnknownReader, UnsafeDirectory
from journaled.config import STORED_FIELDS, reader_config_from_settings, reader_settings, sink_spec
from journaled.disk.settingsfile import load_settings, settings_path, write_settings
from journaled.errors import CorruptJournal
from journaled.format.smallfiles import SettingsData, decode_settings, encode_settings


class FakeQueue:
    """What config.py takes for a queue sink: a str ``path``, ``put`` and ``is_owner``."""

    is_owner = True

    def __init__(self, path: str) -> None:
        self.path = path

    def put(self, data: bytes) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeQueue) and other.path == self.path

    __hash__ = None  # type: ignore[assignment]


positive = st.one_of(st.integers(1, 10**9), st.floats(1e-6, 1e9, allow_nan=False, allow_infinity=False))
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
dirs = st.sampled_from(["/data/dead", "/data/q2", "/elsewhere/dead", "/data/caf\u00e9", "/data/a b"])


@settings(max_examples=200, deadline=None)
@given(
    max_memory=st.integers(1, 2**40),
    max_items=maybe(st.integers(1, 2**40)),
    max_size=maybe(st.integers(1, 2**40)),
    discard=st.booleans(),
    max_age=maybe(positive),
    expire_to=maybe(dirs.map(FakeQueue)),
    open_read_timeout=maybe(positive),
    max_errors=maybe(st.integers(1, 2**31)),
    dead_letter=maybe(dirs.map(FakeQueue)),
    retry_delay=maybe(positive),
    retry_delay_max=maybe(positive),
)
def test_every_config_round_trips_through_the_file_bytes(
    max_memory, max_items, max_size, discard, max_age, expire_to, open_read_timeout,
    max_errors, dead_letter, retry_delay, retry_delay_max,
) -> None:  # fmt: skip
    config = ReaderConfig(
        start="latest",
        max_memory=max_memory,
        max_items=max_items,
        max_size=max_size,
        discard_old_when_full=discard,
        max_age=max_age,
        expire_to=expire_to,
        open_read_timeout=open_read_timeout,
        max_errors=max_errors,
        dead_letter=dead_letter,
        retry_delay=retry_delay,
        retry_delay_max=retry_delay_max,
    )
    stored = reader_settings(config, "/data/q")
    raw = encode_settings(SettingsData({"r": stored}))
    back = decode_settings(raw).readers["r"]
    assert back == stored
    opened = reader_config_from_settings(
        back, lambda _f, spec: FakeQueue(os.path.join("/data/q", spec["queue"]))
    )
    for field in STORED_FIELDS:
        mine, theirs = getattr(opened, field), getattr(config, field)
        if isinstance(theirs, FakeQueue):
            assert os.path.normpath(mine.path) == theirs.path
        else:
            assert mine == theirs and type(mine) is type(theirs), field
    assert opened.start == "earliest"  # not a setting of an existing reader


def test_a_queue_sink_is_named_relative_to_a_sibling_else_absolutely(tmp_path) -> None:
    assert sink_spec(FakeQueue("/data/dead"), "/data/q") == {"queue": "../dead"}
    assert sink_spec(FakeQueue("/other/dead"), "/data/q") == {"queue": "/other/dead"}
    assert sink_spec(FakeQueue("/data/q/inner"), "/data/q") == {"queue": "/data/q/inner"}
    assert sink_spec(print, "/data/q") == {"callable": "builtins.print"}
    assert sink_spec(None, "/data/q") is None


@pytest.mark.parametrize(
    "stored",
    [
        {"max_errors": 0},
        {"max_errors": True},
        {"max_memory": "big"},
        {"colour": "red"},
        {"dead_letter": "../dead"},
        {"dead_letter": {"queue": ""}},
        {"dead_letter": {"queue": "a", "callable": "b"}},
    ],
)
def test_bad_stored_values_are_a_value_error_naming_the_field(stored) -> None:
    with pytest.raises(ValueError):
        reader_config_from_settings(stored)


def test_an_explicit_change_is_stored_logged_and_applied_by_the_next_open(tmp_path, caplog) -> None:
    qdir, deaddir = str(tmp_path / "q"), str(tmp_path / "dead")
    caplog.set_level(logging.INFO, logger="journaled")
    with JournaledQueue(deaddir) as dead, JournaledQueue(qdir) as q:
        q.reader("plain")  # no config: nothing stored
        assert not os.path.exists(settings_path(qdir, "q"))
        cfg = ReaderConfig(max_errors=3, retry_delay=0.5, max_age=60.0, dead_letter=dead, expire_to=dead)
        q.reader("w", cfg)
        assert "reader w settings changed" in caplog.text
        stamp = os.stat(settings_path(qdir, "q")).st_ino
        caplog.clear()
        q.reader("w", cfg)  # the same settings: nothing written, nothing logged
        assert os.stat(settings_path(qdir, "q")).st_ino == stamp and "changed" not in caplog.text
        stored = load_settings(settings_path(qdir, "q")).readers
        assert set(stored) == {"w"} and stored["w"]["dead_letter"] == {"queue": "../dead"}
    with JournaledQueue(qdir) as q:  # dead is closed: this open opens it, and closes it again
        r = q.reader("w")
        assert (r.config.max_errors, r.config.retry_delay, r.config.max_age) == (3, 0.5, 60.0)
        assert r.config.dead_letter is r.config.expire_to  # one destination, opened once
        assert r.config.dead_letter.path == deaddir and q.reader("plain").config == ReaderConfig()
        q.reader("w", ReaderConfig())  # back to the defaults: the entry goes
        assert load_settings(settings_path(qdir, "q")).readers == {}
    assert r.config.dead_letter is None and JournaledQueue(deaddir).close() is None  # dead was closed


def test_a_destination_this_process_owns_is_used_and_left_open(tmp_path) -> None:
    qdir, deaddir = str(tmp_path / "q"), str(tmp_path / "dead")
    with JournaledQueue(deaddir) as dead:
        with JournaledQueue(qdir) as q:
            q.reader("w", ReaderConfig(max_errors=1, dead_letter=dead))
        with JournaledQueue(qdir) as q:  # not QueueLocked: the open queue is the destination
            r = q.reader("w")
            assert r.config.dead_letter is dead
            q.put(b"poison")
            r.abort(r.get(timeout=5))
            q.run_policies()
        assert not dead.closed
        assert dead.reader("check", ReaderConfig()).get(timeout=5).data.endswith(b"poison")


def test_removing_a_reader_removes_its_settings(tmp_path) -> None:
    qdir = str(tmp_path / "q")
    with JournaledQueue(qdir) as q:
        q.reader("a", ReaderConfig(max_errors=2))
        q.reader("b", ReaderConfig(max_errors=3))
        q.remove_reader("a")
        assert set(load_settings(settings_path(qdir, "q")).readers) == {"b"}


def test_a_callable_sink_that_is_gone_suspends_its_policy_and_keeps_the_items(tmp_path, caplog) -> None:
    qdir = str(tmp_path / "q")
    letters: list[bytes] = []
    with JournaledQueue(qdir) as q:
        q.reader("w", ReaderConfig(max_errors=1, dead_letter=lambda item: letters.append(item.data)))
        q.put(b"poison")
    with pytest.warns(UserWarning, match="max_errors suspended"):
        q = JournaledQueue(qdir)
    with q:
        assert "cannot be provided by this process" in caplog.text
        r = q.reader("w")
        assert r.config.max_errors is None and r.config.dead_letter is None
        for _ in range(3):  # aborted again and again: never dropped
            r.abort(r.get(timeout=5))
            q.run_policies()
        assert r.stats().dead_lettered == 0 and len(r) == 1
        cfg = ReaderConfig(max_errors=1, dead_letter=lambda item: letters.append(item.data))
        stamp = os.stat(settings_path(qdir, "q")).st_ino
        q.reader("w", cfg)  # the sink given again: the same stored form, now applied
        assert os.stat(settings_path(qdir, "q")).st_ino == stamp
        with pytest.raises(Empty):  # past max_errors already: it goes to the sink, not to us
            r.get(timeout=0.2)
        q.run_policies()
        assert letters == [b"poison"]


def test_a_destination_that_is_gone_suspends_its_policy(tmp_path) -> None:
    qdir, deaddir = str(tmp_path / "q"), str(tmp_path / "dead")
    with JournaledQueue(deaddir) as dead, JournaledQueue(qdir) as q:
        q.reader("w", ReaderConfig(max_age=1.0, expire_to=dead))
    os.rename(deaddir, deaddir + ".moved")
    with pytest.warns(UserWarning, match="max_age suspended"), JournaledQueue(qdir) as q:
        assert q.reader("w").config.max_age is None
    assert not os.path.exists(deaddir)  # never created by following the setting


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-3] + b"00\n",  # CRC
        lambda raw: b"journaled-settings 9" + raw[20:],  # magic
        lambda raw: b"\xff\xfe garbage",
        lambda raw: b"",
    ],
)
def test_a_damaged_settings_file_is_reported_kept_and_gives_the_defaults(tmp_path, caplog, damage) -> None:
    qdir = str(tmp_path / "q")
    with JournaledQueue(qdir) as q:
        q.reader("w", ReaderConfig(max_errors=2))
    path = settings_path(qdir, "q")
    with open(path, "rb") as f:
        bad = damage(f.read())
    with open(path, "wb") as f:
        f.write(bad)
    with pytest.raises(CorruptJournal):
        load_settings(path)  # typed, for tools
    with JournaledQueue(qdir) as q:
        assert "every reader uses its default settings" in caplog.text
        assert q.reader("w").config == ReaderConfig()
        with open(path, "rb") as f:
            assert f.read() == bad  # opening never rewrites bytes we did not write
        q.reader("w", ReaderConfig(max_errors=4))  # a change replaces it, the old bytes kept aside
    with open(path + ".damaged", "rb") as f:
        assert f.read() == bad
    assert load_settings(path).readers["w"]["max_errors"] == 4


def test_a_bad_entry_gives_that_reader_the_defaults_and_keeps_the_others(tmp_path, caplog) -> None:
    qdir = str(tmp_path / "q")
    with JournaledQueue(qdir) as q:
        q.reader("a", ReaderConfig(max_errors=2))
        q.reader("b", ReaderConfig(max_errors=3))
    path = settings_path(qdir, "q")
    data = load_settings(path)
    write_settings(path, SettingsData({**data.readers, "a": {"max_errors": -1}}, ("later {}",)), 0o600)
    with JournaledQueue(qdir) as q:
        assert q.reader("a").config == ReaderConfig() and q.reader("b").config.max_errors == 3
        assert "reader a: its stored settings are invalid" in caplog.text
        q.reader("b", ReaderConfig(max_errors=5))
    assert load_settings(path).other == ("later {}",)  # lines of other kinds survive a rewrite


def test_a_planted_link_is_refused_never_followed(tmp_path) -> None:
    qdir = str(tmp_path / "q")
    with JournaledQueue(qdir) as q:
        q.reader("w", ReaderConfig(max_errors=2))
    target = tmp_path / "elsewhere"
    os.replace(settings_path(qdir, "q"), target)
    os.symlink(target, settings_path(qdir, "q"))
    with pytest.raises(UnsafeDirectory):
        JournaledQueue(qdir)


def test_set_reader_settings_changes_only_what_it_names(tmp_path, caplog) -> None:
    qdir, deaddir = str(tmp_path / "q"), str(tmp_path / "dead")
    caplog.set_level(logging.INFO, logger="journaled")
    seen: list[bytes] = []
    with JournaledQueue(deaddir) as dead, JournaledQueue(qdir) as q:
        r = q.reader("w", ReaderConfig(max_errors=5, dead_letter=dead, expire_to=seen.append, start="latest"))
        caplog.clear()
        new = q.set_reader_settings("w", {"retry_delay": 0.25, "max_errors": 2})
        assert "reader w settings changed" in caplog.text
        assert new == q.reader_settings("w") == load_settings(settings_path(qdir, "q")).readers["w"]
        assert (new["retry_delay"], new["max_errors"], new["dead_letter"]) == (0.25, 2, {"queue": "../dead"})
        assert new["expire_to"] == {"callable": "list.append"}
        # the sinks it did not name are the ones in use, the callable included; start is kept
        assert r.config.dead_letter is dead and r.config.expire_to == seen.append
        assert (r.config.retry_delay, r.config.max_errors, r.config.start) == (0.25, 2, "latest")
        for bad in ({"colour": 1}, {"max_errors": 0}, {"dead_letter": 7}, {"start": "earliest"}):
            with pytest.raises(ValueError):
                q.set_reader_settings("w", bad)
        assert q.reader_settings("w") == new  # nothing changed by a refused change
        with pytest.raises(UnknownReader):
            q.set_reader_settings("nobody", {"max_errors": 1})
        with pytest.raises(UnknownReader):
            q.reader_settings("nobody")
        q.reader("v")
        assert q.reader_settings("v") == reader_settings(ReaderConfig(), qdir)
    with pytest.warns(UserWarning, match="reader w: .*expire_to"):  # w's callable is gone
        q = JournaledQueue(qdir)
    with q:  # a destination given by its directory, as a command line would
        q.set_reader_settings("v", {"dead_letter": deaddir, "max_errors": 1})
        assert q.reader_settings("v")["dead_letter"] == {"queue": "../dead"}
        assert q.reader("v").config.dead_letter.path == deaddir


def test_unprovided_sinks_names_what_a_reader_lacks(tmp_path) -> None:
    from journaled.owner.reopen import unprovided_sinks

    qdir = str(tmp_path / "q")
    with JournaledQueue(qdir) as q:
        q.reader("w", ReaderConfig(max_errors=1, dead_letter=print, expire_to=print))
        q.reader("v", ReaderConfig(max_errors=1))
        assert unprovided_sinks(q.reader_settings("w"), q.reader("w").config) == ()
    with pytest.warns(UserWarning), JournaledQueue(qdir) as q:
        assert unprovided_sinks(q.reader_settings("w"), q.reader("w").config) == ("dead_letter", "expire_to")
        assert unprovided_sinks(q.reader_settings("v"), q.reader("v").config) == ()
        assert unprovided_sinks(None, ReaderConfig()) == ()
