"""`graphdbg report` as a newcomer reads it (issue 33), on a run file written
by hand (RunWriter, no torch: every number known, so the text is the same
on any machine): the problems first, errors first, each with what to do;
the default short, the full tables behind --full and named on the last line;
at COLUMNS=80 no line wider, none ending in blanks; no jargon left plain.

The two reports are held against tests/golden/report_default_80.txt and
report_full_80.txt (GRAPHDBG_UPDATE_GOLDEN=1 rewrites them: read the diff).
`graphdbg explain` is tested here too: every kind a run file can hold.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from conftest import ENV, ROOT, report_doc, report_text
from graphdbg.runfile.details import KINDS as DETAIL_KINDS
from graphdbg.runfile.records import CallRow, NodeRow, NodeTimeRow, OpRow
from graphdbg.runfile.writer import RunWriter

GOLDEN = ROOT / "tests" / "golden"

SOURCE = """\
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        h = self.stem(x)
        print("hidden:", h.shape)
        h = torch.tanh(self.drop(h))
        return self.head(zlib_checksum(h))


def main():
    net = torch.compile(Net(), backend=my_backend)
    for batch in rows.split(32):
        net(batch)
"""

# torch 2.13's words for a print in a compiled function (gb0059) and for a
# call it cannot trace (gb0007): what graphdbg rewords or leaves out
PRINT_HINTS = ("Avoid calling builtin `print` with argument types ['str', 'Size']. Consider "
               "using an equivalent alternative function/method to `print`.\n"
               "If you are attempting to call a logging function (e.g. `print`), you can try "
               "adding it to `torch._dynamo.config.reorderable_logging_functions`.\n"
               "Please report an issue to PyTorch.")
SKIPPED_HINTS = ("It may be possible to write Dynamo tracing rules for this code. Please report "
                 "an issue to PyTorch if you encounter this graph break often and it is causing "
                 "performance issues.\nPlease report an issue to PyTorch.")


def write_run(folder: Path) -> Path:
    """Four findings of the demo's kinds and one generic break, three graphs,
    node times and eager ops (for --full)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "model.py"
    src.write_text(SOURCE)
    s = str(src)
    w = RunWriter(str(folder / "model.run"))
    w.set_meta(argv=["model.py", "--epochs", "1"], cwd=str(folder), module=False,
               values="stats", torch="2.13.0", python="3.11.7", graphdbg="0.1.0", device="cpu")
    code = {n: line.strip() for n, line in enumerate(SOURCE.splitlines(), 1)}
    fr = {n: w.frame_id(s, n, "main" if n > 12 else "forward", code=code[n]) for n in code
          if n in (6, 7, 8, 9, 15)}
    call = w.stack_id([(s, 15, "main"), (s, 7, "forward")], [code[15], code[7]])
    for gid, cid, nodes in ((1, "0/0", 4), (2, "1/0", 6), (3, "0/1", 4)):
        w.put_graph(gid, compile_id=cid, backend="my_backend", code_name="forward", code_file=s,
                    code_line=5 if cid[0] == "0" else 7, n_nodes=nodes, status="compiled",
                    compile_time_s=0.5 * gid)
    for idx, (name, target, line) in enumerate((("linear", "torch._C._nn.linear", 6),
                                                ("h", "torch.tanh", 8),
                                                ("dropout", "torch.nn.functional.dropout", 8))):
        w.add(NodeRow(2, idx, name, "call_function", target, "[[32, 8]]", '["float32"]',
                      fr[line], None, None, None, "x"))
        w.add(NodeTimeRow(2, name, 40_000 + 1000 * idx))
    for seq, (gid, idx, ns) in enumerate(((1, 0, 2_000_000), (2, 0, 1_500_000), (1, 1, 900_000),
                                          (2, 1, 800_000), (3, 0, 1_200_000)), 1):
        w.add(CallRow(seq, gid, idx, ns, "[]"))
    for seq, op, ns in ((1, "aten.randn.default", 9_000), (2, "aten.cat.default", 3_000)):
        w.add(OpRow(seq, op, "forward", "[[8]]", '["float32"]', None, ns, fr[15], None, None,
                    None))
        w.add_op_summary(op, "forward", fr[15], None, ns)
    w.diagnostic("print", kind="graph_break", severity="warning",
                 message="graph break: Failed to trace builtin operator",
                 reason="Graph Break Reason: Failed to trace builtin operator\n  torch's text",
                 hint=PRINT_HINTS, user_frame=fr[7], stack=call, compile_id="0/0",
                 detail={"gb_id": "gb0059", "gb_type": "Failed to trace builtin operator",
                         "explanation": "Dynamo does not know how to trace builtin operator "
                                        "`print` with argument types ['str', 'Size'] "
                                        "(has_kwargs False)"})
    w.diagnostic("skip", kind="graph_break", severity="warning",
                 message="graph break: Attempted to call function marked as skipped",
                 hint=SKIPPED_HINTS, user_frame=fr[9], stack=call, compile_id="1/0",
                 detail={"gb_id": "gb0007", "gb_type": "Attempted to call function marked as "
                                                      "skipped",
                         "explanation": "Dynamo developers have intentionally marked that the "
                                        "function `checksum` in file `lib.py` should not be "
                                        "traced."})
    w.diagnostic("size", kind="recompile", severity="warning",
                 message="recompile of forward() at model.py:5: tensor 'x' size (dim 0) "
                         "changed: was 32, now 4 (2 compiled frames recompiled: forward() at "
                         "model.py:5, forward() at model.py:7)",
                 hint="A tensor's shape changed between calls. If it keeps changing, mark the "
                      "dimension dynamic before the call (torch._dynamo.mark_dynamic(x, 0)) or "
                      "compile with dynamic=True.",
                 user_frame=fr[15], compile_id="0/1",
                 detail={"guard_kind": "size", "function": "forward"})
    for _ in range(2):
        w.diagnostic("tanh", kind="divergence", severity="error",
                     message="compiled diverges from eager at torch.tanh (stage my_backend)",
                     hint="The op is wrong on its own inputs: look at how the backend lowers it.",
                     user_frame=fr[8], graph_id=2, node="h", op="torch.tanh", compile_id="1/0",
                     detail={"classification": "miscompile", "direction": "forward",
                             "node": "h", "target": "torch.tanh", "stage": "my_backend",
                             "method": "intermediate outputs", "compiles": 4,
                             "compiles_by_stage": {"aot_eager": 1,
                                                   "aot_eager_decomp_partition": 1,
                                                   "my_backend": 2},
                             "max_abs": 0.0097, "max_rel": 0.01, "eager_vs_fp64": 1.2e-08,
                             "compiled_vs_fp64": 0.00486,
                             "isolated": {"decided": True, "diverges": True},
                             "output_max_abs": 0.0067, "graphs": [2]})
    w.diagnostic("drop", kind="divergence", severity="warning",
                 message="compiled and eager draw different random numbers at "
                         "torch.nn.functional.dropout",
                 hint="Different random streams, not a miscompile.",
                 user_frame=fr[8], graph_id=2, node="dropout",
                 op="torch.nn.functional.dropout",
                 detail={"classification": "random", "node": "dropout",
                         "target": "torch.nn.functional.dropout", "module_path": "drop",
                         "module_class": "Dropout", "stage": "aot_eager_decomp_partition",
                         "method": "intermediate outputs", "compiles": 3,
                         "compiles_by_stage": {"aot_eager": 1, "aot_eager_decomp_partition": 1},
                         "max_abs": 4.96, "max_rel": 4.96e5, "eager_vs_fp64": 8.8e-08,
                         "compiled_vs_fp64": 0.607})
    w.close(exit_status=0, status="complete", wall_s=3.5)
    return folder / "model.run"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, str]:
    """The default and the --full report at COLUMNS=80, in-process, from the
    run's folder (paths as a user there sees them)."""
    folder = tmp_path_factory.mktemp("report-text")
    write_run(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        return {"default": report_text("model.run", width=80),
                "full": report_text("model.run", "--full", width=80),
                "run": str(folder / "model.run")}


def assert_fits(text: str, width: int = 80) -> None:
    lines = text.splitlines()
    wide = [ln for ln in lines if cell_len(ln) > width]
    assert not wide, "\n".join(wide)
    padded = [ln for ln in lines if ln != ln.rstrip()]
    assert not padded, padded


@pytest.mark.parametrize("which", ["default", "full"])
def test_the_report_matches_its_golden_text_at_80_columns(reports, which):
    text = reports[which]
    assert_fits(text)
    path = GOLDEN / f"report_{which}_80.txt"
    if os.environ.get("GRAPHDBG_UPDATE_GOLDEN"):
        path.write_text(text)
    want = path.read_text()
    if text != want:
        diff = "\n".join(difflib.unified_diff(want.splitlines(), text.splitlines(),
                                              str(path.name), "this run", lineterm=""))
        pytest.fail(f"the report differs from {path.name}:\n{diff}", pytrace=False)


def test_problems_come_first_errors_first_each_with_what_to_do(reports):
    lines = reports["default"].splitlines()
    heads = [ln for ln in lines if ln[:2] in ("✖ ", "▲ ", "● ")]
    assert [h.split()[1] for h in heads] == ["divergence", "graph_break", "graph_break",
                                             "recompile", "divergence"]
    assert heads[0].startswith("✖ divergence model.py:8 in forward  ×2")
    problems = lines.index(next(ln for ln in lines if ln.startswith("Problems (5)")))
    graphs = lines.index(next(ln for ln in lines if ln.startswith("Graphs (3)")))
    assert 0 < problems < graphs
    # every problem says what to do
    blocks = "\n".join(lines[problems:graphs]).split("\n✖ ")[-1].split("\n▲ ")
    assert all("what to do:" in b for b in blocks), blocks


def test_the_default_is_short_and_its_last_line_names_full(reports):
    default, full = reports["default"].splitlines(), reports["full"].splitlines()
    assert len(default) <= 60 < len(full)
    assert "graphdbg report --full model.run" in default[-1]
    assert "--full" not in full[-1]
    for section in ("Compile time", "Slowest graph nodes", "Slowest eager ops"):
        assert not any(ln.startswith(section) for ln in default)
    assert any(ln.startswith("Slowest graph nodes") for ln in full)
    assert any(ln.startswith("Slowest eager ops") for ln in full)
    assert "graphdbg tui model.run" in reports["default"]
    assert "graphdbg explain divergence" in reports["default"]


def test_no_jargon_is_left_unexplained(reports):
    default, full = reports["default"], reports["full"]
    flat = " ".join(default.split())
    # the examples: none in the default report
    for jargon in ("stage aot_eager_decomp_partition", "compiles (intermediate outputs)",
                   "0/0", "0/1", "eager ref", "values=stats"):
        assert jargon not in flat, jargon
    # a recompiled graph said as such; one backend said once
    assert "forward (recompile 1)" in default
    assert "Graphs (3), backend my_backend" in default
    # the terms a newcomer meets, explained once
    assert "eager: plain PyTorch, op by op; graph: code torch.compile captured" in flat
    assert "float64 (the same graph in double precision)" in flat.lower()
    assert "aot_eager_decomp_partition (torch's decompositions" in flat   # the random one's stage
    # --full keeps the ids and the reference times, and says what they are
    full_flat = " ".join(full.split())
    assert "compile F/N: torch's id of the compile" in full_flat
    assert "eager ref: the graph's ops run eagerly one by one" in full_flat
    assert "Localised with 4 extra compiles (intermediate outputs)" in full_flat


def test_graphdbgs_own_hints_replace_torchs_generic_ones(reports):
    flat = " ".join(reports["default"].split())
    assert "Consider using an equivalent alternative" not in flat
    assert "Please report an issue to PyTorch" not in flat
    assert "tracing rules" not in flat
    assert "what to do: print() cannot go into a graph: the graph breaks here." in flat
    for way in ("move it out of the compiled function",
                "if not torch.compiler.is_compiling(): print(...)",
                "torch._dynamo.config.reorderable_logging_functions.add(print)"):
        assert way in flat, way
    # a break whose hints were all generic: graphdbg's own line
    assert ("what to do: If this break costs time, move the code out of the compiled function "
            "(graphdbg explain graph_break).") in flat
    # the miscompile: whose bug, and how to go on meanwhile
    assert "what to do: Report it to my_backend's authors, with this line and op." in flat
    assert 'meanwhile, backend="aot_eager" was right here' in flat
    assert ("Compiled torch.tanh differs from eager by up to 0.0097 (1%) at node h, where the op "
            "alone, on eager's inputs, is wrong too.") in flat
    # which the message said too: not twice
    assert "compiled diverges from eager at torch.tanh" not in flat
    # the JSON keeps torch's words as they were
    (brk,) = [d for d in report_doc(reports["run"])["diagnostics"] if d["line"] == 7]
    assert brk["hint"] == PRINT_HINTS


def test_the_report_honours_columns_when_not_a_terminal(tmp_path):
    run = write_run(tmp_path)
    for width in (80, 100):
        out = subprocess.run([sys.executable, "-m", "graphdbg", "report", str(run)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             env={**ENV, "COLUMNS": str(width)}, check=True).stdout
        assert_fits(out, width)
        assert max(cell_len(ln) for ln in out.splitlines()) > width - 10   # used, not 120
    # no COLUMNS and no terminal (a log, make): 120, as before
    env = {k: v for k, v in ENV.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "graphdbg", "report", "--full", str(run)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
                         check=True).stdout
    assert_fits(out, 120)
    assert max(cell_len(ln) for ln in out.splitlines()) > 80


# -- graphdbg explain -------------------------------------------------------------------

def explain(*args: str, width: int = 80) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphdbg", "explain", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**ENV, "COLUMNS": str(width)})


def test_explain_covers_every_kind_a_run_file_can_hold():
    from graphdbg.analysis.kinds import CLASSIFICATIONS, KINDS, lookup
    from graphdbg.runfile.writer import DIAGNOSTIC_KINDS
    assert set(KINDS) == set(DETAIL_KINDS) == set(DIAGNOSTIC_KINDS)
    # every classification a divergence's detail names (details.DivergenceDetail)
    assert set(CLASSIFICATIONS) == {"miscompile", "precision", "nonfinite", "random",
                                    "aliasing", "shape", "dtype"}
    for e in (*KINDS.values(), *CLASSIFICATIONS.values()):
        assert e.title and e.what and e.todo and e.where, e.name
    assert lookup("Graph break") is lookup("graph-break") is KINDS["graph_break"]
    listing = explain()
    assert listing.returncode == 0, listing.stderr
    for name in (*KINDS, *CLASSIFICATIONS):
        assert f"  {name}: " in listing.stdout, name
    assert_fits(listing.stdout)


def test_explain_a_kind_says_what_to_do_within_80_columns():
    out = explain("graph_break")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert text.startswith("graph_break: torch.compile stopped its graph")
    assert "what to do:" in text and "fullgraph=True" in text
    assert "where graphdbg puts it: the line that broke the graph" in text
    assert_fits(out.stdout)
    assert "torch._inductor.config.fallback_random = True" in explain("random").stdout


def test_explain_a_misspelt_kind_is_one_line_and_exit_2():
    out = explain("graph-brake")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "graphdbg: no kind 'graph-brake'; did you mean graph_break? (`graphdbg explain` "
        "lists them)"]
    out = explain("zzz")
    assert out.returncode == 2 and "did you mean" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_torchs_generic_hint_lines_are_left_out_or_said_with_graphdbgs_command():
    from graphdbg.analysis.advice import what_to_do
    eager = ("Your code may result in an error when running in eager. Please double check that "
             "your code doesn't contain a similar error when actually running eager/uncompiled. "
             "You can do this by removing the `torch.compile` call, or by using "
             "`torch.compiler.set_stance(\"force_eager\")`. ")
    advice = what_to_do("compile_error", "\n".join([
        "Use `torch.cond` to express dynamic control flow.", eager,
        "This graph break is fundamental - it is unlikely that Dynamo will ever be able to "
        "trace through your code. Consider finding a workaround.",
        "This is likely to be a Dynamo bug. Please report an issue to PyTorch."]))
    assert advice.hint == "Use `torch.cond` to express dynamic control flow."
    assert advice.fixes == [
        "It may fail without torch.compile too: `graphdbg run --stance force_eager SCRIPT` "
        "runs it eagerly (torch.compiler.set_stance(\"force_eager\"))",
        "This is likely to be a Dynamo bug. Please report an issue to PyTorch."]
    # graphdbg's own hint, and a finding without one, pass as they are
    assert what_to_do("recompile", "Mark it dynamic.") == ("Mark it dynamic.", [], False)
    assert what_to_do("nan_inf", None) == (None, [], False)
