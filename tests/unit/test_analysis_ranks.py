"""graphdbg.analysis.ranks, .rankdiff and .jobtext on job folders written by
hand (tests/support/rankfiles.py: RunWriter, no torch): the records that
`graphdbg report DIR`, `graphdbg diff DIR` and the TUI's job screen render,
asserted as records (kinds, severities, ranks, lines, details), not as text."""

from __future__ import annotations

import json
from pathlib import Path

from rankfiles import AR, RELU, SUM, Rank, two_ranks

from graphdbg.analysis.jobtext import (file_line, header_lines, job_info, ordinal,
                                       position_lines, position_text, rank_list)
from graphdbg.analysis.rankdiff import DIFF_SCHEMA, diff_job
from graphdbg.analysis.ranks import (STRAGGLER_MIN_S, STRAGGLER_WARN_S, WAIT_MIN_NS,
                                     Comparison, compare)
from graphdbg.core.format import short
from graphdbg.runfile.job import Job


def compared(folder: Path) -> Comparison:
    with Job.open(str(folder)) as job:
        return compare(job)


def kinds(c: Comparison, kind: str) -> list:
    return [d for d in c.differences if d.kind == kind]


# -- the comparison ----------------------------------------------------------------

def test_the_same_job_on_every_rank_differs_nowhere_and_is_summarised(tmp_path):
    for r in two_ranks(tmp_path):
        r.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"], compile_s=1.5,
                calls=[1_000_000, 1_000_000])
        r.op("aten.randn", 11).op("aten.randn", 11)
        r.finding("graph_break", 5, "graph break: print")   # on every rank: no difference
        r.close()
    c = compared(tmp_path)
    assert c.differences == () and c.between == () and c.stopped == ()
    s0, s1 = c.ranks
    assert (s0.rank, s1.rank) == (0, 1) and not s0.stale
    assert (s0.graphs, s0.graph_breaks, s0.recompiles, s0.compile_errors) == (1, 1, 0, 0)
    assert s0.eager_ops == 2 and s0.compile_s == 1.5
    assert (s0.status, s0.exit_status, s0.host, s0.job) == ("complete", 0, "node0", "j1")
    assert s0.file == str(tmp_path / "rank0.run") and s0.position is None
    assert s0.as_dict()["compile_s"] == 1.5 and s0.as_dict()["stale"] is False


def test_one_rank_alone_is_not_compared(tmp_path):
    Rank(tmp_path, 0, world=2).graph(1, "0/0", [RELU]).close()
    c = compared(tmp_path)
    assert c.differences == () and [s.rank for s in c.ranks] == [0]


def test_a_finding_on_some_ranks_only(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, SUM])
    r1.graph(1, "0/0", [RELU, SUM])
    r1.finding("graph_break", 5, "graph break: print", compile_id="0/0")
    r1.finding("graph_break", 5, "graph break: print", compile_id="0/0")   # counted twice
    r0.finding("nan_inf", 7, "NaN in sum")   # values depend on each rank's data: not compared
    r0.close(), r1.close()
    c = compared(tmp_path)
    (gb,) = c.differences
    assert (gb.kind, gb.severity, gb.ranks) == ("graph_break", "warning", (1,))
    assert (gb.file, gb.line, gb.function) == (str(tmp_path / "train.py"), 5, "step")
    assert gb.message.startswith("graph break on rank 1 only (not on rank 0): graph break: print")
    assert gb.detail["not_on"] == [0] and gb.detail["counts"] == {"1": 2}
    assert gb.detail["compile_ids"] == {"1": ["0/0"]}


def test_collectives_in_other_numbers_at_the_first_without_a_partner(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, AR, ("all_reduce", 7), SUM], collectives=["all_reduce"])
    r1.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"])
    r0.close(), r1.close()
    c = compared(tmp_path)
    (coll,) = c.differences   # the graphs differ too: the collectives say it, once
    assert (coll.kind, coll.severity, coll.ranks, coll.line) == ("collectives", "error", (0, 1), 7)
    assert "rank 0: 2 all_reduce; rank 1: 1 all_reduce" in coll.message
    assert "rank 0's 2nd collective (all_reduce) has no partner on rank 1" in coll.message
    assert coll.detail["index"] == 1
    assert [len(v) for v in coll.detail["collectives"].values()] == [2, 1]


def test_a_graph_on_some_ranks_only_says_which_collectives_the_others_miss(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"])
    r0.close(), r1.close()
    c = compared(tmp_path)
    (g,) = c.differences
    assert (g.kind, g.severity, g.ranks, g.line, g.function) == ("graph", "warning", (0,), 4, "step")
    assert "compiled on rank 0 only (not on rank 1)" in g.message
    assert "its graph issues 1 all_reduce, which rank 1 does not issue there" in g.message
    assert g.detail == {"graphs": {"0": [1]}, "not_on": [1]}
    assert g.code == "def step(x):"


def test_more_graphs_on_one_rank_at_the_extra_graph(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, SUM])
    r1.graph(1, "0/0", [RELU, SUM]).graph(2, "0/1", [("mul", 6)])
    r0.close(), r1.close()
    (g,) = compared(tmp_path).differences
    assert (g.kind, g.severity, g.ranks) == ("graph", "warning", (1,))
    assert "compiled 2 graphs on rank 1, 1 on rank 0" in g.message


