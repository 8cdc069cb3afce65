"""Distributed runs: real torchrun jobs, 2 ranks on gloo (CPU), each rank
under `graphdbg run` (tests/support/jobs.py, shared with test_rank_views.py).

- tests/support/dist/ddp_clean.py: torch.compile(DDP(model)) with two
  gradient buckets, then FSDP2 (fully_shard) with a compiled step: no false
  alarm, DDPOptimizer's buckets shown as one function, and the losses bit for
  bit those of a plain torchrun (the observer rule on 2 ranks).
- tests/support/dist/ranks_part.py: ranks that part ways, then hang in a
  collective until torchrun is killed: each rank's file readable, and where
  each rank was.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
import torch

from conftest import ROOT, assert_every_finding_has_a_line, report_doc, report_text
from graphdbg.core import ranks
from graphdbg.core.errors import GraphdbgError
from graphdbg.runfile.query import Run
from graphdbg.runfile.writer import RunWriter
from jobs import parted_hangs

pytestmark = pytest.mark.xdist_group("jobs")

PROGRAMS = ROOT / "tests" / "support" / "dist"
CLEAN, PARTED = PROGRAMS / "ddp_clean.py", PROGRAMS / "ranks_part.py"


def line(program: Path, marker: str) -> int:
    """The line of ``program`` that ends with ``# MARKER``."""
    found = [i for i, text in enumerate(program.read_text().splitlines(), 1)
             if re.search(rf"#\s*{marker}\s*$", text) or text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, (marker, found)
    return found[0]


def at(d: dict) -> tuple[str, int]:
    return Path(d["file"]).name, d["line"]


def losses(stdout: str) -> dict[int, list[str]]:
    # ranks print at once into one pipe: a line may follow another's without a newline
    return {int(r): v.split() for r, v in
            re.findall(r"losses rank (\d+): ((?:0x[0-9a-f.]+p[+-]\d+\s*)+)", stdout)}


@pytest.fixture(scope="module")
def clean(runs):
    job = runs.job("ddp", "ddp_clean.py")
    assert job.returncode == 0, job.stderr[-3000:]
    return job


@pytest.fixture(scope="module")
def parted(runs):
    return runs.job("parted", "ranks_part.py", hang_until=parted_hangs)


@pytest.fixture(scope="module")
def clean_docs(clean) -> dict[int, dict]:
    return {r: report_doc(clean.run / f"rank{r}.run") for r in (0, 1)}


@pytest.fixture(scope="module")
def parted_docs(parted) -> dict[int, dict]:
    return {r: report_doc(parted.run / f"rank{r}.run") for r in (0, 1)}


# -- which rank wrote what ------------------------------------------------------------

def test_each_rank_writes_its_own_file_in_the_jobs_folder(clean):
    assert sorted(p.name for p in clean.run.iterdir()) == ["rank0.run", "rank1.run"]
    jobs = set()
    for r in (0, 1):
        with Run(clean.run / f"rank{r}.run") as run:
            info = run.info
            assert info.rank["rank"] == r and info.rank["local_rank"] == r
            assert info.rank["world_size"] == 2 and info.rank["local_world_size"] == 2
            assert info.rank["backend"] == "gloo"
            assert info.host == socket.gethostname() and info.status == "complete"
            jobs.add(info.rank["job"])
    assert len(jobs) == 1 and None not in jobs


TEARDOWN_ABORT = "terminate called without an active exception"


def test_the_observer_rule_on_two_ranks(clean, runs):
    plain = runs.job("ddp-plain", "ddp_clean.py", plain=True)
    # torch alone (no graphdbg here) now and then aborts a rank in its own
    # teardown, after destroy_process_group ("terminate called without an
    # active exception", about 1 run in 10 here): the losses are printed before
    assert plain.returncode == 0 or TEARDOWN_ABORT in plain.stderr, plain.stderr[-3000:]
    expected = losses(plain.stdout)
    assert sorted(expected) == [0, 1] and all(len(v) == 5 for v in expected.values())
    assert losses(clean.stdout) == expected     # bitwise: float.hex


# -- DDP and FSDP2 as users meet them --------------------------------------------------

def test_a_clean_ddp_and_fsdp2_job_has_no_false_alarm(clean_docs):
    for doc in clean_docs.values():
        assert_every_finding_has_a_line(doc)
        assert doc["run"]["internal_errors"] == []
        loud = [(d["kind"], d["message"]) for d in doc["diagnostics"] if d["severity"] != "info"]
        assert loud == []
        owners = {d["detail"]["expected_in"] for d in doc["diagnostics"]
                  if d["kind"] == "graph_break"}
        assert owners == {"ddp", "fsdp"}   # DDP's wrapper and FSDP2's hooks: said to be theirs
        ddp = [d for d in doc["diagnostics"] if d["kind"] == "graph_break"
               and d["detail"]["expected_in"] == "ddp"]
        assert {at(d) for d in ddp} == {("ddp_clean.py", line(CLEAN, "DDP_CALL"))}
        assert all("DDPOptimizer" in d["hint"] for d in ddp)


def test_ddp_buckets_are_one_function_split(clean, clean_docs):
    for r, doc in clean_docs.items():
        split = [g for g in doc["graphs"] if g["ddp_bucket"]]
        assert len(split) == 2 and len({g["compile_id"] for g in split}) == 1
        assert [g["ddp_bucket"]["index"] for g in split] == [0, 1]
        assert all(g["ddp_bucket"]["count"] == 2 for g in split)
        params = [p for g in split for p in g["ddp_bucket"]["params"]]
        assert sorted(params) == sorted([f"layers.{i}.{k}" for i in range(6)
                                         for k in ("weight", "bias")]
                                        + ["head.weight", "head.bias"])
        # DDPOptimizer runs each piece on fake tensors while it compiles: not a call
        assert [g["calls"] for g in split] == [3, 3]
        text = report_text(clean.run / f"rank{r}.run")
        assert "bucket 1/2" in text and "DDPOptimizer split" in text
    # the FSDP2 step is compiled and called twice
    fsdp = [g for g in clean_docs[0]["graphs"] if g["function"] == "fsdp_loss"]
    assert fsdp and fsdp[0]["calls"] == 2


def test_compiles_of_torchs_own_frames_are_placed_at_the_users_line(clean_docs):
    rows = clean_docs[0]["compile_times"]
    assert rows and all(Path(c["file"]).name == "ddp_clean.py" for c in rows), rows
    wrapper = [c for c in rows if "contextlib.py" in (c["function"] or "")]
    assert wrapper and all(c["line"] == line(CLEAN, "DDP_CALL") for c in wrapper)


# -- ranks that part ways, and a job that hangs -----------------------------------------

def test_a_killed_jobs_files_say_where_each_rank_was(parted, parted_docs):
    assert parted.returncode != 0          # torchrun was killed
    synced = line(PARTED, "SYNCED_DEF")
    for r, doc in parted_docs.items():
        assert doc["run"]["status"] == "ended without closing", r
        assert doc["run"]["internal_errors"] == []
        call = doc["run"]["position"]["call"]
        assert (call["function"], Path(call["file"]).name, call["line"]) == \
            ("synced", "ranks_part.py", synced)
        assert call["running"] is (r == 0)     # rank 0 waits inside it; rank 1 went on
        op = doc["run"]["position"]["op"]
        assert at(op) == ("ranks_part.py", line(PARTED, "SYNCED_CALL"))
    # what happened before the hang was written (drained before each collective)
    heads = [g for g in parted_docs[0]["graphs"] if g["function"] == "head"]
    assert sum(g["calls"] for g in heads) == 3
    text = report_text(parted.run / "rank0.run")
    assert "last seen: inside compiled call 0 of graph" in text and f"ranks_part.py:{synced}" in text


def test_ranks_findings_differ_where_the_program_does(parted_docs):
    by_rank = {r: {(d["kind"], *at(d)) for d in doc["diagnostics"] if d["severity"] != "info"}
               for r, doc in parted_docs.items()}
    assert by_rank[0] == set()
    assert ("graph_break", "ranks_part.py", line(PARTED, "RANK_BREAK")) in by_rank[1]
    assert ("recompile", "ranks_part.py", line(PARTED, "SCALED_BODY")) in by_rank[1]


def test_a_graph_with_collectives_is_never_run_again_by_the_check(parted_docs):
    first = line(PARTED, "FIRST_ALLREDUCE")
    for r, doc in parted_docs.items():
        skipped = [d for d in doc["diagnostics"] if d["kind"] == "check_skipped"]
        assert len(skipped) == 1 and at(skipped[0]) == ("ranks_part.py", first)
        assert skipped[0]["detail"]["collectives"] == \
            ["_c10d_functional.all_reduce"] * (2 if r == 0 else 1)


# -- paths, and a writer that fails -----------------------------------------------------

TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": "0", "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_RUN_ID": "5abc2788-0bb9-4f48-80e5-a78f81563cfb"}


def test_rank_and_job_from_the_launchers_environment():
    info = ranks.from_env(TORCHRUN_ENV)
    assert (info.rank, info.world_size, info.local_rank, info.job) == (1, 2, 1, "5abc2788")
    assert ranks.rank_path(None, "train", info) == "graphdbg-train-5abc2788/rank1.run"
    assert ranks.rank_path("ddp.run", "train", info) == "ddp.run/rank1.run"
    assert ranks.from_env({**TORCHRUN_ENV, "TORCHELASTIC_RESTART_COUNT": "2"}).file_name == \
        "rank1-restart2.run"
    slurm = ranks.from_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                            "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"})
    assert (slurm.rank, slurm.world_size, slurm.local_rank, slurm.job) == (3, 8, 1, "4242.0")
    assert ranks.from_env({}) is None
    assert ranks.from_env({"RANK": "0", "WORLD_SIZE": "1"}) is None   # one process: no job
    # torchrun's default run id ("none": a fixed --master-port, as accelerate
    # launch starts it): the folder its agent made for the launch's logs
    static = {**TORCHRUN_ENV, "TORCHELASTIC_RUN_ID": "none",
              "TORCHELASTIC_ERROR_FILE": "/tmp/torchelastic_k2x9/none_exw_mb9e/attempt_1/1/error.json"}
    assert ranks.from_env(static).job == "exw_mb9e"
    assert ranks.from_env({**static, "SLURM_JOB_ID": "77"}).job == "77"
    # no log folder (--log-dir /dev/null), or none of its form: the launcher's pid
    for error_file in ("", "/logs/error.json", "/logs/other_exw/attempt_0/1/error.json"):
        assert ranks.from_env({**static, "TORCHELASTIC_ERROR_FILE": error_file}).job == \
            f"pid{os.getppid()}"
    bare = ranks.from_env({"RANK": "1", "WORLD_SIZE": "2"})          # a launcher without an id
    assert bare.job == f"pid{os.getppid()}" and bare.local_rank is None
    assert ranks.from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None


