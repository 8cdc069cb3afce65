"""`graphdbg diff`: an eager run (--stance force_eager) against a compiled run."""

import json

from conftest import SAMPLES, graphdbg


def _run(workdir, out, sample, *opts):
    proc = graphdbg("run", "-q", "-o", out, *opts, SAMPLES / sample, "--backend", "aot_eager",
                    cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_clean_compiled_run_matches_its_eager_run(workdir):
    _run(workdir, "eager.run", "transformer.py", "--stance", "force_eager")
    _run(workdir, "compiled.run", "transformer.py")
    proc = graphdbg("diff", "--json", "eager.run", "compiled.run", cwd=workdir)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["a"]["stance"] == "force_eager" and doc["a"]["graphs"] == 0
    assert doc["b"]["graphs"] == 1 and doc["aligned_ops"] > 10
    assert doc["first_divergence"] is None and doc["graph_boundaries"] == []
    assert doc["compiled_in_one_run"] and all(c["compiled_in"] == "B" for c in doc["compiled_in_one_run"])
    assert doc["timing"]


def test_faulty_compiled_run_parts_from_eager_at_the_graph_output(workdir):
    _run(workdir, "eager.run", "divergence_faulty.py", "--stance", "force_eager")
    _run(workdir, "compiled.run", "divergence_faulty.py", "--no-compare")
    proc = graphdbg("diff", "--json", "eager.run", "compiled.run", cwd=workdir)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    (b,) = doc["graph_boundaries"]
    assert b["compiled_in"] == "B" and b["file"] == str(SAMPLES / "divergence_faulty.py")
    text = graphdbg("diff", "eager.run", "compiled.run", cwd=workdir).stdout
    assert "output differs" in text and "divergence_faulty.py" in text


def test_diff_refuses_foreign_file(workdir):
    (workdir / "x.txt").write_text("nope")
    proc = graphdbg("diff", "x.txt", "x.txt", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.strip() == "graphdbg: x.txt is not a graphdbg run file"
