"""`graphdbg report --json`: the JSON document of a run file.

`document()` is the schema's single source (docs/report-json.md). It reads
the run through graphdbg.runfile.query and turns the typed records into
plain JSON values; no SQL, no torch, no rich.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis.compiletime import cache_text
from ..analysis.lines import compiled_by_line, compiled_lines
from ..analysis.wording import compiled_before_text
from ..runfile.query import Finding, Frame, Node, OpStat, Run, SampledLine, Sampling

JSON_SCHEMA = "graphdbg-report/1"


def _open(run: Run | str) -> tuple[Run, bool]:
    """The `Run` behind what callers give, and whether we opened it."""
    if isinstance(run, Run):
        return run, False
    return Run(run), True


def _where(x: Frame | Node | OpStat | Finding) -> dict:
    return {"file": x.file, "line": x.line, "function": x.function, "code": x.code}


def _location(f: Finding) -> dict:
    """A finding's place: `_where`, the caret's span in ``code`` (``col``,
    ``end_col``: ``code[col:end_col]``; null: the whole line) and a notebook
    cell's name (``cell``: ``Cell In[3]``, null for a file)."""
    return {**_where(f), "col": f.col, "end_col": f.end_col, "cell": f.cell}


def document(run: Run | str, *, nodes: bool = True) -> dict:
    """The JSON report: run, graphs (with nodes), diagnostics, eager summary.
    ``run``: a `Run` (`graphdbg.open_run`) or a path."""
    run, opened = _open(run)
    try:
        return _document(run, nodes)
    finally:
        if opened:
            run.close()


def _document(run: Run, with_nodes: bool) -> dict:
    i = run.info
    info = {
        "file": i.file, "argv": i.argv, "cwd": i.cwd, "module": i.module,
        "exit_status": i.exit_status, "status": i.status,
        "started_at": i.started_at, "ended_at": i.ended_at, "wall_s": i.wall_s,
        "values": i.values, "device": i.device, "versions": i.versions,
        "torch_counters": i.torch_counters, "counts": i.counts,
        "ops_dropped": i.ops_dropped, "internal_errors": i.internal_errors,
        "pid": i.pid, "host": i.host, "profile": i.profile, "py_spy_error": i.py_spy_error,
    }
    if i.compiled_before:   # code compiled before the capture ran in it (what it lacks)
        info["compiled_before"] = {**i.compiled_before,
                                   "text": compiled_before_text(i.compiled_before)}
    if i.rank is not None:   # a launcher's rank, and where it was last seen
        info["rank"] = i.rank
        info["position"] = run.position()
    if i.eager_steps and i.eager_steps.get("recorded", 0) < i.eager_steps.get("steps", 0):
        # which steps' eager ops are in the run (--eager-steps), when not all of them
        info["eager_steps"] = i.eager_steps
    graphs = []
    for g in run.graphs():
        entry = {
            "id": g.id, "compile_id": g.compile_id, "backend": g.backend,
            "function": g.function, "file": g.file, "line": g.line,
            "status": g.status, "error": g.error,
            "n_nodes": g.n_nodes, "n_ops": g.n_ops, "n_inputs": g.n_inputs,
            "compile_time_s": g.compile_time_s, "backend_time_s": g.backend_time_s,
            "calls": g.calls, "total_call_ns": g.total_call_ns,
            "min_call_ns": g.min_call_ns, "max_call_ns": g.max_call_ns,
            "eager_ref_ns": g.eager_ref_ns, "steady_call_ns": g.steady_call_ns,
            "compiled_slower": g.compiled_slower, "ddp_bucket": g.ddp_bucket,
            # compile, export or onnx; the export's own facts (null for a compiled graph)
            "kind": g.kind, "export": g.export,
        }
        if with_nodes:
            entry["nodes"] = [{
                "idx": n.idx, "name": n.name, "op": n.op, "target": n.target,
                "shapes": n.shapes, "dtypes": n.dtypes, "args": n.args,
                "module_path": n.module_path, "module_class": n.module_class,
                "eager_ns": n.eager_ns, **_where(n)} for n in run.nodes(g.id)]
        graphs.append(entry)
    findings = run.findings()
    diagnostics = [{
        "id": d.id, "kind": d.kind, "severity": d.severity,
        "message": d.message, "reason": d.reason, "hint": d.hint, **_location(d),
        "stack": [f.as_dict() for f in d.stack],
        "count": d.count, "compile_ids": list(d.compile_ids),
        "graph": d.graph_id, "node": d.node, "op": d.op,
        "detail": d.detail.as_dict() if d.detail is not None else None,
    } for d in findings]
    top_ops = [{"op": o.op, "phase": o.phase, "count": o.count, "total_ns": o.total_ns,
                "max_ns": o.max_ns, "module_path": o.module_path, **_where(o)}
               for o in run.op_stats(20)]
    ops, total_ns = run.eager_totals()
    eager = {"ops": ops, "total_ns": total_ns, "ops_recorded": run.count("ops"),
             "top_ops": top_ops}
    hot_nodes = [{"graph": n.graph_id, "node": n.name, "target": n.target,
                  "eager_ns": n.eager_ns, "module_path": n.module_path, **_where(n)}
                 for n in run.hot_nodes(20)]
    return {"schema": JSON_SCHEMA, "run": info, "graphs": graphs,
            "diagnostics": diagnostics, "eager": eager, "hot_nodes": hot_nodes,
            "compile_times": _compile_times(run, findings), "py_spy": _py_spy(run),
            "compiled_lines": _compiled_lines(run), "kernels": _kernels(run)}


