"""Per-node values eager vs compiled (the run file's `node_values`, schema
2): what the checker records on a graph's first checked call, how the query
layer pages and filters it, and that older run files read as empty."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
import torch
import torch._dynamo
from conftest import line_of
from faulty_backends import by_line, make_faulty_backend

import faulty_backends
import graphdbg
from faulty_backends import Dropped, own_random_stream
from graphdbg.runfile.query import NODE_VALUE_DIFFERING, Run
from graphdbg.runfile.records import NodeRow, NodeValueRow
from graphdbg.runfile.writer import RunWriter
from graphdbg.runfile.schema import SCHEMA_VERSION

HERE = __file__


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        h = self.norm(x)
        h = self.fc(h)  # MARK fc
        h = torch.nn.functional.gelu(h)
        return x + h * 0.5


class Deep(torch.nn.Module):
    def __init__(self, d=16, n=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):  # MARK deep forward
        for b in self.blocks:
            x = b(x)
        return self.head(torch.sigmoid(x))


def run_deep(path: Path, backend, calls: int = 2, **options) -> list[torch.Tensor]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = Deep(), torch.randn(8, 16)
    with graphdbg.capture(str(path), **options):
        c = torch.compile(model, backend=backend)
        return [c(x) for _ in range(calls)]


# -- engine (in-process compiles) ------------------------------------------------------

@pytest.mark.usefixtures("clean_torch")
def test_clean_graph_records_every_compute_node_once(tmp_path):
    run_deep(tmp_path / "c.run", "aot_eager", calls=3)
    with Run(str(tmp_path / "c.run")) as run:
        (gid,) = run.node_value_graphs()
        assert run.node_value_calls(gid) == [0]            # the first checked call only
        rows = run.node_values(gid)
        compute = [n for n in run.nodes(gid) if n.op.startswith("call_")]
        assert len(rows) == len(compute) and [r.idx for r in rows] == sorted(r.idx for r in rows)
        assert {r.status for r in rows} == {"ok"}
        out = [r for r in rows if r.compiled_from == "output"]
        assert len(out) == 1 and out[0].target and "linear" in out[0].target.lower()
        o = out[0]
        assert o.max_abs == 0.0 and o.compiled_stats == o.eager_stats   # aot_eager: bitwise
        inner = [r for r in rows if r.compiled_from is None]
        assert inner and all(r.compiled_stats is None and r.max_abs is None for r in inner)
        for r in rows:
            s = r.eager_stats
            assert s["dtype"] == "float32" and {"min", "max", "mean", "std", "norm", "nan", "inf"} <= set(s)
            # nothing differed: the float64 judge (two eager runs' worth) never ran
            assert r.fp64_stats is None and r.eager_vs_fp64 is None and r.compiled_vs_fp64 is None
            assert r.file == HERE and r.line
        assert run.node_values(gid, differing_only=True) == []
        assert run.first_divergent_node(gid) is None
        assert run.info.internal_errors == []


@pytest.mark.usefixtures("clean_torch")
def test_divergence_records_compiled_intermediates_and_the_first_divergent_node(tmp_path):
    backend = make_faulty_backend(by_line(line_of(HERE, "fc"), Path(HERE).name), "scale",
                                  inner="aot_eager")
    run_deep(tmp_path / "d.run", backend)
    with Run(str(tmp_path / "d.run")) as run:
        (gid,) = run.node_value_graphs()
        assert run.info.internal_errors == []
        first = run.first_divergent_node(gid)
        assert first is not None and first.status == "first divergent"
        assert first.line == line_of(HERE, "fc") and first.kind == "miscompile"
        assert first.compiled_from.startswith("intermediate outputs")
        assert first.max_rel == pytest.approx(1e-2, rel=0.05)   # the backend scaled by 1.01
        assert first.compiled_vs_fp64 > 10 * first.eager_vs_fp64
        assert first.compiled_stats["norm"] == pytest.approx(first.eager_stats["norm"] * 1.01,
                                                             rel=1e-4)
        # the divergence's finding names the same node
        (d,) = [f for f in run.findings() if f.kind == "divergence"]
        assert d.node == first.node
        rows = run.node_values(gid)
        before = [r for r in rows if r.idx < first.idx]
        assert before and all(r.status == "ok" for r in before)
        differing = run.node_values(gid, differing_only=True)
        assert differing[0].node == first.node
        assert all(r.status in NODE_VALUE_DIFFERING for r in differing)
        assert run.node_value_count(gid, differing_only=True) == len(differing)
        assert run.node_value_count(gid) == len(rows)
        # paging
        assert [r.node for r in run.node_values(gid, offset=2, limit=3)] == \
            [r.node for r in rows[2:5]]


@pytest.mark.usefixtures("clean_torch")
def test_bisection_leaves_other_nodes_not_compared(tmp_path):
    backend = make_faulty_backend(by_line(line_of(HERE, "fc"), Path(HERE).name), "scale",
                                  inner="aot_eager")
    run_deep(tmp_path / "b.run", backend, calls=1, localize="bisect")
    with Run(str(tmp_path / "b.run")) as run:
        (gid,) = run.node_value_graphs()
        first = run.first_divergent_node(gid)
        assert first.line == line_of(HERE, "fc") and first.compiled_stats is None
        assert first.max_rel == pytest.approx(1e-2, rel=0.05)
        statuses = {r.status for r in run.node_values(gid)}
        assert "not compared" in statuses and "first divergent" in statuses


@pytest.mark.usefixtures("clean_torch")
def test_observer_rule_and_value_tiers(tmp_path):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = Deep(), torch.randn(8, 16)
    plain = torch.compile(model, backend="aot_eager")(x)
    torch._dynamo.reset()
    got = run_deep(tmp_path / "o.run", "aot_eager", calls=1)[0]
    assert torch.equal(plain, got)
    run_deep(tmp_path / "n.run", "aot_eager", calls=1, values="none")
    with Run(str(tmp_path / "n.run")) as run:
        assert run.count("node_values") == 0 and run.node_value_graphs() == []
    run_deep(tmp_path / "h.run", "aot_eager", calls=1, values="health")
    with Run(str(tmp_path / "h.run")) as run:
        rows = run.node_values(run.node_value_graphs()[0])
        assert rows and all(set(r.eager_stats) == {"shape", "dtype", "nan", "inf"} for r in rows)


# -- the query layer on hand-written files ----------------------------------------------

def _write(path: Path) -> None:
    w = RunWriter(str(path))
    fid = w.frame_id("/p/model.py", 10, "forward", code="y = f(x)")
    for i, name in enumerate(["a", "b", "c", "d"]):
        w.add(NodeRow(1, i + 1, name, "call_function", f"torch.{name}", "[[2]]", '["float32"]',
                      fid, None, None, None, None))
    stats = json.dumps({"shape": [2], "dtype": "float32", "min": 0.0, "max": 1.0, "mean": 0.5,
                        "std": 0.7, "norm": 1.0, "nan": 0, "inf": 0})
    rows = [(1, 0, "a", "ok", None, None, None, None, 1e-8, None, stats, None, stats),
            (1, 0, "b", "ok", None, "intermediate outputs (user)", 0.0, 0.0, 1e-8, 1e-8,
             stats, stats, stats),
            (1, 0, "c", "first divergent", "miscompile", "intermediate outputs (user)", 0.5,
             math.inf, 1e-8, 0.3, stats, stats, stats),
            (1, 0, "d", "differs", "miscompile", "output", 0.4, 0.8, 1e-8, 0.2, stats, stats,
             stats),
            (1, 2, "a", "ok", None, None, None, None, 1e-8, None, stats, None, stats)]
    for r in rows:
        w.add(NodeValueRow(*r))
    w.close(status="complete")


def test_query_pages_filters_and_jumps(tmp_path):
    _write(tmp_path / "h.run")
    with Run(str(tmp_path / "h.run")) as run:
        assert run.info.schema_version == SCHEMA_VERSION >= 2
        assert run.node_value_graphs() == [1] and run.node_value_calls(1) == [0, 2]
        assert run.node_value_call(1) == 0          # the call with a localised divergence
        assert [v.node for v in run.node_values(1)] == ["a", "b", "c", "d"]
        assert [v.node for v in run.node_values(1, call_idx=2)] == ["a"]
        assert [v.node for v in run.node_values(1, differing_only=True)] == ["c", "d"]
        assert [v.node for v in run.node_values(1, offset=1, limit=2)] == ["b", "c"]
        c = run.node_values(1, differing_only=True)[0]
        assert c.max_rel == math.inf and c.differs and c.idx == 3 and c.target == "torch.c"
        assert (c.file, c.line, c.code) == ("/p/model.py", 10, "y = f(x)")
        assert c.eager_stats["mean"] == 0.5
        assert run.first_divergent_node(1).node == "c"
        assert run.node_value_count(1) == 4 and run.node_value_count(1, 2) == 1
        assert run.node_value_count(1, before_idx=3) == 2
        assert run.node_value_count(1, differing_only=True, before_idx=4) == 1
        assert run.node_values(7) == [] and run.first_divergent_node(7) is None


def test_schema_1_file_reads_as_empty(tmp_path):
    path = tmp_path / "old.run"
    _write(path)
    db = sqlite3.connect(str(path))
    db.execute("DROP TABLE node_values")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    with Run(str(path)) as run:
        assert run.info.schema_version == 1
        assert run.node_value_graphs() == [] and run.node_value_calls(1) == []
        assert run.node_values(1) == [] and run.node_values(1, differing_only=True) == []
        assert run.node_value_count(1) == 0 and run.node_value_call(1) is None
        assert run.first_divergent_node(1) is None
        assert len(run.nodes(1)) == 4   # everything else reads as before


def test_errors_helper():
    from graphdbg.hooks.check.nodevalues import errors
    a = torch.tensor([1.0, 2.0, float("nan")])
    assert errors(a, a.clone()) == (0.0, 0.0)
    assert errors(a, torch.tensor([1.0, 2.5, float("nan")])) == pytest.approx((0.5, 0.2))
    assert errors(a, torch.tensor([1.0, 2.0, 3.0])) == (math.inf, math.inf)
    assert errors(a, torch.zeros(2)) == (math.inf, math.inf)
    assert errors(1, a) == (None, None)


@pytest.mark.usefixtures("clean_torch")
@pytest.mark.parametrize("swap", [False, True])
def test_random_draws_are_replayed_so_only_real_differences_differ(tmp_path, swap):
    torch._dynamo.reset()
    torch.manual_seed(0)
    with graphdbg.capture(str(tmp_path / "r.run")), torch.no_grad():
        torch.compile(Dropped(), backend=own_random_stream(swap))(torch.randn(4, 16))
    with Run(str(tmp_path / "r.run")) as run:
        assert run.info.internal_errors == []
        (gid,) = run.node_value_graphs()
        rows = {r.line: r for r in run.node_values(gid) if r.line != line_of(faulty_backends.__file__, "tanh")}
        drop = rows[line_of(faulty_backends.__file__, "dropout")]
        assert (drop.status, drop.kind) == ("differs", "random")
        tanh_rows = [r for r in run.node_values(gid) if r.line == line_of(faulty_backends.__file__, "tanh")]
        assert len(tanh_rows) == 2   # tanh and the product
        if swap:
            first = run.first_divergent_node(gid)
            assert first.line == line_of(faulty_backends.__file__, "tanh") and first.status == "first divergent"
            assert "random draws replayed" in first.compiled_from
        else:
            assert all(r.status == "ok" and "replayed" in r.compiled_from for r in tanh_rows)
            assert all(r.max_abs == 0.0 and r.compiled_stats == r.eager_stats for r in tanh_rows)
            assert run.first_divergent_node(gid).node == drop.node


@pytest.mark.usefixtures("clean_torch")
def test_a_random_findings_figures_come_from_the_compile_its_node_values_do(tmp_path):
    """The stage ladder's aot_eager_decomp_partition and the backend's own
    compile draw different numbers: the finding keeps the stage where the
    draws first differed, and takes its figures from the backend's compile,
    as the per-node values do (they were 4.96 against 5.61 before)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    with graphdbg.capture(str(tmp_path / "r.run")), torch.no_grad():
        torch.compile(Dropped(), backend=own_random_stream(False))(torch.randn(4, 16))
    reader = graphdbg.open_run(str(tmp_path / "r.run"))
    try:
        (f,) = reader.findings("divergence")
    finally:
        reader.close()
    with Run(str(tmp_path / "r.run")) as run:
        (gid,) = run.node_value_graphs()
        (row,) = [r for r in run.node_values(gid) if r.node == f.node]
    assert f.detail.classification == "random" and row.kind == "random"
    assert f.detail.stage == "aot_eager_decomp_partition"
    assert "intermediate outputs (backend" in row.compiled_from
    assert (f.detail.max_abs, f.detail.max_rel) == (row.max_abs, row.max_rel)
    assert "figures from stage backend's compile" in f.detail.method


