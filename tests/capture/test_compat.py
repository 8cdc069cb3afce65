"""hooks/compat.py, entry by entry, on the torch these tests run on (CI runs
them on the oldest and on the newest supported release): each entry gives the
same answer on every version, whatever torch does underneath."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from graphdbg.hooks import compat


def test_torch_release_reads_every_kind_of_version_string():
    assert compat.torch_release("2.15.0+cu132") == (2, 15)
    assert compat.torch_release("2.13.0+cpu") == (2, 13)
    assert compat.torch_release("2.16.0a0+git1234abc") == (2, 16)
    assert compat.torch_release("nightly") is None


def test_this_torch_is_supported_and_has_every_feature():
    assert compat.SUPPORTED[0] <= compat.torch_release() <= compat.SUPPORTED[1]
    assert all(compat._features().values()), compat._features()
    compat.check_torch()  # no error, no warning


# -- a malformed graph's error behind torch's cleanup error ----------------------------

def _malforming_backend(gm, example_inputs):
    """Uses a node before it is defined (samples/broken_fx_pass.py's bug),
    then hands the graph to aot_eager, whose code generation fails on it."""
    from torch._dynamo.backends.registry import lookup_backend
    graph = gm.graph
    (mul,) = [n for n in graph.nodes if n.target is torch.mul]
    first = next(n for n in graph.nodes if n.op == "call_function")
    with graph.inserting_before(first):
        neg = graph.call_function(torch.neg, (mul,))
    mul.replace_all_uses_with(neg, delete_user_cb=lambda user: user is not neg)
    return lookup_backend("aot_eager")(gm, example_inputs)


def test_a_backends_error_is_found_behind_torchs_cleanup_error(clean_torch):
    def f(x):
        return torch.mul(x.sin(), 2) + 1

    with pytest.raises(Exception) as info:
        torch.compile(f, backend=_malforming_backend)(torch.ones(3))
    raised = info.value
    found = compat.unwrap_cleanup_error(raised)
    # 2.13/2.14 raise BackendCompilerFailed; 2.15 raises torch's cleanup
    # RuntimeError with it as __context__: the same error comes out of both
    assert type(found).__name__ == "BackendCompilerFailed"
    assert "referenced nonexistent value" in str(found)
    if raised is not found:
        assert isinstance(raised, RuntimeError) and raised.__context__ is found


def test_an_error_not_raised_by_torchs_cleanup_is_kept():
    try:
        try:
            raise ValueError("first")
        except ValueError:
            raise KeyError("second")
    except KeyError as exc:
        assert compat.unwrap_cleanup_error(exc) is exc


# -- the node whose fake run failed, with its inputs ------------------------------------

lib = torch.library.Library("graphdbg_compat", "DEF")
lib.define("widen(Tensor x) -> Tensor")
torch.library.impl(lib, "widen", "CompositeExplicitAutograd")(lambda x: torch.cat([x, x], 1))
torch.library.register_fake("graphdbg_compat::widen", lib=lib)(lambda x: x.new_empty(x.shape))


def _widen_then_matmul(x):
    y = torch.ops.graphdbg_compat.widen(x)
    return y @ torch.ones(16, 2)  # the fake's (4, 8) cannot be multiplied by (16, 2)


class _AtDynamoError(logging.Handler):
    """What compat.failed_fake_node says at the dynamo_error artifact, the
    moment graphdbg's trace handler asks it (the failed graph still whole)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.found = []

    def emit(self, record):
        md = getattr(record, "metadata", {}) or {}
        if md.get("artifact", {}).get("name") == compat.DYNAMO_ERROR_ARTIFACT:
            self.found.append(compat.failed_fake_node(sys.exc_info()[1]))


def test_the_failed_fake_node_keeps_its_inputs(clean_torch):
    import torch._logging._internal as tlog
    handler = _AtDynamoError()
    level = tlog.trace_log.level
    tlog.trace_log.setLevel(logging.DEBUG)
    tlog.trace_log.addHandler(handler)
    try:
        with pytest.raises(Exception):
            torch.compile(_widen_then_matmul, backend="eager", fullgraph=True)(torch.ones(4, 8))
    finally:
        tlog.trace_log.removeHandler(handler)
        tlog.trace_log.setLevel(level)
    (found,) = handler.found
    node, inputs = found
    # 2.14 and 2.15 erase the failing matmul from the graph; its inputs are still known
    assert node.target in (torch.matmul, torch.Tensor.matmul, getattr(torch.Tensor, "__matmul__"),
                           __import__("operator").matmul), node.target
    assert [str(n.target).split(".")[:2] for n in inputs][0] == ["graphdbg_compat", "widen"]
    assert len(inputs) == 2  # widen's output and torch.ones(16, 2)
