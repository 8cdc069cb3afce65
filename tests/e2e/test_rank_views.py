"""One view of a distributed job's ranks: `graphdbg report DIR` (text and
--json), `graphdbg diff DIR` and `graphdbg tui DIR`'s job screen, on real
2-rank torchrun jobs (tests/support/jobs.py, shared with the other
distributed tests) and on small run files written by hand
(tests/support/rankfiles.py: every record known) for what a real job cannot
easily show: a straggler, a call that waited, a missing rank, a stale file.

The reports are built in-process; one CLI subprocess per command at most."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from jobs import PROGRAMS, parted_hangs
from rankfiles import AR, RELU, SUM, Rank, two_ranks

from graphdbg.analysis.rankdiff import diff_job
from graphdbg.analysis.ranks import STRAGGLER_MIN_S, WAIT_MIN_NS, compare, rank_list
from graphdbg.reporters.ranks import document
from graphdbg.runfile.job import Job, is_job_folder

from conftest import graphdbg

PARTED = PROGRAMS / "ranks_part.py"
CLEAN = PROGRAMS / "ddp_clean.py"

jobs = pytest.mark.xdist_group("jobs")


def marker(path: Path, name: str) -> int:
    """The line of the one `# NAME` comment of a test program."""
    lines = [i for i, ln in enumerate(path.read_text().splitlines(), 1)
             if re.search(rf"#\s*{name}\b", ln)]
    assert len(lines) == 1, (path, name, lines)
    return lines[0]


def line_with(path: Path, text: str) -> int:
    lines = [i for i, ln in enumerate(path.read_text().splitlines(), 1)
             if ln.split("#")[0].strip() == text]
    assert len(lines) == 1, (path, text, lines)
    return lines[0]


def cli(*args: str) -> tuple[int, str]:
    """`graphdbg ARGS` in-process: (exit status, stdout), 120 columns wide
    (the views honour COLUMNS, which xdist's workers set to 80)."""
    from graphdbg.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), \
            pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "120")
        try:
            rc = main(list(args))
        except SystemExit as exc:   # --help
            rc = exc.code
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def parted(runs) -> Path:
    return runs.job("parted", "ranks_part.py", hang_until=parted_hangs).run


@pytest.fixture(scope="module")
def clean(runs) -> Path:
    return runs.job("ddp", "ddp_clean.py").run


def by_kind(differences, kind: str) -> list:
    return [d for d in differences if d.kind == kind]


# -- the real jobs ---------------------------------------------------------------------

@jobs
def test_parted_job_differences_each_at_the_users_line(parted):
    with Job.open(str(parted)) as job:
        assert sorted(job.runs) == [0, 1] and job.world_size == 2 and not job.missing
        assert not job.stale and job.id
        c = compare(job)
        rank1_recompile = job.runs[1].findings("recompile")[0]
    for d in c.differences:   # a difference without a location is a bug
        assert d.file and isinstance(d.line, int) and d.line > 0, d

    # rank 0's compiled synced issues 2 all_reduce, rank 1's 1: at the one rank 0 alone issues
    (coll,) = by_kind(c.differences, "collectives")
    assert (coll.severity, coll.file, coll.line, coll.function) == \
        ("error", str(PARTED), marker(PARTED, "RANK0_ALLREDUCE"), "synced")
    assert coll.ranks == (0, 1)
    assert "rank 0: 2 all_reduce; rank 1: 1 all_reduce" in coll.message
    assert "wait for each other" in coll.message
    assert [len(v) for v in coll.detail["collectives"].values()] == [2, 1]

    # rank 1's recompile, where torch put the failed guard (`s` used in scaled)
    (rc,) = by_kind(c.differences, "recompile")
    assert (rc.file, rc.line) == (rank1_recompile.file, rank1_recompile.line) \
        == (str(PARTED), line_with(PARTED, "return x * s + 1"))
    assert rc.ranks == (1,) and rc.severity == "warning"
    assert "rank 1 only" in rc.message and "was 1.0, now 2.0" in rc.message

    # rank 1's graph break at its print
    (gb,) = by_kind(c.differences, "graph_break")
    assert (gb.file, gb.line, gb.ranks, gb.severity) == \
        (str(PARTED), marker(PARTED, "RANK_BREAK"), (1,), "warning")

    # the graphs that follow from them are info, and say what they follow from;
    # synced's graphs differ too, but the collectives say it (no second record)
    graphs = by_kind(c.differences, "graph")
    assert graphs and all(g.severity == "info" and "follows from" in g.message for g in graphs)
    assert {g.function for g in graphs} == {"scaled", "head"}

    # where each rank was: rank 0 inside its compiled call of synced, rank 1 past it
    stopped = {d.ranks[0]: d for d in by_kind(c.differences, "stopped")}
    assert sorted(stopped) == [0, 1]
    call0 = stopped[0].detail["position"]["call"]
    call1 = stopped[1].detail["position"]["call"]
    assert call0["function"] == call1["function"] == "synced"
    assert call0["running"] is True and call1["running"] is False
    assert stopped[0].line == call0["line"]            # inside synced: at synced
    assert stopped[1].line == marker(PARTED, "SYNCED_CALL")   # its last eager op
    assert stopped[0].line == marker(PARTED, "SYNCED_DEF")
    ranks = {s.rank: s for s in c.ranks}
    assert ranks[1].recompiles == 1 and ranks[1].graph_breaks == 1 and ranks[0].recompiles == 0
    assert {s.status for s in c.ranks} == {"ended without closing"}