@pytest.mark.usefixtures("clean_torch")
def test_a_recorded_divergence_in_the_diff_screen(tmp_path):
    """Engine -> run file -> DiffModel -> DiffScreen: `g` lands on the line
    the faulty backend changed."""
    import asyncio

    from graphdbg.tui.model.diff import DiffModel
    from graphdbg.tui.views.diff import DiffScreen
    from textual.app import App
    from textual.widgets import DataTable

    backend = make_faulty_backend(by_line(line_of(HERE, "fc"), Path(HERE).name), "scale",
                                  inner="aot_eager")
    run_deep(tmp_path / "s.run", backend, calls=1)

    class Host(App):
        def compose(self):
            return []

    async def main():
        with Run(str(tmp_path / "s.run")) as run:
            app = Host()
            async with app.run_test(size=(80, 24)) as pilot:
                screen = DiffScreen(DiffModel.for_graph(run, None))
                app.push_screen(screen)
                for _ in range(3):
                    await app.workers.wait_for_complete()
                    await pilot.pause()
                await pilot.press("g")
                for _ in range(3):
                    await app.workers.wait_for_complete()
                    await pilot.pause()
                row = screen.current_row()
                assert row.status == "first divergent" and row.line == line_of(HERE, "fc")
                before = [r for r in screen.model.rows if r.item.idx < row.item.idx]
                assert screen.query_one("#diff-table", DataTable).cursor_row == len(before) > 0
                assert all(r.status == "ok" for r in before)
    asyncio.run(main())


