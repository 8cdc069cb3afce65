"""Recompiles sit at the line that installed the failed guard: one finding per
(recompiled code object, guard), counted up when the same guard fails again;
guards without a source line at the user's call; the recompile limit as one
error at the guard's line. Real torch.compile, in-process, backend "eager"."""

from __future__ import annotations


import pytest
import torch
import torch._dynamo
import torch.nn as nn

import graphdbg
from conftest import line_of, report_doc
from test_counts import assert_counts_are_torchs, torch_counts

HERE = __file__
in_process = pytest.mark.usefixtures("clean_torch")


def recompiles(run) -> list[dict]:
    return [d for d in report_doc(run)["diagnostics"] if d["kind"] == "recompile"]


def at(d: dict) -> tuple[str, int]:
    return d["file"], d["line"]


def scale_shift(x, scale, shift):
    y = x * scale  # MARK scale used
    return y + shift  # MARK shift used


@in_process
def test_two_python_numbers_are_two_findings_at_their_lines(tmp_path):
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(scale_shift, backend="eager", dynamic=False)
        x = torch.randn(4)
        f(x, 2.0, 1.0)
        f(x, 3.0, 1.0)  # MARK scale changes
        f(x, 3.0, 5.0)
        f(x, 4.0, 5.0)  # MARK scale again
    found = {at(d): d for d in recompiles(run)}
    scale = found.pop((HERE, line_of(HERE, "scale used")))
    shift = found.pop((HERE, line_of(HERE, "shift used")))
    assert not found, found
    # the same guard failing again counts up its finding
    assert (scale["count"], shift["count"]) == (2, 1)
    assert scale["severity"] == "warning"
    assert "scale_shift()" in scale["message"] and "scale changed 2 times" in scale["message"]
    assert "2.0 -> 3.0 -> 4.0" in scale["message"]
    assert shift["message"].endswith("shift changed: was 1.0, now 5.0")
    assert "torch.tensor(shift)" in shift["hint"] and "dynamic=True" in shift["hint"]
    # the user's call that recompiled is in the chain, above the guard's line
    lines = [(f["file"], f["line"]) for f in scale["stack"]]
    assert lines[-1] == (HERE, line_of(HERE, "scale used"))
    assert (HERE, line_of(HERE, "scale changes")) in lines


def normalize(x):
    return x / x.sum()


@in_process
def test_size_and_grad_mode_guards_sit_at_the_call(tmp_path):
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(normalize, backend="eager", dynamic=False)
        f(torch.randn(4))
        f(torch.randn(6))  # MARK new size
        with torch.no_grad():
            f(torch.randn(6))  # MARK no grad
    found = {at(d): d for d in recompiles(run)}
    size = found.pop((HERE, line_of(HERE, "new size")))
    grad = found.pop((HERE, line_of(HERE, "no grad")))
    assert not found, found
    def_line = normalize.__code__.co_firstlineno
    assert f"normalize() at test_placement_recompile.py:{def_line}" in size["message"]
    assert "size (dim 0) changed: was 4, now 6" in size["message"]
    assert "mark_dynamic(x, 0)" in size["hint"]
    assert "grad_mode" in grad["message"] and "no_grad" in grad["hint"]
    assert size["detail"]["guard_located"] is False


def checked_sum(x):
    return x.sum()


@in_process
def test_tensor_guard_names_the_property_that_changed(tmp_path):
    # torch lists one failure per cached version: the change is the failure of
    # the version that matched the most (here requires_grad, not the dtype)
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(checked_sum, backend="eager", dynamic=False)
        f(torch.ones(2))
        f(torch.ones(2, dtype=torch.float64))  # MARK dtype
        f(torch.ones(2, requires_grad=True))  # MARK requires_grad
    found = {at(d): d for d in recompiles(run)}
    assert "dtype changed: was Float, now Double" in found[(HERE, line_of(HERE, "dtype"))]["message"]
    rg = found[(HERE, line_of(HERE, "requires_grad"))]
    assert "requires_grad changed: was False, now True" in rg["message"]


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.1)
        self.use_bias = True

    def forward(self, x):
        h = self.fc(x)
        if self.use_bias:  # MARK use_bias read
            h = h + 1
        return self.drop(h)  # MARK dropout called


