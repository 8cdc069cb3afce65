"""graphdbg on a CUDA machine, in one run: `make gpu-check` (docs/development.md).

Runs the programs in gpu/programs/ plain and under `graphdbg run`, and checks:

  eager     an eager training step is captured (ops, value statistics); overhead
  compiled  a model compiled with inductor (triton kernels): graphs, the
            eager-vs-compiled check, kernel times per source line; steady-state
            overhead per call
  profile   `--profile` writes torch.profiler traces with the GPU's kernels
  sync      `--values stats` under torch.cuda.set_sync_debug_mode("error"):
            graphdbg adds no host synchronisation per op
  ddp       two DDP ranks on one device under torchrun: NCCL if it allows two
            ranks on one GPU, else gloo; one run file per rank

It prints one table (what passed, with figures), writes it as JSON into --out,
and exits 1 when a check failed. Without CUDA it says so and skips (exit 0;
exit 2 with --require-cuda); --dry-run runs the same programs on the CPU, with
smaller sizes, to try the harness itself.

On a machine where nothing can be installed but carried wheels: `make
gpu-wheels` here fills gpu/wheels/ (pure-Python wheels and numpy's and
safetensors' for CPython 3.12, under 64 MiB); there, `python3 gpu/check.py
--install ...` makes .venv-gpu (the machine's torch seen through a .pth file,
graphdbg installed editable from the working tree, `pip install --no-index
--find-links gpu/wheels`) and runs the check in it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "gpu" / "programs"
WHEELS = ROOT / "gpu" / "wheels"
VENV = ROOT / ".venv-gpu"
CHECKS = ("eager", "compiled", "profile", "sync", "ddp")
# the packages graphdbg needs besides torch (pyproject.toml's dependencies), and
# setuptools to build graphdbg's editable install without an index
NEEDED = ("rich", "textual", "safetensors", "numpy")


class Failed(Exception):
    pass


# -- installing from carried wheels ------------------------------------------------------

def install() -> Path:
    """.venv-gpu: this interpreter's torch (its site directories through a .pth
    file) and graphdbg, installed editable from the carried wheels only."""
    import site
    if not any(WHEELS.glob("*.whl")):
        raise SystemExit(f"gpu/check.py: no wheels in {WHEELS}: run `make gpu-wheels` where "
                         "there is an index, and carry gpu/wheels/ with the tree")
    try:
        import torch
    except ImportError:
        raise SystemExit(f"gpu/check.py: {sys.executable} has no torch to check graphdbg with")
    dirs = [str(Path(torch.__file__).resolve().parent.parent)]
    dirs += [d for d in site.getsitepackages() + [site.getusersitepackages()]
             if os.path.isdir(d) and d not in dirs]
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    own = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (Path(own) / "graphdbg-gpu-torch.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
    # pip: the machine's own, else the one carried as a wheel (runs from the zip)
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        pip = [sys.executable, "-m", "pip"]
    else:
        wheel = next(iter(sorted(WHEELS.glob("pip-*.whl"))), None)
        if wheel is None:
            raise SystemExit("gpu/check.py: no pip here and no pip wheel in gpu/wheels")
        pip = [sys.executable, str(wheel / "pip")]
    cmd = pip + ["--python", str(py), "install", "-q", "--no-index", "--find-links", str(WHEELS),
                 "--disable-pip-version-check", "-e", str(ROOT)]
    print("gpu/check.py: installing graphdbg into .venv-gpu from gpu/wheels", flush=True)
    # graphdbg's build runs in an isolated env fed from the same wheels
    env = dict(os.environ, PIP_CONSTRAINT="", PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL="")
    subprocess.run(cmd, check=True, env=env)
    return py


# -- running the programs ------------------------------------------------------------------

class Runner:
    def __init__(self, out: Path, device: str, deadline: float, dry: bool) -> None:
        self.out, self.device, self.deadline, self.dry = out, device, deadline, dry
        self.bin = Path(sys.executable).parent
        exe = self.bin / "graphdbg"
        self.graphdbg = [str(exe)] if exe.exists() else [sys.executable, "-m", "graphdbg"]
        self.env = dict(os.environ, PYTHONPATH=str(PROGRAMS), PYTHONUNBUFFERED="1")
        self.env.pop("GRAPHDBG_ALLOW_ANY_TORCH", None)
        # sizes: an H100 takes the full ones in seconds; the CPU dry run small ones
        self.sizes = (["--width", "128", "--steps", "3"] if dry else [])

    def run(self, cmd: list[str], name: str, limit: float = 300) -> tuple[int, str, float]:
        left = self.deadline - time.monotonic()
        if left < 5:
            raise Failed("out of time (the check's --budget)")
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=self.out, env=self.env, capture_output=True, text=True,
                               timeout=min(limit, left))
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            (self.out / f"{name}.log").write_text(text)
            raise Failed(f"{name}: timed out after {min(limit, left):.0f} s")
        text = p.stdout + p.stderr
        (self.out / f"{name}.log").write_text(" ".join(cmd) + "\n" + text)
        return p.returncode, text, time.monotonic() - t0

    def program(self, script: str, name: str, graphdbg: list[str] | None = None,
                extra: tuple[str, ...] = (), limit: float = 300) -> dict:
        """Runs a program plain (graphdbg None) or under `graphdbg run OPTIONS`;
        returns the figures it printed, with the wall time."""
        prog = [str(PROGRAMS / script), "--device", self.device, *self.sizes, *extra]
        cmd = ([sys.executable, *prog] if graphdbg is None
               else [*self.graphdbg, "run", "-q", *graphdbg, *prog])
        rc, text, wall = self.run(cmd, name, limit)
        if rc != 0:
            raise Failed(f"{name}: exit {rc}: {last_lines(text)} (gpu-check/{name}.log)")
        return {**figures(text, name), "wall_s": wall}

    def report(self, run: Path) -> dict:
        rc, text, _ = self.run([*self.graphdbg, "report", "--json", str(run)], f"{run.stem}.report")
        if rc != 0:
            raise Failed(f"graphdbg report {run.name}: exit {rc}: {last_lines(text)}")
        return json.loads(text)


def figures(text: str, name: str) -> dict:
    for line in text.splitlines():
        if line.startswith("GPU-CHECK "):
            return json.loads(line[len("GPU-CHECK "):])
    raise Failed(f"{name}: the program printed no figures")


def last_lines(text: str, n: int = 3) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])[-400:]


def sql(run: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise Failed(what)


def sound_run(doc: dict, name: str) -> None:
    r = doc["run"]
    expect(r["status"] == "complete", f"{name}: run status {r['status']}")
    expect(not r.get("internal_errors"), f"{name}: graphdbg's internal errors: {r.get('internal_errors')}")


# -- the checks ------------------------------------------------------------------------------

def check_eager(r: Runner) -> dict:
    plain = r.program("train_step.py", "eager.plain")
    under = r.program("train_step.py", "eager.graphdbg", ["-o", "eager.run"])
    run = r.out / "eager.run"
    doc = r.report(run)
    sound_run(doc, "eager")
    (ops, with_stats) = sql(run, "SELECT count(*), count(stats) FROM ops")[0]
    expect(ops > 0, "eager: no eager op recorded")
    expect(with_stats > 0, "eager: no op has value statistics (--values stats is the default)")
    same = plain["loss"] == under["loss"]
    # bitwise on the CPU; a GPU's atomics (embedding's backward) may differ run to run
    expect(same or not r.dry, f"eager: the loss differs under graphdbg ({plain['loss']} vs {under['loss']})")
    return {"same loss": same, "ops": ops, "ops with stats": with_stats,
            "step ms plain": plain["step_ms"], "step ms graphdbg": under["step_ms"],
            "ratio": under["step_ms"] / plain["step_ms"],
            "note": f"steps {doc['run'].get('eager_steps') or 'all recorded'}"}


def check_compiled(r: Runner) -> dict:
    extra = ("--calls", "20") if r.dry else ()
    plain = r.program("compiled.py", "compiled.plain", extra=extra, limit=420)
    under = r.program("compiled.py", "compiled.graphdbg", ["-o", "compiled.run"], extra=extra, limit=420)
    run = r.out / "compiled.run"
    doc = r.report(run)
    sound_run(doc, "compiled")
    graphs = [g for g in doc["graphs"] if g["kind"] == "compile"]
    expect(graphs and all(g["status"] == "compiled" for g in graphs),
           f"compiled: graphs {[(g['id'], g['status']) for g in graphs]}")
    expect(all(g["backend"] == "inductor" for g in graphs), "compiled: a graph not given to inductor")
    checked = sql(run, "SELECT status, kind, count(*) FROM node_values GROUP BY status, kind")
    n_checked = sum(c for _, _, c in checked)
    expect(n_checked > 0, "compiled: no node was checked against eager")
    bad = [(s, k, c) for s, k, c in checked if k == "miscompile"]
    expect(not bad, f"compiled: the check calls a correct model miscompiled: {bad}")
    divergences = [d for d in doc["diagnostics"] if d["kind"] == "divergence" and d["severity"] == "error"]
    expect(not divergences, f"compiled: divergence findings {[d['message'] for d in divergences]}")
    kernels = doc.get("kernels") or []
    timed = [k for k in kernels if k.get("ns")]
    expect(timed, "compiled: no kernel timed")
    want = "cuda" if not r.dry else "cpu"
    devices = set(sql(run, "SELECT value FROM meta WHERE key = 'device'"))
    triton = [k for k in timed if "triton" in k["name"]]
    if not r.dry:
        expect(triton, f"compiled: no triton kernel timed among {[k['name'] for k in timed][:5]}")
    lines = [l for l in doc.get("compiled_lines") or [] if l["file"].startswith(str(PROGRAMS))]
    expect(lines, "compiled: no kernel time at a line of the program")
    same = plain["out_sum"] == under["out_sum"]
    expect(same or not r.dry,
           f"compiled: outputs differ under graphdbg ({plain['out_sum']} vs {under['out_sum']})")
    return {"same output": same, "graphs": len(graphs), "nodes checked": n_checked, "kernels timed": len(timed),
            "triton kernels": len(triton), "lines with kernel times": len(lines),
            "call us plain": plain["call_us"], "call us graphdbg": under["call_us"],
            "ratio": under["call_us"] / plain["call_us"],
            "train s plain": plain["train_s"], "train s graphdbg (compile + check)": under["train_s"],
            "note": f"{want} kernels; device {devices}"}


def check_profile(r: Runner) -> dict:
    plain = r.program("train_step.py", "profile.plain")
    under = r.program("train_step.py", "profile.graphdbg", ["--profile", "-o", "profile.run"])
    doc = r.report(r.out / "profile.run")
    sound_run(doc, "profile")
    prof = doc["run"].get("profile") or {}
    traces = [Path(t) for t in prof.get("traces") or []]
    expect(traces and all(t.exists() for t in traces), f"profile: traces {traces}")
    text = traces[0].read_text(errors="replace")
    kernels = len(re.findall(r'"cat":\s*"kernel"', text))
    if not r.dry:
        expect(kernels > 0, "profile: the trace holds no GPU kernel")
    return {"traces": len(traces), "kernel events": kernels,
            "step ms plain": plain["step_ms"], "step ms graphdbg": under["step_ms"],
            "ratio": under["step_ms"] / plain["step_ms"]}


def check_sync(r: Runner) -> dict:
    plain = r.program("sync_stats.py", "sync.plain")
    under = r.program("sync_stats.py", "sync.graphdbg", ["--values", "stats", "-o", "sync.run"])
    run = r.out / "sync.run"
    doc = r.report(run)
    sound_run(doc, "sync")
    (ops, with_stats) = sql(run, "SELECT count(*), count(stats) FROM ops")[0]
    expect(with_stats > 0, "sync: no op has value statistics")
    return {"sync debug": under["sync_debug"], "ops": ops, "ops with stats": with_stats,
            "step ms plain": plain["step_ms"], "step ms graphdbg": under["step_ms"],
            "ratio": under["step_ms"] / plain["step_ms"],
            "note": "" if under["sync_debug"] == "error" else "no CUDA: the sync mode was not on"}


def check_ddp(r: Runner) -> dict:
    tried = []
    for backend in (["nccl", "gloo"] if not r.dry else ["gloo"]):
        folder = r.out / f"ddp-{backend}"
        shutil.rmtree(folder, ignore_errors=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--no-python", *r.graphdbg, "run", "-q", "-o", str(folder),
               str(PROGRAMS / "ddp.py"), "--device", r.device, *r.sizes, "--backend", backend]
        rc, text, wall = r.run(cmd, f"ddp.{backend}", limit=240)
        if rc != 0:
            tried.append(f"{backend}: exit {rc}: {last_lines(text, 2)}")
            continue
        fig = figures(text, "ddp")
        runs = sorted(folder.glob("*.run"))
        expect(len(runs) == 2, f"ddp: {len(runs)} run files in {folder.name}")
        for run in runs:
            doc = r.report(run)
            sound_run(doc, f"ddp {run.name}")
            rank = doc["run"].get("rank") or {}
            expect(rank.get("world_size") == 2, f"ddp: {run.name} names no rank of a 2-rank job: {rank}")
        expect(fig["params_agree"], "ddp: the ranks' parameters disagree")
        return {"backend": backend, "run files": len(runs), "step ms graphdbg": fig["step_ms"],
                "wall s": wall, "note": "; ".join(f"not {t}" for t in tried)}
    raise Failed("ddp: " + " / ".join(tried))


RUNS = {"eager": check_eager, "compiled": check_compiled, "profile": check_profile,
        "sync": check_sync, "ddp": check_ddp}


# -- main ----------------------------------------------------------------------------------

def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--install", action="store_true", help="make .venv-gpu from gpu/wheels first")
    p.add_argument("--require-cuda", action="store_true", help="no CUDA is a failure (exit 2)")
    p.add_argument("--dry-run", action="store_true", help="run the programs on the CPU, small")
    p.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated, of {','.join(CHECKS)}")
    p.add_argument("--out", default=str(ROOT / "gpu-check"), help="run files, logs, gpu-check.json")
    p.add_argument("--budget", type=float, default=450, help="seconds for everything (default 450)")
    a = p.parse_args(argv)
    only = [c.strip() for c in a.only.split(",") if c.strip()]
    unknown = [c for c in only if c not in RUNS]
    if unknown:
        p.error(f"unknown check {unknown[0]!r}; known: {', '.join(CHECKS)}")
    if a.install and Path(sys.executable).resolve() != (VENV / "bin" / "python").resolve():
        py = install()
        args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--install"]
        return subprocess.run([str(py), str(Path(__file__).resolve()), *args]).returncode

    start = time.monotonic()
    import torch
    cuda = torch.cuda.is_available()
    head = f"torch {torch.__version__}, Python {sys.version.split()[0]}"
    if not cuda and not a.dry_run:
        print(f"gpu-check: no CUDA: torch {torch.__version__} sees no CUDA device here "
              f"(cuda build: {torch.version.cuda or 'none'}); the GPU checks are skipped. "
              "--dry-run runs the harness on the CPU.", flush=True)
        return 2 if a.require_cuda else 0
    try:
        from graphdbg.hooks import compat
        compat.check_torch()
    except Exception as e:
        print(f"gpu-check: graphdbg cannot run with {head}: {e}", flush=True)
        return 1
    if cuda:
        props = torch.cuda.get_device_properties(0)
        head += f", {props.name} ({props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
        head += f", NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}" if torch.distributed.is_nccl_available() else ", no NCCL"
    else:
        head += ", no CUDA: a dry run on the CPU (small sizes; no triton, no sync mode, gloo)"
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpu-check: {head}; results in {out}", flush=True)
    r = Runner(out, "cuda" if cuda else "cpu", start + a.budget, dry=not cuda)

    results = []
    for name in only:
        t0 = time.monotonic()
        try:
            figs = RUNS[name](r)
            ok, why = True, ""
        except Failed as e:
            figs, ok, why = {}, False, str(e)
        except Exception as e:  # the harness's own error: still a failure, still reported
            figs, ok, why = {}, False, f"{type(e).__name__}: {e}"
        results.append({"check": name, "passed": ok, "seconds": time.monotonic() - t0,
                        "why": why, "figures": figs})
        print(f"gpu-check: {name}: {'passed' if ok else 'FAILED: ' + why} "
              f"({time.monotonic() - t0:.0f} s)", flush=True)

    total = time.monotonic() - start
    print(f"\ngpu-check: {head}\n")
    print(f"{'check':<9} {'result':<7} {'s':>5}  figures")
    for res in results:
        figs = ", ".join(f"{k} {fmt(v)}" for k, v in res["figures"].items() if v != "")
        print(f"{res['check']:<9} {'pass' if res['passed'] else 'FAIL':<7} {res['seconds']:>5.0f}  "
              f"{figs if res['passed'] else res['why']}")
    failed = [res["check"] for res in results if not res["passed"]]
    print(f"\n{len(results) - len(failed)} of {len(results)} passed in {total:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    (out / "gpu-check.json").write_text(json.dumps(
        {"environment": head, "dry_run": not cuda, "seconds": total, "results": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
