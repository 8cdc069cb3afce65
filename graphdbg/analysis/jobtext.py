"""What every view of a distributed job says of it, in plain words: the
header (the job, how its ranks ended, what its folder lacks), rank lists,
where a rank that never closed its file was last seen, and the job's part of
the JSON documents. `graphdbg report DIR`, `graphdbg diff DIR`, the TUI's job
screen and a rank's own report use these, so they say it the same way.

No rich: a header line is (style, text), the style a rich style name that
the reporters turn into markup and the TUI into its own style.
"""

from __future__ import annotations

from collections import defaultdict

from ..core.format import brief, short
from ..runfile.job import Job

CLOSED = ("complete",)   # statuses of a rank that ended as it should
ENDED = ("complete", "failed", "interrupted")   # ... that closed its file


def rank_list(ranks) -> str:
    """"rank 1", "ranks 0, 2", "ranks 0-3, 6" (runs of 3 or more as ranges)."""
    rs = sorted(set(ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts += [f"{rs[i]}-{rs[j]}"] if j - i >= 2 else [str(r) for r in rs[i:j + 1]]
        i = j + 1
    return "ranks " + ", ".join(parts)


def file_line(file: str | None, line: int | None) -> str:
    """"train.py:12" (the file's brief name), "?" without a file."""
    return f"{brief(file)}:{line}" if file else "?"


def ordinal(n: int) -> str:
    """1 -> "1st", 12 -> "12th", 22 -> "22nd"."""
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def position_lines(position: dict | None) -> list[str]:
    """Where a rank that never closed its file was last seen (`Run.position`)."""
    if not position:
        return []
    out = []
    call = position.get("call")
    if call:
        at = f" ({call['function'] or '?'} at {short(call['file'])}:{call['line']})" \
            if call.get("file") else ""
        what = f"compiled call {call['call_idx']} of graph {call['graph_id']}{at}"
        out.append(f"last seen: inside {what}" if call.get("running") else
                   f"last seen: {what}, which raised" if call.get("raised") else
                   f"last seen: returned from {what}")
    op = position.get("op")
    if op:
        at = f" at {short(op['file'])}:{op['line']}" if op.get("file") else ""
        out.append(f"last eager op: {op['op']} ({op['phase']}){at}")
    return out


def position_text(position: dict | None) -> str:
    """`position_lines` in one line."""
    return "; ".join(position_lines(position)) if position else "no position recorded"


def job_info(job: Job) -> dict:
    """The job's part of the documents: its id, ranks, hosts, and what the
    folder lacks or holds too much of."""
    argv = next((run.info.argv for run in job.runs.values() if run.info.argv), None)
    return {"folder": job.folder, "id": job.id, "world_size": job.world_size,
            "backend": job.backend, "hosts": job.hosts, "argv": argv,
            "ranks": sorted(job.runs), "missing_ranks": job.missing,
            "stale": [{"rank": r, "job": j, "file": job.path(r)} for r, j in job.stale.items()],
            "unreadable": [{"rank": f.rank, "file": f.path, "error": f.error}
                           for f in job.unreadable],
            "superseded": [{"rank": f.rank, "restart": f.restart, "file": f.path}
                           for f in job.superseded]}


def header_lines(job: Job, c) -> list[tuple[str, str]]:
    """(style, text) lines that open every view of a job: the job, how its
    ranks ended (`c`: its `analysis.ranks.Comparison`), and what the folder
    lacks or holds too much of."""
    n = len(job.runs)
    world = f" of {job.world_size}" if job.world_size else ""
    argv = job_info(job)["argv"]
    hosts = ", ".join(job.hosts) or "?"
    parts = [job.backend, f"host{'s' if len(job.hosts) != 1 else ''} {hosts}"]
    out = [("bold", f"job {job.id or '?'}: {n} rank{'s' if n != 1 else ''}{world} "
                    f"({', '.join(p for p in parts if p)})"
                    + (f"  graphdbg run {' '.join(argv)}" if argv else ""))]
    by_status: dict[str, list[int]] = defaultdict(list)
    for s in c.ranks:
        by_status[s.status or "?"].append(s.rank)
    ended = "; ".join(f"{status}: {rank_list(rs)}" for status, rs in by_status.items())
    exits = {s.exit_status for s in c.ranks}
    exit_text = f", exit {exits.pop()}" if len(exits) == 1 and None not in exits else ""
    style = "green" if set(by_status) <= set(CLOSED) and exit_text == ", exit 0" else "yellow"
    out.append((style, ended + exit_text))
    if job.missing:
        out.append(("yellow", f"{rank_list(job.missing)} of 0-{(job.world_size or 1) - 1} "
                              f"{'has' if len(job.missing) == 1 else 'have'} no run file in "
                              f"this folder (not started, or its file is elsewhere: copy it "
                              f"here)"))
    for r, other in job.stale.items():
        out.append(("yellow", f"{short(job.path(r))} is from another job ({other or 'no job id'}, "
                              f"not {job.id}): a stale file? left out of the comparison"))
    for f in job.unreadable:
        out.append(("yellow", f"rank {f.rank}: {f.error}"))
    for f in job.superseded:
        out.append(("dim", f"{short(f.path)}: an earlier restart of rank {f.rank}, replaced by "
                           f"a later one"))
    return out
