"""Where the commands write: the one place a rich console is made (the
reporters only render onto the console they are given) and JSON is printed."""

from __future__ import annotations

import json
import sys


def console(stderr: bool = False):
    """A rich console on stdout (or stderr). Not a terminal (a pipe, a log,
    make): 120 columns, wide enough for paths and tables."""
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, emoji=False,
                   width=None if stream.isatty() else 120)


def write_json(document) -> None:
    """A JSON document on stdout."""
    sys.stdout.write(json.dumps(document, indent=1, default=str) + "\n")