def test_output_of_a_rank(tmp_path, monkeypatch):
    from graphdbg.runner import output_path
    monkeypatch.chdir(tmp_path)
    for k, v in TORCHRUN_ENV.items():
        monkeypatch.setenv(k, v)
    assert output_path(None, "train.py", False) == "graphdbg-train-5abc2788/rank1.run"
    assert (tmp_path / "graphdbg-train-5abc2788").is_dir()
    assert output_path("ddp.run", "train.py", False) == "ddp.run/rank1.run"
    (tmp_path / "old.run").write_text("a run file of a single process")
    with pytest.raises(GraphdbgError, match="old.run is a file; under a launcher"):
        output_path("old.run", "train.py", False)


def test_a_writer_that_cannot_write_never_reaches_the_program(tmp_path):
    # two processes given one path (the report: `-o ddp.run` on two ranks before
    # they had folders): the second takes the file over; the first must go quiet
    path = str(tmp_path / "x.run")
    first, told = RunWriter(path), []
    first.on_failure = told.append
    first.frame_id(str(tmp_path / "a.py"), 1, "f")
    first.flush()
    second = RunWriter(path)
    first.frame_id(str(tmp_path / "a.py"), 2, "g")
    first.flush()                     # no exception
    first.set_meta(more=1)
    first.close(exit_status=0)
    assert first.failed and len(told) == 1 and "the program goes on" in told[0]
    second.frame_id(str(tmp_path / "b.py"), 1, "h")
    second.close(exit_status=0)
    with Run(path) as run:
        assert run.info.exit_status == 0


