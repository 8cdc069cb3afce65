"""A run as HTML: one self-contained page (`graphdbg report --html`,
`graphdbg run --html`), and a fragment of it for Jupyter's rich display.

The contract the notebook display and the CLI code against:

- ``page(path) -> str``: a whole document, no network (inline CSS, a few
  inline handlers; a Content-Security-Policy that allows nothing else);
  ``path`` is a run file or a distributed job's folder;
- ``fragment(path) -> str``: one ``<div class="gdbg">`` with its own
  ``<style>``, every rule scoped under that class (a notebook's look is left
  alone), no ``<html>``/``<body>``; its ids carry a per-render prefix, so two
  fragments in one notebook do not collide.

Why hand-written HTML. rich's ``Console(record=True).export_html(inline_styles=True)``
(the interim body) gives the terminal report as one <pre> of styled spans:
no links, so no jump from a problem to its source, no tables a browser can
lay out or filter, and a 100k-node table would be one enormous block.
textual-serve serves the TUI to a browser, but it needs a running Python
process and a websocket: not a file to attach to an issue or open offline.
So the structure (sections, the problem-to-source links, tables, the node
filter, the eager-vs-compiled table) is a small template here, and the
words are the analysis's (`graphdbg.analysis.problemtext`, `lines`,
`ranks`, `jobtext`, `values`): the page, the report and the TUI say the
same. No rich renderable is reused, so rich is not imported.

Security: run files travel between people. Every string from a run file is
escaped with ``html.escape(quote=True)`` (`markup.esc`), in text and in
attributes; no run-file text goes into a handler or a <script> (there is
none); ids are made from counters. The page's CSP admits only the two
handlers' hashes, so even an escaping slip could not run script or load
anything. Paging: `graphs.py`. docs/html.md says what the page shows.
"""

from __future__ import annotations

import os
import secrets

from .markup import ROOT, csp, esc, style

__all__ = ["fragment", "page"]


def _body(path: str, uid: str) -> tuple[str, str]:
    """(title, body) of a run file or a job's folder."""
    from ...core.format import short
    from ...runfile.job import is_job_folder
    if is_job_folder(path):
        from ...analysis.ranks import compare
        from ...runfile.job import Job
        from .jobpage import job_body
        with Job.open(path) as job:
            return f"job {short(path)}", job_body(job, compare(job), uid)
    from ...runfile.query import Run
    from ..report import newest_run
    from .runpage import run_body
    if os.path.isdir(path):
        path = newest_run(path)
    with Run(path) as run:
        return short(path), run_body(run, path, uid)


def _uid() -> str:
    return f"{ROOT}{secrets.token_hex(4)}"


def page(path: str) -> str:
    """The whole page of the run file (or job folder) at ``path``."""
    uid = _uid()
    title, body = _body(path, uid)
    return ("<!doctype html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(csp())}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>graphdbg: {esc(title)}</title>"
            f"<style>body{{margin:0}}{style()}</style></head>\n"
            f'<body><div class="{ROOT}" id="{uid}">{body}</div></body></html>\n')


def fragment(path: str) -> str:
    """The page's body as one <div> with its scoped <style>, for a notebook's
    output cell (the handlers are inline attributes: no <script> to run)."""
    uid = _uid()
    _, body = _body(path, uid)
    return f'<div class="{ROOT}" id="{uid}"><style>{style()}</style>{body}</div>'
