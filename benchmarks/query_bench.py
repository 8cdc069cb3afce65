"""Read side at scale: graphdbg.runfile.query and `graphdbg report` on a synthetic run.

    python benchmarks/query_bench.py [--diff] [--rebuild]

Writes two runs with RunWriter directly (no torch), cached in
$TMPDIR/graphdbg-query-bench/: "full" (100 graphs x 1000 nodes with frames,
stacks, node times, calls and per-node values; 1,000,000 eager ops with their summary;
300 findings with stacks; source snapshots) and "small" (a tenth of the
graphs and ops, the same findings). Then measures, each in a fresh process:
open + first page of a graph's nodes (target <= 50 ms), findings (<= 50 ms),
the `graphdbg report` rendering to a null console (<= 1 s), and the peak
memory of that rendering for both runs: it should not grow with the run
(peak RSS growth over the process before the report, and tracemalloc's peak
of Python objects). With --diff, also `graphdbg diff` of each run against
itself (every op compared). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GENERATOR = 2  # bump when the synthetic run changes: the cache is keyed on it
SIZES = {"small": (10, 1000, 100_000), "full": (100, 1000, 1_000_000)}  # graphs, nodes, ops
FINDINGS = 300
FILES, LINES = 20, 500
OPS = ("aten.addmm.default", "aten.relu.default", "aten.mul.Tensor", "aten.add.Tensor",
       "aten.view.default", "aten.t.default", "aten.sum.dim_IntList", "aten.gelu.default")
KINDS = (("graph_break", "warning"), ("recompile", "warning"), ("divergence", "error"),
         ("malformed_graph", "error"), ("nan_inf", "warning"), ("divergence", "info"))


def build(path: Path, graphs: int, nodes: int, ops: int) -> None:
    from graphdbg.runfile.records import CallRow, NodeRow, NodeTimeRow, NodeValueRow, OpRow
    from graphdbg.runfile.writer import RunWriter
    rng = random.Random(0)
    src = path.parent / "src"
    src.mkdir(exist_ok=True)
    files = []
    for i in range(FILES):
        f = src / f"model_{i}.py"
        f.write_text("".join(f"    h{j} = self.layer_{j}(h{j - 1})  # step {j}\n"
                             for j in range(1, LINES + 1)))
        files.append(str(f))
    w = RunWriter(str(path), commit_interval=1e9, batch_rows=200_000)
    w.set_meta(argv=["train.py", "--synthetic"], cwd=str(src), module=False, values="stats",
               device="cpu", python="3.x", torch="2.13.0+cpu", graphdbg="bench")
    frames = [w.frame_id(f, ln, f"block_{ln // 50}") for f in files for ln in range(1, LINES + 1)]
    stacks = [w.stack_id([(files[0], 1, "main"), (files[i % FILES], 1 + i % LINES, "forward"),
                          (files[(i * 7) % FILES], 1 + (i * 13) % LINES, f"block_{i % 10}")])
              for i in range(2000)]
    stats = '[{"min":-1.5,"max":2.25,"mean":0.01,"std":0.98,"norm":31.6,"nan":0,"inf":0}]'
    seq = 0
    for g in range(1, graphs + 1):
        w.put_graph(g, compile_id=f"{g - 1}/0", backend="inductor", code_name=f"forward_{g}",
                    code_file=files[g % FILES], code_line=1 + g % LINES, n_nodes=nodes,
                    n_ops=nodes - 2, n_inputs=2, backend_time_s=1.5, compile_time_s=2.0,
                    status="compiled", graph_code=f"def forward(self, x):  # graph {g}\n    ...\n")
        for i in range(nodes):
            op = "placeholder" if i < 2 else "output" if i == nodes - 1 else "call_function"
            w.add(NodeRow(g, i, f"n{i}", op, "torch.relu", "[[64,256]]", '["float32"]',
                          frames[(g * nodes + i) % len(frames)], stacks[i % len(stacks)],
                          f"blocks.{i % 12}.mlp", "Linear", "x, w"))
            w.add(NodeTimeRow(g, f"n{i}", rng.randrange(1_000, 2_000_000)))
            # every node's value on the first checked call; a few differ
            status = ("first divergent" if i == nodes // 2 else "differs" if i > nodes // 2
                      and i % 50 == 0 else "ok")
            err = rng.random() * (1.0 if status != "ok" else 1e-6)
            w.add(NodeValueRow(g, 0, f"n{i}", status, "miscompile" if status != "ok" else None,
                               "intermediate outputs (aot)", err, err * 10, 1e-7, err,
                               stats[1:-1], stats[1:-1], stats[1:-1]))
        for c in range(20):
            seq += 1
            w.add(CallRow(seq, g, c, rng.randrange(100_000, 5_000_000),
                          '[{"shape":[64,256],"dtype":"float32","stats":' + stats[1:-1] + "}]"))
    for i in range(ops):
        seq += 1
        op, frame, ns = OPS[i % len(OPS)], frames[(i * 31) % len(frames)], rng.randrange(500, 90_000)
        phase = "backward" if i % 3 == 2 else "forward"
        w.add(OpRow(seq, op, phase, "[[64,256]]", '["float32"]', stats, ns, frame,
                    stacks[i % len(stacks)], f"blocks.{i % 12}.mlp", "Linear"))
        w.add_op_summary(op, phase, frame, f"blocks.{i % 12}.mlp", ns)
    for i in range(FINDINGS):
        kind, severity = KINDS[i % len(KINDS)]
        w.diagnostic(f"k{i}", kind=kind, severity=severity, message=f"finding {i}",
                     reason="torch's full reason " * 10, hint="try this", user_frame=frames[i * 17],
                     stack=stacks[i], graph_id=1 + i % graphs, node=f"n{i % nodes}",
                     compile_id=f"{i % graphs}/0", detail={"i": i, "classification": "miscompile"})
    w.close(exit_status=0, status="complete", wall_s=123.0)


def ensure(name: str, rebuild: bool) -> Path:
    graphs, nodes, ops = SIZES[name]
    d = Path(tempfile.gettempdir()) / "graphdbg-query-bench" / f"v{GENERATOR}-{name}"
    path = d / "run.run"
    if rebuild or not path.exists():
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / "building.run"
        t = time.perf_counter()
        build(tmp, graphs, nodes, ops)
        os.replace(tmp, path)
        print(f"built {name} run ({graphs} graphs x {nodes} nodes, {ops:,} ops): "
              f"{time.perf_counter() - t:.1f} s, {path.stat().st_size / 2**20:.0f} MiB", flush=True)
    return path


# -- measurements, each in a fresh process -------------------------------------------

def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_times(path: str) -> dict:
    from graphdbg.runfile.query import Run
    t0 = time.perf_counter()
    run = Run(path)
    page = run.nodes(len(run.graphs()) // 2 or 1, offset=0, limit=50)
    t1 = time.perf_counter()
    findings = run.findings()
    t2 = time.perf_counter()
    hot = run.hot_nodes(20)
    t3 = time.perf_counter()
    lines = run.hot_lines(20)
    t4 = time.perf_counter()
    deep = run.ops(offset=run.count("ops") // 2, limit=50)
    t5 = time.perf_counter()
    after = run.ops(after_seq=deep[-1].seq, limit=50)
    t6 = time.perf_counter()
    assert len(page) == 50 and len(findings) == FINDINGS and len(hot) == 20 and lines
    assert after[0].seq == deep[-1].seq + 1
    return {"open + first node page": t1 - t0, "findings": t2 - t1, "hot nodes": t3 - t2,
            "hot lines": t4 - t3, "ops page at the middle (offset)": t5 - t4,
            "next ops page (after_seq)": t6 - t5}


def measure_report(path: str, traced: bool = False) -> dict:
    """Time and peak RSS growth of the rendering; with ``traced``, tracemalloc's
    peak instead (tracing slows Python down: not timed)."""
    import tracemalloc

    from rich.console import Console

    from graphdbg.runfile.query import Run
    from graphdbg.reporters.report import render
    before = _rss()
    if traced:
        tracemalloc.start()
    t = time.perf_counter()
    with open(os.devnull, "w") as null, Run(path) as run:
        render(run, Console(file=null, width=120, highlight=False))
    elapsed = time.perf_counter() - t
    if traced:
        return {"python_peak": tracemalloc.get_traced_memory()[1]}
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": elapsed, "rss_growth": max(0, peak_rss - before)}


def measure_diff(path: str) -> dict:
    from graphdbg.reporters.diff import diff_runs
    before = _rss()
    t = time.perf_counter()
    diff = diff_runs(path, path)
    elapsed = time.perf_counter() - t
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": elapsed, "rss_growth": max(0, peak_rss - before),
            "aligned": diff.aligned_ops}


def child(what: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", what, str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diff", action="store_true", help="also time `graphdbg diff` (slow)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached runs")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        what, path = args.child
        fn = {"times": measure_times, "report": measure_report, "diff": measure_diff,
              "report-traced": lambda p: measure_report(p, traced=True)}[what]
        print(json.dumps(fn(path)))
        return
    runs = {name: ensure(name, args.rebuild) for name in SIZES}
    mib = 2**20
    print(f"\n{'measurement':<34}{'small':>14}{'full':>14}   target")
    times = {n: child("times", p) for n, p in runs.items()}
    targets = {"open + first node page": "<= 50 ms", "findings": "<= 50 ms"}
    for key in times["full"]:
        print(f"{key:<34}{times['small'][key] * 1e3:>11.1f} ms{times['full'][key] * 1e3:>11.1f} ms"
              f"   {targets.get(key, '')}")
    rep = {n: {**child("report", p), **child("report-traced", p)} for n, p in runs.items()}
    print(f"{'report (rich, null console)':<34}{rep['small']['seconds'] * 1e3:>11.1f} ms"
          f"{rep['full']['seconds'] * 1e3:>11.1f} ms   <= 1 s")
    print(f"{'report peak RSS growth':<34}{rep['small']['rss_growth'] / mib:>10.1f} MiB"
          f"{rep['full']['rss_growth'] / mib:>10.1f} MiB   flat")
    print(f"{'report tracemalloc peak':<34}{rep['small']['python_peak'] / mib:>10.1f} MiB"
          f"{rep['full']['python_peak'] / mib:>10.1f} MiB   flat")
    if args.diff:
        dif = {n: child("diff", p) for n, p in runs.items()}
        print(f"{'diff run against itself':<34}{dif['small']['seconds']:>12.1f} s"
              f"{dif['full']['seconds']:>12.1f} s")
        print(f"{'diff peak RSS growth':<34}{dif['small']['rss_growth'] / mib:>10.1f} MiB"
              f"{dif['full']['rss_growth'] / mib:>10.1f} MiB   flat")
    sizes = "  ".join(f"{n}: {p.stat().st_size / mib:.0f} MiB" for n, p in runs.items())
    print(f"\nrun files: {sizes} ({runs['full'].parent.parent})")


if __name__ == "__main__":
    main()
