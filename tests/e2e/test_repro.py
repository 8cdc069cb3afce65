"""`graphdbg repro`: for each divergence, compile-error and malformed-graph
sample, a standalone script that reproduces the finding in a fresh python,
smaller than the graph it came from; findings without a repro said in one line.

The samples' runs are the golden ones (aot_eager), shared with the golden and
compile-error tests (`runs.golden`)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import graphdbg, group, python


def _torch_before(major: int, minor: int) -> bool:
    import torch
    return tuple(int(x) for x in torch.__version__.split(".")[:2]) < (major, minor)

# sample -> (finding number, the repro's kind)
REPROS = {
    "divergence_faulty": (1, "divergence"),
    "demo": (1, "divergence"),
    "compile_shape_error": (1, "compile_error"),
    "broken_fx_pass": (2, "compile_error"),       # its compile error
    "broken_fx_pass#1": (1, "compile_error"),     # its malformed graph: the same failure
}
ALLOWED_IMPORTS = {"torch", "safetensors", "math", "operator", "os", "sys"}


def repro(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """`graphdbg repro ARGS` (forked from the worker's warm interpreter: the
    script it writes is still checked in a fresh python, by graphdbg itself)."""
    return graphdbg("repro", *args, cwd=cwd, timeout=timeout)


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


@pytest.mark.parametrize("key", [pytest.param(k, marks=group(k.split("#")[0])) for k in REPROS])
def test_sample_repro_reproduces_standalone(runs, tmp_path, key):
    name = key.split("#")[0]
    number, kind = REPROS[key]
    run = runs.golden(name).run
    out = tmp_path / "bug"
    p = repro(run, number, "-o", out, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    script = out / "repro.py"
    readme = (out / "README.md").read_text().splitlines()
    assert len(readme) == 2 and readme[1].startswith("Run it: `python repro.py`"), readme
    assert not (out / "attempt").exists()
    # torch, safetensors and the standard library only; nothing unpickled
    assert imports(script) <= ALLOWED_IMPORTS, imports(script)
    assert "pickle" not in script.read_text() and "torch.load" not in script.read_text()
    # a divergence's inputs; a compile error's where the program's values were recorded
    # (else random, and the README says so)
    kept = (out / "inputs.safetensors").exists()
    assert kept or kind == "compile_error"
    if kind == "compile_error":
        assert ("as the program passed them" in readme[0]) == kept, readme[0]
        assert ("values are random" in readme[0]) != kept, readme[0]
    # smaller than the graph it came from; torch 2.11's ConstraintViolationError names
    # no node (the finding has no node to cut to): the whole graph, which reproduces
    m = re.search(r"(\d+) of the (?:graph's )?(\d+) nodes", readme[0])
    if m is None and key == "compile_shape_error" and _torch_before(2, 13):
        return
    assert m, readme[0]
    small, whole = int(m[1]), int(m[2])
    print(f"{key}: repro of {small} nodes from a graph of {whole} ({script.stat().st_size} bytes)")
    assert small < whole
    # reproduces standalone, in under 30 s: graphdbg ran it so before offering
    # it, and printed what it printed; run here once more for two of the
    # samples: in a fresh python as the user would (seconds of the suite's
    # time), and in a child of the worker's server (torch imported, nothing of
    # the program or of graphdbg)
    said = re.search(r"^reproduced in ([\d.]+) s", p.stdout, re.M)
    assert said and float(said[1]) < 30, p.stdout
    fresh = p
    if key in ("divergence_faulty", "compile_shape_error"):
        t0 = time.perf_counter()
        fresh = (subprocess.run([sys.executable, "repro.py"], cwd=out, capture_output=True,
                                text=True, timeout=60) if key == "divergence_faulty" else
                 python("repro.py", cwd=out, timeout=60))
        took = time.perf_counter() - t0
        print(f"{key}: reproduced in {took:.1f} s")
        assert fresh.returncode == 1, fresh.stdout + fresh.stderr[-2000:]
        assert took < 30
    assert ("DIVERGES" if kind == "divergence" else "REPRODUCED") in fresh.stdout
    if kind == "divergence":
        for side in ("eager", "compiled", "float64"):
            assert re.search(rf"^  {side}\s+\(", fresh.stdout, re.M), fresh.stdout


@group("demo")
def test_findings_without_a_repro_say_why_in_one_line(runs, tmp_path):
    run = runs.golden("demo").run
    p = repro(run, 2, cwd=tmp_path)      # the graph break, in a module's forward
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "cannot be cut out: forward is a method of " \
        "Classifier (an nn.Module): it uses self.block1" in p.stderr, p.stderr
    p = repro(run, 3, cwd=tmp_path)      # the recompile, of the same forward
    assert p.returncode == 1 and "recompile of forward()) cannot be cut out" in p.stderr, p.stderr
    p = repro(run, 9, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip() == (
        "graphdbg: no finding 9: the run has 3 (numbered as `graphdbg report` lists them, from 1)")
    p = repro(tmp_path / "missing.run", cwd=tmp_path)
    assert p.returncode == 2 and "no run file" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "bad.run").write_text("not a run")
    p = repro("bad.run", cwd=tmp_path)
    assert (p.returncode, p.stderr) == (2, "graphdbg: bad.run is not a graphdbg run file\n")
    p = repro(tmp_path, cwd=tmp_path)
    assert p.returncode == 2 and "is a folder: name a run file in it" in p.stderr
    p = repro(run, 1, "-o", "bad.run", cwd=tmp_path)
    assert p.returncode == 2 and "a file is there, not a folder" in p.stderr
    assert not list(tmp_path.glob("repro-*"))


@group("divergence_faulty")
def test_default_folder_and_custom_backend_said(runs, tmp_path):
    run = tmp_path / "divergence_faulty.run"   # a copy: the shared run's folder stays as it is
    shutil.copy(runs.golden("divergence_faulty").run, run)
    p = repro(run.name, cwd=tmp_path)   # the first error, beside the run file
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stdout.split())
    assert "'FaultyBackend' is defined in your program and cannot be imported" in said
    folder = tmp_path / "repro-divergence-1"
    assert (folder / "repro.py").exists()
    assert "FaultyBackend" in (folder / "README.md").read_text()
    # the README's "Reproducing a finding" shows this very script
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert (folder / "repro.py").read_text().rstrip() in readme


def test_a_script_that_does_not_reproduce_is_kept_as_an_attempt(tmp_path):
    """The graph compiles fine standalone: not offered, kept in attempt/, why said."""
    from graphdbg.repro.make import make
    from graphdbg.repro.plan import Plan
    spec = {"kind": "compile_error", "graph_id": 1, "graph_nodes": 3,
            "exception": "RuntimeError", "message": "boom",
            "backend": {"name": "eager", "named": True},
            "nodes": [{"name": "x", "op": "placeholder", "target": "x",
                       "meta": {"shape": [2, 3], "dtype": "float32", "stride": [3, 1],
                                "dynamic": []}},
                      {"name": "relu", "op": "call_function", "target": "torch.relu",
                       "args": {"tuple": [{"node": "x"}]}, "kwargs": {"dict": []}},
                      {"name": "output", "op": "output",
                       "args": {"tuple": [{"tuple": [{"node": "relu"}]}]}, "kwargs": {"dict": []}}]}
    p = Plan(1, "compile_error", spec, b"", "Graph 1 fails to compile: RuntimeError: boom", None)
    r = make(p, str(tmp_path / "x.run"), str(tmp_path / "out"))
    assert not r.ok
    assert "compiled without error" in r.why
    assert (tmp_path / "out" / "attempt" / "repro.py").exists()
    assert not (tmp_path / "out" / "repro.py").exists()


@group("divergence_faulty")
def test_tui_r_on_a_problem_writes_its_repro(runs, tmp_path):
    """Pilot: `r` on the problems view runs `graphdbg repro RUN N` in a worker;
    a "checking" notice stays until the check ends, and its verdict replaces it."""
    import asyncio

    from graphdbg.tui.views.app import GraphdbgApp
    run = tmp_path / "t.run"
    shutil.copy(runs.golden("divergence_faulty").run, run)

    notified: list[str] = []       # every notice, in the order it was shown
    shown: list[str] = []          # the notices on screen at the end

    async def main():
        app = GraphdbgApp([str(run)], cursor_blink=False)
        app.animation_level = "none"
        add = app._notifications.add
        app._notifications.add = lambda n: (notified.append(str(n.message)), add(n))[1]
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(3):
                await app.workers.wait_for_complete()
                await pilot.pause()
            await pilot.press("1", "r")
            for _ in range(60):
                await app.workers.wait_for_complete()
                await pilot.pause()
                shown[:] = [str(n.message) for n in app._notifications]
                if any(s.startswith("repro: ") for s in shown):
                    break
    asyncio.run(main())
    checking, verdict = notified
    assert checking.startswith("graphdbg repro ") and \
        checking.endswith(" 1: checking it in a fresh python…"), notified
    assert verdict.startswith("repro: reproduced; wrote "), notified
    assert shown == [verdict], shown   # the verdict in place of the notice
    assert (tmp_path / "repro-divergence-1" / "repro.py").exists()


FUSED = '''
import torch

class FusedOnly:
    """Miscompiles the add only when the sigmoid before it is in the same graph
    (a fault of a fusion): the add alone compiles right."""
    def __call__(self, gm, example_inputs):
        import copy
        from torch._dynamo.backends.registry import lookup_backend
        graph = copy.deepcopy(gm.graph)
        if any(n.target is torch.sigmoid for n in graph.nodes):
            for n in graph.nodes:
                if n.target in (torch.add, __import__("operator").add):
                    with graph.inserting_after(n):
                        wrong = graph.call_function(torch.mul, (n, 1.05))
                    for u in list(n.users):
                        if u is not wrong:
                            u.replace_input_with(n, wrong)
                    gm = torch.fx.GraphModule(gm, graph)
                    break
        return lookup_backend("aot_eager")(gm, example_inputs)

def f(x, w):
    h = torch.sigmoid(x @ w)
    h = h + 1.0
    h = torch.tanh(h) * 2
    return torch.relu(h - 1).sum(0)

torch.manual_seed(0)
print(torch.compile(f, backend=FusedOnly())(torch.randn(4, 8), torch.randn(8, 8)).sum().item())
'''


def test_a_fused_fault_grows_the_cut_to_the_graph_up_to_the_node(runs, tmp_path):
    (tmp_path / "fused.py").write_text(FUSED)
    r = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "fused.run", "fused.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    p = repro("fused.run", 1, "-o", "bug", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    readme = (tmp_path / "bug" / "README.md").read_text()
    assert "the graph up to the node (the node alone does not diverge: fusion)" in readme, readme
    m = re.search(r"(\d+) of the graph's (\d+) nodes", readme)
    assert int(m[1]) < int(m[2]), readme
    # graphdbg ran it in a fresh python before offering it, and printed what it printed
    assert re.search(r"^reproduced in", p.stdout, re.M) and "DIVERGES" in p.stdout, p.stdout


LLAMA = '''
import copy
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

class ScaleSilu:
    """An injected fault: scales the first silu by 1.02, then aot_eager."""
    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.registry import lookup_backend
        graph = copy.deepcopy(gm.graph)
        for n in graph.nodes:
            if n.op == "call_function" and n.target is F.silu:
                with graph.inserting_after(n):
                    wrong = graph.call_function(torch.mul, (n, 1.02))
                for u in list(n.users):
                    if u is not wrong:
                        u.replace_input_with(n, wrong)
                gm = torch.fx.GraphModule(gm, graph)
                break
        return lookup_backend("aot_eager")(gm, example_inputs)

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, intermediate_size=64, vocab_size=100)
model = LlamaForCausalLM(cfg).eval()
with torch.no_grad():
    out = torch.compile(model, backend=ScaleSilu())(input_ids=torch.randint(0, 100, (2, 8)))
print(out.logits.sum().item())
'''


def test_a_transformers_model_with_an_injected_fault(runs, tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "llama.py").write_text(LLAMA)
    r = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "llama.run", "llama.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    p = repro("llama.run", "-o", "bug", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    readme = (tmp_path / "bug" / "README.md").read_text()
    assert "(torch.nn.functional.silu)" in readme and "the node alone" in readme, readme
    m = re.search(r"(\d+) of the graph's (\d+) nodes", readme)
    print(f"llama: repro of {m[1]} nodes from a graph of {m[2]}")
    assert int(m[1]) * 10 < int(m[2]), readme
    # graphdbg ran it in a fresh python before offering it, and printed what it printed
    assert re.search(r"^reproduced in", p.stdout, re.M) and "DIVERGES" in p.stdout, p.stdout
    assert "transformers" not in (tmp_path / "bug" / "repro.py").read_text()


WRONG_OP = '''
import torch

def bad_backend(gm, example_inputs):
    from torch._dynamo.backends.registry import lookup_backend
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.relu:
            n.target = torch.ops.aten.mm.default   # a pass that picks the wrong op
    gm.recompile()
    return lookup_backend("aot_eager")(gm, example_inputs)

def f(x):
    return torch.relu(x).sum(0)

x = torch.randn(6, 4)
torch._dynamo.mark_dynamic(x, 0)   # a size input (s0) in the graph
torch.compile(f, backend=bad_backend)(x)
'''


def test_a_pass_that_breaks_an_op_with_dynamic_sizes(runs, tmp_path):
    (tmp_path / "wrong_op.py").write_text(WRONG_OP)
    r = runs.spawn("-m", "graphdbg", "run", "-q", "-o", "w.run", "wrong_op.py", cwd=tmp_path)
    assert r.returncode == 1
    p = repro("w.run", "-o", "bug", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "raised RuntimeError: aten::mm() is missing value for argument 'mat2'" in p.stdout
    readme = (tmp_path / "bug" / "README.md").read_text()
    m = re.search(r"(\d+) of the (\d+) nodes", readme)
    assert int(m[1]) < int(m[2]), readme
