"""The page's bricks: escaping, tables, the scoped style and the few inline
handlers (no <script> block: every handler is a fixed string of ours, no
run-file text ever reaches one).

Every string from a run file goes through `esc` (html.escape, quotes too)
before it is put in the page, in text and in attributes alike; ids and
anchors are made from our own counters, never from run-file text.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable, Sequence

ROOT = "gdbg"   # the one class every rule is scoped under (a notebook keeps its own look)


def esc(text: object) -> str:
    """``text`` as HTML text or an attribute's value: &, <, >, " and ' escaped."""
    return html.escape("" if text is None else str(text), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "",
          row_classes: Sequence[str | None] | None = None, numeric: Iterable[int] = ()) -> str:
    """A table of escaped cells (``rows``: plain text, escaped here);
    ``numeric``: column indices aligned right."""
    right = set(numeric)
    head = "".join('<th' + (' class="n"' if i in right else "") + f'>{esc(h)}</th>'
                   for i, h in enumerate(headers))
    body = []
    for r, cells in enumerate(rows):
        rc = row_classes[r] if row_classes is not None and r < len(row_classes) else None
        tds = "".join('<td' + (' class="n"' if i in right else "") + f'>{esc(c)}</td>'
                      for i, c in enumerate(cells))
        attr = f' class="{esc(rc)}"' if rc else ""
        body.append(f"<tr{attr}>{tds}</tr>")
    return (f'<table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def note(text: str) -> str:
    return f'<p class="dim">{esc(text)}</p>'


def section(title: str, body: str, sid: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{body}</section>'


# -- the handlers (fixed strings: the page's CSP allows exactly these) ------------------

# a problem's file:line: open the source excerpt it points at, scroll to its
# line and mark it (without JS the link's #anchor does the same in chromium,
# which opens a closed <details> holding the target)
JUMP = ("var t=document.getElementById(this.getAttribute('href').slice(1));"
        "if(!t)return true;var d=t.closest('details');if(d)d.open=true;"
        "t.scrollIntoView({block:'center'});t.classList.add('flash');return false;")
# the node filter: rows of this page's node tables whose text holds the words
FILTER = ("var q=this.value.toLowerCase();var r=this.closest('." + ROOT + "');"
          "r.querySelectorAll('table.nodes tbody tr').forEach(function(e){"
          "e.style.display=e.textContent.toLowerCase().indexOf(q)<0?'none':'';});"
          "r.querySelectorAll('details.graph').forEach(function(d){if(q)d.open=true;});")
HANDLERS = (JUMP, FILTER)


def csp() -> str:
    """The page's Content-Security-Policy: nothing from the network, no
    script but our handlers (by hash), inline style."""
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(h.encode()).digest()).decode()
                      + "'" for h in HANDLERS)
    return (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            f"script-src 'unsafe-hashes' {hashes}; base-uri 'none'; form-action 'none'")


STYLE = """
.R{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;background:#fff;
 max-width:1200px;margin:0 auto;padding:8px 16px}
.R h1{font-size:20px;margin:8px 0}.R h2{font-size:17px;border-bottom:1px solid #d0d7de;
 margin:22px 0 8px;padding-bottom:3px}.R h3{font-size:15px;margin:12px 0 4px}
.R code,.R pre,.R .code{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.R pre{margin:2px 0;white-space:pre-wrap;overflow-wrap:anywhere}
.R .dim{color:#656d76}.R .ok{color:#1a7f37}.R .warn{color:#9a6700}.R .err{color:#cf222e}
.R .info{color:#0969da}.R a{color:#0969da;text-decoration:none}.R a:hover{text-decoration:underline}
.R .problem{border-left:3px solid #d0d7de;padding:2px 0 4px 10px;margin:10px 0}
.R .problem.p-error{border-color:#cf222e}.R .problem.p-warning{border-color:#bf8700}
.R .problem.p-info{border-color:#0969da}.R .problem p{margin:3px 0}
.R .head{font-weight:600}.R .where{font-family:ui-monospace,Menlo,Consolas,monospace}
.R .todo b{color:#1a7f37}.R ul.fixes{margin:2px 0 2px 18px;padding:0}
.R .caret{color:#cf222e}
.R table{border-collapse:collapse;margin:4px 0 8px;font-size:13px}
.R th,.R td{padding:2px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
.R th{background:#f6f8fa;position:sticky;top:0}.R td.n,.R th.n{text-align:right}
.R table.src{border:1px solid #d0d7de;width:100%}
.R table.src td{border:0;padding:0 8px;white-space:pre-wrap;font:13px/1.4 ui-monospace,Menlo,monospace}
.R table.src td.ln{color:#656d76;text-align:right;width:4em;user-select:none}
.R table.src tr.hl td{background:#fff8c5}.R tr.flash td{animation:gdbgflash 1.5s}
@keyframes gdbgflash{from{background:#ffd33d}}
.R details{margin:4px 0}.R summary{cursor:pointer}
.R tr.first-divergent td{background:#ffebe9}.R tr.differs td{background:#fff8c5}
.R input.filter{font-size:14px;padding:3px 6px;width:24em;margin:4px 0}
.R .scroll{overflow-x:auto}
"""


def style() -> str:
    """The style, every rule under `.gdbg` (the class of the page's root <div>)."""
    return STYLE.replace(".R", "." + ROOT)
