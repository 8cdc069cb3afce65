"""Where the commands write: the one place a rich console is made (the
reporters only render onto the console they are given), JSON is printed and
HTML pages written."""

from __future__ import annotations

import contextlib
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


def check_html_path(out: str) -> str | None:
    """Why ``out`` cannot take an HTML page (None: it can), said of --html;
    checked before the work (a long `graphdbg run` must not end in it)."""
    if out.endswith(".run") or os.path.isdir(out):
        return (f"--html OUT names the page to write, and {out} is "
                f"{'a folder' if os.path.isdir(out) else 'a run file name'}: "
                f"graphdbg report --html run.html [RUN]")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        return f"--html: the folder {folder} does not exist"
    return None


def write_html(out: str, text: str, quiet: bool = False) -> None:
    """The page into ``out`` whole (a temporary file renamed over it: a
    reader never sees half a page), and a line on stderr saying where
    (``quiet``: none)."""
    from ..core.errors import GraphdbgError
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise GraphdbgError(f"cannot write {out}: {exc.strerror or exc}") from None
    if quiet:
        return
    size = len(text.encode("utf-8"))
    print(f"graphdbg: wrote {out} ({size / 1024:.0f} kB), one self-contained page: "
          f"open it in a browser", file=sys.stderr)


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
