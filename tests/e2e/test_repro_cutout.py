"""`graphdbg repro` of graph breaks and recompiles: the function with the
break or the guard cut out of the program's source snapshot (with the
self-contained helpers it calls and its torch/stdlib imports), called with
arguments rebuilt from Dynamo's guards, checked in a fresh python; a function
that depends on the program (a method, a global) refused, naming what.

One program of different shapes (tests/support/cutout_cases.py), run once for
the module; the samples' golden runs are shared with test_repro.py."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from conftest import SUPPORT, graphdbg, group, python

PROGRAM = SUPPORT / "cutout_cases.py"
ALLOWED = {"__future__", "torch", "math", "logging", "sys", "re", "zlib"}


@pytest.fixture(scope="module")
def cases(runs):
    return runs.program(PROGRAM).ok().run


def number(run: Path, kind: str, function: str) -> int:
    """The finding's number (the report's order) by kind and function."""
    from graphdbg.runfile.query import Run
    with Run(str(run)) as r:
        for i, f in enumerate(r.findings(), 1):
            name = getattr(f.detail, "function", None) if kind == "recompile" else f.function
            if f.kind == kind and name == function:
                return i
    raise AssertionError(f"no {kind} finding in {function}")


def repro(run: Path, n: int, out: Path) -> subprocess.CompletedProcess:
    return graphdbg("repro", run, n, "-o", out, cwd=out.parent, timeout=180)


def defs(script: Path) -> set[str]:
    return {n.name for n in ast.parse(script.read_text()).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def imports(script: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


# (kind, the function the finding names, the program's functions the repro holds)
REPRODUCED = {
    "print": ("graph_break", "shout", {"shout", "_center"}),      # + a helper, + import math
    "item_in_helper": ("graph_break", "report", {"report"}),     # inlined helper; `tag` unread
    "shape": ("recompile", "widen", {"widen"}),                  # dynamic=False, (4,8) -> (6,8)
    "int_arg": ("recompile", "repeat", {"repeat"}),              # n == 2 -> 3
    "dynamic_dim": ("recompile", "pooled", {"pooled"}),          # dynamic=True, size 1 specialised
}
SCRIPT_OWN = {"_make", "_Log", "_key", "_main", "_guard"}  # the script's own, named apart


@pytest.mark.parametrize("case", list(REPRODUCED))
def test_cut_out_and_reproduced(cases, tmp_path, case):
    kind, function, held = REPRODUCED[case]
    out = tmp_path / "bug"
    p = repro(cases, number(cases, kind, function), out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "REPRODUCED" in p.stdout and "reproduced in" in p.stdout, p.stdout
    script = out / "repro.py"
    assert not (out / "attempt").exists() and not (out / "inputs.safetensors").exists()
    readme = (out / "README.md").read_text().splitlines()
    assert len(readme) == 2 and readme[1].startswith("Run it: `python repro.py`"), readme
    assert f"{function}() cut out of the file" in readme[0], readme[0]
    # the function (and its helpers) only, never the program's module
    assert defs(script) - SCRIPT_OWN == held, defs(script)
    assert imports(script) <= ALLOWED, imports(script)
    assert "cutout_cases" not in {i for i in imports(script)}
    if kind == "recompile":
        assert "recompiled: guard failed:" in p.stdout, p.stdout
    else:
        assert "graph break at line" in p.stdout, p.stdout
    if case == "print":  # fixed in the repro: gone, exit 0
        fixed = out / "fixed"
        fixed.mkdir()
        text = script.read_text().replace('print("shout:", y.shape)', "pass")
        (fixed / "repro.py").write_text(text)
        done = python("repro.py", cwd=fixed, timeout=120)
        assert done.returncode == 0 and "problem is gone" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("function, why", [
    ("clipped", "clipped uses LIMIT (a global variable of your program)"),
    ("forward", "forward is a method of Head (an nn.Module): it uses self.fc"),
])
def test_refused_naming_what_it_depends_on(cases, tmp_path, function, why):
    out = tmp_path / "bug"
    p = repro(cases, number(cases, "graph_break", function), out)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "cannot be cut out" in p.stderr and why in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


@group("graph_breaks")
def test_sample_break_with_a_string_argument(runs, tmp_path):
    """graph_breaks.py's zlib.crc32 break: `name` rebuilt from Dynamo's
    EQUALS_MATCH guard, `import zlib` carried."""
    run = runs.golden("graph_breaks").run
    out = tmp_path / "bug"
    p = repro(run, number(run, "graph_break", "hashed_lookup"), out)
    assert p.returncode == 0, p.stdout + p.stderr
    text = (out / "repro.py").read_text()
    assert "import zlib" in text and "'user_country'" in text
    assert defs(out / "repro.py") - SCRIPT_OWN == {"hashed_lookup"}


@group("recompiles")
def test_sample_module_recompile_refused(runs, tmp_path):
    run = runs.golden("recompiles").run
    p = repro(run, number(run, "recompile", "forward"), tmp_path / "bug")
    assert p.returncode == 1, p.stderr
    assert "forward is a method of Classifier (an nn.Module)" in p.stderr, p.stderr


# -- the cut itself, on source text (no torch, no run) ---------------------------------

SOURCE = '''
import os
import numpy as np
import torch.nn.functional as F
from torch import nn
from .sibling import thing
SCALE = 2.0


def helper(x):
    return F.relu(x)


def uses_helper(x: MyTensor, k: int = 3) -> Net:
    out = [helper(v) for v in x.unbind(0)]
    return torch_free(out, k)


def torch_free(out, k):
    return sum(out) * k


def reads_global(x):
    return x * SCALE


def uses_numpy(x):
    return np.asarray(x)


def relative(x):
    return thing(x)


def outer(x):
    def inner(y):
        return y + x
    return inner(x)


class Net(nn.Module):
    def forward(self, x):
        return self.fc(x)


def uses_class(x):
    return Net()(x)


def star(*xs):
    return xs
'''


def _cut(name: str):
    import ast as _ast

    from graphdbg.repro.cutout import cut
    tree = _ast.parse(SOURCE)
    node = next(n for n in _ast.walk(tree)
                if isinstance(n, _ast.FunctionDef) and n.name == name)
    return cut(SOURCE, "/x/prog.py", node, node.lineno + 1)


def test_cut_carries_self_contained_helpers_and_torch_imports():
    c = _cut("uses_helper")
    assert sorted(c.helpers) == ["helper", "torch_free"]
    assert "import torch.nn.functional as F" in c.text and "numpy" not in c.text
    assert c.params == [("x", False), ("k", True)]
    assert c.text.splitlines()[c.line_in_text - 1].strip().startswith("out = [helper(v)")
    compile(c.text, "repro.py", "exec")


@pytest.mark.parametrize("name, why", [
    ("reads_global", "reads_global uses SCALE (a global variable of your program)"),
    ("uses_numpy", "uses_numpy uses np (imported from numpy, which is neither torch nor"),
    ("relative", "relative uses thing (imported from .sibling"),
    ("inner", "inner is defined inside outer: it may use outer's locals (a closure)"),
    ("forward", "forward is a method of Net (an nn.Module): it uses self.fc"),
    ("uses_class", "uses_class uses Net (a class defined in your program)"),
    ("star", "star takes *xs"),
])
def test_cut_refuses_what_depends_on_the_program(name, why):
    from graphdbg.repro.cutout import NotCut
    with pytest.raises(NotCut) as e:
        _cut(name)
    assert why in str(e.value), str(e.value)


def test_arguments_from_guards_and_the_failed_guards_change():
    from graphdbg.repro.cutout import _changed, args_of, guard_key
    guards = """