def test_compile_straggler_is_a_warning_past_a_minute_and_names_the_cache(tmp_path):
    slow = 1.0 + STRAGGLER_WARN_S + 5
    r0, r1, r2 = (Rank(tmp_path, r, world=3) for r in range(3))
    for r in (r0, r2):
        r.graph(1, "0/0", [RELU, SUM], compile_s=1.0, fx_cache={"hits": 1})
    r1.graph(1, "0/0", [RELU, SUM], compile_s=slow, fx_cache={"misses": 1})
    for r in (r0, r1, r2):
        r.close()
    (st,) = compared(tmp_path).differences
    assert (st.kind, st.severity, st.ranks, st.line) == ("compile_time", "warning", (1,), 4)
    assert st.detail == {"compile_s": round(slow, 3), "others_median_s": 1.0,
                         "function_extra_s": round(slow - 1.0, 3)}
    assert "FX graph cache missed there on this rank and hit on others" in st.message


def test_a_compile_barely_slower_is_no_straggler(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU], compile_s=1.0)
    r1.graph(1, "0/0", [RELU], compile_s=1.0 + STRAGGLER_MIN_S * 0.9)   # 1.5x, but < MIN_S
    r0.close(), r1.close()
    assert compared(tmp_path).differences == ()


def test_a_waited_call_at_the_collective_the_rank_waited_at(tmp_path):
    r0, r1, r2 = (Rank(tmp_path, r, world=3) for r in range(3))
    base = [1_000_000] * 4
    waited = WAIT_MIN_NS * 4
    r0.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"], calls=base)
    r1.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"],
             calls=[1_000_000, 1_000_000, waited, waited])
    r2.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"], calls=base)
    for r in (r0, r1, r2):
        r.close()
    (w,) = compared(tmp_path).differences
    assert (w.kind, w.severity, w.ranks, w.line) == ("waited_call", "warning", (1,), 6)
    assert w.detail["collectives"] is True
    assert [c["call"] for c in w.detail["calls"]["1"]] == [2, 3]
    assert "2 calls in all" in w.message and "waited at its first collective" in w.message


def test_where_each_stopped_rank_was(tmp_path):
    r0, r1, r2 = (Rank(tmp_path, r, world=3) for r in range(3))
    for r in (r0, r1, r2):
        r.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"])
    r0.close()
    # rank 1 killed inside its compiled call; rank 2 failed with an error at line 7
    r1.killed({"since": 1.0, "call": {"graph_id": 1, "call_idx": 0, "running": True},
               "op": {"op": "aten.randn.default", "phase": "forward",
                      "user_frame": r1.frames[11]}})
    r2.status = "failed"
    r2.finding("runtime_error", 7, "RuntimeError: boom", severity="error")
    r2.close()
    c = compared(tmp_path)
    assert c.between == ()
    assert [d.kind for d in c.differences[-2:]] == ["stopped", "stopped"]   # stopped ones last
    failed, killed = sorted(c.stopped, key=lambda d: d.severity)   # error, warning
    assert (failed.ranks, failed.severity, failed.line) == ((2,), "error", 7)
    assert failed.message == "rank 2 failed: RuntimeError: boom"
    assert failed.detail["status"] == "failed" and isinstance(failed.detail["finding"], int)
    assert (killed.ranks, killed.severity, killed.line) == ((1,), "warning", 4)  # at step
    assert killed.detail["status"] == "ended without closing"
    assert killed.detail["position"]["call"]["running"] is True
    src = short(str(tmp_path / "train.py"))
    assert killed.message == (f"rank 1 ended without closing: last seen: inside compiled call 0 "
                              f"of graph 1 (step at {src}:4); last eager op: "
                              f"aten.randn.default (forward) at {src}:11")
    summaries = {s.rank: s for s in c.ranks}
    assert summaries[1].status == "ended without closing" and summaries[1].position
    assert summaries[2].status == "failed"


def test_a_stale_rank_is_summarised_and_left_out(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU]).close()
    r1.graph(1, "0/0", [RELU]).close()
    Rank(tmp_path, 2, world=3, job="old").graph(1, "0/0", [("mul", 6)]).close()
    c = compared(tmp_path)
    assert c.differences == ()
    assert [(s.rank, s.stale, s.job) for s in c.ranks] == [(0, False, "j1"), (1, False, "j1"),
                                                           (2, True, "old")]


def test_differences_are_ordered_by_severity_then_kind(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, AR, ("all_reduce", 7), SUM], collectives=["all_reduce"])
    r1.graph(1, "0/0", [RELU, AR, SUM], collectives=["all_reduce"])
    r1.finding("recompile", 5, "recompile of step(): x changed", compile_id="0/1")
    r1.finding("compile_error", 11, "shape error", severity="error")
    r0.close(), r1.close()
    c = compared(tmp_path)
    assert [(d.severity, d.kind) for d in c.differences] == [
        ("error", "collectives"), ("error", "compile_error"), ("warning", "recompile")]
    doc = json.loads(json.dumps([d.as_dict() for d in c.differences]))
    assert doc[0]["ranks"] == [0, 1] and doc[1]["line"] == 11


