"""A small run file for the TUI tests, written with RunWriter (no torch):
every record is known, and a graph large enough to need paging."""

from __future__ import annotations

import json
from pathlib import Path

from graphdbg.runfile.records import CallRow, NodeRow, NodeTimeRow, NodeValueRow, OpRow
from graphdbg.runfile.writer import RunWriter

SOURCE = """\
import torch


def block(x, scale):
    y = x.relu()
    z = y * scale
    if z.sum() > 0:
        z = z + 1
    return z.sin()


def main():
    x = torch.randn(8)
    for scale in (0.5, 2.0):
        block(x, scale)


main()
"""

N_NODES = 450  # graph 1: more than two pages of 200


def _stats(shift: float) -> str:
    return json.dumps({"shape": [8, 3], "dtype": "float32", "min": -1.5 + shift,
                       "max": 2.25 + shift, "mean": 0.01 + shift, "std": 0.98, "norm": 31.6,
                       "nan": 0, "inf": 0})


def write_sample_run(folder: Path, n_nodes: int = N_NODES, *, internal_errors=(),
                     node_values: bool = False, cwd: str | None = None) -> Path:
    """``node_values``: also the per-node eager/compiled values of graph 1's
    first call, node_008 the first divergent one (for the diff view); ``cwd``:
    the program's directory as the run says (default: ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "model.py"
    src.write_text(SOURCE)
    s = str(src)
    w = RunWriter(str(folder / "sample.run"))
    w.set_meta(argv=["model.py", "--epochs", "1"], cwd=cwd or str(folder), module=False,
               values="stats", torch="2.13.0", python="3.11.7", graphdbg="0.1.0",
               device="cpu", counts={"recompiles": 1}, internal_errors=list(internal_errors))
    relu = w.frame_id(s, 5, "block")
    mul = w.frame_id(s, 6, "block")
    brk = w.frame_id(s, 7, "block")
    sin = w.frame_id(s, 9, "block")
    call = w.frame_id(s, 15, "main")
    stack = w.stack_id([(s, 18, "<module>"), (s, 15, "main"), (s, 6, "block")])
    w.put_graph(1, compile_id="0/0", backend="inductor", code_name="block", code_file=s,
                code_line=4, n_nodes=n_nodes, status="compiled", compile_time_s=1.25,
                user_frame=call)
    w.put_graph(2, compile_id="0/1", backend="inductor", code_name="block", code_file=s,
                code_line=4, n_nodes=3, status="compiled", compile_time_s=0.5)
    frames = (relu, mul, sin)
    for idx in range(n_nodes):
        op = "placeholder" if idx == 0 else "output" if idx == n_nodes - 1 else "call_function"
        name = "x" if idx == 0 else "output" if idx == n_nodes - 1 else f"node_{idx:03d}"
        target = ("torch.relu", "operator.mul", "torch.sin")[idx % 3]
        frame = frames[idx % 3] if op == "call_function" else None
        w.add(NodeRow(1, idx, name, op, target, json.dumps([[8, idx % 7 + 1]]),
                      json.dumps(["float32"]), frame, stack if frame else None,
                      "blocks.0.act" if idx % 3 == 0 else None, None, "x"))
        if op == "call_function":
            ns = 90_000 if idx == 7 else 1000 + (idx * 37) % 5000  # node_007: the slowest
            w.add(NodeTimeRow(1, name, ns))
    for idx, name in enumerate(("x", "sin", "output")):
        w.add(NodeRow(2, idx, name, "call_function" if name == "sin" else "placeholder",
                      "torch.sin", None, None, sin if name == "sin" else None, None, None,
                      None, ""))
    if node_values:
        for idx in range(1, 30):
            first, known = idx == 8, idx >= 8  # localisation compiled node_008 onwards
            differs = idx > 8 and idx % 5 == 0
            status = "first divergent" if first else "differs" if differs else "ok"
            w.add(NodeValueRow(
                1, 0, f"node_{idx:03d}", status, "miscompile" if first or differs else None,
                "intermediate outputs (inductor)" if known else None,
                0.125 if first or differs else 1e-7 if known else None,
                0.5 if first or differs else 1e-6 if known else None, 1e-7,
                0.125 if first or differs else 2e-7 if known else None,
                _stats(0.0), _stats(0.125 if first or differs else 0.0) if known else None,
                _stats(0.0)))
    w.add(CallRow(1, 1, 0, 2_000_000, "[]"))
    w.add(CallRow(2, 1, 1, 1_000_000, "[]"))
    w.add(CallRow(3, 2, 0, 500_000, "[]"))
    for seq, op, frame, ns in ((10, "aten.randn.default", w.frame_id(s, 13, "main"), 40_000),
                               (11, "aten.sum.default", brk, 7_000),
                               (12, "aten.gt.Scalar", brk, 3_000)):
        w.add(OpRow(seq, op, "forward", "[[8]]", '["float32"]', None, ns, frame, None,
                    None, None))
        w.add_op_summary(op, "forward", frame, None, ns)
    w.diagnostic("brk", kind="graph_break", severity="warning",
                 message="graph break: Data-dependent branching",
                 reason="Graph Break Reason: Data-dependent branching\n  full torch text here",
                 hint="Use torch.cond or move the branch out of the compiled region",
                 user_frame=brk, stack=stack, compile_id="0/0",
                 detail={"gb_type": "Data-dependent branching", "explanation": "explained"})
    w.diagnostic("rc", kind="recompile", severity="warning",
                 message="recompile of block() at model.py:4: scale changed: was 0.5, now 2.0",
                 hint="mark scale dynamic", user_frame=mul, stack=stack, compile_id="0/1")
    w.diagnostic("div", kind="divergence", severity="error",
                 message="compiled differs from eager at torch.sin (node node_008)",
                 user_frame=sin, stack=stack, graph_id=1, node="node_008", op="torch.sin",
                 detail={"classification": "miscompile", "node": "node_008", "stage": "inductor",
                         "max_abs": 0.125, "max_rel": 0.5, "eager_vs_fp64": 1e-7,
                         "compiled_vs_fp64": 0.125, "method": "intermediates", "compiles": 1})
    w.diagnostic("note", kind="divergence", severity="info",
                 message="precision: compiled is closer to float64", user_frame=relu)
    w.close(exit_status=0, status="complete", wall_s=3.5)
    return folder / "sample.run"


# -- a second run, for two runs open (`graphdbg tui A.run B.run`) --------------------

TRAIN = """\
import torch

