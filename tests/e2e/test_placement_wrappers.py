"""Decorators' wrappers are never "the user's line" (issue 30).

A ``functools.wraps`` wrapper (transformers wraps every model's forward in two
or three: ``can_return_tuple``, ``merge_with_config_defaults``,
``capture_outputs``; users time, log or check theirs) runs between a call and
the function it wraps. The placement layer (hooks/placement/internal.py)
finds such wrappers in the source and counts them as internal where they
only pass the call on; a graph input never sits in one (Dynamo wraps an
argument when something first reads it, and a wrapper reading its
``**kwargs`` is no use of the input).

What a user expects, and what is checked here on real programs under
`graphdbg run`:
- a transformers model compiled whole: the input sits at the model's own
  line that uses it (``LlamaForCausalLM.forward`` passing it to
  ``self.model``), or, when only the wrappers touched it
  (``torch.compile(model.model)``), at the ``def`` of the forward they wrap,
  never at ``output_capturing.py``'s ``recordable_keys = {``;
- the user's own decorator on a module's forward, compiled whole: the graph
  is named after the module at its ``torch.compile`` line (not ``wrapper`` at
  the ``@functools.wraps`` line), its input at the forward's ``def``;
- the user's decorator over a compiled function: a recompile sits at the
  user's call, not at the wrapper's ``return fn(*args, **kwargs)``.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from conftest import SUPPORT, line_of, report_json

PROGRAMS = SUPPORT / "placement"
HF, DECORATED = PROGRAMS / "hf_wrapped.py", PROGRAMS / "decorated.py"


def inputs(graph: dict) -> dict[str, dict]:
    """The graph's inputs that are not a module's parameters or buffers."""
    return {n["name"]: n for n in graph["nodes"] if n["op"] == "placeholder"
            and "_parameters_" not in n["name"] and "_buffers_" not in n["name"]}


def def_line(fn) -> tuple[str, int]:
    """(file, line) of the ``def`` of the function under ``fn``'s decorators."""
    fn = inspect.unwrap(fn)
    lines, first = inspect.getsourcelines(fn)
    offset = next(i for i, text in enumerate(lines) if text.lstrip().startswith("def "))
    return fn.__code__.co_filename, first + offset


# -- the rule, on source ------------------------------------------------------------------

def test_which_functions_are_wrappers_and_where_they_pass_the_call_on(tmp_path):
    from graphdbg.hooks.placement.internal import is_passthrough, wrapper_at, wrappers_in
    src = tmp_path / "decos.py"
    src.write_text(textwrap.dedent('''\
        import functools

        def traced(fn):
            @functools.wraps(fn)
            def wrapper(self, x):
                x = x.float()
                return fn(self, x)

            return wrapper

        def timed(fn):
            def inner(*args, **kw):
                out = fn(
                    *args, **kw)
                return out
            return inner

        def scaled(helper):
            def run(x):
                return helper(x) * 2
            return run

        def plain(fn, *args):
            return fn(*args)
        '''))
    path = str(src)
    assert [(w.name, w.first, w.wrapped, sorted(w.forwards)) for w in wrappers_in(path)] == [
        ("wrapper", 4, "fn", [7]), ("inner", 12, "fn", [13, 14])]
    assert is_passthrough(path, 7, "wrapper") and not is_passthrough(path, 6, "wrapper")
    assert is_passthrough(path, 13, "inner") and not is_passthrough(path, 15, "inner")
    # a closure that does its own work with what it calls is no wrapper, nor is a
    # top-level function that calls its argument
    assert wrapper_at(path, 20, "run") is None and not is_passthrough(path, 24, "plain")
    # only the function of that name counts: a frame's (file, line, function)
    assert wrapper_at(path, 7, "traced") is None


def test_unwrap_follows_wraps_and_closures_to_the_def():
    from graphdbg.hooks.placement.internal import def_line as placed_def, unwrap
    from transformers import LlamaModel
    fn = unwrap(LlamaModel.forward)
    assert fn is inspect.unwrap(LlamaModel.forward)
    file, line, name = placed_def(fn)
    assert (file, line) == def_line(LlamaModel.forward) and name == "LlamaModel.forward"


