"""`make bench`'s `generate` section (issue 34): an eager generate loop and
the cost per recorded op on its deep stacks.

- A transformers Llama (hidden 64, 2 layers, no compile) generates 64 tokens
  greedily, 6 times in one process (generate_loop.py), plain and under
  `graphdbg run` at defaults, interleaved, in fresh processes. The figure is
  the median of calls 2-6 (after the first steps: one call is 64 steps of
  the top module); the ratio is to plain in the same round.
- Per recorded op (in one process, one torch thread): one generate plain,
  under torch.profiler (shapes and stacks), and under graphdbg with every
  step recorded (`--values none` and the default stats), interleaved; the
  added time divided by the ops graphdbg recorded.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import time
from pathlib import Path

from bench import HERE, Row, graphdbg_cmd, progress, quiet_profile, run_proc, spread


def section_generate(rows: list, args, tmp: Path) -> None:
    rounds = 1 if args.quick else 3
    script = [HERE / "generate_loop.py", "--calls", "6"]
    variants = {
        "plain python": lambda i: [sys.executable] + script,
        "graphdbg run (defaults)": lambda i: graphdbg_cmd() + [
            "run", "-q", "-o", tmp / f"gen{i}.run"] + script,
    }
    names = list(variants)
    later = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            calls = run_proc(variants[n](r), str(tmp)).last_json()["calls_s"]
            later[n].append(statistics.median(calls[1:]))
        progress(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {later[n][-1] * 1e3:.0f} ms/generate" for n in names))
    for n in names:
        ratios = [a / b for a, b in zip(later[n], later["plain python"])]
        row = Row("generate", f"eager Llama generate (hidden 64, 64 tokens), calls 2-6: {n}",
                  f"{statistics.median(later[n]) * 1e3:.0f} ms/call",
                  "1.00 (baseline)" if n == "plain python" else spread(ratios),
                  raw={"median_later_s": later[n]})
        if n != "plain python":
            row.target, row.ok = "<= x1.5", statistics.median(ratios) <= 1.5
        rows.append(row)
    _per_op(rows, args, tmp)


def _per_op(rows: list, args, tmp: Path) -> None:
    import torch
    import graphdbg
    sys.path.insert(0, str(HERE))
    from generate_loop import build
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(3, 1000, (1, 8))

    def gen():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64,
                              min_new_tokens=64, do_sample=False)
    gen()
    with graphdbg.capture(str(tmp / "warm.run"), eager_steps=(0, 1)):
        gen()   # the one-time parse of transformers' sources for decorators' wrappers
    times: dict[str, list] = {"plain": [], "profiler": [], "none": [], "stats": []}
    ops = 0
    for r in range(3 if args.quick else 5):
        for k in times:
            t0 = time.perf_counter()
            if k == "plain":
                gen()
            elif k == "profiler":
                with quiet_profile():
                    t0 = time.perf_counter()
                    gen()
            else:
                run = tmp / f"op-{k}{r}.run"
                with graphdbg.capture(str(run), values=k, eager_steps=(0, 1)):
                    t0 = time.perf_counter()
                    gen()
                times[k].append(time.perf_counter() - t0)
                if not ops:
                    with sqlite3.connect(str(run)) as db:
                        ops = db.execute("SELECT count(*) FROM ops").fetchone()[0]
                continue
            times[k].append(time.perf_counter() - t0)
    plain = statistics.median(times["plain"])
    per = {k: (statistics.median(v) - plain) / ops * 1e6 for k, v in times.items() if k != "plain"}
    for k in ("profiler", "none", "stats"):
        what = "torch.profiler (shapes, stacks)" if k == "profiler" else \
            f"graphdbg, every step, --values {k}"
        row = Row("generate", f"per recorded op, generate's deep stacks: {what}",
                  f"+{per[k]:.1f} us/op", spread([v / p for v, p in zip(times[k], times["plain"])]),
                  raw={"s": times[k], "plain_s": times["plain"], "ops": ops})
        if k != "profiler":
            row.target, row.ok = "<= the profiler's", per[k] <= per["profiler"]
        rows.append(row)