@in_process
def test_module_attribute_guards_sit_at_the_line_that_read_them(tmp_path):
    run = tmp_path / "x.run"
    model = Head()
    with graphdbg.capture(str(run)):
        m = torch.compile(model, backend="eager")
        x = torch.randn(2, 4)
        m(x)
        model.eval()
        m(x)  # MARK eval call
        model.use_bias = False
        m(x)
    found = {at(d): d for d in recompiles(run)}
    training = found.pop((HERE, line_of(HERE, "dropout called")))
    use_bias = found.pop((HERE, line_of(HERE, "use_bias read")))
    assert not found, found
    # `training` is read inside torch's Dropout: the user's call of it is the line
    assert "self.drop.training changed: was True, now False" in training["message"]
    assert "one compile per mode is expected" in training["hint"]
    assert (HERE, line_of(HERE, "eval call")) in [(f["file"], f["line"]) for f in training["stack"]]
    assert "self.use_bias changed: was True, now False" in use_bias["message"]
    assert all(not f["file"].startswith(torch.__path__[0]) for f in training["stack"])


LIBRARY = '''
import torch

class Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5

    def forward(self, x):
        return x * self.scale  # library guard
'''


@pytest.fixture
def library(site_package):
    return site_package("scalerlib", LIBRARY)


class UsesLibrary(nn.Module):
    def __init__(self, lib):
        super().__init__()
        self.inner = lib.Scaler()

    def forward(self, x):
        return self.inner(x) + 1  # MARK library called


@in_process
def test_guard_inside_a_library_sits_at_the_library_line(tmp_path, library):
    run = tmp_path / "x.run"
    model = UsesLibrary(library)
    with graphdbg.capture(str(run)):
        m = torch.compile(model, backend="eager")
        m(torch.ones(2))
        model.inner.scale = 0.7
        m(torch.ones(2))
    (d,) = recompiles(run)
    assert d["file"] == library.__file__ and d["code"] == "return x * self.scale  # library guard"
    assert "self.inner.scale changed: was 0.5, now 0.7" in d["message"]
    assert (HERE, line_of(HERE, "library called")) in [(f["file"], f["line"]) for f in d["stack"]]


def times(x, k):
    return x * k  # MARK k used


@in_process
def test_recompile_limit_is_one_error_at_the_guard_line(tmp_path):
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with torch._dynamo.config.patch(recompile_limit=2), graphdbg.capture(str(run)):
            f = torch.compile(times, backend="eager", dynamic=False)
            for k in range(4):
                f(torch.ones(2), k)
    doc = assert_counts_are_torchs(run, tc)
    (limit,) = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    (guard,) = [d for d in doc["diagnostics"] if d["severity"] == "warning"]
    assert at(limit) == at(guard) == (HERE, line_of(HERE, "k used"))
    # torch refuses the compile: an error of kind compile_error, no recompile
    assert (limit["kind"], guard["kind"]) == ("compile_error", "recompile")
    assert guard["count"] == tc.recompiles == 1
    assert "recompile_limit=2" in limit["message"] and "(k changed: was 1, now 2)" in limit["message"]
    assert "times()" in limit["message"] and "k is not one of 0, 1" in limit["message"]
    assert "run eagerly" in limit["message"]


@in_process
def test_recompile_limit_under_fullgraph_is_the_same_finding(tmp_path):
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with torch._dynamo.config.patch(recompile_limit=1), graphdbg.capture(str(run)):
            f = torch.compile(times, backend="eager", dynamic=False, fullgraph=True)
            f(torch.ones(2), 0)
            with pytest.raises(Exception, match="fullgraph"):
                f(torch.ones(2), 1)
    doc = assert_counts_are_torchs(run, tc)
    assert [(d["kind"], d["severity"], d["file"], d["line"]) for d in doc["diagnostics"]] == [
        ("compile_error", "error", HERE, line_of(HERE, "k used"))]
    assert doc["diagnostics"][0]["detail"]["recompile_limit"] is True