@jobs
def test_parted_job_report_text_and_json(parted):
    rc, text = cli("report", str(parted))
    assert rc == 0
    flat = " ".join(text.split())
    assert "job " in text and "2 ranks of 2 (gloo" in flat
    differ = text.index("Where ranks differ (")
    was = text.index("Where each rank was")
    table = text.index("Ranks (2)")
    assert differ < was < table
    assert f"ranks_part.py:{marker(PARTED, 'RANK0_ALLREDUCE')} in synced" in text
    assert f"ranks_part.py:{marker(PARTED, 'RANK_BREAK')} in head" in text
    assert "last seen: inside compiled call 0 of graph" in text
    assert f"graphdbg report {parted}/rank1.run" in flat or "rank1.run" in flat

    with Job.open(str(parted)) as job:
        doc = json.loads(json.dumps(document(job, compare(job)), default=str))
    assert doc["schema"] == "graphdbg-job/1"
    assert doc["job"]["world_size"] == 2 and doc["job"]["missing_ranks"] == []
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][0]["position"]["call"]["running"] is True
    assert set(doc["runs"]) == {"0", "1"}
    assert doc["runs"]["1"]["schema"] == "graphdbg-report/1"
    assert all("nodes" not in g for g in doc["runs"]["1"]["graphs"])
    assert doc["differences"][0]["kind"] == "collectives"
    assert all(d["file"] and d["line"] for d in doc["differences"])

    # rank against rank: the ranks' files never closed, and still their ops part
    # ways early (rank 1's head breaks: its first compiled piece returns relu's [4])
    rc, text = cli("diff", str(parted))
    assert rc == 1 and "the files of ranks 0, 1 never closed" in " ".join(text.split())
    with Job.open(str(parted)) as job:
        (pair,) = diff_job(job).pairs
    assert pair.unclosed == (0, 1) and pair.first.file == str(PARTED)
    assert pair.first.function in ("head", "scaled"), pair.first


@jobs
def test_clean_job_gives_no_false_alarm(clean):
    with Job.open(str(clean)) as job:
        c = compare(job)
        doc = json.loads(json.dumps(document(job, c), default=str))
        pairs = diff_job(job)
    # nothing differs that deserves a warning; timing (a compile straggler of
    # seconds: two ranks and another test share two cores here) is info
    alarms = [d for d in c.differences if d.severity in ("error", "warning")]
    assert alarms == [], [d.message for d in alarms]
    for d in by_kind(c.differences, "compile_time"):
        assert d.detail["compile_s"] - d.detail["others_median_s"] > STRAGGLER_MIN_S
    # the compiled calls issue no collective: a slow call there is never a warning
    assert all(d.severity == "info" for d in by_kind(c.differences, "waited_call"))
    assert {s.status for s in c.ranks} == {"complete"} and {s.exit_status for s in c.ranks} == {0}
    # DDPOptimizer's buckets, in each rank's run
    for rank in ("0", "1"):
        buckets = [g["ddp_bucket"] for g in doc["runs"][rank]["graphs"] if g["ddp_bucket"]]
        assert [b["index"] for b in buckets] == [0, 1] and {b["count"] for b in buckets} == {2}
    # the diff of ranks: values differ by design, ops and shapes do not
    assert not pairs.differs and pairs.pairs[0].aligned_ops > 0
    assert pairs.pairs[0].only_in_a == pairs.pairs[0].only_in_b == 0


