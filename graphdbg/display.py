"""How a run shows itself in Jupyter and in a terminal: the capture object,
`graphdbg.compare`'s and `graphdbg.check_export`'s results and the
``%%graphdbg`` magic all show a run file through here.

Jupyter asks an object for ``_repr_mimebundle_``: the HTML is the page
renderer's fragment (`graphdbg.reporters.html.fragment`, the same analysis
as the report), the text/plain the terminal report. Imports neither torch
nor IPython: `in_ipython` looks only at what is already imported.
"""

from __future__ import annotations

import sys


def in_ipython() -> bool:
    """Running under an IPython shell (a notebook's kernel, the IPython
    terminal); False in scripts and pytest, even where IPython is imported."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        return ipython.get_ipython() is not None
    except Exception:   # an IPython half imported, or torn down
        return False


def summary_line(path: str, what: str = "capture") -> str:
    """``graphdbg capture → demo.run: 2 graphs, 3 problems (1 error) —
    graphdbg report demo.run``; a capture that ran code compiled before it
    says how many graphs it could not see."""
    from .core.format import short
    from .runfile.query import Run
    with Run(path) as run:
        graphs = sum(g.kind == "compile" for g in run.graphs())
        findings = run.findings()
        before = run.info.compiled_before
    errors = sum(f.severity == "error" for f in findings)
    name = short(path)
    text = (f"graphdbg {what} → {name}: {graphs} graph{'s' if graphs != 1 else ''}, "
            f"{len(findings)} problem{'s' if len(findings) != 1 else ''}"
            + (f" ({errors} error{'s' if errors != 1 else ''})" if errors else ""))
    if before:
        n = before.get("graphs") or 0
        text += (f"; {n} graph{'s' if n != 1 else ''} compiled before it not seen "
                 f"(reset=True recompiles them)" if n else "; code compiled before it ran")
    return f"{text} — graphdbg report {name}"


def report_text(path: str, name: str | None = None) -> str:
    """The terminal report of a run file, as plain text (``name``: the run
    file as its next commands name it)."""
    from .commands.output import plain_text
    from .reporters.report import summary
    from .runfile.query import Run
    with Run(path) as run:
        return plain_text(summary(run, False, name or path))


def mimebundle(path: str, head: str | None = None, name: str | None = None) -> dict[str, str]:
    """A run file for Jupyter's display: its HTML fragment, and the report as
    text (``head``: a line above both; ``name``: as `report_text`)."""
    from html import escape

    from .reporters.html import fragment
    text = report_text(path, name)
    html = fragment(path)
    if head:
        text = f"{head}\n{text}"
        html = f"<div><b>{escape(head)}</b></div>{html}"
    return {"text/plain": text, "text/html": html}
