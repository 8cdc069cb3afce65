"""`make bench`'s `train` section (benchmarks/bench.py): two real inductor
training loops timed step by step, and nanoGPT's working directory (also
used by the `check` section's memory rows)."""

from __future__ import annotations

import re
import statistics
import sys
import traceback
from pathlib import Path


from benchlib import (HERE, Proc, Row, graphdbg_cmd, progress, report_json, run_proc,
                      spread)


# -- 7. real training loops ---------------------------------------------------------

NANOGPT = HERE / "nanogpt"  # nanoGPT's model.py, train.py, configurator.py (see its README)
NANOGPT_ITER = re.compile(r"^iter (\d+): loss \S+, time ([\d.]+)ms", re.M)


def nanogpt_workdir(tmp: Path, vocab: int | None = 1000) -> Path:
    """A working directory for nanoGPT's train.py, which reads configurator.py
    and data/<dataset>/ from its cwd and imports model.py: copies of the three,
    random uint16 tokens as train.bin and val.bin (as nanoGPT's prepare.py
    scripts write them) and a meta.pkl with the vocabulary size (1000); with
    ``vocab=None`` no meta.pkl, and train.py takes GPT-2's 50,304."""
    import pickle

    import numpy as np
    work = tmp / ("nanogpt" if vocab else "nanogpt-gpt2-vocab")
    if work.exists():
        return work
    data = work / "data" / "random"
    data.mkdir(parents=True)
    for name in ("model.py", "train.py", "configurator.py"):
        (work / name).write_bytes((NANOGPT / name).read_bytes())
    rng = np.random.default_rng(0)
    for split, n in (("train", 200_000), ("val", 20_000)):
        arr = np.memmap(data / f"{split}.bin", dtype=np.uint16, mode="w+", shape=(n,))
        arr[:] = rng.integers(0, 1000, n, dtype=np.uint16)
        arr.flush()
        del arr
    if vocab:
        with open(data / "meta.pkl", "wb") as fh:
            pickle.dump({"vocab_size": vocab}, fh)
    return work


def nanogpt_step_ms(p: Proc, warmup: int, steps: int) -> list:
    """Per-iteration times from train.py's `iter N: loss X, time Y ms, mfu Z%`
    lines, the first `warmup` iterations left out."""
    p.check()
    times = [float(t) for i, t in NANOGPT_ITER.findall(p.out) if int(i) >= warmup]
    if len(times) != steps:
        raise RuntimeError(f"expected {steps} timed iterations of train.py, found {len(times)}: "
                           f"{p.out[-300:]!r}")
    return times


def section_train(rows: list, args, tmp: Path) -> None:
    rounds, warmup = (1 if args.quick else 3), 10
    steps = 100 if args.quick else 200
    env = {"OMP_NUM_THREADS": "1"}  # one torch thread, as workloads.py sets it (train.py does not)
    llama = [HERE / "workloads.py", "train-llama", "--steps", str(warmup + steps),
             "--warmup", str(warmup), "--layers", "2", "--width", "128", "--batch", "4",
             "--seq", "64"]
    # train.py (the copy in its working directory, run from there) runs iterations
    # 0..max_iters and evaluates at iteration 0 only, eval_interval being beyond
    # the end; it saves a checkpoint after an evaluation, but never at iteration 0.
    nano = ["train.py", "--dataset=random", "--device=cpu", "--dtype=float32",
            "--compile=True", "--n_layer=2", "--n_head=4", "--n_embd=128", "--block_size=64",
            "--batch_size=4", "--gradient_accumulation_steps=1",
            f"--max_iters={warmup + steps - 1}", f"--eval_interval={10 * (warmup + steps)}",
            "--eval_iters=1", "--log_interval=1", "--wandb_log=False",
            "--always_save_checkpoint=False", "--out_dir=out"]
    workloads = [
        ("Llama", f"Llama 2x128 (4 heads, vocab 1000) train, inductor, AdamW+clip, batch 4x64: "
                  f"mean of {steps} steps after {warmup}",
         llama, lambda: tmp, lambda p: p.last_json()["step_ms"]),
        ("nanoGPT", f"nanoGPT's train.py 2x128 (4 heads, vocab 1000), inductor, AdamW+clip, "
                    f"batch 4x64: mean of {steps} iters after {warmup}",
         nano, lambda: nanogpt_workdir(tmp), lambda p: nanogpt_step_ms(p, warmup, steps)),
    ]
    variants = [("plain python", None), ("graphdbg run -q (defaults)", []),
                ("graphdbg run -q --eager-steps all", ["--eager-steps", "all"]),
                ("graphdbg run -q --no-eager", ["--no-eager"])]
    names = [n for n, _ in variants]
    counter = iter(range(10**9))
    for short, label, script, workdir, step_ms in workloads:
        means = {n: [] for n in names}
        try:
            cwd = str(workdir())
            for r in range(rounds):
                k = r % len(variants)  # rotate the order from round to round
                for n, opts in variants[k:] + variants[:k]:
                    if opts is None:
                        cmd = [sys.executable] + script
                    else:
                        run = tmp / f"train-{short}{next(counter)}.run"
                        cmd = graphdbg_cmd() + ["run", "-q", "-o", run] + opts + script
                        if not opts:
                            last_run = run
                    means[n].append(statistics.mean(step_ms(run_proc(cmd, cwd, env=env))))
                progress(f"  {short} round {r + 1}/{rounds}: " + ", ".join(
                    f"{n} {means[n][-1]:.1f} ms/step" for n in names))
            doc = report_json(last_run, cwd)
        except Exception as exc:  # noqa: BLE001  (this workload fails, the other goes on)
            traceback.print_exc(file=sys.stderr)
            rows.append(Row("train", label, error=f"{type(exc).__name__}: {exc}"[:500]))
            continue
        for n in names:
            ratios = [a / b for a, b in zip(means[n], means["plain python"])]
            row = Row("train", f"plain python, {label}" if n == "plain python" else f"{short}: {n}",
                      f"{statistics.median(means[n]):.1f} ms/step",
                      "1.00 (baseline)" if n == "plain python" else spread(ratios),
                      raw={"mean_step_ms": means[n], "ratios": ratios, "steps": steps,
                           "warmup": warmup})
            if n == "graphdbg run -q (defaults)":
                row.target, row.ok = "<= x1.1", statistics.median(ratios) <= 1.1
                eager = doc.get("eager") or {}
                ops = eager.get("ops")
                if ops is not None:  # the whole run's (model init included), last round
                    row.figure += f"; {ops} eager ops in the run"
                    row.raw.update(eager_ops=ops, eager_ops_recorded=eager.get("ops_recorded"))
            rows.append(row)
