"""``python -m journaled``: the command-line tool."""

from journaled.cli import main

raise SystemExit(main())
