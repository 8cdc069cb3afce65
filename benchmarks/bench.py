"""`make bench`: graphdbg's costs in one table, each a ratio against a
baseline measured in the same run (these machines are noisy: rounds are
interleaved and the median taken; in-process measurements use one torch
thread, and so do the workload scripts).

    python benchmarks/bench.py [--quick] [--only capture,compiled,...] [--json PATH]

Sections (names for --only):
  capture   eager capture overhead of `--values none|health|stats` against
            torch.profiler (record_shapes, with_stack), torch's DebugMode
            (record_stack_trace), a TorchDispatchMode that only calls the op
            (the floor of any Python dispatch-mode recorder) and plain eager, on a GPT-2-like forward and
            on 64 x (Linear, LayerNorm, GELU); each round enters each tool once
            and times 3 forwards; the ratio is to plain eager in the same round
  compiled  an inductor-compiled MLP's 2000-call loop (timed by the script
            itself) plain, under `graphdbg run` and under its cheapest settings
  check     a compiled GPT-2-like training loop (aot_eager, 4 steps): whole
            process time and peak RSS plain, and under `graphdbg run` without
            the eager-vs-compiled check, checking the first call and by
            default; the cost of a checked call in steady steps; and the peak
            RSS of nanoGPT's train.py with GPT-2's vocabulary (inductor, 14
            iterations) plain, under `graphdbg run` and with --no-compare
  localize  samples/divergence_faulty.py plain and under `graphdbg run`, with
            the localization's compiles and time from the run's report
  runfile   run-file bytes per recorded eager op and graph node (a GPT-2-like
            forward, eager and compiled), against torch.profiler's chrome
            trace bytes per op event of the same forward
  tui       first paint of the terminal UI on a synthetic run (tui_bench.py)
  train     two real inductor training loops (forward, backward, AdamW, grad
            clipping), each timed step by step by the program itself: a tiny
            transformers Llama (workloads.py train-llama) and nanoGPT's own
            train.py (benchmarks/nanogpt/, on random tokens); plain, under
            `graphdbg run` (defaults: eager ops of the first 10 steps, then
            one in 100), with every step's eager ops (`--eager-steps all`)
            and without eager ops (`--no-eager`); the figure is
            the mean step time after 10 warm-up steps (compiles, checks), the
            ratio is to plain in the same round
  generate  an eager transformers Llama generate loop, plain and under
            `graphdbg run` (calls after the first, in fresh processes), and
            the cost per recorded op on its deep stacks against
            torch.profiler (bench_generate.py)
  onnx      one torch.onnx.export(dynamo=True), each in a fresh process
            (workloads.py onnx-export), of a tiny transformers GPT-2 and of a
            wide MLP: plain, under `graphdbg run` (the export recorded and
            checked against eager in ONNX Runtime) and with --no-compare
            (recorded only); the export call's time (the exporter's imports
            done before it in every variant) and the process's peak RSS, as
            ratios to plain in the same round; the peak the export adds over
            the RSS before it; and graphdbg's work after the export inside
            the same call (from the run file), a ratio less exposed to noise
  html      the HTML page (`graphdbg report --html`) of the showcase and of a
            synthetic run of 100k nodes: size, render time, the command's
            wall time, and the load time in headless chromium where Debian's
            chromium and selenium are installed (bench_html.py)

--quick shrinks the training loop (2 layers, 256 wide, batch 2 x 128), times
100 steps instead of 200 in `train`, and runs one round where there are
rounds: for development only.
Figures are printed (and written to benchmarks/results.json), never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext, redirect_stdout
from dataclasses import asdict
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

SECTIONS = ("capture", "compiled", "check", "localize", "runfile", "tui", "train", "onnx",
            "generate", "html")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1"}


from benchlib import (HERE, ROOT, Row, gib, graphdbg_cmd, ms, progress, quiet_profile,
                      report_json, run_proc, secs, spread, x)
from bench_html import section_html  # noqa: E402
from bench_onnx import section_onnx  # noqa: E402
from bench_train import nanogpt_workdir, section_train  # noqa: E402


# -- 1. eager capture overhead -------------------------------------------------------

def _pass_through_mode():
    """A TorchDispatchMode that only calls the op: the floor of any recorder
    written as a Python dispatch mode (graphdbg's is one)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    fn = PassThrough.__dict__["__torch_dispatch__"]
    fn = getattr(fn, "__wrapped__", fn)  # without the lazy Dynamo shim, as graphdbg's
    PassThrough.__torch_dispatch__ = fn
    return PassThrough


def PassThroughMode():
    global _PASS_THROUGH
    if _PASS_THROUGH is None:
        _PASS_THROUGH = _pass_through_mode()
    return _PASS_THROUGH()


_PASS_THROUGH = None

def section_capture(rows: list, args, tmp: Path) -> None:
    import torch
    from torch.utils._debug_mode import DebugMode

    from eager_overhead import capture_session, timed
    from workloads import gpt2_forward, linear_stack

    torch.manual_seed(0)
    rounds, reps = (3 if args.quick else 5), 3
    tiers = ("none", "health", "stats")
    targets = {"gpt2-like": 1.5, "tiny-ops": 3.0}   # the stats tier (issue 34: GPT-2-like <= x1.5)
    counter = iter(range(10**9))

    def tools():
        yield "plain eager", nullcontext
        yield "torch.profiler", quiet_profile
        yield "DebugMode", lambda: DebugMode(record_stack_trace=True)
        yield "empty TorchDispatchMode", PassThroughMode
        for tier in tiers:
            yield f"graphdbg {tier}", lambda tier=tier: capture_session(
                str(tmp / f"capture{next(counter)}.run"), tier)

    workloads = (("gpt2-like", "GPT-2-like fwd, 4 layers x 256, batch 4x128", gpt2_forward),
                 ("tiny-ops", "64x(Linear,LayerNorm,GELU), batch 8", linear_stack))
    for name, label, build in workloads:
        fn = build()
        names = [n for n, _ in tools()]
        times = {n: [] for n in names}
        for r in range(rounds + 1):  # round 0 warms every tool up and is not counted
            order = list(tools())
            k = r % len(order)  # rotate the order from round to round
            for tool, enter in order[k:] + order[:k]:
                fn()
                with enter():
                    t = timed(fn, reps)
                if r:
                    times[tool].append(t)
            if r:
                progress(f"  {name} round {r}/{rounds}: " + ", ".join(
                    f"{n} {times[n][-1] / times['plain eager'][-1]:.2f}" for n in names[1:]))
        ratios = {n: [a / b for a, b in zip(times[n], times["plain eager"])] for n in names}
        med = {n: statistics.median(v) for n, v in ratios.items()}
        for tool in names:
            row = Row("capture", f"{name}: {tool}", f"{ms(statistics.median(times[tool]))}/{reps} fwd",
                      "1.00 (baseline)" if tool == "plain eager" else spread(ratios[tool]),
                      raw={"seconds": times[tool], "ratios": ratios[tool]})
            if tool == "plain eager":
                row.what = f"{name}: plain eager, {label}"
            if tool == "graphdbg stats":
                row.target, row.ok = f"<= x{targets[name]:g}", med[tool] <= targets[name]
            if tool == "graphdbg none":
                prof = med["torch.profiler"]
                row.target, row.ok = f"<= profiler ({x(prof)})", med[tool] <= prof
            rows.append(row)


# -- 2. compiled steady state --------------------------------------------------------

def section_compiled(rows: list, args, tmp: Path) -> None:
    """Issue 34's probe (benchmarks/compiled_probe.py: Linear 256->512, GELU,
    Linear, LayerNorm, Linear; batch 64; 2,000 calls under no_grad, one
    thread), plain and under `graphdbg run`, one process each, interleaved;
    then graphdbg's own cost per steady call measured in one process
    (benchmarks/hotpath.py: the same compiled code with and without
    graphdbg's wrapper, CPU time, interleaved rounds)."""
    rounds, calls = (1 if args.quick else 3), 2000
    script = [HERE / "compiled_probe.py", "--calls", str(calls)]
    variants = {
        "plain python": lambda i: [sys.executable] + script,
        "graphdbg run (defaults)": lambda i: graphdbg_cmd() + [
            "run", "-q", "-o", tmp / f"mlp{i}.run"] + script,
        "graphdbg run --values none --no-eager --no-compare": lambda i: graphdbg_cmd() + [
            "run", "-q", "-o", tmp / f"mlp-min{i}.run", "--values", "none", "--no-eager",
            "--no-compare"] + script,
    }
    names = list(variants)
    loops = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            loops[n].append(run_proc(variants[n](r), str(tmp)).last_json()["loop_s"])
        progress(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {loops[n][-1] * 1e6 / calls:.0f} us/call" for n in names))
    for n in names:
        ratios = [a / b for a, b in zip(loops[n], loops["plain python"])]
        per_call = statistics.median(loops[n]) / calls * 1e6
        row = Row("compiled", f"probe MLP 256-512-512-256 (GELU, LayerNorm), batch 64: {n}",
                  f"{per_call:.0f} us/call", "1.00 (baseline)" if n == "plain python"
                  else spread(ratios), raw={"loop_s": loops[n], "calls": calls})
        if n == "graphdbg run (defaults)":
            row.target, row.ok = "<= x1.03", statistics.median(ratios) <= 1.03
        rows.append(row)
    hot = [HERE / "hotpath.py", "--rounds", "7" if args.quick else "15"]
    for label, extra in (("whole", []), ("without the step events", ["--without-steps"])):
        own = run_proc([sys.executable] + hot + ["--batch", "1"] + extra, str(tmp)).last_json()
        lo, hi = own["own_us_range"]
        row = Row("compiled", f"graphdbg's own cost per steady call ({label}; probe at batch 1, "
                  f"{own['plain_us']:.0f} us/call plain, CPU time)",
                  f"{own['own_us_median']:.1f} us ({lo:.1f} to {hi:.1f})",
                  spread([own["ratio_median"], *own["ratio_range"]]), raw=own)
        if not extra:
            row.target, row.ok = "<= 5 us", own["own_us_median"] <= 5
        rows.append(row)


# -- 3. eager-vs-compiled check on a training loop ----------------------------------

BUDGET = "<budget>"  # --compare-memory's value, from the plain run's peak (below)


def _compare_memory_variants() -> list:
    """`--compare-memory` rows, if this graphdbg has the option (it is being
    added): a flag, one row; a choice, one row per non-default choice (two at
    most); a number of MiB, one row with the budget the memory target leaves
    (half the plain run's peak RSS)."""
    lines = run_proc(graphdbg_cmd() + ["run", "--help"], str(ROOT)).check().out.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s+(?:-\w[ ,]+)?--compare-memory(?:[ =](\S+))?", line)
        if m:
            break
    else:
        return []
    metavar = (m.group(1) or "").strip("[],")
    if not metavar:
        return [["--compare-memory"]]
    if not metavar.startswith("{"):
        return [["--compare-memory", BUDGET]]
    para = [line]
    for nxt in lines[i + 1:]:  # the option's help, up to the next option
        if re.match(r"\s+-", nxt):
            break
        para.append(nxt)
    default = re.search(r"default[:\s]+([\w-]+)", " ".join(para))
    choices = metavar.strip("{}").split(",")
    return [["--compare-memory", c] for c in choices
            if not default or c != default.group(1)][:2]


def section_check(rows: list, args, tmp: Path) -> None:
    from graphdbg.core.options import CaptureOptions

    shape = (["--layers", "2", "--width", "256", "--batch", "2", "--seq", "128"] if args.quick
             else ["--layers", "6", "--width", "512", "--batch", "8", "--seq", "256"])
    steps = 4
    script = [HERE / "workloads.py", "train-gpt2", "--steps", str(steps)] + shape
    label = ("GPT-2-like train, 2x256, batch 2x128" if args.quick
             else "GPT-2-like train, 6x512, batch 8x256") + f", aot_eager, {steps} steps"
    checked_by_default = min(CaptureOptions().compare_first, steps)
    variants = [("plain python", None, 0),
                ("graphdbg run -q --no-compare", ["--no-compare"], 0),
                ("graphdbg run -q --compare-first 1", ["--compare-first", "1"], 1),
                ("graphdbg run -q (defaults)", [], checked_by_default)]
    variants += [(None, extra, checked_by_default) for extra in _compare_memory_variants()]
    results = {}
    for i, (name, opts, checked) in enumerate(variants):
        base = results.get("plain python")
        nocheck = results.get("graphdbg run -q --no-compare")
        if opts and BUDGET in opts:
            if base is None:
                rows.append(Row("check", "graphdbg run -q --compare-memory MIB",
                                error="no plain run to size the budget from"))
                continue
            budget = str(round(base[0].maxrss_kib / 1024 * 0.5))
            opts = [budget if o == BUDGET else o for o in opts]
            name = f"graphdbg run -q {' '.join(opts)} (MiB: half the plain peak)"
        name = name or f"graphdbg run -q {' '.join(opts)}"
        progress(f"  {name} ...")
        run = tmp / f"train{i}.run"
        cmd = ([sys.executable] + script if opts is None else
               graphdbg_cmd() + ["run", "-q", "-o", run] + opts + script)
        try:
            p = run_proc(cmd, str(tmp))
            steps_s = p.last_json()["steps_s"]
            skipped = 0
            if opts is not None and checked:  # graphs over the check's memory budget
                doc = report_json(run, str(tmp))
                skipped = sum(d.get("count") or 1 for d in doc["diagnostics"]
                              if d["kind"] == "check_skipped")
        except Exception as exc:  # noqa: BLE001  (this row fails, the others go on)
            rows.append(Row("check", name, error=f"{type(exc).__name__}: {exc}"))
            continue
        results[name] = (p, steps_s)
        progress(f"    {p.wall_s:.1f} s, peak RSS {gib(p.maxrss_kib)}, steps "
                 + " ".join(f"{s:.2f}" for s in steps_s))
        row = Row("check", name if opts is not None else f"plain python, {label}",
                  f"{secs(p.wall_s)}, {gib(p.maxrss_kib)}",
                  raw={"wall_s": p.wall_s, "maxrss_kib": p.maxrss_kib, "steps_s": steps_s,
                       "checks_skipped": skipped})
        if skipped:
            row.figure += f"; {skipped} graph(s) not checked: over the memory budget"
        if opts is None:
            row.ratio = "1.00 (baseline)"
        elif base is not None:
            t_ratio = p.wall_s / base[0].wall_s
            m_ratio = p.maxrss_kib / base[0].maxrss_kib
            row.ratio = f"time {x(t_ratio)}, mem {x(m_ratio)}"
            row.raw.update(time_ratio=t_ratio, mem_ratio=m_ratio)
            if skipped:  # not (all) checked: no check cost to judge
                row.target = "(check skipped)"
            elif checked and nocheck is not None:
                # A checked call's cost: its step's time over the same step's without
                # the check, in steady steps of the plain run (aot_eager runs eager
                # kernels: its steady step is an eager run of the call). The first
                # step also compiles, so its figure carries the compile's noise.
                unit = statistics.median(base[1][1:])
                extra = [(a - b) / unit for a, b in zip(steps_s[:checked], nocheck[1])]
                avg = statistics.mean(extra)
                row.figure += (f"; check +{avg:.1f} eager steps per checked call (first "
                               f"+{extra[0]:.1f}" + (f", later +{statistics.mean(extra[1:]):.1f}"
                                                     if len(extra) > 1 else "") + ")")
                row.target = "check <= 3 eager steps; mem <= x1.5"
                row.ok = avg <= 3 and m_ratio <= 1.5
                row.raw.update(checked_calls=checked, eager_step_s=unit,
                               check_cost_eager_steps=extra)
        rows.append(row)
    check_nanogpt_memory(rows, args, tmp)


def check_nanogpt_memory(rows: list, args, tmp: Path) -> None:
    """nanoGPT's train.py (inductor, 2 x 128, batch 4 x 64, GPT-2's vocabulary:
    256 x 50,304 logits, the check's largest values) for 14 iterations: the
    process's peak RSS plain, under `graphdbg run` (every graph checked on
    its first 3 calls, gradients on one) and with --no-compare; each round
    runs the three in a rotated order, the ratio is to plain in the same
    round, the figure the median of the rounds."""
    rounds = 1 if args.quick else 3
    env = {"OMP_NUM_THREADS": "1"}
    script = ["train.py", "--dataset=random", "--device=cpu", "--dtype=float32",
              "--compile=True", "--n_layer=2", "--n_head=4", "--n_embd=128", "--block_size=64",
              "--batch_size=4", "--gradient_accumulation_steps=1", "--max_iters=14",
              "--eval_interval=1000", "--eval_iters=1", "--log_interval=1", "--wandb_log=False",
              "--always_save_checkpoint=False", "--out_dir=out"]
    variants = [("plain python", None), ("graphdbg run -q (defaults)", []),
                ("graphdbg run -q --no-compare", ["--no-compare"])]
    label = "nanoGPT's train.py 2x128, vocab 50,304, batch 4x64, inductor, 14 iters"
    peaks = {n: [] for n, _ in variants}
    try:
        cwd = str(nanogpt_workdir(tmp, vocab=None))
        for r in range(rounds):
            k = r % len(variants)
            for n, opts in variants[k:] + variants[:k]:
                cmd = ([sys.executable] + script if opts is None else graphdbg_cmd()
                       + ["run", "-q", "-o", tmp / f"nanogpt-mem{r}.run"] + opts + script)
                peaks[n].append(run_proc(cmd, cwd, env=env).check().maxrss_kib)
            progress(f"  nanoGPT memory round {r + 1}/{rounds}: " + ", ".join(
                f"{n} {gib(peaks[n][-1])}" for n, _ in variants))
    except Exception as exc:  # noqa: BLE001  (this row fails, the others go on)
        rows.append(Row("check", f"peak memory, {label}", error=f"{type(exc).__name__}: {exc}"[:500]))
        return
    for n, opts in variants:
        ratios = [a / b for a, b in zip(peaks[n], peaks["plain python"])]
        row = Row("check", f"plain python, peak memory, {label}" if opts is None
                  else f"nanoGPT peak memory: {n}", gib(statistics.median(peaks[n])),
                  "1.00 (baseline)" if opts is None else spread(ratios),
                  raw={"maxrss_kib": peaks[n], "ratios": ratios})
        if opts == []:
            row.target, row.ok = "mem <= x1.5", statistics.median(ratios) <= 1.5
        rows.append(row)


# -- 4. localization -------------------------------------------------------------------

def section_localize(rows: list, args, tmp: Path) -> None:
    rounds = 1 if args.quick else 2
    sample = ROOT / "samples" / "divergence_faulty.py"
    plain, traced, details = [], [], []
    for r in range(rounds):  # plain first: it fills the inductor cache for both
        plain.append(run_proc([sys.executable, sample], str(tmp)).check().wall_s)
        run = tmp / f"divergence{r}.run"
        traced.append(run_proc(graphdbg_cmd() + ["run", "-q", "-o", run, sample], str(tmp))
                      .check().wall_s)
        doc = report_json(run, str(tmp))
        div = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
        details.append(div[0] if div else None)
        progress(f"  round {r + 1}/{rounds}: plain {plain[-1]:.1f} s, graphdbg run "
                 f"{traced[-1]:.1f} s")
    base = statistics.median(plain)
    rows.append(Row("localize", "samples/divergence_faulty.py: plain python", secs(base),
                    "1.00 (baseline)", raw={"wall_s": plain}))
    rows.append(Row("localize", "graphdbg run -q (defaults)", secs(statistics.median(traced)),
                    spread([t / p for t, p in zip(traced, plain)]), raw={"wall_s": traced}))
    d = details[-1]
    if d is None:
        rows.append(Row("localize", "localization", error="the run reported no divergence"))
        return
    det = d.get("detail") or {}
    loc_s = [(dd.get("detail") or {}).get("seconds") for dd in details if dd]
    loc_s = [s for s in loc_s if s is not None]
    rows.append(Row(
        "localize", "localization, from the run's report",
        (f"{secs(statistics.median(loc_s))}, " if loc_s else "")
        + f"{det.get('compiles')} compiles ({det.get('method')}); "
        f"found {d.get('op')} at line {d.get('line')}",
        f"{x(statistics.median(loc_s) / base)} of plain" if loc_s else "",
        raw={"detail": det, "seconds": loc_s}))


# -- 5. run-file bytes per op -------------------------------------------------------

def section_runfile(rows: list, args, tmp: Path) -> None:
    import torch

    run = tmp / "gpt2-forward.run"
    p = run_proc(graphdbg_cmd() + ["run", "-q", "-o", run, HERE / "workloads.py",
                                   "gpt2-forward"], str(tmp))
    p.check()
    doc = report_json(run, str(tmp))
    ops = doc["eager"]["ops_recorded"]
    nodes = sum(g["n_nodes"] for g in doc["graphs"])
    size = run.stat().st_size
    per = size / max(1, ops + nodes)

    # the same eager forward under torch.profiler, exported as a chrome trace
    from workloads import gpt2_forward
    torch.manual_seed(0)
    fn = gpt2_forward()
    fn()
    with quiet_profile() as prof:
        fn()
    trace = tmp / "gpt2-forward.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text()).get("traceEvents", [])
    cpu_ops = sum(1 for e in events if e.get("cat") == "cpu_op")
    prof_per = trace.stat().st_size / max(1, cpu_ops)
    rows.append(Row("runfile", "torch.profiler chrome trace (shapes, stacks), one eager fwd",
                    f"{prof_per:.0f} B/op ({trace.stat().st_size / 1024:.0f} KiB, {cpu_ops} op events)",
                    "1.00 (baseline)", raw={"bytes": trace.stat().st_size, "ops": cpu_ops}))
    rows.append(Row("runfile", "graphdbg run file: GPT-2-like eager + aot_eager fwd",
                    f"{per:.0f} B/op ({size / 1024:.0f} KiB, {ops} eager ops + {nodes} nodes)",
                    x(per / prof_per), raw={"bytes": size, "ops": ops, "nodes": nodes}))


# -- 6. TUI first paint ------------------------------------------------------------

def section_tui(rows: list, args, tmp: Path) -> None:
    from query_bench import ensure
    with redirect_stdout(sys.stderr):  # "built small run ..." is progress, not a figure
        path = ensure("small", False)
    rounds = 1 if args.quick else 3
    paints, errors = [], []
    for _ in range(rounds):  # each in a fresh process, as tui_bench.py measures it
        p = run_proc([sys.executable, HERE / "tui_bench.py", "--child", path,
                      "--first-paint-only"], str(tmp))
        try:
            paints.append(p.last_json()["first_paint_s"])
        except RuntimeError as exc:
            errors.append(str(exc))
    what = "TUI first paint, synthetic run (10k nodes, 100k ops), 160x48"
    if not paints:
        rows.append(Row("tui", what, error=errors[0]))
        return
    first = statistics.median(paints)
    rows.append(Row("tui", what, f"{first:.2f} s" + (
        f" ({len(errors)} of {rounds} runs failed: {errors[0]})" if errors else ""),
        "", "<= 1 s", first <= 1.0, raw={"first_paint_s": paints, "errors": errors}))


# -- main ------------------------------------------------------------------------------

def machine() -> dict:
    import torch
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": model or platform.processor(),
            "torch": torch.__version__, "python": platform.python_version(),
            "load": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "torch_threads_in_process": 1}


def print_table(rows: list, info: dict, total: float, quick: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    console = Console(width=max(160, Console().width))
    table = Table(title=escape(f"graphdbg bench{' (--quick)' if quick else ''}: {info['cores']} cores "
                        f"({info['cpu']}), torch {info['torch']}, python {info['python']}, "
                        f"load at start {info['load']}"),
                  caption=f"total {total:.0f} s; ratios: median of rounds (min-max)",
                  show_lines=False, expand=True)
    table.add_column("section", no_wrap=True)
    table.add_column("measurement", ratio=3)
    table.add_column("figure", ratio=3)
    table.add_column("ratio", no_wrap=True)
    table.add_column("target", ratio=2)
    table.add_column("ok", no_wrap=True)
    last = None
    for r in rows:
        if last is not None and r.section != last:
            table.add_section()
        last = r.section
        if r.error:
            table.add_row(r.section, escape(r.what), f"[red]error: {escape(r.error)}[/]", "",
                          escape(r.target), "")
            continue
        ok = "" if r.ok is None else "[green]yes[/]" if r.ok else "[red]NO[/]"
        table.add_row(r.section, *map(escape, (r.what, r.figure, r.ratio, r.target)), ok)
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--quick", action="store_true",
                    help="a small training loop and one round each (development)")
    ap.add_argument("--only", help="comma-separated sections: " + ", ".join(SECTIONS))
    ap.add_argument("--json", default=str(HERE / "results.json"),
                    help="write the figures here (default benchmarks/results.json; '' for none)")
    args = ap.parse_args()
    chosen = SECTIONS if not args.only else tuple(s.strip() for s in args.only.split(","))
    for s in chosen:
        if s not in SECTIONS:
            ap.error(f"unknown section {s!r}; known: {', '.join(SECTIONS)}")

    t0 = time.perf_counter()
    import torch
    torch.set_num_threads(1)
    info = machine()
    progress(f"graphdbg bench: {info['cores']} cores ({info['cpu']}), torch {info['torch']}, "
             f"load {info['load']}{', --quick' if args.quick else ''}")
    funcs = {"capture": section_capture, "compiled": section_compiled, "check": section_check,
             "localize": section_localize, "runfile": section_runfile, "tui": section_tui,
             "train": section_train, "onnx": section_onnx, "html": section_html}
    from bench_generate import section_generate   # imports this module's helpers
    funcs["generate"] = section_generate
    rows: list[Row] = []
    timings = {}
    with tempfile.TemporaryDirectory(prefix="graphdbg-bench-") as tmp:
        for i, name in enumerate(chosen, 1):
            progress(f"[{i}/{len(chosen)}] {name} ...")
            t = time.perf_counter()
            try:
                funcs[name](rows, args, Path(tmp))
            except Exception as exc:  # noqa: BLE001  (fail soft: the error goes in the table)
                traceback.print_exc(file=sys.stderr)
                rows.append(Row(name, "(section failed)", error=f"{type(exc).__name__}: {exc}"[:500]))
            timings[name] = time.perf_counter() - t
            progress(f"[{i}/{len(chosen)}] {name}: {timings[name]:.0f} s")
    total = time.perf_counter() - t0
    print_table(rows, info, total, args.quick)
    print(f"total bench time {total:.0f} s (" + ", ".join(
        f"{k} {v:.0f} s" for k, v in timings.items()) + ")")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "quick": args.quick, "total_s": total, "section_s": timings,
             "rows": [asdict(r) for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
