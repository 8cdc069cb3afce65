"""Notebook cells, named as IPython names them (``Cell In[3], line 7``).

IPython compiles each cell under a made-up file name: ipykernel's
``<tmp>/ipykernel_<pid>/<hash>.py`` (on no disk), the terminal's and IPython's
own ``<ipython-input-3-<hash>>``. Its tracebacks name the cell by its execution
count instead, which its compiler keeps per file name
(``get_ipython().compile._filename_map``, IPython 8+; the count is in the
name before 8), and the cell's source is in ``linecache``. The name and the
source are taken at capture (`source_of`, which the session gives the run
file's writer) and stored in the run file's ``sources`` table: the views show
the cell's name and source without IPython.
"""

from __future__ import annotations

import linecache
import re
import sys

# ipykernel compiles each cell to <tmp>/ipykernel_<pid>/<hash>.py; IPython
# before 8 (and the terminal) to "<ipython-input-3-hash>"
_CELL = re.compile(r"(?:[\\/]ipykernel_\d+[\\/]\d+\.py$|^<ipython-input-\d+-)")
_INPUT = re.compile(r"^<ipython-input-(\d+)-")


def is_cell(filename: str) -> bool:
    return bool(_CELL.search(filename or ""))


# a cell that only runs graphdbg's cell magic, as IPython transforms it
_MAGIC_CALL = "get_ipython().run_cell_magic('graphdbg'"


def runs_magic(filename: str) -> bool:
    """A cell whose code is the ``%%graphdbg`` magic's call: the magic's
    machinery (the body is its own cell), never the user's line."""
    lines = linecache.getlines(filename)
    return bool(lines) and lines[0].startswith(_MAGIC_CALL)


def cell_name(filename: str) -> str | None:
    """``Cell In[3]`` for a cell's file name, as IPython's tracebacks name it;
    None for anything else, or when the running IPython does not know it.
    Never imports IPython: a program that did not load it has no cells."""
    if not is_cell(filename):
        return None
    shell = None
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        try:
            shell = ipython.get_ipython()
        except Exception:   # an IPython half imported, or torn down
            shell = None
    compiler = getattr(shell, "compile", None)
    try:
        named = compiler.format_code_name(filename) if compiler is not None else None
    except Exception:
        named = None
    if named is None and compiler is not None:
        count = getattr(compiler, "_filename_map", {}).get(filename)
        named = ("Cell", f"In[{count}]") if count is not None else None
    if named is not None:
        label, name = named
        return f"{label} {name}"
    m = _INPUT.match(filename)   # IPython < 8 counts in the name
    return f"Cell In[{m[1]}]" if m else None


def cell_source(filename: str) -> str | None:
    """A cell's source, from linecache (where IPython keeps it: the file is
    on no disk)."""
    lines = linecache.getlines(filename)
    return "".join(lines) if lines else None


def source_of(filename: str) -> tuple[str, str] | None:
    """For the run file's writer (`RunWriter`'s ``source_of``): a cell's name
    and source, None for a file that is not a cell (read from disk)."""
    name = cell_name(filename)
    if name is None:
        return None
    text = cell_source(filename)
    return (name, text) if text is not None else None
