"""A distributed job's folder as the page's body: the job's header, where
the ranks differ (each at its line), where each stopped rank was, and one
row per rank: `graphdbg report DIR`'s sections, from the same comparison
(`graphdbg.analysis.ranks.compare`) and words (`analysis.jobtext`)."""

from __future__ import annotations

from ...analysis.jobtext import CLOSED, header_lines, position_lines, rank_list
from ...analysis.ranks import KIND_LABELS, Comparison, Difference
from ...core.format import short
from ...runfile.job import Job
from .markup import esc, note, section, table
from .problems import ICONS, problems_html

_STYLES = {"bold": "head", "green": "ok", "yellow": "warn", "red": "err", "dim": "dim"}


def job_body(job: Job, c: Comparison, uid: str) -> str:
    out = ["<h1>graphdbg job</h1>"]
    for style, text in header_lines(job, c):
        out.append(f'<p class="{_STYLES.get(style, "")}">{esc(text)}</p>')
    between = c.between
    if len(job.runs) - len(job.stale) < 2:
        body = note("one rank's file only: nothing to compare")
    elif not between:
        body = ('<p class="ok">● no difference between the ranks\' compiled graphs, graph '
                'breaks, recompiles, collectives, compile times and calls</p>')
    else:
        body = "".join(_difference(d) + f"<p>{esc(d.message)}</p></div>" for d in between)
    out.append(section(f"Where ranks differ ({len(between)})", body, f"{uid}-between"))
    if c.stopped:
        out.append(section("Where each rank was", _stopped(c), f"{uid}-stopped"))
    out.append(section(f"Ranks ({len(c.ranks)})", _ranks(job, c), f"{uid}-ranks"))
    out.append(section("Each rank's problems", _rank_problems(job, uid), f"{uid}-each"))
    return "".join(out)


def _rank_problems(job: Job, uid: str) -> str:
    """Each rank's problems as its own page shows them (collapsed; a rank
    with problems says how many)."""
    out = []
    for r, run in sorted(job.runs.items()):
        findings = run.findings()
        out.append(f'<details class="rank"><summary>rank {r}: {len(findings)} problem'
                   f'{"s" if len(findings) != 1 else ""}</summary>'
                   f"{problems_html(run, findings, f'{uid}-r{r}')}</details>")
    return "".join(out)


def _difference(d: Difference) -> str:
    """A difference's head and code (its block is closed by the caller)."""
    sev = d.severity if d.severity in ICONS else "info"
    colour = {"error": "err", "warning": "warn"}.get(sev, "info")
    fn = f" in {esc(d.function)}" if d.function else ""
    where = f"{short(d.file)}:{d.line}"
    code = (f'<pre class="code">{esc(f"{d.line:>5} │ {d.code}")}</pre>' if d.code else "")
    return (f'<div class="problem p-{sev}" data-kind="{esc(d.kind)}"><div class="head">'
            f'<span class="{colour}">{ICONS[sev]}</span> {esc(KIND_LABELS.get(d.kind, d.kind))} '
            f'<span class="where">{esc(where)}</span>{fn} '
            f'<span class="dim">{esc(rank_list(d.ranks))}</span></div>{code}')


def _stopped(c: Comparison) -> str:
    out = []
    for d in c.stopped:
        out.append(_difference(d))
        if d.severity == "error" and d.detail.get("finding") is not None:
            out.append(f"<p>{esc(d.message)}</p>")
        lines = position_lines(d.detail.get("position"))
        out += [f'<p class="warn">{esc(line)}</p>' for line in lines]
        if not lines:
            out.append(note(f"rank {d.ranks[0]} {d.detail.get('status') or 'stopped'}; "
                            f"no position recorded"))
        out.append("</div>")
    placed = {d.ranks[0] for d in c.stopped}
    for s in c.ranks:
        if s.status not in CLOSED and s.rank not in placed:
            out.append(f'<p class="warn">rank {s.rank} {esc(s.status or "stopped")}: '
                       f"no position recorded</p>")
    return "".join(out)


def _ranks(job: Job, c: Comparison) -> str:
    rows, classes = [], []
    for s in c.ranks:
        status = (s.status or "?") + (f", exit {s.exit_status}" if s.exit_status is not None
                                      else "") + (" (other job)" if s.stale else "")
        rows.append((str(s.rank), s.host or "?", status, str(s.graphs), str(s.graph_breaks),
                     str(s.recompiles), str(s.eager_ops), f"{s.compile_s:.1f} s", short(s.file)))
        classes.append(None if s.status in CLOSED and s.exit_status == 0 else "differs")
    example = c.ranks[-1].file if c.ranks else f"{job.folder}/rank0.run"
    return (table(("rank", "host", "status", "graphs", "breaks", "recompiles", "eager ops",
                   "compile", "file"), rows, "ranks", classes, numeric=(0, 3, 4, 5, 6, 7))
            + note(f"a rank's own page: graphdbg report --html OUT.html {short(example)}; "
                   f"ops aligned rank against rank: graphdbg diff {short(job.folder)}"))
