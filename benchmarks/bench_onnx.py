"""`make bench`'s `onnx` section (benchmarks/bench.py): one
torch.onnx.export per fresh process, plain, checked and recorded only."""

from __future__ import annotations

import statistics
import sys
import traceback
from pathlib import Path


from benchlib import HERE, Row, gib, graphdbg_cmd, progress, run_proc, secs, spread, x


# -- 8. checking an ONNX export ------------------------------------------------------

def _onnx_run_facts(run: Path) -> dict:
    """From the run file of an ONNX export under `graphdbg run`: the export's
    own time inside graphdbg's wrapper (``inner_s``; the rest of the call is
    graphdbg's record and check, timed in the same process, so less exposed
    to the machine's noise than two processes are), the FX nodes compared
    with ONNX Runtime's values and those that differ (a check that did not
    run would look cheap), and the run's internal errors."""
    import graphdbg
    with graphdbg.open_run(str(run)) as r:
        graphs = [g for g in r.graphs() if g.backend == "onnx"]
        values = r.node_values(graphs[0].id, 0) if graphs else []
        return {"inner_s": graphs[0].backend_time_s if graphs else None,
                "compared": sum(v.status != "not compared" for v in values),
                "differing": sum(v.status not in ("ok", "not compared") for v in values),
                "internal_errors": list(r.info.internal_errors or [])}


def section_onnx(rows: list, args, tmp: Path) -> None:
    rounds = 1 if args.quick else 3
    script = [HERE / "workloads.py", "onnx-export"]
    workloads = [
        ("GPT-2", "transformers GPT-2 4x128 (4 heads, vocab 1000, use_cache=False, eval), "
                  "batch 2x64",
         ["--model", "gpt2", "--layers", "4", "--width", "128", "--batch", "2", "--seq", "64"]),
        ("MLP", "MLP 4 x (Linear 1024-4096, GELU, Linear 4096-1024, LayerNorm), 34M params "
                "(134 MB), batch 256",
         ["--model", "mlp", "--layers", "4", "--width", "1024", "--batch", "256"]),
    ]
    variants = [("plain python", None), ("graphdbg run -q (defaults: check)", []),
                ("graphdbg run -q --no-compare (record only)", ["--no-compare"])]
    names = [n for n, _ in variants]
    base, check, record = names
    counter = iter(range(10**9))
    for short, label, opts_model in workloads:
        figs = {n: [] for n in names}   # each round's JSON line from the child (+ run facts)
        try:
            for r in range(rounds):
                k = r % len(variants)  # rotate the order from round to round
                for n, opts in variants[k:] + variants[:k]:
                    if opts is None:
                        cmd = [sys.executable] + script + opts_model
                    else:
                        run = tmp / f"onnx-{short}{next(counter)}.run"
                        cmd = graphdbg_cmd() + ["run", "-q", "-o", run] + opts + script + opts_model
                    fig = run_proc(cmd, str(tmp), env={"OMP_NUM_THREADS": "1"}).last_json()
                    if opts is not None:
                        fig.update(_onnx_run_facts(run))
                    figs[n].append(fig)
                progress(f"  {short} round {r + 1}/{rounds}: " + ", ".join(
                    f"{n} {figs[n][-1]['export_s']:.2f} s "
                    f"+{figs[n][-1]['added_kib'] / 1024:.0f} MiB" for n in names))
        except Exception as exc:  # noqa: BLE001  (this workload fails, the other goes on)
            traceback.print_exc(file=sys.stderr)
            rows.append(Row("onnx", label, error=f"{type(exc).__name__}: {exc}"[:500]))
            continue

        def ratios(n, key):
            return [a[key] / b[key] for a, b in zip(figs[n], figs[base])]

        def med(n, key):
            return statistics.median(f[key] for f in figs[n])

        for n in names:
            t_ratio, m_ratio = ratios(n, "export_s"), ratios(n, "process_peak_kib")
            row = Row("onnx", f"{short}: {n}", raw={
                "figures": figs[n], "time_ratios": t_ratio, "cpu_ratios": ratios(n, "cpu_s"),
                "process_peak_ratios": m_ratio})
            # graphdbg's work after the export, timed in the same process as the export
            after = [f["export_s"] - f["inner_s"] for f in figs[n] if f.get("inner_s")]
            inproc = [f["export_s"] / f["inner_s"] for f in figs[n] if f.get("inner_s")]
            row.figure = secs(med(n, "export_s"))
            if after:
                what = "check and record" if n == check else "record"
                row.figure += (f", of which the {what} after the export "
                               f"+{secs(statistics.median(after))}: {spread(inproc)} of the "
                               f"export in the same call")
                row.raw.update(after_export_s=after, in_process_ratios=inproc)
            row.figure += (f"; peak RSS {gib(med(n, 'process_peak_kib'))}, the export +"
                           f"{med(n, 'added_kib') / 1024:.0f} MiB over the RSS before it")
            if n == base:
                first = figs[base][0]
                row.what = (f"plain python, {label}: one torch.onnx.export(dynamo=True) "
                            f"({first['fx_nodes']} FX nodes, {first['onnx_nodes']} ONNX nodes)")
                row.ratio = "1.00 (baseline)"
                rows.append(row)
                continue
            mem = statistics.median(m_ratio)
            row.ratio = f"time {spread(t_ratio)}, peak RSS {x(mem)}"
            if n == check:
                compared = min(f["compared"] for f in figs[n])   # every round's check ran
                differing = max(f["differing"] for f in figs[n])
                errors = [e for f in figs[n] for e in f["internal_errors"]]
                extra_mib = [(a["added_kib"] - b["added_kib"]) / 1024
                             for a, b in zip(figs[n], figs[record])]
                row.figure += (f" ({statistics.median(extra_mib):+.0f} MiB over --no-compare); "
                               f"{compared} FX nodes compared with ONNX Runtime"
                               + (f", {differing} differ" if differing else ""))
                row.raw.update(check_extra_mib=extra_mib)
                # The time target is judged on the same-process ratio: two processes'
                # export times differ by up to 40% here from the machine's load alone.
                row.target = "call <= x2 of the export in it; peak RSS <= x1.5"
                if errors or not compared or not inproc:
                    row.error = ("the check did not run: " + (errors[0] if errors else
                                 "no FX node compared"))[:500]
                else:
                    row.ok = statistics.median(inproc) <= 2 and mem <= 1.5
            rows.append(row)
