"""Compiled time per user line, and when compiled code is slower than eager.

Inductor's provenance names the FX nodes, hence the user lines, each kernel
computes (hooks/record/kernels.py). A kernel fused from several lines is
*split* between them, never charged in full to each: in proportion to its
nodes' times in the eager reference run when every one of its lines has one,
else equally. Per graph, the lines' forward shares never add up to more than
the graph's own fastest call after the first (where the kernels' fastest
calls, each measured apart, would, they are scaled down to it); the rest of a
graph's call time (wrapper, guards, allocation, a cold first call) is placed
at the compiled function's first line by `compiled_by_line`.

"Slower than eager" (▲) is said only beyond the noise the run measured
(`beyond_noise`, also behind `Graph.compiled_slower`): the compiled side's
fastest steady time must exceed the eager reference by more than the spread
of its own steady measurements (median − fastest: the kernels' calls for a
line, the graph's calls for a graph), over at least `MIN_SAMPLES` calls
after the first.

Pure: reads `graphdbg.runfile.query.Run`'s typed records; no rich, textual
or SQL. The report, its JSON and the TUI all use these functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.format import brief, ms
from ..runfile.query import MIN_SAMPLES, KernelTime, Run
from ..runfile.readrecords import beyond_noise

Line = tuple  # (file, line)


@dataclass(frozen=True, slots=True)
class CompiledLine:
    """Compiled kernel time at a user line. Per call of its graphs (weighted
    by their calls): `forward_ns` (forward and inference kernels, their
    fastest steady call) against `eager_ref_ns` (the line's nodes in the
    eager reference run), `backward_ns`; `total_ns` over all calls.
    `shared`: a kernel of the line also computes other lines (its time is
    split, `split` says how: "eager" in proportion to the nodes' eager
    times, "equal" in equal shares)."""
    file: str
    line: int
    function: str | None
    code: str | None
    total_ns: int
    forward_ns: int
    backward_ns: int
    eager_ref_ns: int | None
    kernels: tuple[str, ...]
    graph_ids: tuple[int, ...]
    steady: bool = True            # its forward kernels were timed after a first call
    samples: int = 0               # the fewest steady calls any of its forward kernels was timed over
    forward_median_ns: int | None = None   # the same from the kernels' median steady calls
    compiled_slower: bool | None = None    # slower than eager beyond the measured spread
    shared: bool = False
    split: str | None = None       # "eager" | "equal" (None: no kernel shared)

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "function": self.function,
                "code": self.code, "total_ns": self.total_ns, "forward_ns": self.forward_ns,
                "forward_median_ns": self.forward_median_ns, "backward_ns": self.backward_ns,
                "eager_ref_ns": self.eager_ref_ns, "compiled_slower": self.compiled_slower,
                "steady": self.steady, "samples": self.samples, "kernels": list(self.kernels),
                "graphs": list(self.graph_ids), "shared": self.shared, "split": self.split}


# -- kernels split between their lines --------------------------------------------------

@dataclass
class _Acc:
    frame: object
    fw: float = 0.0            # per call, fastest
    fw_med: float = 0.0
    bw: float = 0.0
    kernels: list = None
    steady: bool = True
    samples: int | None = None
    shared: bool = False
    split: str | None = None


def _shares(run: Run) -> tuple[list[tuple[KernelTime, list[tuple[object, float]], str | None]],
                                dict[tuple, int]]:
    """Each timed kernel with [(frame, fraction)] of its lines (fractions add
    up to 1) and how it was split; and the eager time per (graph, line)."""
    kernels = [k for k in run.kernel_times() if k.frames and k.ns is not None]
    gids = {k.graph_id for k in kernels if k.graph_id is not None}
    node_at: dict[tuple, tuple] = {}
    eager: dict[tuple, int] = {}
    for gid, node, file, line, ns in run.timed_nodes(gids):
        node_at[(gid, node)] = ((file, line), ns or 0)
        eager[(gid, (file, line))] = eager.get((gid, (file, line)), 0) + (ns or 0)
    out = []
    for k in kernels:
        frames: dict[Line, object] = {}
        for f in k.frames:
            frames.setdefault((f.file, f.line), f)
        if len(frames) == 1:
            out.append((k, [(next(iter(frames.values())), 1.0)], None))
            continue
        weight = dict.fromkeys(frames, 0)
        for n in k.nodes:
            hit = node_at.get((k.graph_id, n))
            if hit is not None and hit[0] in weight:
                weight[hit[0]] += hit[1]
        total = sum(weight.values())
        if total > 0 and all(weight.values()):
            out.append((k, [(f, weight[key] / total) for key, f in frames.items()], "eager"))
        else:
            out.append((k, [(f, 1.0 / len(frames)) for f in frames.values()], "equal"))
    return out, eager


def _per_graph(run: Run) -> tuple[dict, dict, dict, dict]:
    """{graph: {line: _Acc}}, forward calls and backward calls per graph,
    eager time per (graph, line); forward shares capped at each graph's own
    per-call time."""
    shares, eager = _shares(run)
    acc: dict = {}
    fw_calls: dict = {}
    bw_calls: dict = {}
    for k, parts, split in shares:
        g = acc.setdefault(k.graph_id, {})
        back = k.part == "backward"
        (bw_calls if back else fw_calls)[k.graph_id] = k.calls
        for f, frac in parts:
            a = g.get((f.file, f.line))
            if a is None:
                a = g[(f.file, f.line)] = _Acc(f, kernels=[])
            if back:
                a.bw += k.ns * frac
            else:
                a.fw += k.ns * frac
                a.fw_med += (k.median_ns or k.ns) * frac
                a.steady = a.steady and k.steady
                a.samples = k.samples if a.samples is None else min(a.samples, k.samples)
            if k.name not in a.kernels:
                a.kernels.append(k.name)
            if split is not None:
                a.shared, a.split = True, (a.split if a.split == "equal" else split)
    graphs = {g.id: g for g in run.graphs()}
    for gid, lines in acc.items():
        g = graphs.get(gid)
        if g is None or not g.calls:
            continue
        # the graph's own time per call: its fastest call after the first, or
        # its one (cold) call; its lines never add up to more, per call nor
        # over its calls (a graph of two calls whose first was the faster one:
        # the fastest after the first is above the mean)
        own = g.steady_call_ns or g.total_call_ns / g.calls
        calls = fw_calls.get(gid, 0)
        if calls and g.total_call_ns:
            own = min(own, g.total_call_ns / calls) if own else g.total_call_ns / calls
        fw = sum(a.fw for a in lines.values())
        if own and fw > own:
            scale = own / fw
            for a in lines.values():
                a.fw *= scale
                a.fw_med *= scale
    return acc, fw_calls, bw_calls, eager


def compiled_lines(run: Run, limit: int | None = None) -> list[CompiledLine]:
    """Compiled kernel time per user line, most total time first (then by
    file and line); `CompiledLine` says what each number is."""
    acc, fw_calls, bw_calls, eager = _per_graph(run)
    merged: dict[Line, dict] = {}
    for gid, lines in acc.items():
        for key, a in lines.items():
            m = merged.setdefault(key, {"frame": a.frame, "total": 0.0, "fw": 0.0, "fw_med": 0.0,
                                        "fw_calls": 0, "bw": 0.0, "bw_calls": 0, "eager": 0.0,
                                        "eager_calls": 0, "kernels": [], "graphs": [],
                                        "steady": True, "samples": None, "shared": False,
                                        "split": None})
            fc, bc = fw_calls.get(gid, 0), bw_calls.get(gid, 0)
            m["total"] += a.fw * fc + a.bw * bc
            if a.fw:
                m["fw"] += a.fw * fc
                m["fw_med"] += a.fw_med * fc
                m["fw_calls"] += fc
                m["steady"] = m["steady"] and a.steady
                if a.samples is not None:
                    m["samples"] = a.samples if m["samples"] is None else min(m["samples"], a.samples)
                e = eager.get((gid, key))
                if e:
                    m["eager"] += e * fc
                    m["eager_calls"] += fc
            if a.bw:
                m["bw"] += a.bw * bc
                m["bw_calls"] += bc
            m["kernels"] += [k for k in a.kernels if k not in m["kernels"]]
            if gid is not None and gid not in m["graphs"]:
                m["graphs"].append(gid)
            if a.shared:
                m["shared"] = True
                m["split"] = "equal" if "equal" in (m["split"], a.split) else a.split
    out = []
    for (file, line), m in merged.items():
        f = m["frame"]
        fw = int(m["fw"] / m["fw_calls"]) if m["fw_calls"] else 0
        med = int(m["fw_med"] / m["fw_calls"]) if m["fw_calls"] else None
        ref = int(m["eager"] / m["eager_calls"]) if m["eager_calls"] else None
        samples = m["samples"] or 0
        slower = beyond_noise(fw, med, ref, samples) if m["steady"] else None
        out.append(CompiledLine(
            file, line, f.function, f.code, int(m["total"]), fw,
            int(m["bw"] / m["bw_calls"]) if m["bw_calls"] else 0, ref, tuple(m["kernels"]),
            tuple(m["graphs"]), m["steady"], samples, med, slower, m["shared"], m["split"]))
    out.sort(key=lambda c: (-c.total_ns, c.file, c.line))
    return out if limit is None else out[:limit]


def compiled_by_line(run: Run) -> dict[Line, int]:
    """Compiled time per (file, line) over the whole run, for the time per
    source line (`Run.hot_lines`, `Run.source_lines`, given as their
    ``compiled``): a graph whose kernels were timed (inductor) counts each
    kernel's share at the lines it computes (as `compiled_lines`) and the
    rest of its call time at the compiled function's first line; its
    backward kernels count at the forward lines they differentiate. Other
    graphs count their whole call time at the compiled function's first line."""
    acc, fw_calls, bw_calls, _ = _per_graph(run)
    out: dict[Line, int] = {}
    kernel_ns: dict[int, float] = {}
    for gid, lines in acc.items():
        fc, bc = fw_calls.get(gid, 0), bw_calls.get(gid, 0)
        for key, a in lines.items():
            out[key] = out.get(key, 0) + int(a.fw * fc + a.bw * bc)
            kernel_ns[gid] = kernel_ns.get(gid, 0.0) + a.fw * fc
    for gid, file, line, ns in run.graph_call_lines():
        rest = max(0, int(ns - kernel_ns.get(gid, 0)))
        if rest:
            out[(file, line)] = out.get((file, line), 0) + rest
    return out


