"""The caret's span (graphdbg.hooks.placement.columns): from a live frame, a
traceback's FrameSummary, torch's stack_trace text and an FX node; stored with
each frame, and drawn under the span by the report, --json and the TUI.

A span is 0-based character offsets into the line's code without its
indentation: ``code[col:end_col]`` is what the caret underlines."""

from __future__ import annotations

import traceback

import pytest
import torch
import torch._dynamo

import graphdbg
from conftest import line_of, report_doc, report_text
from graphdbg.core.format import caret
from graphdbg.core.sourcemap import Frame, code_line, parse_traceback
from graphdbg.hooks.placement import columns, stack
from graphdbg.hooks.placement.nodes import node_source, user_frames
from graphdbg.runfile.query import Run
from graphdbg.runfile.writer import RunWriter
from graphdbg.tui.model import run as tui

HERE = __file__


def underlined(frame: Frame) -> str | None:
    """What the frame's caret underlines; None: the whole line."""
    code = code_line(frame.file, frame.line)
    return code[frame.col:frame.end_col] if frame.col is not None else None


def caller() -> Frame:
    return stack.user_frame(1)   # the frame that called caller(), at that call


def test_a_live_frame_is_at_the_call_it_makes():
    here = [caller()][0]  # a comment after the code
    assert underlined(here) == "caller()"
    there = [caller(
    )][0]
    assert underlined(there) == "caller("   # over two lines: to this one's end
    whole = caller()
    assert underlined(whole) == "caller()"  # the call, not `whole = `
    caller()   # the whole line's code: no span
    assert stack.user_stack()[-1].col is not None


def divide(a, b, zero):
    return a + b / zero   # MARK divide


def test_a_traceback_summary_gives_its_span():
    try:
        divide(1, 2, 0)
    except ZeroDivisionError as e:
        (inner,) = [f for f in traceback.extract_tb(e.__traceback__) if f.name == "divide"]
    (frame,) = user_frames([inner])
    assert underlined(frame) == "b / zero"


def spans_lines():
    return 1 + sum((1,  # MARK first of two
                    2))


def test_torch_summaries_have_no_end_line_the_code_decides():
    # torch makes FrameSummary(colno=, end_colno=) without end_lineno
    line = line_of(HERE, "divide")
    raw = code_line(HERE, line)
    full = open(HERE).read().splitlines()[line - 1]
    col = full.index("b / zero")
    one = traceback.FrameSummary(HERE, line, "divide", lookup_line=False,
                                 colno=col, end_colno=col + len("b / zero"))
    c, e = columns.of_summary(one)
    assert raw[c:e] == "b / zero"
    # columns that end on a later line: to the end of this one
    line = line_of(HERE, "first of two")
    full = open(HERE).read().splitlines()[line - 1]
    many = traceback.FrameSummary(HERE, line, "spans_lines", lookup_line=False,
                                  colno=full.index("sum("), end_colno=len("                    2))") - 1)
    c, e = columns.of_summary(many)
    assert code_line(HERE, line)[c:e] == "sum((1,"
    assert columns.of_summary(traceback.FrameSummary(HERE, line, "f", lookup_line=False)) \
        == (None, None)


def _nodes(fn, *args) -> list[torch.fx.Node]:
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*args)
    return [n for gm in graphs for n in gm.graph.nodes]


def chain(x):
    y = torch.sin(x) + \
        torch.cos(x)  # MARK cos
    return (x @ x).relu() * y.sum()  # MARK chain


SQUARE = lambda x: x @ x  # MARK square


@pytest.mark.usefixtures("clean_torch")
def test_an_fx_node_sits_at_its_own_expression(tmp_path):
    w = RunWriter(str(tmp_path / "n.run"))
    spans = {}
    for n in _nodes(chain, torch.randn(3, 3)) + _nodes(SQUARE, torch.randn(2, 2)):
        if n.op in ("call_function", "call_method"):
            fid, *_ = node_source(w, n)
            f = w.frame(fid)
            spans[(f["line"], n.name)] = (f["code"][f["col"]:f["end_col"]]
                                          if f["col"] is not None else None)
    w.close()
    cos, ret, lam = line_of(HERE, "cos"), line_of(HERE, "chain"), line_of(HERE, "square")
    # torch's own carets run on to the end of the line; each node gets its expression
    assert spans == {
        (cos - 1, "sin"): "torch.sin(x)",
        (cos, "cos"): None,                          # the whole line's code
        (cos - 1, "y"): "torch.sin(x) + \\",         # over two lines: to this one's end
        (ret, "matmul"): "x @ x",
        (ret, "relu"): "(x @ x).relu()",
        (ret, "sum_1"): "y.sum()",
        (ret, "mul"): "(x @ x).relu() * y.sum()",
        (lam, "matmul"): "x @ x"}


