"""Where the commands write: the one place a rich console is made (the
reporters only render onto the console they are given) and JSON is printed."""

from __future__ import annotations

import json
import os
import re
import sys


def console(stderr: bool = False):
    """A rich console on stdout (or stderr): the terminal's width, or
    COLUMNS where it is set (a pipe or a log at the width the user gives);
    else, not a terminal (a pipe, a log, make): 120 columns, wide enough for
    paths and tables."""
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    columns = os.environ.get("COLUMNS", "")   # rich reads it when width is None
    return Console(stderr=stderr, highlight=False, emoji=False,
                   width=None if stream.isatty() or columns.isdigit() else 120)


# a line's trailing blanks, among the colour codes that close it
_TRAILING = re.compile(r"(?:[ \t]|\x1b\[[0-9;]*m)+$")
_CODE = re.compile(r"\x1b\[[0-9;]*m")


def print_trimmed(console, renderable) -> None:
    """Print ``renderable`` on ``console`` without the blanks rich pads each
    line with (tables, wrapped text): no line ends in spaces, colours kept."""
    with console.capture() as captured:
        console.print(renderable)
    text = captured.get()
    console.file.write("\n".join(_TRAILING.sub(lambda m: "".join(_CODE.findall(m[0])), line)
                                 for line in text.split("\n")))
    console.file.flush()


def write_json(document) -> None:
    """A JSON document on stdout."""
    sys.stdout.write(json.dumps(document, indent=1, default=str) + "\n")


def plain_text(renderable, width: int = 100) -> str:
    """``renderable`` as plain text (no colours, no trailing blanks), for a
    notebook's text/plain output and the API results' ``str``."""
    import io

    from rich.console import Console
    # recorded and exported without styles: a kernel's environment may force
    # colours onto any console (FORCE_COLOR)
    c = Console(file=io.StringIO(), width=width, record=True, highlight=False, emoji=False,
                force_terminal=False, force_jupyter=False)
    c.print(renderable)
    text = c.export_text(styles=False)
    return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n"))
