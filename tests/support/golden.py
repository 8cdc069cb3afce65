"""`report --json` documents of the samples, made before the query-layer
refactor, and the normalisation that makes two runs of a sample comparable,
on any supported torch.

What changes from run to run is left out: times, paths of the checkout and of
temporary folders, memory addresses, graphdbg's own tracebacks; floats are kept
to 4 significant digits. Text that torch owns and rewords between releases is
replaced by TORCH_TEXT (see `torch_owned`): the torch version, torch's reasons,
explanations and hints, and the text of torch's exceptions after their type.

`compare` holds a run's document against a golden one. Floats are float32
results whose last bits differ between CPUs (BLAS kernels, vectorisation), so
each is compared with the tolerance of what it measures (`FLOAT_FIELDS`, a
tight default for the rest). Everything else (graphs, nodes, findings with
their kind, file, line, node, stacks, graphdbg's own messages and hints,
strings, ints, bools, counts, the keys of each object and the length of each
list) must match exactly.

    python tests/support/golden.py OUT_DIR [SAMPLE ...]   # (re)make documents
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
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
            return float(f"{v:.{DIGITS}g}")
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


# -- comparing a run's document with a golden one ------------------------------------

DIGITS = 4             # significant digits a float keeps in the documents
EPS32 = 2.0 ** -23     # float32's machine epsilon, ~1.19e-07


@dataclass(frozen=True)
class Tol:
    """How far two values of a float field may be apart: |a - b| <= rel *
    max(|a|, |b|) + atol * scale, where scale is the tensor's magnitude when the
    field's object gives one (`_scale`), else 1. With `noise`, values that both
    lie below it are float32 rounding noise: they only have to agree in order of
    magnitude (within `factor` of each other, or both within EPS32 of zero).
    Documents keep DIGITS significant digits, so one unit in the last kept digit
    is always allowed on top: two values a hair apart may round to neighbours."""
    what: str
    rel: float = 0.0
    atol: float = 0.0
    noise: float = 0.0
    factor: float = 1.0

    def allows(self, want: float, got: float, scale: float = 1.0) -> bool:
        if want == got or (math.isnan(want) and math.isnan(got)):
            return True
        if not (math.isfinite(want) and math.isfinite(got)):
            return False  # inf against anything else, nan against a number
        big, small = max(abs(want), abs(got)), min(abs(want), abs(got))
        if (self.noise and big <= self.noise and (want >= 0) == (got >= 0)
                and (big <= self.factor * small or big <= EPS32)):
            return True
        quantum = 10.0 ** (math.floor(math.log10(big)) - (DIGITS - 1))
        return abs(want - got) <= self.rel * big + self.atol * scale + quantum

    def __str__(self) -> str:
        parts = [f"rel {self.rel:g}"] + ([f"abs {self.atol:.2g} x scale"] if self.atol else [])
        if self.noise:
            parts.append(f"within x{self.factor:g} below {self.noise:.2g}")
        return f"{self.what}: " + ", ".join(parts) + f", +1 unit in digit {DIGITS}"


# an error against the float64 judge (rmse): at float32 rounding level (~EPS32 x the
# tensor's magnitude, up to magnitudes ~100) it is noise whose size, not value, counts
FP64_ERROR = Tol("error against float64", rel=1e-3, noise=128 * EPS32, factor=4)
# the max difference a real divergence shows: set by the faulty op, rounding moves it
# in the 4th-5th digit; the small abs covers a difference that is itself noise
DIVERGENCE = Tol("max difference", rel=1e-3, atol=4 * EPS32)
# a statistic of a tensor's values: accumulation order moves it by ~EPS32 x magnitude
# (a mean near 0 of values ~1 moves by that much too, hence abs x the tensor's scale)
STATS = Tol("value statistic", rel=1e-4, atol=1e-6)
# any float not listed: tight; list a field here rather than loosen this
DEFAULT = Tol("float", rel=1e-4)

# a float field's key (fnmatch pattern) -> its tolerance; the first match wins
FLOAT_FIELDS: dict[str, Tol] = {
    "*_vs_fp64": FP64_ERROR,        # eager_vs_fp64, compiled_vs_fp64
    "max_abs": DIVERGENCE,          # the diverging node's, and `isolated`'s
    "max_rel": DIVERGENCE,
    "output_max_abs": DIVERGENCE,   # the divergence as the model's output sees it
    "output_max_rel": DIVERGENCE,
    "min": STATS, "max": STATS, "mean": STATS, "std": STATS, "norm": STATS,
    "absmax": STATS,
}
_SCALE_KEYS = ("absmax", "min", "max")  # a stats object's magnitude


def tolerance(key: str | None) -> Tol:
    for pattern, tol in FLOAT_FIELDS.items():
        if key is not None and fnmatch.fnmatchcase(key, pattern):
            return tol
    return DEFAULT


def _scale(obj: dict) -> float:
    """The magnitude of the tensor whose statistics `obj` holds, 1 if unknown."""
    m = [abs(obj[k]) for k in _SCALE_KEYS
         if isinstance(obj.get(k), float) and math.isfinite(obj[k])]
    return max(m) if m else 1.0


@dataclass(frozen=True)
class Mismatch:
    path: str
    want: object
    got: object
    why: str

    def __str__(self) -> str:
        def show(v):
            return "(none)" if v is MISSING else json.dumps(v, sort_keys=True)[:200]
        return f"{self.path}: golden {show(self.want)}, this run {show(self.got)} ({self.why})"


MISSING = object()  # a key or list item that one of the documents lacks


def compare(want, got) -> tuple[list[Mismatch], object]:
    """Where `got` (a run's normalised document) differs from `want` (the golden
    one), and `got` with each float that is within tolerance replaced by the
    golden's, so a text diff of `want` against it shows only the differences."""
    out: list[Mismatch] = []

    def walk(w, g, path: str, key: str | None, scale: float):
        if type(w) is float and type(g) is float:
            tol = tolerance(key)
            if tol.allows(w, g, scale):
                return w
            out.append(Mismatch(path, w, g, str(tol)))
            return g
        if type(w) is not type(g):
            out.append(Mismatch(path, w, g, f"{type(w).__name__} != {type(g).__name__}"))
            return g
        if isinstance(w, dict):
            s = _scale(w)
            aligned = {}
            for k in list(w) + [k for k in g if k not in w]:
                p = f"{path}.{k}" if path else k
                if k not in g:
                    out.append(Mismatch(p, w[k], MISSING, "missing in this run"))
                elif k not in w:
                    out.append(Mismatch(p, MISSING, g[k], "not in the golden"))
                    aligned[k] = g[k]
                else:
                    aligned[k] = walk(w[k], g[k], p, k, s)
            return aligned
        if isinstance(w, list):
            aligned = [walk(a, b, f"{path}[{i}]", key, scale)
                       for i, (a, b) in enumerate(zip(w, g))]
            for i in range(len(g), len(w)):
                out.append(Mismatch(f"{path}[{i}]", w[i], MISSING, "missing in this run"))
            for i in range(len(w), len(g)):
                out.append(Mismatch(f"{path}[{i}]", MISSING, g[i], "not in the golden"))
            return aligned + g[len(w):]
        if w != g:
            out.append(Mismatch(path, w, g, "differs"))
        return g

    aligned = walk(want, got, "", None, 1.0)
    return out, aligned


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