def shifted(x, shift):
    return (x + shift).relu()  # MARK inductor guard


@pytest.mark.inductor
@in_process
def test_guard_line_under_inductor(tmp_path):
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(shifted, dynamic=False)
        x = torch.randn(8)
        f(x, 0.5)
        out = f(x, 1.5)
    assert torch.equal(out, (x + 1.5).relu())
    (d,) = recompiles(run)
    assert at(d) == (HERE, line_of(HERE, "inductor guard"))
    assert "shift changed: was 0.5, now 1.5" in d["message"]
    assert [g["backend"] for g in report_doc(run)["graphs"]] == ["inductor", "inductor"]


@in_process
def test_a_module_compiled_whole_is_named_in_its_recompile(tmp_path):
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        m = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), backend="eager",  # MARK whole
                          dynamic=False)
        m(torch.randn(2, 4))
        m(torch.randn(3, 4))  # MARK whole call
    (d,) = recompiles(run)
    assert at(d) == (HERE, line_of(HERE, "whole call"))
    assert (f"recompile of Sequential (torch.compile) at test_placement_recompile.py:"
            f"{line_of(HERE, 'whole')}: argument 0 size (dim 0) changed: was 2, now 3") in d["message"]
    assert "mark_dynamic(x, 0)" in d["hint"]


def keyword_tensors(**kwargs):
    return kwargs["a"] * 2 + kwargs["n"]["b"]


def positional_tensors(*args):
    return args[0] * 2


@in_process
def test_tensors_passed_through_kwargs_and_args_get_the_clear_message(tmp_path):
    # as every transformers call passes its tensors: `kwargs['pixel_values']`
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            kw = torch.compile(keyword_tensors, backend="eager", dynamic=False)
            kw(a=torch.ones(4), n={"b": torch.ones(4)})
            kw(a=torch.ones(2), n={"b": torch.ones(2)})  # MARK kwargs size
            kw(a=torch.ones(2), n={"b": torch.ones(2, dtype=torch.float64)})  # MARK nested dtype
            pos = torch.compile(positional_tensors, backend="eager", dynamic=False)
            pos(torch.ones(4))
            pos(torch.ones(2))  # MARK args size
            m = torch.compile(nn.Linear(3, 3), backend="eager", dynamic=False)
            m(input=torch.ones(4, 3))
            m(input=torch.ones(2, 3))  # MARK module kwarg
    doc = assert_counts_are_torchs(run, tc)
    found = {at(d): d for d in recompiles(run)}
    assert all((d["kind"], d["severity"]) == ("recompile", "warning") for d in found.values())
    size = found.pop((HERE, line_of(HERE, "kwargs size")))
    dtype = found.pop((HERE, line_of(HERE, "nested dtype")))
    args = found.pop((HERE, line_of(HERE, "args size")))
    module = found.pop((HERE, line_of(HERE, "module kwarg")))
    assert not found, found
    assert size["message"].endswith("tensor 'kwargs['a']' size (dim 0) changed: was 4, now 2")
    assert "mark_dynamic(a, 0), on the tensor you pass as a=" in size["hint"]
    assert size["detail"]["guard_kind"] == "size"
    assert dtype["message"].endswith("tensor 'kwargs['n']['b']' dtype changed: was Float, "
                                     "now Double")
    assert "cast inputs to one dtype" in dtype["hint"]
    assert args["message"].endswith("argument 0 size (dim 0) changed: was 4, now 2")
    assert "mark_dynamic(x, 0)" in args["hint"]
    assert module["message"].endswith("tensor 'kwargs['input']' size (dim 0) changed: was 4, "
                                      "now 2")
    assert "mark_dynamic(input, 0), on the tensor you pass as input=" in module["hint"]
    assert not any("other changed" in d["message"] or "mismatch" in d["message"]
                   for d in doc["diagnostics"])