def _mlp(x, w1, w2):
    h = torch.relu(x @ w1)
    h = h * 3 + 1                                          # FAULTY
    return (h @ w2).tanh()


def test_a_ranks_localisation_is_bounded_and_its_file_says_which_rank(tmp_path, monkeypatch,
                                                                      clean_torch):
    # in-process, as one rank of a launcher (no process group needed): the
    # divergence is found, but its search stops at the rank's budget
    from faulty_backends import by_line, make_faulty_backend
    from graphdbg.hooks.record import ranks as rank_hooks
    import graphdbg
    for k, v in TORCHRUN_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(rank_hooks, "LOCALIZE_BUDGET_S", 0.0)
    fault = make_faulty_backend(by_line(line(Path(__file__), "FAULTY")), "scale", inner="aot_eager")
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8, 2)
    with graphdbg.capture(str(tmp_path / "r.run")):
        torch.compile(_mlp, backend=fault)(x, w1, w2)
    doc = report_doc(tmp_path / "r.run")
    assert doc["run"]["rank"]["rank"] == 1 and doc["run"]["rank"]["job"] == "5abc2788"
    assert doc["run"]["position"]["call"]["function"] == "_mlp"
    (d,) = [d for d in doc["diagnostics"] if d["kind"] == "divergence"]
    assert any("stopped after 0 s" in u for u in d["detail"]["undecided"]), d["detail"]
    assert Path(d["file"]).name == "test_distributed.py"   # still at the user's line


def test_a_ranks_compiled_call_that_raised_is_where_it_stopped(tmp_path, monkeypatch, clean_torch):
    import graphdbg
    for k, v in TORCHRUN_ENV.items():
        monkeypatch.setenv(k, v)
    step = torch.compile(lambda x: torch.linalg.cholesky(x) * 2, backend="eager")
    with pytest.raises(RuntimeError), graphdbg.capture(str(tmp_path / "r.run")):
        step(torch.eye(3))
        step(-torch.eye(3))     # not positive-definite: raises inside the compiled call
    doc = report_doc(tmp_path / "r.run")
    call = doc["run"]["position"]["call"]
    assert (call["call_idx"], call["running"], call["raised"]) == (1, False, True)
    assert "which raised" in report_text(tmp_path / "r.run")
