"""A single put with a key or headers hands its readers a ``MetaItem`` (and its ``Meta``) that the
cyclic collector does not walk, as a plain put's ``Item`` is not, where the C codec is built: the
collections that allocations start otherwise walk every such item a reader holds (issue 37)."""

from __future__ import annotations

import gc

import pytest

from journaled import JournaledQueue
from journaled.format import speedups
from journaled.item import MetaItem

pytestmark = pytest.mark.skipif(speedups.native is None, reason="the C codec builds these objects")


@pytest.mark.parametrize(
    "options", [{"key": b"k1"}, {"headers": {"ct": b"json"}}, {"headers": {"ct": b"json"}, "key": b"k2"}]
)
def test_a_put_with_a_key_or_headers_hands_readers_items_the_collector_does_not_walk(tmp_path, options):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put(b"first", **options)
        q.put(b"second", **options)  # the same headers again: the remembered ones
        got = [r.get(timeout=0), r.get(timeout=0)]
    for it in got:
        assert type(it) is MetaItem
        assert (gc.is_tracked(it), gc.is_tracked(it.meta)) == (False, False), it
        assert it.key == options.get("key") and dict(it.headers) == options.get("headers", {})


def test_a_put_with_a_not_before_hands_readers_an_item_the_collector_does_not_walk(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put(b"x", not_before=1.0, key=b"k")  # a time long past: deliverable at once, stored as 0
        q.put(b"y", delay=0.001)
        first = r.get(timeout=0)
        second = r.get(timeout=5)
    assert not gc.is_tracked(first) and not gc.is_tracked(second)
    assert second.not_before is not None
