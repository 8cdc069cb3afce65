"""`report --json` documents of the samples, made before the query-layer
refactor, and the normalisation that makes two runs of a sample comparable.

What changes from run to run is left out: times, paths of the checkout and of
temporary folders, memory addresses, graphdbg's own tracebacks; floats are kept
to 4 significant digits. Everything else (graphs, nodes, findings with their
lines, stacks, messages, hints, details, counts) must match exactly.

    python tests/support/golden.py OUT_DIR [SAMPLE ...]   # (re)make documents
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
# every one with the aot_eager backend and its outputs saved
SAMPLES = ["mlp_clean", "graph_breaks", "recompiles", "eager_only", "train_loop",
           "transformer", "showcase", "hf_gpt2", "divergence_faulty", "clean_compare",
           "compile_shape_error", "broken_fx_pass", "export_failure"]

_VOLATILE = {"started_at", "ended_at", "wall_s", "cwd", "file", "compile_time_s",
             "backend_time_s", "total_call_ns", "min_call_ns", "max_call_ns", "eager_ns",
             "total_ns", "seconds", "traceback", "top_ops", "hot_nodes", "device", "pid",
             "host", "compile_times", "py_spy", "eager_ref_ns", "steady_call_ns", "compiled_slower",
             "profile", "py_spy_error", "compiled_lines", "kernels"}
_ADDR = re.compile(r"0x[0-9a-f]{6,}")


_SITE = re.compile(r"/[^\s'\"]*?/site-packages/")
# torch cuts paths in "path:line in f" (guard comments, "Caused by: (...)") to a width
_CUT_PATH = re.compile(r"(?<=[\s(])[^\s(]*/([\w.-]+\.py:\d+ in )")


def _text(s: str, roots: list[str]) -> str:
    s = _SITE.sub("<site-packages>/", s)
    for r in roots:
        s = s.replace(r, "<root>")
    s = re.sub(r"/tmp/[^\s'\"]*?/(?=[\w.-]+\.(?:py|run|safetensors)\b)", "<tmp>/", s)
    s = _CUT_PATH.sub(r"\1", s)
    return _ADDR.sub("0x?", s)


def normalize(doc, roots: list[str]):
    def walk(v):
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k not in _VOLATILE:
                    out[_text(k, roots)] = walk(x)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            return _text(v, roots)
        if isinstance(v, float):
            return float(f"{v:.4g}")
        return v

    doc = json.loads(json.dumps(doc, default=str))
    # a frame's file is kept as `where` (relative to the checkout); the run file's path is not
    for d in doc.get("diagnostics", []):
        d["where"] = _text(f"{d.get('file')}:{d.get('line')}", roots)
        for f in d.get("stack", []):
            f["where"] = _text(f"{f.get('file')}:{f.get('line')}", roots)
    for g in doc.get("graphs", []):
        g["where"] = _text(f"{g.get('file')}:{g.get('line')}", roots)
        for n in g.get("nodes", []):
            n["where"] = _text(f"{n.get('file')}:{n.get('line')}", roots)
    return walk(doc)


def roots_for(root: Path) -> list[str]:
    return [str(root), os.path.realpath(root)]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else GOLDEN
    names = argv[1:] or SAMPLES
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            run = os.path.join(tmp, f"{name}.run")
            subprocess.run([sys.executable, "-m", "graphdbg", "run", "-q", "-o", run,
                            str(ROOT / "samples" / f"{name}.py"), "--backend", "aot_eager",
                            # as the tests' golden runs (conftest.GOLDEN_SAVE): they
                            # serve the observer rule's outputs too
                            "--save", "observed.safetensors"],
                           cwd=tmp, env=env, capture_output=True)
            doc = json.loads(subprocess.run(
                [sys.executable, "-m", "graphdbg", "report", "--json", run], cwd=tmp, env=env,
                capture_output=True, text=True, check=True).stdout)
            (out / f"{name}.json").write_text(
                json.dumps(normalize(doc, roots_for(ROOT)), indent=1, sort_keys=True) + "\n")
            print(name, "ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