def nested_kwargs(x, **kwargs):
    return x + kwargs["extra"]["scale"]  # MARK nested scale


def optional_mask(x, mask=None):
    if mask is None:  # MARK mask checked
        return x + 1
    return x * mask


@in_process
def test_a_guard_on_none_says_what_it_was_and_is(tmp_path):
    # `mask is None` flipping: "was None, now 3", never "was is None"
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            f = torch.compile(optional_mask, backend="eager", dynamic=False)
            f(torch.ones(2))
            f(torch.ones(2), 3)  # MARK mask given
    assert tc.recompiles == 1
    doc = assert_counts_are_torchs(run, tc)
    (d,) = recompiles(run)
    assert (d["kind"], d["severity"], d["file"], d["line"]) == (
        "recompile", "warning", HERE, line_of(HERE, "mask checked"))
    assert (HERE, line_of(HERE, "mask given")) in [(f["file"], f["line"]) for f in d["stack"]]
    assert d["message"].endswith("mask changed: was None, now 3")
    assert "is None" in d["detail"]["guard"] and "whether mask is None" in d["hint"]
    assert not any("was is" in x["message"] for x in doc["diagnostics"])


@in_process
def test_a_tensor_argument_that_becomes_none(tmp_path):
    # compiled for a tensor, called with None (torch: "expected type of 'mask'
    # to be a tensor type"), then the other way round ("mask is None")
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            f = torch.compile(optional_mask, backend="eager", dynamic=False)
            f(torch.ones(2), torch.ones(2))
            f(torch.ones(2))  # MARK mask dropped
    doc = assert_counts_are_torchs(run, tc)
    (d,) = recompiles(run)
    assert (d["kind"], d["severity"], d["file"], d["line"]) == (
        "recompile", "warning", HERE, line_of(HERE, "mask dropped"))
    assert d["message"].endswith("mask changed: was a tensor, now None")
    assert "whether mask is None" in d["hint"]
    assert d["count"] == tc.recompiles == 1
    assert doc["run"]["internal_errors"] == []


@in_process
def test_a_python_value_inside_kwargs_is_read_from_the_frame(tmp_path):
    run = tmp_path / "x.run"
    with torch_counts() as tc:
        with graphdbg.capture(str(run)):
            f = torch.compile(nested_kwargs, backend="eager", dynamic=False)
            f(torch.ones(2), extra={"scale": 0.5})
            f(torch.ones(2), extra={"scale": 2.0})  # MARK scale in kwargs
    assert_counts_are_torchs(run, tc)
    (d,) = recompiles(run)
    assert (d["kind"], d["severity"], d["file"], d["line"]) == (
        "recompile", "warning", HERE, line_of(HERE, "nested scale"))
    assert d["message"].endswith("kwargs['extra']['scale'] changed: was 0.5, now 2.0")


def times_s(x, s):
    return x * s  # MARK s used


@in_process
def test_a_python_number_named_like_a_symbol_is_a_number(tmp_path):
    # "s == 0.5": the guard's sides apart, not "s0.5" (read as torch's size symbol s0)
    run = tmp_path / "s.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(times_s, backend="eager", dynamic=False)
        f(torch.ones(3), 0.5)
        f(torch.ones(3), 2.0)
    (d,) = recompiles(run)
    assert at(d) == (HERE, line_of(HERE, "s used"))
    assert d["detail"]["guard_kind"] == "value"
    assert "torch.tensor(s)" in d["hint"] and "mark_dynamic" not in d["hint"]


import dataclasses


@dataclasses.dataclass
class Built:
    loss: torch.Tensor
    scale: float

    def __post_init__(self):
        print(end="")  # a graph break: Dynamo compiles the generated __init__ as its own frame


def build(x, s):
    return Built(x.sum() * s, s)  # MARK built


