"""The ``journaled`` command-line tool.

Subcommands live in their own small modules and register here; this module only parses the
command line and dispatches, so ``journaled --help`` lists everything the tool can do.  No
command shows a traceback for a wrong path, a wrong option or Ctrl-C: each is one line on stderr
and an exit status (EXIT_STATUS below, also in ``--help``).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Sequence

from journaled import __version__
from journaled.cli.console import add_console_commands
from journaled.cli.deadletters import add_dead_letter_commands
from journaled.cli.inspection import UsageError, add_inspect_commands
from journaled.cli.qtest.main import add_qtest_command
from journaled.cli.serve import add_serve_command
from journaled.cli.settings import add_config_command
from journaled.cli.top import add_top_command
from journaled.errors import JournaledError

EXIT_STATUS = """exit status:
  0    success: the queue is clean, the load test validated
  1    damage found (check, dump), repair failed, or a load test found a broken promise
  2    usage error: a wrong option, or a path that is missing, not a directory, holds no
       queue or several (pick one with --name); nothing is created or changed
  3    repair refused: a live process holds the queue
  130  interrupted (Ctrl-C); a load test prints what it measured so far
  141  the output's reader went away (| head): stopped quietly, as a shell's SIGPIPE
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="journaled",
        description="Inspect journaled queue directories and load-test them.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"journaled {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_qtest_command(sub)
    add_inspect_commands(sub)
    add_serve_command(sub)
    add_config_command(sub)
    add_dead_letter_commands(sub)
    add_top_command(sub)
    add_console_commands(sub)
    for command in sub.choices.values():
        command.set_defaults(command_parser=command)
    return parser


def _output_gone() -> bool:
    """Standard output is a pipe whose reader has closed it (poll reports POLLERR on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() here, or stdout is no file
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; return the process exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "messages", None) is not None and not any(x.startswith("-") for x in extra):
        args.messages += extra  # `put PATH --key K a b`: argparse leaves MESSAGEs after an option
        extra = []
    if extra:
        # argparse leaves a subcommand's unknown option to the top-level parser, which would
        # print the top-level usage: the subcommand's own usage says what it does accept
        command = getattr(args, "command_parser", None) or parser
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        result: int = args.func(args)
    except UsageError as exc:
        print(f"journaled {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError as exc:
        if not _output_gone():  # another pipe (a socket to the owner): an error like any other
            print(f"journaled {args.command}: {exc}", file=sys.stderr)
            return 2
        # `journaled dump PATH | head`: nothing went wrong here, and status 2 would claim that
        # nothing was changed (a config change is made before it prints).  Python flushes
        # stdout again at exit: point it at /dev/null so that raises no second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (JournaledError, OSError) as exc:
        # a locked or damaged directory, a permission problem: say so, no traceback
        print(f"journaled {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"journaled {args.command}: interrupted", file=sys.stderr)
        return 130
    return result