# -- the table's words (`graphdbg report --full` and the HTML page) --------------------

LINE_COLUMNS = ("where", "total", "fwd/call", "eager ref", "bwd/call", "kernels", "code")


def line_cells(c: CompiledLine) -> tuple[str, ...]:
    """A compiled line's cells in `LINE_COLUMNS` order: ``fwd/call`` marked
    `` *`` (a cold first call only) or `` ~`` (too few calls to judge),
    ``eager ref`` `` ▲`` where compiled is slower beyond the spread, ``where``
    `` ⋈`` where a kernel is shared with other lines."""
    ks = [k.removeprefix("extern_kernels.") for k in c.kernels]
    fwd = ms(c.forward_ns) if c.forward_ns else "-"
    if c.forward_ns and not c.steady:
        fwd += " *"
    elif c.forward_ns and c.samples < MIN_SAMPLES:
        fwd += " ~"
    ref = "-" if not c.eager_ref_ns else ms(c.eager_ref_ns) + (" ▲" if c.compiled_slower else "")
    return (f"{brief(c.file)}:{c.line}" + (" ⋈" if c.shared else ""), ms(c.total_ns), fwd, ref,
            ms(c.backward_ns) if c.backward_ns else "-",
            ", ".join(ks[:2]) + (f" +{len(ks) - 2}" if len(ks) > 2 else ""), c.code or "")


def line_notes(lines: list[CompiledLine]) -> list[str]:
    """What the table's marks mean, for the marks its rows carry."""
    cells = [line_cells(c) for c in lines]
    out = []
    if any(c.shared for c in lines):
        out.append("⋈ a kernel fused from several lines: its time is split between them (in "
                   "proportion to their nodes' eager reference times where each has one, else "
                   "equally), so the lines add up to the kernels' time, never more than the "
                   "graph's")
    if any(c.compiled_slower for c in lines):
        out.append(f"▲ the line's kernels took longer per call than its nodes in the eager "
                   f"reference run, by more than their own spread over at least {MIN_SAMPLES} "
                   f"calls after the first (median − fastest)")
    if any(r[2].endswith(" *") for r in cells):
        out.append("* the graph's first (cold) call only: it ran once")
    if any(r[2].endswith(" ~") for r in cells):
        out.append(f"~ timed over fewer than {MIN_SAMPLES} calls after the first: too few to "
                   f"call it slower than eager")
    return out
