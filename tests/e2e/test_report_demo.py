"""What `make demo` shows (issue 33): samples/demo.py's report at 80
columns opens with the miscompiled tanh at its line, then the print's graph
break and the recompile, each with what to do, and ends with the commands
to type next; about 40 lines. The run is the one test_samples checks
(shared: `runs.golden`, aot_eager as `make demo` runs it).

Also: the ways out graphdbg names for the graph breaks a newcomer meets
first hold on this torch (real torch.compile, the eager backend)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from rich.cells import cell_len

from conftest import ENV, ROOT, SAMPLES, group, marked

DEMO = SAMPLES / "demo.py"


def report(run, *flags: str, width: int = 80) -> list[str]:
    """`graphdbg report` in a subprocess, not a terminal, from the checkout
    (where `make demo` runs it)."""
    out = subprocess.run([sys.executable, "-m", "graphdbg", "report", *flags, str(run)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**ENV, "COLUMNS": str(width)}, check=True).stdout
    lines = out.splitlines()
    assert all(cell_len(ln) <= width for ln in lines), [ln for ln in lines if cell_len(ln) > width]
    assert all(ln == ln.rstrip() for ln in lines)
    return lines


@group("demo")
def test_the_demo_report_opens_with_the_miscompile_at_its_line(runs):
    r = runs.golden("demo").ok()
    lines = report(r.run)
    # `make demo` prints the same report with two lines of header and three of
    # next commands (its run file is ./demo.run; here a longer path wraps)
    blank = [i for i, ln in enumerate(lines) if not ln]
    body = lines[blank[0]:blank[-1] + 1]
    assert 2 + len(body) + 3 <= 45, "\n".join(lines)
    heads = [(i, ln) for i, ln in enumerate(lines) if ln[:2] in ("✖ ", "▲ ", "● ")]
    tanh, brk, again = marked(DEMO, "divergence"), marked(DEMO, "graph_break"), \
        marked(DEMO, "recompile")
    assert [ln for _, ln in heads] == [
        f"✖ divergence samples/demo.py:{tanh} in forward  ×2",
        f"▲ graph_break samples/demo.py:{brk} in forward  ×2",
        f"▲ recompile samples/demo.py:{again} in main  ×2"]
    first = heads[0][0]
    # the line, the caret under torch.tanh(h), the node and its verdict, what to do
    assert re.match(rf"^ +{tanh} │ h = torch\.tanh\(h\)", lines[first + 1])
    assert lines[first + 2].strip() == "^" * len("torch.tanh(h)")
    assert lines[first + 2].index("^") == lines[first + 1].index("torch.tanh")
    block = " ".join(" ".join(lines[first:heads[1][0]]).split())
    assert "Compiled torch.tanh differs from eager by up to" in block
    assert "at node h, where the op alone, on eager's inputs, is wrong too" in block
    assert "sides with eager" in block
    assert "what to do: Report it to FaultyBackend's authors, with this line and op." in block
    assert 'meanwhile, backend="aot_eager" was right here' in block
    # the break and the recompile, each with its way out
    text = " ".join(" ".join(lines).split())
    assert "what to do: print() cannot go into a graph" in text
    assert "what to do: A tensor's shape changed between calls" in text
    assert "random" not in text          # not the only divergence, nor any
    # the commands to type next; the last line names --full
    # (a long path is folded at the edge: compared without blanks)
    tail = "".join("".join(lines[blank[-1]:]).split())
    assert "".join(f"next: graphdbg tui {r.run} (browse) · graphdbg explain divergence"
                   .split()) in tail
    assert tail.endswith("".join(f"all tables (compile time, slowest ops): graphdbg report "
                                 f"--full {r.run}".split()))
    # --full adds the tables, within 80 columns too
    full = report(r.run, "--full")
    assert any(ln.startswith("Compile time (") for ln in full)
    assert any(ln.startswith("Slowest graph nodes") for ln in full)


def test_make_demo_runs_the_demo_this_file_tests():
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\ndemo: ", 1)[1].split("\n\n", 1)[0]
    assert "graphdbg run -q -o demo.run samples/demo.py --backend aot_eager" in recipe
    assert "graphdbg report demo.run" in recipe


# -- the ways out the report names hold ---------------------------------------------------

def _breaks(fn, *args, **config) -> list[str]:
    """The graph breaks torch.compile(fn, backend="eager") meets, under ``config``."""
    from torch._dynamo.utils import counters
    counters.clear()
    with torch._dynamo.config.patch(**config):
        torch.compile(fn, backend="eager")(*args)
    torch._dynamo.reset()
    return [k.split("\n")[0] for k in counters["graph_break"]]


def printed(x):
    y = x.sin()
    print("mean", y.mean())
    return y.cos()


def printed_when_eager(x):
    y = x.sin()
    if not torch.compiler.is_compiling():
        print("mean", y.mean())
    return y.cos()


def printed_item(x):
    y = x.sin()
    print(f"norm {y.norm().item():.3f}")
    return y.cos()


def item_in_math(x):
    y = x.sin()
    return y.cos() * y.sum().item()


@pytest.mark.usefixtures("clean_torch")
def test_the_ways_out_of_a_print_and_an_item_break_hold(capsys):
    x = torch.randn(4, 3)
    assert _breaks(printed, x) == ["Failed to trace builtin operator"]
    # "or guard it: if not torch.compiler.is_compiling(): print(...)"
    assert _breaks(printed_when_eager, x) == []
    # "or print after the graph runs (tensors, numbers and strings only)"
    assert _breaks(printed, x, reorderable_logging_functions={print}) == []
    # ".item()": a break; capture_scalar_outputs keeps it in the graph...
    assert _breaks(item_in_math, x) == \
        ["Unsupported Tensor.item() call with capture_scalar_outputs=False"]
    assert _breaks(item_in_math, x, capture_scalar_outputs=True) == []
    # ... "(printing or formatting the number still breaks it)"
    assert _breaks(printed_item, x, capture_scalar_outputs=True) == \
        ["Failed to trace builtin operator"]
    capsys.readouterr()


@group("graph_breaks")
def test_the_breaks_graphdbg_rewords_are_the_ones_torch_names(runs):
    # graphdbg's advice is keyed by torch's graph-break ids: the graph_breaks
    # sample (shared run) meets each with the cause the advice is about
    from graphdbg.analysis.advice import what_to_do
    from graphdbg.runfile.details import parse
    doc = runs.golden("graph_breaks").ok().doc
    got = {}
    for d in doc["diagnostics"]:
        advice = what_to_do(d["kind"], d["hint"], parse(d["kind"], d["detail"]))
        got.setdefault(d["detail"]["gb_id"], (d["code"], advice))
    code, advice = got["gb0059"]
    assert code.startswith("print(") and advice.hint.startswith("print() cannot go into a graph")
    code, advice = got["gb0124"]
    assert ".item()" in code and advice.hint.startswith("`.item()` turns a tensor")
    code, advice = got["gb0170"]
    assert code.startswith("if ") and advice.hint.startswith("A Python `if` on a tensor's value")
    code, advice = got["gb0007"]      # zlib.crc32: a builtin, C code
    assert "zlib.crc32" in code and advice.hint.startswith("torch.compile cannot look inside")
