"""Tests a user might write with graphdbg's pytest plugin (installed with
graphdbg: nothing to import). `pytest samples/pytest_plugin` runs them: one
passes, two fail on purpose (a graph break, a recompile), and the failure
text points at the lines that caused them.

    pytest samples/pytest_plugin                 # the marker and the fixture
    pytest samples/pytest_plugin --graphdbg      # ...and record every test
"""

import pytest
import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = self.fc(x)
        if h.mean() > 0:  # graphdbg-expect: graph_break
            h = torch.relu(h)
        return h * 2


def scale_and_shift(x, scale):
    return x * scale + 1  # graphdbg-expect: recompile


@pytest.mark.graphdbg  # no graph breaks, no recompiles, compiled close to eager
def test_gate_compiles_in_one_graph():
    torch.manual_seed(0)
    model = torch.compile(Gate(), backend="aot_eager")
    model(torch.randn(4, 16))


def test_a_second_scale_does_not_recompile(graphdbg):
    f = torch.compile(scale_and_shift, backend="aot_eager")
    f(torch.ones(8), 0.5)
    with graphdbg.expect(graphs=0, recompiles=0):
        f(torch.ones(8), 2.0)


def test_compiled_matches_eager(graphdbg):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    assert torch.allclose(torch.compile(mlp, backend="aot_eager")(x), mlp(x))
    graphdbg.assert_no_graph_breaks()
    graphdbg.assert_graphs(1)
    graphdbg.assert_close()
