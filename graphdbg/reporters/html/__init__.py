"""A run as HTML: one self-contained page (`graphdbg report --html`), and a
fragment of it for Jupyter's rich display (`_repr_html_`).

The contract the notebook display and the CLI code against:

- ``page(path) -> str``: a whole document, no network (inline CSS, a little JS);
- ``fragment(path) -> str``: a ``<div>`` with its own scoped inline style, to
  embed in a notebook's output.

Interim body: the terminal report, exported by rich with inline styles.
"""

from __future__ import annotations


def _report_html(path: str) -> str:
    from rich.console import Console

    from ...runfile.query import Run
    from ..report import summary
    console = Console(record=True, width=100, file=open("/dev/null", "w"))
    with Run(path) as run:
        console.print(summary(run, False, path))
    return console.export_html(inline_styles=True)


def page(path: str) -> str:
    return _report_html(path)


def fragment(path: str) -> str:
    from rich.console import Console  # noqa: F401
    html = _report_html(path)
    start = html.find("<body>")
    end = html.rfind("</body>")
    body = html[start + 6:end] if start >= 0 and end > start else html
    return f'<div class="graphdbg-run">{body}</div>'