# -- rank against rank -------------------------------------------------------------

def test_diff_of_ranks_in_step(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    for r in (r0, r1):
        r.op("aten.relu", 5).op("aten.sum", 7).close()
    with Job.open(str(tmp_path)) as job:
        d = diff_job(job)
    (p,) = d.pairs
    assert not d.differs and (p.a, p.b, p.aligned_ops, p.only_in_a, p.only_in_b) == (0, 1, 2, 0, 0)
    assert p.first is None and p.unclosed == ()
    doc = d.as_dict()
    assert doc["schema"] == DIFF_SCHEMA and doc["job"]["ranks"] == [0, 1]
    assert doc["pairs"][0]["first_divergence"] is None


def test_diff_of_ranks_compiled_output_shapes(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, SUM]).call(1, 0, 1000, [(8,)]).call(1, 1, 1000, [(8,)])
    r1.graph(1, "0/0", [RELU, SUM]).call(1, 0, 1000, [(8,)]).call(1, 1, 1000, [(4,)])
    r0.close(), r1.close()
    with Job.open(str(tmp_path)) as job:
        (p,) = diff_job(job).pairs
    f = p.first
    assert (f.what, f.occurrence, f.a, f.b) == ("compiled output shape", 1, [[8]], [[4]])
    assert (f.file, f.line, f.function, f.code) == (str(tmp_path / "train.py"), 4, "step",
                                                    "def step(x):")
    assert "the 2nd call of compiled step returns [[8]] on rank 0, [[4]] on rank 1" == f.message


def test_diff_of_ranks_where_a_file_never_closed(tmp_path):
    # rank 1 was killed before its last op: an op it never recorded is no divergence
    r0, r1 = two_ranks(tmp_path)
    r0.op("aten.relu", 5).op("aten.sum", 7).close()
    r1.op("aten.relu", 5)
    r1.killed()
    with Job.open(str(tmp_path)) as job:
        (p,) = diff_job(job).pairs
    assert p.unclosed == (1,) and p.first is None and p.only_in_a == 1
    # ... but one it skipped before an op it did record is
    (tmp_path / "b").mkdir()
    r0, r1 = two_ranks(tmp_path / "b")
    r0.op("aten.relu", 5).op("aten.mul", 6).op("aten.sum", 7).close()
    r1.op("aten.relu", 5).op("aten.sum", 7)
    r1.killed()
    with Job.open(str(tmp_path / "b")) as job:
        (p,) = diff_job(job).pairs
    assert (p.first.what, p.first.op, p.first.line, p.first.a, p.first.b) == \
        ("sequence", "aten.mul", 6, 0, None)
    assert p.first.message == "aten.mul (forward) runs a 1st time on rank 0, not on rank 1"


# -- the job's words ---------------------------------------------------------------

def test_rank_lists_ordinals_and_places():
    assert rank_list([3, 0, 1, 2, 5, 7, 8]) == "ranks 0-3, 5, 7, 8"
    assert rank_list([4, 4]) == "rank 4" and rank_list([0, 1]) == "ranks 0, 1"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 111)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "111th"]
    assert file_line(None, 3) == "?" and file_line("/a/b/train.py", 3).endswith("train.py:3")
    assert position_lines(None) == [] and position_text(None) == "no position recorded"
    pos = {"call": {"graph_id": 2, "call_idx": 5, "raised": True, "function": "f",
                    "file": "x.py", "line": 3},
           "op": {"op": "aten.mm", "phase": "backward", "file": None}}
    assert position_lines(pos) == ["last seen: compiled call 5 of graph 2 (f at x.py:3), which "
                                   "raised", "last eager op: aten.mm (backward)"]


def test_header_lines_say_how_the_job_ended_and_what_the_folder_lacks(tmp_path):
    for r in range(2):
        Rank(tmp_path, r, world=2).close()
    with Job.open(str(tmp_path)) as job:
        head = header_lines(job, compare(job))
        info = job_info(job)
    assert head[0] == ("bold", "job j1: 2 ranks of 2 (gloo, host node0)  graphdbg run train.py")
    assert head[1] == ("green", "complete: ranks 0, 1, exit 0")
    assert len(head) == 2
    assert (info["id"], info["world_size"], info["ranks"], info["missing_ranks"]) == \
        ("j1", 2, [0, 1], [])

    (tmp_path / "b").mkdir()
    Rank(tmp_path / "b", 0, world=4).close()
    Rank(tmp_path / "b", 1, world=4, status="failed").close()
    with Job.open(str(tmp_path / "b")) as job:
        head = header_lines(job, compare(job))
    assert head[1] == ("yellow", "complete: rank 0; failed: rank 1")
    assert head[2] == ("yellow", "ranks 2, 3 of 0-3 have no run file in this folder (not "
                                 "started, or its file is elsewhere: copy it here)")