@jobs
def test_diff_of_a_job_folder_and_of_two_rank_files(clean):
    rc, text = cli("diff", str(clean))
    assert rc == 0 and "values are not compared" in " ".join(text.split())
    assert "rank 0 ↔ rank 1" in text
    rc, text = cli("diff", str(clean / "rank0.run"), str(clean / "rank1.run"))
    assert rc in (0, 1) and "graphdbg diff A=" in text   # two runs: as before
    rc, _ = cli("diff", str(clean), str(clean / "rank1.run"))
    assert rc == 2


@jobs
def test_job_screen_lists_ranks_and_enter_opens_a_rank(parted):
    from graphdbg.tui.model.job import JobModel
    from graphdbg.tui.views.job import JobApp

    def shown(app) -> str:
        return "\n".join("".join(seg.text for seg in strip)
                         for strip in app.screen._compositor.render_strips())

    with Job.open(str(parted)) as job:
        model = JobModel.load(job)
        rows = model.rank_rows()
        assert [r[0] for r in rows] == ["0", "1"]
        assert rows[0][-1].startswith("last seen: inside compiled call")
        assert model.difference_rows()[0][1] == "collectives"
        assert model.run_of(model.differences[0]) == str(parted / "rank0.run")

        async def main() -> JobApp:
            app = JobApp(job, cursor_blink=False)   # builds its model in a worker
            app.animation_level = "none"
            async with app.run_test(size=(120, 30)) as pilot:
                for _ in range(3):
                    await app.workers.wait_for_complete()
                    await pilot.pause()
                text = shown(app)
                assert "2 ranks of 2" in text and "ended without closing" in text
                assert "collectives" in text and "stopped" in text
                await pilot.press("d", "down")      # the differences: the preview follows
                assert "recompile on rank 1 only" in " ".join(shown(app).split())
                await pilot.press("r", "down", "enter")
            return app
        app = asyncio.run(main())
    assert app.return_value == str(parted / "rank1.run") and app.rank_row == 1


@jobs
def test_cli_report_json_of_a_job_folder(parted, tmp_path):
    proc = graphdbg("report", "--json", parted, cwd=tmp_path, check=True)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "graphdbg-job/1" and doc["differences"]
    # and a job folder under the terminal UI without a terminal: one line, no traceback
    proc = graphdbg("tui", parted, cwd=tmp_path)
    assert proc.returncode == 2 and "needs a terminal" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_texts_say_they_take_a_job_folder():
    for command in ("report", "tui", "diff"):
        rc, text = cli(command, "--help")
        assert rc == 0 and "job's folder" in " ".join(text.split()), command


# -- small jobs written by hand --------------------------------------------------------

def test_synthetic_collectives_order_and_rank_lists(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, AR, ("broadcast", 6), SUM], collectives=["all_reduce", "broadcast"])
    r1.graph(1, "0/0", [RELU, ("broadcast", 6), AR, SUM], collectives=["all_reduce", "broadcast"])
    r0.close(), r1.close()
    with Job.open(str(tmp_path)) as job:
        c = compare(job)
    (coll,) = by_kind(c.differences, "collectives")
    assert "in a different order" in coll.message and coll.line == 6
    assert not by_kind(c.differences, "graph")   # the collectives say it
    assert rank_list([0, 1, 2, 3, 5, 7, 8]) == "ranks 0-3, 5, 7, 8" and rank_list([4]) == "rank 4"


def test_synthetic_straggler_and_waited_call(tmp_path):
    slow = STRAGGLER_MIN_S + 10
    waited = WAIT_MIN_NS * 4
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, AR, SUM], compile_s=1.0, collectives=["all_reduce"],
             calls=[1_000_000, waited, 1_000_000])
    r1.graph(1, "0/0", [RELU, AR, SUM], compile_s=slow, collectives=["all_reduce"],
             calls=[1_000_000, 1_000_000, 1_100_000])
    r0.graph(2, "1/0", [RELU], calls=[1_000_000, waited])     # no collective: info
    r1.graph(2, "1/0", [RELU], calls=[1_000_000, 1_000_000])
    r0.close(), r1.close()
    with Job.open(str(tmp_path)) as job:
        c = compare(job)
    (st,) = by_kind(c.differences, "compile_time")
    assert st.ranks == (1,) and (st.file, st.line) == (str(tmp_path / "train.py"), 4)
    assert st.severity == "info"   # 10 s more: noted; a minute more is a warning
    assert "rank 1 compiled for" in st.message
    w, slower = by_kind(c.differences, "waited_call")
    assert (w.severity, w.ranks, w.line) == ("warning", (0,), 6)   # at its all_reduce
    assert w.detail["calls"]["0"][0]["call"] == 1 and "waited at its first collective" in w.message
    assert slower.severity == "info" and "issues no collective" in slower.message