# -- transformers' wrappers ----------------------------------------------------------------

@pytest.fixture(scope="module")
def hf(runs):
    return runs.program(HF).ok()


def test_a_transformers_models_input_is_not_placed_in_its_decorators(hf):
    from transformers import LlamaModel
    doc = hf.doc
    assert doc["run"]["internal_errors"] == []
    assert [d for d in doc["diagnostics"] if d["severity"] != "info"] == []
    by_name = {g["function"]: g for g in doc["graphs"]}
    assert set(by_name) == {"LlamaForCausalLM (torch.compile)", "LlamaModel (torch.compile)",
                            "forward"}
    for g in doc["graphs"]:
        for n in g["nodes"]:
            if n["op"] == "placeholder":
                # no graph input in a decorator's wrapper (output_capturing.py,
                # generic.py's `wrapper`s): before, `recordable_keys = {`
                assert n["function"] != "wrapper", (g["function"], n)
    # the model compiled whole: its forward's line that passes the input on
    (ids,) = inputs(by_name["LlamaForCausalLM (torch.compile)"]).values()
    assert Path(ids["file"]).name == "modeling_llama.py" and ids["function"] == "forward"
    assert ids["code"].startswith("outputs: BaseModelOutputWithPast = self.model(")
    # the inner model compiled whole: only the wrappers read the input, so it
    # sits at the def of the forward they wrap
    (ids,) = inputs(by_name["LlamaModel (torch.compile)"]).values()
    assert (ids["file"], ids["line"]) == def_line(LlamaModel.forward)
    assert ids["code"] == "def forward("
    # the user's module around the model: the model's line, the user's line in the stack
    (ids,) = inputs(by_name["forward"]).values()
    assert (Path(ids["file"]).name, ids["function"]) == ("modeling_llama.py", "forward")
    assert by_name["forward"]["line"] == line_of(HF, "classifier def")


def test_transformers_graphs_are_named_at_the_users_compile_line(hf):
    lines = {g["function"]: (g["file"], g["line"]) for g in hf.doc["graphs"]}
    assert lines["LlamaForCausalLM (torch.compile)"] == (str(HF), line_of(HF, "compile lm"))
    assert lines["LlamaModel (torch.compile)"] == (str(HF), line_of(HF, "compile base"))


# -- the user's own decorators -------------------------------------------------------------

@pytest.fixture(scope="module")
def decorated(runs):
    return runs.program(DECORATED).ok()


def test_a_decorated_forward_compiled_whole_is_named_and_placed_past_its_wrapper(decorated):
    doc = report_json(decorated.run, decorated.dir)    # the CLI's --json, as a user reads it
    assert doc["run"]["internal_errors"] == []
    tagger = next(g for g in doc["graphs"] if g["function"] == "Tagger (torch.compile)")
    assert (tagger["file"], tagger["line"]) == (str(DECORATED), line_of(DECORATED, "compile tagger"))
    (ids,) = inputs(tagger).values()
    # before: at the wrapper's `assert ids.dim() == 2`
    assert (ids["file"], ids["line"]) == (str(DECORATED), line_of(DECORATED, "tagger def"))
    weights = {n["line"] for n in tagger["nodes"] if "_parameters_" in n["name"]}
    assert weights == {line_of(DECORATED, "tagger body")}
    assert [g["function"] for g in doc["graphs"]].count("wrapper") == 0


def test_a_recompile_through_a_users_decorator_sits_at_the_users_call(decorated):
    doc = report_json(decorated.run, decorated.dir)
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "recompile"]
    # before: at the wrapper's `return fn(*args, **kwargs)`
    assert (d["file"], d["line"]) == (str(DECORATED), line_of(DECORATED, "step recompile"))
    assert [(f["file"], f["line"]) for f in d["stack"]] == [
        (str(DECORATED), line_of(DECORATED, "step recompile"))]
    assert all(f["line"] != line_of(DECORATED, "logged forwards") for f in d["stack"])