def lambda_program():
    f = torch.compile(lambda x: x @ x, backend="eager")
    f(torch.randn(2, 3))


@pytest.mark.usefixtures("clean_torch")
def test_the_issue_case_underlines_the_expression_in_every_view(tmp_path):
    run_file = tmp_path / "x.run"
    with pytest.raises(Exception):
        with graphdbg.capture(str(run_file)):
            lambda_program()
    doc = report_doc(run_file)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "compile_error"]
    assert d["code"] == 'f = torch.compile(lambda x: x @ x, backend="eager")'
    assert d["code"][d["col"]:d["end_col"]] == "x @ x" and d["cell"] is None
    assert (d["stack"][-1]["col"], d["stack"][-1]["end_col"]) == (d["col"], d["end_col"])
    # the report: the caret under x @ x, not under the whole line
    lines = report_text(run_file).splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.endswith(d["code"]))
    assert lines[i + 1].strip() == "^^^^^"
    assert lines[i + 1].index("^") == lines[i].index(d["code"]) + d["col"]
    # the TUI's problem view, on the snapshot's full line
    with Run(str(run_file)) as r:
        (f,) = r.findings(kind="compile_error")
        detail = tui.finding_detail(f, r.source(f.file))
    (mark,) = [ln.text for ln in detail if ln.style == "caret"]
    (line,) = [ln.text for ln in detail if ln.style == "current"]
    assert mark.strip() == "^^^^^" and line[mark.index("^"):].startswith("x @ x")


def test_carets_fall_back_to_the_whole_line():
    assert caret("y = f(x)  # note") == "^^^^^^^^"
    assert caret("y = f(x)  # note", 4, 8) == "    ^^^^"
    assert caret("y = '日本' + f(x)", 11, 15) == " " * 13 + "^^^^"   # wide characters: two cells
    assert caret("y = f(x)", 4, 99) == "^^^^^^^^"   # a span the code does not have
    lines = ["a = 1", "    y = f(x)  # note"]
    marks = lambda out: [ln.text for ln in out if ln.style == "caret"]  # noqa: E731
    assert marks(tui.source_excerpt(lines, 2, caret=True, code="y = f(x)  # note",
                                    col=4, end_col=8)) == [" " * 12 + "    ^^^^"]
    # the snapshot's line is not the finding's (the file changed): the whole line
    assert marks(tui.source_excerpt(lines, 2, caret=True, code="y = g(x)", col=4,
                                    end_col=8)) == [" " * 12 + "^^^^^^^^"]
    # no snapshot: under the finding's own code
    assert marks(tui.source_excerpt([], 2, caret=True, code="y = f(x)", col=4, end_col=8)) \
        == [" " * 8 + "    ^^^^"]


def branchy(x, table, name):
    if x.sum() > 0:  # MARK branch
        x = x * 2
    peak = x.abs().max().item()  # MARK item
    bucket = hash(name.encode("utf-8")) % table.shape[0]  # MARK skipped call
    return peak, bucket


def test_torch_text_carets_are_narrowed_to_the_expression_at_the_caret():
    # torch writes its frames' carets from the instruction's column to the end
    # of the line (it gives them no end line), as a graph break's user stack has them
    def torch_text(mark: str, start: str) -> str:
        line = line_of(HERE, mark)
        full = open(HERE).read().splitlines()[line - 1]
        code = full.strip()
        col = code.index(start)
        return (f'  File "{HERE}", line {line}, in branchy\n    {code}\n'
                f'    {" " * col}{"^" * (len(code) - col)}\n')

    def narrowed(mark: str, start: str) -> str:
        ((f, code),) = columns.narrow(parse_traceback(torch_text(mark, start)))
        return code[f.col:f.end_col]

    assert narrowed("branch", "x.sum()") == "x.sum() > 0"                   # the if's test
    assert narrowed("item", "x.abs()") == "x.abs().max().item()"            # the outermost call
    assert narrowed("skipped call", "hash(") == 'hash(name.encode("utf-8"))'  # not the % around it


def test_a_long_hint_is_cut_after_a_sentence_or_a_word_and_says_so():
    from graphdbg.core.format import clip
    assert clip("short", 400) == "short"
    text = "First sentence here. Second one is long enough to pass the limit of it"
    assert clip(text, 36) == "First sentence here. …"
    assert clip(text, 45) == "First sentence here. Second one is long…"
    assert clip("word " * 20, 23) == "word word word word…"
    assert all(len(clip(text, n)) <= n + 2 for n in range(5, 80))
