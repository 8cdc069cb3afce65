"""Generated code is never "the user's line" (issue 30).

Inductor writes each compiled graph as a Python module in its cache folder
(``/tmp/torchinductor_<user>/xx/<hash>.py``, or under
``TORCHINDUCTOR_CACHE_DIR``); an error raised while it runs (a kernel's bounds
check, a collective that times out) has that module as its innermost frame
outside torch. No user wrote it or can find it: the finding sits at the
user's compiled function, with the user's call in its stack.

Real programs under `graphdbg run`, real inductor (a C++ compile each, so one
run per program, shared by the assertions):
- tests/support/placement/inductor_index.py: a table lookup compiled with
  ``torch.compile(fn)``, called with an index past the table's end (with
  ``--no-compare``: only the traceback places it, as for every graph that
  cannot be replayed);
- tests/support/dist/compiled_timeout.py: two ranks under torchrun, rank 0
  in an ``@torch.compile``'d all_reduce that rank 1 never joins, until gloo's
  timeout (a graph with a collective is never replayed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SUPPORT, line_of, report_doc, report_json

INDEX = SUPPORT / "placement" / "inductor_index.py"
TIMEOUT = SUPPORT / "dist" / "compiled_timeout.py"


def errors(doc: dict) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["severity"] == "error"]


def in_generated_code(frame: dict) -> bool:
    return "torchinductor_" in frame["file"] or frame["file"].startswith("<")


# -- the rule -----------------------------------------------------------------------------

def test_inductors_output_modules_are_generated_code(tmp_path, monkeypatch):
    from graphdbg.hooks.placement import internal
    assert internal.is_generated("/tmp/torchinductor_alice/ci/cicxyz.py")
    assert internal.is_generated("<eval_with_key>.3") and internal.is_generated("<string>")
    assert not internal.is_generated("<ipython-input-3-abc>")
    cache = tmp_path / "inductor-cache"
    module = str(cache / "ab" / "cabxyz.py")
    assert not internal.is_generated(module)
    # the cache moved by the program, after graphdbg started: still generated
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    assert internal.is_generated(module)
    assert not internal.is_generated(str(tmp_path / "train.py"))


# -- a kernel's error, one process ------------------------------------------------------------

@pytest.fixture(scope="module")
def index(runs):
    r = runs.program(INDEX, "--no-compare")
    assert r.returncode != 0 and "index out of bounds" in r.stderr, r.stderr[-3000:]
    return r


@pytest.mark.inductor
def test_an_error_in_inductors_generated_code_is_at_the_compiled_function(index):
    for doc in (report_doc(index.run), report_json(index.run, index.dir)):
        (d,) = errors(doc)
        assert d["kind"] == "runtime_error" and "index out of bounds" in d["message"]
        # the compiled function (its frame's line), called from the user's line
        assert (d["file"], d["line"], d["function"]) == (
            str(INDEX), line_of(INDEX, "lookup def"), "lookup")
        assert [(f["file"], f["line"]) for f in d["stack"]] == [
            (str(INDEX), line_of(INDEX, "bad call")), (str(INDEX), line_of(INDEX, "lookup def"))]
        assert not any(in_generated_code(f) for f in d["stack"])
        # the traceback is kept whole: the generated module's frame is still in it
        assert "cpp_fused_" in d["detail"]["traceback"]


# -- a compiled collective's timeout, two ranks ------------------------------------------------

@pytest.fixture(scope="module")
def timeout(runs):
    job = runs.job("compiled-timeout", TIMEOUT.name)
    assert job.returncode != 0 and "Timed out" in job.stderr, job.stderr[-3000:]
    return job


@pytest.mark.inductor
@pytest.mark.xdist_group("jobs")
def test_a_ranks_compiled_collective_error_is_at_the_users_compiled_function(timeout):
    run = timeout.run / "rank0.run"
    for doc in (report_doc(run), report_json(run, timeout.dir)):
        assert doc["run"]["rank"]["rank"] == 0 and doc["run"]["internal_errors"] == []
        (d,) = errors(doc)
        assert d["kind"] == "runtime_error" and "Timed out" in d["message"]
        # before: at inductor's generated module, `torchinductor_<user>/…/<hash>.py`
        assert (Path(d["file"]), d["line"], d["function"]) == (
            TIMEOUT, line_of(TIMEOUT, "summed def"), "summed")
        assert [(Path(f["file"]), f["line"]) for f in d["stack"]] == [
            (TIMEOUT, line_of(TIMEOUT, "summed call")), (TIMEOUT, line_of(TIMEOUT, "summed def"))]
        # the rank's position names the same function and the call that raised
        call = doc["run"]["position"]["call"]
        assert (call["function"], call["raised"]) == ("summed", True)
        # the graph's collective, not checked against eager, at the all_reduce line
        (skipped,) = [x for x in doc["diagnostics"] if x["kind"] == "check_skipped"]
        assert skipped["line"] == line_of(TIMEOUT, "all_reduce")
