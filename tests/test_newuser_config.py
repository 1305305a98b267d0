"""The settings of issue 39 refuse a wrong value with a message a user can read: one sentence
naming the setting, what it takes and what was given (no attrs ``Attribute(...)`` dump)."""

from __future__ import annotations

import pytest

from journaled import JournaledQueue, QueueConfig, ReaderConfig


@pytest.mark.parametrize("value", ["lz4", "ZSTD", True, 1])
def test_a_wrong_compression_is_one_readable_sentence(value: object) -> None:
    with pytest.raises((TypeError, ValueError)) as exc:
        QueueConfig(compression=value)  # type: ignore[arg-type]
    message = str(exc.value)
    assert "Attribute(" not in message and message.startswith("compression must be"), message
    assert "'zstd'" in message and "'none'" in message and repr(value) in message, message


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_wrong_key_order_is_one_readable_sentence(value: object) -> None:
    with pytest.raises(TypeError) as exc:
        ReaderConfig(key_order=value)  # type: ignore[arg-type]
    message = str(exc.value)
    assert "Attribute(" not in message and message.startswith("key_order must be True or False"), message
    assert repr(value) in message, message


def test_a_wrong_key_order_in_set_reader_settings_is_one_readable_sentence(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "q")) as q:
        q.reader("orders")
        with pytest.raises((TypeError, ValueError)) as exc:
            q.set_reader_settings("orders", {"key_order": "yes"})
        assert "Attribute(" not in str(exc.value) and "key_order must be True or False" in str(exc.value), (
            str(exc.value)
        )
        assert q.reader_settings("orders").get("key_order", False) is False  # nothing stored
