"""Configs are frozen, validated at construction with messages naming the field; names are safe."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journaled import InvalidName, JournaledQueue, QueueConfig, ReaderConfig
from journaled.config import validate_name


def test_defaults_are_the_documented_ones():
    c = QueueConfig()
    assert c.sync == 0.05 and c.sync_interval == 0.05
    assert c.journal_size == 16 * 1024 * 1024
    assert c.max_item_size == 16 * 1024 * 1024
    assert c.file_mode == 0o600
    assert QueueConfig(sync="always").sync_interval is None
    assert QueueConfig(sync="never").sync_interval is None
    assert QueueConfig(sync=2).sync_interval == 2.0


def test_configs_are_frozen():
    c = QueueConfig()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.sync = "always"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ReaderConfig().start = "latest"  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"sync": "sometimes"}, "sync"),
        ({"sync": "ALWAYS"}, "sync"),
        ({"sync": 0}, "sync"),
        ({"sync": -1.0}, "sync"),
        ({"sync": float("inf")}, "sync"),
        ({"sync": float("nan")}, "sync"),
        ({"sync": True}, "sync"),
        ({"sync": None}, "sync"),
        ({"journal_size": 0}, "journal_size"),
        ({"journal_size": -5}, "journal_size"),
        ({"journal_size": 2**31 + 1}, "journal_size"),
        ({"max_item_size": 0}, "max_item_size"),
        ({"max_item_size": 2**30 + 1}, "max_item_size"),
        ({"checkpoint_interval": 0}, "checkpoint_interval"),
        ({"checkpoint_interval": -1}, "checkpoint_interval"),
        ({"file_mode": -1}, "file_mode"),
        ({"file_mode": 0o4755}, "file_mode"),
        ({"file_mode": "0600"}, "file_mode"),
        ({"recovery": "yolo"}, "recovery"),
    ],
)
def test_bad_queue_config_values_raise_at_construction_naming_the_field(kwargs, field):
    with pytest.raises((ValueError, TypeError)) as err:
        QueueConfig(**kwargs)
    assert field in str(err.value)


@pytest.mark.parametrize("kwargs", [{"journal_size": 1.5e6}, {"max_item_size": "16MiB"}])
def test_sizes_must_be_ints(kwargs):
    with pytest.raises((ValueError, TypeError)):
        QueueConfig(**kwargs)


def test_config_must_be_a_queue_config(qdir):
    with pytest.raises(TypeError, match="QueueConfig"):
        JournaledQueue(qdir, config={"sync": "always"})  # type: ignore[arg-type]


@pytest.mark.parametrize("start", ["first", -1, float("nan"), None, b"earliest"])
def test_bad_reader_start_raises(start):
    with pytest.raises(ValueError, match="start"):
        ReaderConfig(start=start)


def test_reader_max_memory_must_be_positive():
    with pytest.raises(ValueError, match="max_memory"):
        ReaderConfig(max_memory=0)


@pytest.mark.parametrize("name", ["q", "events", "a.b", "A-Z_0-9:x", "x" * 128, "a.", "a..b", "7"])
def test_valid_names(name):
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", ".hidden", "../x", "/abs", "a/b", "a\\b", "x" * 129, "é", "a b", "a\nb", "\x00", 3, None],
)
def test_invalid_names_raise_invalid_name(name):
    with pytest.raises(InvalidName):
        validate_name(name)


@given(st.text(max_size=140))
@settings(max_examples=200, deadline=None)
def test_any_accepted_name_is_a_single_non_hidden_path_component(name):
    try:
        validate_name(name)
    except InvalidName:
        return
    assert 1 <= len(name) <= 128
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".")
    assert name not in (".", "..")
    assert name.isascii()
