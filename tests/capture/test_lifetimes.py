"""The observer rule for memory: with graphdbg watching, the program's objects
(compiled graphs, their inputs, models) are freed when the program lets go of
them, as without graphdbg, while the capture session is still running."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch._dynamo

import graphdbg

pytestmark = pytest.mark.usefixtures("clean_torch")


class Compiled:
    """A backend's compiled callable, weakly observable."""

    def __init__(self, gm):
        self.gm = gm

    def __call__(self, *args):
        return self.gm(*args)


def program(made: list) -> None:
    """Compiles a training step, calls it once with grad, then lets go of it
    all: the compiled graph, the model, its input."""
    def backend(gm, example_inputs):
        from torch._dynamo.backends.registry import lookup_backend
        compiled = Compiled(lookup_backend("aot_eager")(gm, example_inputs))
        made.append(weakref.ref(compiled))
        return compiled

    model = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    made.extend([weakref.ref(model), weakref.ref(x)])
    step = torch.compile(model, backend=backend)
    step(x).sum().backward()  # grad mode: a gradient check is left for later
    del step, model, x
    torch._dynamo.reset()  # the program drops its compiled code (as a cache eviction does)


def alive(refs: list) -> list:
    gc.collect()
    return [r() for r in refs if r() is not None]


def test_a_dropped_graph_its_model_and_inputs_are_freed_while_graphdbg_watches(tmp_path):
    plain: list = []
    program(plain)
    assert len(plain) == 3 and alive(plain) == []  # without graphdbg: all freed
    watched: list = []
    with graphdbg.capture(str(tmp_path / "l.run")):
        program(watched)
        assert len(watched) == 3
        assert alive(watched) == [], "kept alive by graphdbg while it watches"


def drop_cache_on_skip() -> bool:
    """PyTorch's test_drop_cache_on_skip (test/dynamo/test_recompile_ux.py): the
    backend's result is freed as soon as Dynamo lets go of it, with no gc."""
    triggered = []

    def compiler(gm, example_inputs):
        f = gm.forward
        weakref.finalize(f, lambda: triggered.append(True))
        return f

    def model(x, i):
        return x + i

    x = torch.randn(2)
    for i in range(2):
        torch.compile(model, backend=compiler)(x, i)
    return bool(triggered)


def test_a_backends_result_is_freed_as_promptly_as_without_graphdbg(tmp_path):
    plain = drop_cache_on_skip()
    torch._dynamo.reset()
    with graphdbg.capture(str(tmp_path / "d.run")):
        watched = drop_cache_on_skip()
    assert plain and watched