def test_pages_of_a_large_graph_cost_their_rows(tmp_path):
    """Every query reads by primary key: a page of a 10k-node graph, its
    first divergent node and its position are quick (a join on node names
    without the index was quadratic: over a minute at 20k nodes)."""
    import time

    from graphdbg.tui.model.diff import DiffModel
    n = 10_000
    w = RunWriter(str(tmp_path / "big.run"))
    stats = json.dumps({"shape": [4], "dtype": "float32", "min": 0.0, "max": 1.0, "mean": 0.5,
                        "std": 0.1, "norm": 1.0, "nan": 0, "inf": 0})
    for i in range(n):
        w.add(NodeRow(1, i, f"n{i}", "call_function", "t", "[[4]]", '["float32"]', None, None,
                      None, None, None))
        status = "first divergent" if i == n - 5 else "differs" if i > n - 5 else "ok"
        w.add(NodeValueRow(1, 0, f"n{i}", status, None, None, 0.0, 0.0, 1e-9, None, stats,
                           None, stats))
    w.close(status="complete")
    with Run(str(tmp_path / "big.run")) as run:
        t0 = time.perf_counter()
        page = run.node_values(1, offset=n - 300, limit=200)
        first = run.first_divergent_node(1)
        m = DiffModel.for_graph(run, 1)
        at = m.first_divergent()
        m.toggle_differing()
        at_differing = m.first_divergent()
        took = time.perf_counter() - t0
        assert [v.idx for v in page] == list(range(n - 300, n - 100))
        assert first.node == f"n{n - 5}" and at == n - 5 and at_differing == 0
        assert m.total == 5
        assert took < 2.0, took


