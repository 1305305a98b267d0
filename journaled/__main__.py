"""``python -m journaled``: the command-line tool."""

import sys

try:
    from journaled.cli.main import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C while starting up: still no traceback
    print("journaled: interrupted", file=sys.stderr)
    code = 130
raise SystemExit(code)