| +- GuardManager: source=L['x'], accessed_by=FrameLocalsGuardAccessor(key='x', framelocals_idx=0), type=<class 'torch.Tensor'>, tag_safe=(False, False)
| | +- TENSOR_MATCH: check_tensor(L['x'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), torch.float16, device=None, requires_grad=False, size=[4, None], stride=[16, 1])  # y = x  # p.py:3 in f
| +- GuardManager: source=L['name'], accessed_by=FrameLocalsGuardAccessor(key='name', framelocals_idx=1), type=<class 'str'>, tag_safe=(False, False)
| | +- EQUALS_MATCH: L['name'] == 'a b'                                   # p.py:3 in f
| +- GuardManager: source=L['m'], accessed_by=FrameLocalsGuardAccessor(key='m', framelocals_idx=2), type=<class 'NoneType'>, tag_safe=(False, False)
| +- GuardManager: source=L['flag'], accessed_by=FrameLocalsGuardAccessor(key='flag', framelocals_idx=3), type=<class 'bool'>, tag_safe=(False, False)
| | +- ID_MATCH: ___check_obj_id(L['flag'], 9781), type=<class 'bool'>  # p.py:3 in f
| +- GuardManager: source=L['seen'], accessed_by=FrameLocalsGuardAccessor(key='seen', framelocals_idx=4), type=<class 'int'>, tag_safe=(False, False)
| | +- TYPE_MATCH: ___check_type_id(L['seen'], 9782), type=<class 'int'>  # p.py:3 in f (HINT: type int)
| +- GuardManager: source=L['xs'], accessed_by=FrameLocalsGuardAccessor(key='xs', framelocals_idx=5), type=<class 'tuple'>, tag_safe=(False, False)
| | +- LENGTH_CHECK: len(L['xs']) == 2                                             # p.py:3 in f
| | +- GuardManager: source=L['xs'][0], accessed_by=TupleGetItemGuardAccessor(0), type=<class 'torch.Tensor'>, tag_safe=(False, False)
| | | +- TENSOR_MATCH: check_tensor(L['xs'][0], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), torch.float32, device=None, requires_grad=False, size=[2], stride=[1])  # p.py:3 in f
| | +- GuardManager: source=L['xs'][1], accessed_by=TupleGetItemGuardAccessor(1), type=<class 'int'>, tag_safe=(False, False)
| | | +- EQUALS_MATCH: L['xs'][1] == 7  # p.py:3 in f
"""
    found = args_of(guards)
    assert found["x"]["tensor"]["shape"] == [4, None] and found["x"]["tensor"]["dtype"] == "float16"
    assert found["name"] == {"value": "a b"} and found["m"] == {"value": None}
    assert found["flag"] == {"unknown": "bool"}            # its value checked, not recorded
    assert found["seen"] == {"value": 2, "any": True}       # its type only: any int will do
    assert found["xs"] == {"seq": "tuple", "items": [
        {"tensor": {"shape": [2], "stride": [1], "dtype": "float32", "requires_grad": False,
                    "device": "cpu"}}, {"value": 7}]}
    key = guard_key("3/0: tensor 'x' dtype mismatch. expected Half, actual Float  # y = x")
    assert key == "tensor 'x' dtype mismatch. expected Half, actual Float"
    call = {"x": {"tensor": {"shape": [4, 5], "stride": None, "dtype": "float16"}}}
    assert _changed(call, key, None, 1)["x"]["tensor"]["dtype"] == "float32"
    assert _changed(call, "1 <= x.size()[1]", None, 1)["x"]["tensor"]["shape"] == [4, 0]
    assert _changed({"n": {"value": 2}}, "n == 2", "3", 1) == {"n": {"value": 3}}
