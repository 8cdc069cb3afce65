"""Capture details on real torch.compile: eager ops, compiled calls, source
mapping, libraries, value tiers."""

from __future__ import annotations

import textwrap

from graphdbg.runfile import RunReader

from conftest import SAMPLES, graphdbg, report_json


def _run(workdir, body: str, *opts: str, name: str = "prog.py") -> dict:
    (workdir / name).write_text(textwrap.dedent(body))
    proc = graphdbg("run", "-q", "-o", "x.run", *opts, name, cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return report_json("x.run", workdir)


def test_compiled_work_is_never_recorded_as_eager(workdir):
    doc = _run(workdir, """\
        import torch
        x = torch.randn(8, requires_grad=True)
        f = torch.compile(lambda t: t.sin().cos() * 3, backend="aot_eager", fullgraph=True)
        y = f(x)
        y.sum().backward()
        print(x.grad.shape)
        """)
    reader = RunReader(str(workdir / "x.run"))
    ops = {r["op"] for r in reader.query("SELECT op FROM ops")}
    assert "aten.randn.default" in ops and "aten.sum.default" in ops
    assert not ops & {"aten.sin.default", "aten.cos.default", "aten.mul.Tensor"}
    (g,) = doc["graphs"]
    assert g["calls"] == 1 and g["backend"] == "aot_eager"
    targets = [n["target"] for n in g["nodes"] if n["op"] == "call_method"]
    assert targets == ["sin", "cos"]
    sin = next(n for n in g["nodes"] if n["target"] == "sin")
    assert sin["line"] == 3 and sin["code"].startswith("f = torch.compile")
    assert sin["shapes"] == [[8]] and sin["dtypes"] == ["float32"]


def test_eager_ops_forward_backward_lines_and_modules(workdir):
    proc = graphdbg("run", "-q", "-o", "e.run", SAMPLES / "eager_only.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reader = RunReader(str(workdir / "e.run"))
    rows = [dict(r) for r in reader.query("SELECT * FROM ops")]
    phases = {r["phase"] for r in rows}
    assert phases == {"forward", "backward"}
    convs = [r for r in rows if r["op"] == "aten.convolution.default"]
    assert convs and all(r["module_class"] == "Conv2d" for r in convs)
    assert all(r["module_path"].count(".") >= 1 for r in convs)
    conv_line = reader.frame(convs[0]["user_frame"])
    assert conv_line["file"] == str(SAMPLES / "eager_only.py")
    # backward ops map to the forward line that created their autograd node
    bw = [r for r in rows if r["phase"] == "backward" and r["op"] == "aten.convolution_backward.default"]
    assert bw and all(r["user_frame"] for r in bw)
    assert {reader.frame(r["user_frame"])["line"] for r in bw} <= {
        reader.frame(r["user_frame"])["line"] for r in convs}
    stats = [r["stats"] for r in rows if r["op"] == "aten.convolution.default"]
    assert all('"mean"' in s and '"norm"' in s for s in stats)


def test_value_tiers(workdir):
    body = """\
        import torch
        x = torch.tensor([1.0, float("nan"), 3.0])
        y = x * 2
        """
    doc = _run(workdir, body, "--values", "none")
    reader = RunReader(str(workdir / "x.run"))
    assert all(r["stats"] is None for r in reader.query("SELECT stats FROM ops"))
    _run(workdir, body, "--values", "health")
    reader = RunReader(str(workdir / "x.run"))
    mul = reader.query("SELECT stats FROM ops WHERE op='aten.mul.Tensor'")[0]["stats"]
    assert mul == '[{"nan":1,"inf":0}]'
    _run(workdir, body, "--values", "full")
    reader = RunReader(str(workdir / "x.run"))
    assert reader.count("tensors") >= 2
    _run(workdir, body, "--values", "full", "--keep", r"aten\.mul")
    reader = RunReader(str(workdir / "x.run"))
    kept = reader.query("SELECT ops.op, tensors.safetensors FROM tensors "
                        "JOIN ops ON tensors.owner = 'op:' || ops.seq")
    assert [r["op"] for r in kept] == ["aten.mul.Tensor"]
    from safetensors.torch import load
    value = load(kept[0]["safetensors"])["value"]
    assert value[0] == 2 and value[2] == 6 and value[1].isnan()
    assert doc["run"]["values"] == "none"


def test_break_inside_a_library_is_reported_at_the_library_line(workdir):
    lib = workdir / "vendor" / "fancylib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "layers.py").write_text(textwrap.dedent("""\
        import torch

        def noisy_gelu(x):
            print("gelu on", tuple(x.shape))
            return torch.nn.functional.gelu(x)
        """))
    doc = _run(workdir, """\
        import sys, torch
        sys.path.insert(0, "vendor")
        from fancylib.layers import noisy_gelu

        def block(x):
            h = x * 2
            return noisy_gelu(h) + 1

        torch.compile(block, backend="eager")(torch.randn(4))
        """)
    (brk,) = [d for d in doc["diagnostics"] if d["kind"] == "graph_break"]
    assert brk["file"] == str(lib / "layers.py") and brk["line"] == 4
    assert brk["function"] == "noisy_gelu"
    chain = [(f["file"], f["line"]) for f in brk["stack"]]
    assert (str(workdir / "prog.py"), 7) in chain and (str(workdir / "prog.py"), 9) in chain
    assert "print" in brk["reason"]


def test_recompile_limit_hit_is_reported(workdir):
    doc = _run(workdir, """\
        import torch
        torch._dynamo.config.recompile_limit = 2

        def f(x, k):
            return x * k

        cf = torch.compile(f, backend="eager", dynamic=False)
        for k in range(4):
            cf(torch.ones(2), k)
        """)
    rec = [d for d in doc["diagnostics"] if d["kind"] == "recompile"]
    limit = [d for d in rec if "recompile limit" in d["message"]]
    assert limit and limit[0]["severity"] == "error"
    site = [d for d in rec if d not in limit]
    assert site and site[0]["line"] == 9 and "guard failed" in site[0]["message"]


def test_backend_variants_callable_fullgraph_dynamic(workdir):
    doc = _run(workdir, """\
        import torch

        seen = []

        def my_backend(gm, example_inputs):
            seen.append(len(gm.graph.nodes))
            return gm.forward

        def f(x, y):
            return (x @ y).relu().sum(dim=0)

        a = torch.compile(f, backend=my_backend)
        b = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
        for n in (3, 5):
            a(torch.randn(n, 4), torch.randn(4, 2))
            b(torch.randn(n, 4), torch.randn(4, 2))
        print(seen)
        """)
    backends = [g["backend"] for g in doc["graphs"]]
    assert backends.count("my_backend") >= 1 and backends.count("aot_eager") == 1
    dyn = next(g for g in doc["graphs"] if g["backend"] == "aot_eager")
    assert dyn["calls"] == 2
    matmul = next(n for n in dyn["nodes"] if n["target"] == "_operator.matmul")
    assert all(isinstance(s, str) and s.startswith("s") for s in matmul["shapes"][0])
    assert matmul["line"] == 10 and matmul["code"] == "return (x @ y).relu().sum(dim=0)"
    reader = RunReader(str(workdir / "x.run"))
    outs = [r["outputs"] for r in reader.query(
        "SELECT outputs FROM calls WHERE graph_id=?", (dyn["id"],))]
    assert len(outs) == 2 and all('"shape":[2]' in o and '"mean"' in o for o in outs)


def test_set_logs_does_not_remove_our_handler(workdir):
    doc = _run(workdir, """\
        import torch
        torch._logging.set_logs(dynamo=30)

        def f(x):
            print("side effect")
            return x + 1

        torch.compile(f, backend="eager")(torch.ones(2))
        """)
    assert [(d["kind"], d["line"]) for d in doc["diagnostics"]] == [("graph_break", 5)]


HIGHER_ORDER = '''\
import torch
from torch.utils.checkpoint import checkpoint

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def block(self, x):
        return torch.relu(self.a(x))

    def forward(self, x):
        h = checkpoint(self.block, x, use_reentrant=False)
        h = torch.cond(h.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (h,))
        y = torch.func.vmap(lambda r: r * 2)(h)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.b(y)
        return z.float().sum()

torch.manual_seed(0)
m = M()
x = torch.randn(4, 8, requires_grad=True)
eager = m(x)                                   # higher-order ops in eager, too
out = torch.compile(m, backend="aot_eager")(x)
out.backward()                                 # a compiled backward with a cond in it
print(eager.item(), out.item(), x.grad.sum().item())
'''


def test_higher_order_ops_run_unchanged_under_graphdbg(workdir):
    # torch.cond, checkpoint, vmap and autocast, eager and compiled, forward and
    # backward: same numbers as plain python, no findings, no internal errors
    import subprocess
    import sys

    from conftest import ENV
    (workdir / "hop.py").write_text(HIGHER_ORDER)
    plain = subprocess.run([sys.executable, "hop.py"], cwd=workdir, capture_output=True,
                           text=True, env=ENV, timeout=600)
    assert plain.returncode == 0, plain.stderr[-2000:]
    proc = graphdbg("run", "-q", "-o", "x.run", "hop.py", cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == plain.stdout
    doc = report_json("x.run", workdir)
    assert doc["diagnostics"] == [] and doc["run"]["internal_errors"] == []
    assert doc["graphs"] and all(g["status"] == "compiled" for g in doc["graphs"])