def _kernels(run: Run) -> list[dict]:
    """inductor's kernels, most total time first, with the user lines they compute."""
    ks = sorted(run.kernel_times(), key=lambda k: -k.total_ns)[:100]
    return [{"compile_id": k.compile_id, "graph": k.graph_id, "part": k.part, "name": k.name,
             "handle": k.handle, "ns": k.ns, "median_ns": k.median_ns, "first_ns": k.first_ns,
             "steady": k.steady,
             "samples": k.samples,
             "calls": k.calls,
             "total_ns": k.total_ns, "lines": [{"file": f.file, "line": f.line} for f in k.frames],
             "nodes": list(k.nodes)} for k in ks]


def _compiled_lines(run: Run) -> list[dict]:
    """Inductor's kernel time per user line (provenance; a fused kernel split
    between its lines), beside the line's nodes in the eager reference run
    (graphdbg.analysis.lines)."""
    return [c.as_dict() for c in compiled_lines(run, 50)]


@dataclass(frozen=True)
class PySpyLine:
    """A line py-spy sampled, with its code and the time of the eager ops
    and compiled calls at the same line."""
    sampled: SampledLine
    code: str | None
    share: float                   # of all samples
    eager_ns: int
    compiled_ns: int


def py_spy_lines(run: Run, s: Sampling, limit: int = 50) -> list[PySpyLine]:
    """The most sampled lines of ``s`` (the run's `sampling()`)."""
    times = {(t.file, t.line): t for t in run.hot_lines(None, compiled=compiled_by_line(run))}
    sources: dict[str, list[str]] = {}
    out = []
    for ln in s.lines[:limit]:
        if ln.file not in sources:
            text = run.source(ln.file)
            sources[ln.file] = text.splitlines() if text else []
        src = sources[ln.file]
        t = times.get((ln.file, ln.line))
        out.append(PySpyLine(ln, src[ln.line - 1].strip() if 0 < ln.line <= len(src) else None,
                             ln.samples / s.samples if s.samples else 0.0,
                             t.eager_ns if t else 0, t.compiled_ns if t else 0))
    return out


def _py_spy(run: Run) -> dict | None:
    """py-spy's samples per user line, beside the eager op and compiled time of the line."""
    s = run.sampling()
    if s is None:
        return None
    lines = [{"file": p.sampled.file, "line": p.sampled.line, "function": p.sampled.function,
              "code": p.code, "samples": p.sampled.samples, "share": p.share,
              "eager_ns": p.eager_ns, "compiled_ns": p.compiled_ns}
             for p in py_spy_lines(run, s)]
    return {"samples": s.samples, "rate": s.rate, "speedscope": s.file, "lines": lines}


def recompile_findings(findings: list[Finding]) -> dict[str, int]:
    """compile id -> the id of the recompile finding that says why it recompiled."""
    return {cid: f.id for f in findings if f.kind == "recompile" for cid in f.compile_ids}


def _compile_times(run: Run, findings: list[Finding]) -> list[dict]:
    """Each compile's time by phase; a recompile names the finding that says why."""
    why = recompile_findings(findings)
    return [{"compile_id": c.compile_id, "graphs": list(c.graph_ids), "function": c.function,
             "file": c.file, "line": c.line, "total_s": c.total_s, "phases": c.phases,
             "fx_cache": c.fx_cache, "aot_cache": c.aot_cache, "cache": cache_text(c),
             "failed": c.failed,
             "recompile": c.recompile, "recompile_finding": why.get(c.compile_id)}
            for c in run.compile_times()]