def step(x):
    y = x.cos()          # B's graph break
    return y.item()      # B's runtime error
"""


def write_b_run(folder: Path) -> str:
    """A second run with findings of its own, in a file of its own (train.py,
    snapshotted in B's run file only)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "train.py"
    src.write_text(TRAIN)
    w = RunWriter(str(folder / "compiled.run"))
    w.set_meta(argv=["train.py", "--compiled"], cwd=str(folder), module=False, stance="default",
               values="stats", torch="2.13.0")
    brk = w.frame_id(str(src), 4, "step")
    err = w.frame_id(str(src), 5, "step")
    w.diagnostic("b", kind="graph_break", severity="warning", message="graph break: B's own break",
                 user_frame=brk)
    w.diagnostic("e", kind="runtime_error", severity="error", message="RuntimeError: B failed",
                 user_frame=err)
    w.close(exit_status=1, status="failed", wall_s=1.0)
    return str(folder / "compiled.run")


# -- a real run whose divergence draws anew in each compile ---------------------------

RANDOM_PROGRAM = '''\
"""A dropout compiled by a backend that draws from its own random stream (as
inductor does): the stage ladder's aot_eager_decomp_partition draws
otherwise again, so the finding's stage and the per-node values (the
backend's own compile) see different numbers."""
import torch


def backend(gm, example_inputs):
    from torch._dynamo.backends.registry import lookup_backend
    compiled = lookup_backend("aot_eager")(gm, example_inputs)

    def run(*args):
        torch.rand(1)   # a shifted stream
        return compiled(*args)
    return run


class Dropped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        h = self.fc(x)
        h = self.drop(h)  # graphdbg-expect: divergence
        return torch.tanh(h) * 2


torch.manual_seed(0)
with torch.no_grad():
    torch.compile(Dropped(), backend=backend)(torch.randn(4, 16))
'''


def write_random_program(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tui_random.py"
    path.write_text(RANDOM_PROGRAM)
    return path
