"""What ``--help`` tells a user (issue 38, point 5): ``top`` and ``stat`` describe themselves in
a user's words (no notes for developers, no Sphinx markup), ``stat`` says where its ``--json``
keys are documented, and ``dead-letters --payload PATH`` reads PATH as the path, not as the
payload's format."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from journaled import DeadLetter, JournaledQueue, QueueConfig
from support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)

# What a docstring written for developers shows in a terminal: reST roles and double backquotes.
MARKUP = (":func:", ":data:", ":class:", ":meth:", "``")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journaled", *args], capture_output=True, text=True, timeout=120, env=ENV
    )


def description(command: str) -> str:
    """The text ``journaled COMMAND --help`` prints between the usage and the arguments."""
    out = cli(command, "--help")
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("\n\n", 1)[1]
    return text.split("positional arguments:", 1)[0].strip()


@pytest.mark.parametrize("command", ["top", "stat", "dead-letters", "redrive"])
def test_help_describes_the_command_without_developer_markup(command):
    text = description(command)
    assert text, f"journaled {command} --help has no description"
    for mark in MARKUP:
        assert mark not in text, f"journaled {command} --help shows {mark!r}:\n{text}"


def test_top_help_says_what_it_shows_and_how_to_quit():
    text = description("top")
    assert "backlog" in text and "quit" in text, text
    assert "sample" not in text and "render" not in text, text  # the module's function names


def test_stat_help_says_it_changes_nothing_and_where_the_json_keys_are():
    text = description("stat")
    assert "never" in text and "owner" in text, text
    assert "docs/cli.md" in cli("stat", "--help").stdout


def test_dead_letters_payload_before_the_path_takes_the_path_as_the_path(tmp_path):
    path = str(tmp_path / "dead")
    with JournaledQueue(path, QueueConfig(sync="always"), name="dead") as q:
        q.put(DeadLetter(1, b"hello", 1_700_000_000.0, None, 0, "rejected", "bad", "work").encode())
    shown = cli("dead-letters", "--payload", path)
    assert shown.returncode == 0, shown.stderr
    assert "payload: hello" in shown.stdout
    hexed = cli("dead-letters", "--payload-format", "hex", path)
    assert hexed.returncode == 0, hexed.stderr
    assert f"payload: {b'hello'.hex()}" in hexed.stdout
    assert "payload:" not in cli("dead-letters", path).stdout