@pytest.mark.usefixtures("clean_torch")
def test_check_over_its_memory_budget_is_skipped_with_a_note(tmp_path):
    """The check's memory is known from the graph's shapes before it runs:
    over --compare-memory the graph is not checked, and a note at the
    compiled function says so and how to check a smaller piece."""
    run_deep(tmp_path / "s.run", "aot_eager", compare_memory=1 / 1024)  # 1 KiB
    with Run(str(tmp_path / "s.run")) as run:
        (f,) = run.findings()
        assert f.kind == "check_skipped" and f.severity == "info"
        assert f.file == HERE and f.line == line_of(HERE, "deep forward")
        assert "not checked against eager" in f.message and "--compare-memory" in f.message
        assert "graphdbg.compare(" in f.hint
        need = f.detail.need_bytes
        # every compute node's float32 value is in the estimate (4 blocks of 8x16
        # activations, several values each)
        assert need > 4 * 8 * 16 * 4 * 3 and f.detail.budget_bytes == 1024
        assert run.node_value_graphs() == [] and not run.query("SELECT * FROM node_times")
    # within the budget (the default: half the free memory) it is checked
    run_deep(tmp_path / "c.run", "aot_eager")
    with Run(str(tmp_path / "c.run")) as run:
        assert run.findings() == [] and len(run.node_value_graphs()) == 1
