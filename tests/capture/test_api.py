"""graphdbg.compare from Python, as in a notebook or a user's own test."""

import pytest
import torch

import graphdbg
from faulty_backends import by_target, make_faulty_backend

pytestmark = pytest.mark.usefixtures("clean_torch")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 2)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.sigmoid(h) * h
        return self.b(h)


def test_compare_names_the_faulty_line(tmp_path):
    torch.manual_seed(0)
    net, x = Net(), torch.randn(4, 8)
    expected = net(x)
    be = make_faulty_backend(by_target(torch.sigmoid), "swap_op", inner="aot_eager")
    report = graphdbg.compare(net, x, backend=be, run_file=str(tmp_path / "c.run"))
    (d,) = report.divergences
    assert d.code == "h = torch.sigmoid(h) * h" and d.op == "torch.sigmoid"
    assert d.detail.target == "torch.sigmoid"  # typed records, as `graphdbg.open_run` reads them
    with pytest.raises(AssertionError, match="h = torch.sigmoid"):
        report.assert_close()
    report.assert_no_graph_breaks()
    # the program's own model is untouched
    assert torch.equal(net(x), expected)


def test_compare_clean_model_and_gradients(tmp_path):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4, 8, requires_grad=True)
    report = graphdbg.compare(net, x, backend="aot_eager", run_file=str(tmp_path / "c.run"))
    report.assert_close()
    assert report.divergences == [] and len(report.graphs) == 1
    assert x.grad is None  # the gradient check used clones
    assert "1 graph(s), 0 divergence(s)" in repr(report)


def test_compare_reports_graph_breaks(tmp_path):
    def f(x):
        y = x.sin()
        print("debug")
        return y.cos()

    report = graphdbg.compare(f, torch.ones(3), backend="eager", run_file=str(tmp_path / "c.run"))
    with pytest.raises(AssertionError, match="graph breaks"):
        report.assert_no_graph_breaks()