def test_synthetic_graph_differences_and_findings(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.graph(1, "0/0", [RELU, SUM])
    r1.graph(1, "0/0", [RELU, ("mul", 6), SUM])   # a different graph, parting at line 6
    r0.finding("compile_error", 11, "shape error at size 8", severity="error")
    r1.finding("compile_error", 11, "shape error at size 16", severity="error")  # the same, by gist
    r1.finding("recompile", 5, "recompile of step(): x changed", compile_id="0/1")
    r0.close(), r1.close()
    with Job.open(str(tmp_path)) as job:
        c = compare(job)
    assert not by_kind(c.differences, "compile_error")
    (g,) = by_kind(c.differences, "graph")
    assert g.line == 6 and g.ranks == (1,) and "part at node 2" in g.message
    assert g.severity == "info" and "follows from the recompile" in g.message   # same function
    (rc,) = by_kind(c.differences, "recompile")
    assert rc.line == 5 and rc.ranks == (1,)


def test_synthetic_missing_stale_superseded_unreadable_and_failed(tmp_path):
    r0 = Rank(tmp_path, 0, world=4)
    r0.graph(1, "0/0", [RELU, SUM]).close()
    old = Rank(tmp_path, 1, world=4, status="failed")
    old.graph(1, "0/0", [RELU]).close()
    r1 = Rank(tmp_path, 1, world=4, status="failed", name="rank1-restart1.run", restart=1)
    r1.graph(1, "0/0", [RELU, SUM])
    r1.finding("runtime_error", 7, "RuntimeError: boom", severity="error")
    r1.close()
    stale = Rank(tmp_path, 2, world=4, job="old")
    stale.graph(1, "0/0", [("mul", 6)]).close()
    (tmp_path / "rank3.run").write_text("not a run file\n")
    with Job.open(str(tmp_path)) as job:
        assert job.missing == [] and [f.rank for f in job.unreadable] == [3]
        assert job.stale == {2: "old"} and job.id == "j1"
        assert [(f.rank, f.restart) for f in job.superseded] == [(1, 0)]
        assert job.path(1).endswith("rank1-restart1.run")
        c = compare(job)
        doc = json.loads(json.dumps(document(job, c), default=str))
        rc, text = cli("report", str(tmp_path))
    # the stale rank 2 is left out: no graph difference from it
    assert [d.kind for d in c.differences] == ["stopped"]
    (failed,) = c.differences
    assert (failed.severity, failed.line, failed.ranks) == ("error", 7, (1,))
    assert doc["job"]["stale"][0]["rank"] == 2 and doc["job"]["unreadable"][0]["rank"] == 3
    assert [r["stale"] for r in doc["ranks"]] == [False, False, True]
    flat = " ".join(text.split())
    assert "is from another job (old, not j1)" in flat and "an earlier restart of rank 1" in flat
    assert rc == 0 and "RuntimeError: boom" in flat

    shutil.rmtree(tmp_path / "more", ignore_errors=True)
    (tmp_path / "more").mkdir()
    Rank(tmp_path / "more", 0, world=3).close()
    with Job.open(str(tmp_path / "more")) as job:
        assert job.missing == [1, 2]
    assert is_job_folder(str(tmp_path)) and not is_job_folder(str(tmp_path / "train.py"))


def test_synthetic_diff_of_ranks_sequence_and_shapes(tmp_path):
    r0, r1 = two_ranks(tmp_path)
    r0.op("aten.relu", 5).op("aten.sum", 7).op("aten.add", 11)
    r1.op("aten.relu", 5).op("aten.sum", 7, shape=(4,)).op("aten.add", 11)
    r0.close(), r1.close()
    with Job.open(str(tmp_path)) as job:
        (pair,) = diff_job(job).pairs
    assert pair.first.what == "shape" and pair.first.line == 7
    rc, text = cli("diff", str(tmp_path))
    assert rc == 1 and "first divergence (shape)" in text

    (tmp_path / "seq").mkdir()
    r0, r1 = two_ranks(tmp_path / "seq")
    r0.op("aten.relu", 5).op("aten.sum", 7)
    r1.op("aten.relu", 5).op("aten.mul", 6).op("aten.sum", 7)
    r0.close(), r1.close()
    with Job.open(str(tmp_path / "seq")) as job:
        (pair,) = diff_job(job).pairs
    assert (pair.first.what, pair.first.op, pair.first.line) == ("sequence", "aten.mul", 6)
    assert pair.first.a is None and pair.first.b == 0