@in_process
def test_a_generated_init_is_named_after_its_class_at_the_line_that_built_it(tmp_path):
    run = tmp_path / "d.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(build, backend="eager")
        for s in (0.5, 2.0):
            f(torch.ones(3), s)
    (d,) = recompiles(run)
    names = [fr["name"] for fr in d["detail"]["frames"]]
    assert f"Built.__init__() at test_placement_recompile.py:{line_of(HERE, 'built')}" in names
    assert not any("<string>" in n for n in names) and "<string>" not in d["message"]
    # its graphs too (2.13 makes one of the __init__ frame, 2.15 none), and the
    # compile times of its frame when a graph of it was named
    doc = report_doc(run)
    built = ("Built.__init__", HERE, line_of(HERE, "built"))
    graphs = {(g["function"], g["file"], g["line"]) for g in doc["graphs"]}
    assert not [g for g in graphs if g[1].startswith("<")]
    if built in graphs:
        assert not [c for c in doc["compile_times"] if (c["file"] or "").startswith("<")]
        assert built in {(c["function"], c["file"], c["line"]) for c in doc["compile_times"]}


class Config:
    def __init__(self):
        self.problem_type = None  # as transformers' PretrainedConfig sets it


class LazilyConfigured(nn.Module):
    """As transformers' sequence classifiers: the first call fills in its config."""

    def __init__(self):
        super().__init__()
        self.config = Config()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if self.config.problem_type is None:  # MARK lazy config
            self.config.problem_type = "single_label_classification"
        return self.fc(x)


class DefaultConfig:
    problem_type = None  # a class default: the object sets its own on the first call


class LazilyConfiguredByDefault(LazilyConfigured):
    def __init__(self):
        super().__init__()
        self.config = DefaultConfig()


@in_process
@pytest.mark.parametrize("model,kind,was", [
    (LazilyConfigured, "value", "None"),                            # guard: `... is None`
    (LazilyConfiguredByDefault, "attribute", "the class's default"),  # ___dict_contains
], ids=["instance-attribute", "class-default"])
def test_an_attribute_the_first_call_fills_in_says_to_set_it_before_compiling(tmp_path, model,
                                                                              kind, was):
    run = tmp_path / "p.run"
    with graphdbg.capture(str(run)):
        compiled = torch.compile(model(), backend="eager")
        compiled(torch.ones(2, 4))
        compiled(torch.ones(2, 4))
    (d,) = recompiles(run)
    assert at(d) == (HERE, line_of(HERE, "lazy config"))
    assert d["detail"]["guard_kind"] == kind
    assert f"self.config.problem_type changed: was {was}, now " in d["message"]
    assert "Set it before compiling (self.config.problem_type = 'single_label_classification'" \
        in d["hint"]
    assert "torch.where" not in d["hint"] and "optional argument" not in d["hint"]


def normalised(h):
    scale = h.abs().max().item()  # MARK item breaks
    if scale > 0.1:  # MARK scale compared
        h = h / scale
    return h + 1


@in_process
def test_a_number_carried_across_a_graph_break_is_named_by_its_line(tmp_path):
    """`.item()` breaks the graph; the code after the break is compiled for
    the number it was handed (Dynamo's `___stack0`): a new number recompiles
    it. The finding names the value by the break's line, never `___stack0`,
    and its hint ties the recompiles to the break."""
    run = tmp_path / "x.run"
    with graphdbg.capture(str(run)):
        f = torch.compile(normalised, backend="eager")
        for k in (2.0, 3.0, 4.0):
            f(torch.full((4,), k))
    (d,) = recompiles(run)
    assert at(d) == (HERE, line_of(HERE, "scale compared"))
    made = f"the value made at test_placement_recompile.py:{line_of(HERE, 'item breaks')} " \
        "before the graph break changed"
    assert made in d["message"], d["message"]
    assert "___stack" not in d["message"] + d["hint"]
    assert "Keep the value a tensor" in d["hint"] and "torch.tensor(" not in d["hint"]
