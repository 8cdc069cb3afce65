"""`graphdbg diff`: an eager run (--stance force_eager) against a compiled run
(the golden test's run of the same sample)."""

import json

from conftest import AOT, GOLDEN_SAVE, SAMPLES, graphdbg, group

EAGER = ("--stance", "force_eager")


@group("transformer")
def test_clean_compiled_run_matches_its_eager_run(runs, workdir):
    eager = runs.graphdbg("transformer", *AOT, *GOLDEN_SAVE, opts=EAGER).ok()
    compiled = runs.golden("transformer").ok()
    proc = graphdbg("diff", "--json", eager.run, compiled.run, cwd=workdir)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["a"]["stance"] == "force_eager" and doc["a"]["graphs"] == 0
    assert doc["b"]["graphs"] == 1 and doc["aligned_ops"] > 10
    assert doc["a"]["exit_status"] == doc["b"]["exit_status"] == 0
    assert doc["first_divergence"] is None and doc["graph_boundaries"] == []
    assert doc["compiled_in_one_run"] and all(c["compiled_in"] == "B" for c in doc["compiled_in_one_run"])
    assert doc["timing"]


@group("divergence_faulty")
def test_faulty_compiled_run_parts_from_eager_at_the_graph_output(runs, workdir):
    eager = runs.graphdbg("divergence_faulty", *AOT, *GOLDEN_SAVE, opts=EAGER).ok()
    compiled = runs.golden("divergence_faulty").ok()
    proc = graphdbg("diff", "--json", eager.run, compiled.run, cwd=workdir)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    (b,) = doc["graph_boundaries"]
    assert b["compiled_in"] == "B" and b["file"] == str(SAMPLES / "divergence_faulty.py")
    # the graph's output (the head's Linear) against the eager addmm that computed it
    assert b["code"].startswith("return self.head(") and b["eager_op"] == "aten.addmm.default"
    assert b["step"] is None  # no optimizer: the eager run counts no steps
    text = " ".join(graphdbg("diff", eager.run, compiled.run, cwd=workdir).stdout.split())
    assert f"output 0 differs at samples/divergence_faulty.py:{b['line']}" in text or \
        f"output 0 differs at {b['file']}:{b['line']}" in text


@group("transformer")
def test_a_run_whose_program_failed_says_so_in_the_heading(runs, workdir):
    # nothing recorded in A because its program stopped, not because the runs agree
    (workdir / "stops.py").write_text("import sys\nsys.exit(3)\n")
    assert graphdbg("run", "-q", "-o", "stops.run", "stops.py", cwd=workdir).returncode == 3
    compiled = runs.golden("transformer").ok()
    proc = graphdbg("diff", "--json", "stops.run", compiled.run, cwd=workdir)
    doc = json.loads(proc.stdout)
    assert (doc["a"]["exit_status"], doc["b"]["exit_status"]) == (3, 0)
    text = " ".join(graphdbg("diff", "stops.run", compiled.run, cwd=workdir).stdout.split())
    assert "A=stops.run (its program exited 3, stance default, 0 graphs, 0 eager ops)" in text
    assert "its program exited" not in text.split("B=", 1)[1].split(")", 1)[0]
    assert ", 1 graph, " in text                       # B's one graph, in the singular


def test_diff_refuses_foreign_file(workdir):
    (workdir / "x.txt").write_text("nope")
    proc = graphdbg("diff", "x.txt", "x.txt", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.strip() == "graphdbg: x.txt is not a graphdbg run file"
