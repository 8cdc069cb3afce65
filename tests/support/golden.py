"""`report --json` documents of the samples, made before the query-layer
refactor, and the normalisation that makes two runs of a sample comparable,
on any supported torch.

What changes from run to run is left out: times, paths of the checkout and of
temporary folders, memory addresses, graphdbg's own tracebacks; floats are kept
to 4 significant digits. Text that torch owns and rewords between releases is
replaced by TORCH_TEXT (see `torch_owned`): the torch version, torch's reasons,
explanations and hints, and the text of torch's exceptions after their type.
Everything else (graphs, nodes, findings with their kind, file, line, node,
stacks, graphdbg's own messages and hints, details, counts) must match exactly.

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


TORCH_TEXT = "<torch's text>"
# "backend 'b' failed at aten.mm: RuntimeError: <torch's text>": graphdbg's words and
# the exception's type stay; what torch says after the type is torch's
_EXC_TEXT = re.compile(r"(\b[A-Z]\w*(?:Error|Exception|Failed|Unsupported|SymNode)\b\)?:) .*",
                       re.S)
# graph_break's message is "graph break: " and torch's name of the break
_TORCH_MESSAGE = {"graph_break": re.compile(r"(graph break:) .*", re.S)}


def torch_owned(d: dict) -> dict:
    """A finding (a report document's diagnostic) with torch's own words
    replaced by TORCH_TEXT, the rest as it was."""
    d = dict(d)
    detail = dict(d.get("detail") or {})
    hints = detail.get("hints") or []
    if d.get("reason"):
        d["reason"] = TORCH_TEXT
    if d.get("kind") == "graph_break" or d.get("hint") and d["hint"] in hints:
        d["hint"] = TORCH_TEXT if d.get("hint") else d.get("hint")
    for key in ("explanation", "gb_type", "eager_replay"):
        if detail.get(key):
            detail[key] = TORCH_TEXT
    if hints:
        detail["hints"] = [TORCH_TEXT]
    if d.get("detail") is not None:
        d["detail"] = detail
    pattern = _TORCH_MESSAGE.get(d.get("kind"), _EXC_TEXT)
    if d.get("message"):
        d["message"] = pattern.sub(rf"\1 {TORCH_TEXT}", d["message"])
    return d


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
    doc["diagnostics"] = [torch_owned(d) for d in doc.get("diagnostics", [])]
    for g in doc.get("graphs", []):  # a graph's compile error: torch's exception
        if g.get("error"):
            g["error"] = _EXC_TEXT.sub(rf"\1 {TORCH_TEXT}", g["error"])
    versions = doc.get("run", {}).get("versions")
    if versions and "torch" in versions:
        versions["torch"] = TORCH_TEXT
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
