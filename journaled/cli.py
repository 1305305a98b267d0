"""The ``journaled`` command-line tool.

Subcommands live in their own small modules and register here; this module only parses the
command line and dispatches, so ``journaled --help`` lists everything the tool can do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from journaled import __version__
from journaled.cli_inspect import add_inspect_commands
from journaled.errors import JournaledError
from journaled.qtest import add_qtest_command
from journaled.cli_serve import add_serve_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="journaled", description="Inspect journaled queue directories and load-test them."
    )
    parser.add_argument("--version", action="version", version=f"journaled {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_qtest_command(sub)
    add_inspect_commands(sub)
    add_serve_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        result: int = args.func(args)
    except (JournaledError, OSError) as exc:
        # a wrong path, a locked or damaged directory: say so, no traceback
        print(f"journaled {args.command}: {exc}", file=sys.stderr)
        return 2
    return result
