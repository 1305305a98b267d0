"""``journaled stat --json`` is documented field by field (issue 38, point 5): every key the
command prints is in docs/cli.md's table, and every key of the table is printed in one of the
three cases a queue can be in: nobody holds it, a running owner answers (with a client holding
a read and a Spark-style bookmark), and a process holds it without serving it."""

from __future__ import annotations

import fcntl
import json
import os
import re
from typing import Any

from journaled import JournaledQueue, QueueConfig
from journaled.cli.main import main
from journaled.disk.bookmarks import write_bookmark
from support.child import Child
from support.paths import ROOT

DOC = os.path.join(ROOT, "docs", "cli.md")
# Objects whose keys are data (reader names), not part of the format.
MAPS = {"owner.clients[].open_reads"}


def documented() -> set[str]:
    """The keys of docs/cli.md's ``stat --json`` table (first column, in backquotes)."""
    with open(DOC, encoding="utf-8") as f:
        section = f.read().split("## `stat --json`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.M))


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key in ``value`` as a dotted path, ``[]`` standing for any element of a list."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}{key}"
            out.add(path)
            if path not in MAPS:
                out |= key_paths(inner, path + ".")
    elif isinstance(value, list):
        for inner in value:
            out |= key_paths(inner, prefix[:-1] + "[].")
    return out


def stat_json(path: str, capsys: Any) -> dict[str, Any]:
    assert main(["stat", path, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
with JournaledQueue(sys.argv[1], QueueConfig(sync="always")) as q:
    print("owner", flush=True)
    sys.stdin.readline()
"""

CLIENT = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
item = q.reader("work").get(timeout=30)
print("holding", item.id, flush=True)
sys.stdin.readline()
"""


def test_every_key_stat_json_prints_is_documented_and_every_documented_key_is_printed(tmp_path, capsys):
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="always"), name="q") as q:
        q.reader("work")
        q.put_many([b"a", b"b", b"c"])
    write_bookmark(path, "spark-query", 2)
    seen: dict[str, set[str]] = {}

    seen["nobody holds it"] = key_paths(stat_json(path, capsys))

    owner = Child(OWNER, path)  # another process: stat asks the owner over its socket
    try:
        owner.wait_for_line("owner")
        client = Child(CLIENT, path)
        try:
            client.wait_for_line("holding")
            live = stat_json(path, capsys)
        finally:
            client.send("")
            client.proc.wait(timeout=60)
    finally:
        owner.send("")
        owner.proc.wait(timeout=60)
    assert live["owner"].get("clients") and live["readers"][0]["open_reads"] == 1, live
    seen["a running owner"] = key_paths(live)

    with open(os.path.join(path, ".journaled.lock"), "a") as lock:  # held, as by an offline repair
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = stat_json(path, capsys)
    assert "error" in held["owner"], held
    seen["held, not served"] = key_paths(held)

    table = documented()
    for case, keys in seen.items():
        assert keys <= table, f"{case}: printed but not in docs/cli.md: {sorted(keys - table)}"
    printed = set().union(*seen.values())
    assert table <= printed, f"in docs/cli.md but never printed: {sorted(table - printed)}"
