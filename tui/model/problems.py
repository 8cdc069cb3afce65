"""The problems view: every finding in order, `n`/`N`, the preview under
the table and the detail Enter opens. No textual."""

from __future__ import annotations

import re
from collections.abc import Sequence

from graphdbg.analysis.wording import CARET_KINDS, hint_and_fixes, specialized_lines
from graphdbg.analysis.values import value_errors, value_source
from graphdbg.core.format import at, num
from graphdbg.runfile.details import (CompileErrorDetail, DivergenceDetail, GraphBreakDetail,
                                      NanInfDetail, SpecializedDetail)
from graphdbg.runfile.query import SEVERITIES, Finding, NodeValue
from .common import ICONS, KIND_LABELS, Line, one_line, source_excerpt, where

# -- problems --------------------------------------------------------------------------

PROBLEM_COLUMNS = (("severity", "sev"), ("kind", "kind"), ("where", "where"),
                   ("message", "message"))
# two runs open (`graphdbg tui A B`): each problem says whose it is
RUN_LABELS = ("A", "B")
TWO_RUN_PROBLEM_COLUMNS = (("run", "run"), *PROBLEM_COLUMNS)


class ProblemsModel:
    """Every finding by severity (errors, warnings, info; each by first
    appearance), the selected one, and `n`/`N`. Over two runs
    (`of_runs`), both runs' findings, each with its run (`runs`: 0 for A,
    1 for B): finding ids are per run, so a problem is (run, id)."""

    def __init__(self, findings: Sequence[Finding], runs: Sequence[int] | None = None) -> None:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        tagged = sorted(zip(findings, runs if runs is not None else [0] * len(findings)),
                        key=lambda t: (order.get(t[0].severity, 9), t[1], t[0].id))
        self.findings = [f for f, _ in tagged]
        self.runs = [r for _, r in tagged]
        self.two_runs = runs is not None
        self.cursor = 0

    @classmethod
    def of_runs(cls, per_run: Sequence[Sequence[Finding]]) -> ProblemsModel:
        """The problems of one run, or of two (A's and B's findings)."""
        if len(per_run) == 1:
            return cls(per_run[0])
        return cls([f for fs in per_run for f in fs],
                   [i for i, fs in enumerate(per_run) for _ in fs])

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return TWO_RUN_PROBLEM_COLUMNS if self.two_runs else PROBLEM_COLUMNS

    def __len__(self) -> int:
        return len(self.findings)

    @staticmethod
    def cells(f: Finding) -> tuple[str, str, str, str]:
        times = f" ×{f.count}" if f.count > 1 else ""
        return (f"{ICONS.get(f.severity, '?')} {f.severity}", KIND_LABELS.get(f.kind, f.kind),
                where(f.file, f.line, f.cell), one_line(f.message) + times)

    def rows(self) -> list[tuple[str, ...]]:
        if self.two_runs:
            return [(RUN_LABELS[r], *self.cells(f)) for f, r in zip(self.findings, self.runs)]
        return [self.cells(f) for f in self.findings]

    @property
    def current_run(self) -> int:
        """The run of the selected problem (0: A, the only run; 1: B)."""
        return self.runs[self.cursor] if self.findings else 0

    def run_of(self, index: int) -> int:
        return self.runs[index] if 0 <= index < len(self.runs) else 0

    @property
    def current(self) -> Finding | None:
        return self.findings[self.cursor] if self.findings else None

    def select(self, index: int) -> Finding | None:
        if self.findings:
            self.cursor = max(0, min(index, len(self.findings) - 1))
        return self.current

    def select_id(self, finding_id: int, run: int = 0) -> Finding | None:
        """The finding `finding_id` of run `run` (0: A, 1: B)."""
        for i, (f, r) in enumerate(zip(self.findings, self.runs)):
            if f.id == finding_id and r == run:
                return self.select(i)
        return None

    def step(self, forward: bool = True, *, from_outside: bool = False) -> Finding | None:
        """`n` (forward) or `N`: the next or previous problem, wrapping.
        ``from_outside``: coming from another view, `n` selects the problem
        under the cursor first (the first one, at the start)."""
        if not self.findings:
            return None
        if not from_outside:
            self.cursor = (self.cursor + (1 if forward else -1)) % len(self.findings)
        return self.current

    def counts(self, run: int | None = None) -> dict[str, int]:
        """Problems by severity (of one run: ``run``)."""
        out: dict[str, int] = {}
        for f, r in zip(self.findings, self.runs):
            if run is None or r == run:
                out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def summary(self, run: int | None = None) -> str:
        """"1 error, 2 warnings, 1 info" ("no problems" without one); over
        two runs, each run's: "A: no problems; B: 5 warnings"."""
        if self.two_runs and run is None:
            return "; ".join(f"{RUN_LABELS[i]}: {self.summary(i)}" for i in range(len(RUN_LABELS)))
        c = self.counts(run)
        parts = [f"{c[s]} {s}{'s' if c[s] != 1 and s != 'info' else ''}" for s in SEVERITIES if c.get(s)]
        return ", ".join(parts) if parts else "no problems"

    def title(self) -> str:
        return f"Problems ({len(self)}): {self.summary()}"


def problem_preview(f: Finding | None) -> str:
    """The few lines under the problems table: the selected problem's whole
    message, its hint, and who called the line."""
    if f is None:
        return ""
    out = [one_line(f.message, 400)]
    if f.hint:
        out.append("hint: " + one_line(f.hint, 400))
    callers = list(f.stack[:-1])[-2:]
    if callers:
        out.append("called from " + " ← ".join(f"{where(c.file, c.line, c.cell)} {c.function}"
                                               for c in reversed(callers)))
    return "\n".join(out)


def divergence_numbers(detail: object) -> list[tuple[str, str]]:
    """The numbers of a divergence (or NaN/Inf) finding, as (label, value)."""
    return detail.numbers() if isinstance(detail, (DivergenceDetail, NanInfDetail)) else []


def _names(xs: Sequence | None) -> str | None:
    return ", ".join(map(str, xs)) if xs else None


def export_numbers(detail: object) -> list[tuple[str, str]]:
    """What a finding about an export adds to its numbers, as (label,
    value): a divergence's ONNX ops and opset (or what each side ran at the
    line), a specialised size, an ONNX translation's op and node."""
    if isinstance(detail, DivergenceDetail) and detail.exported:
        pairs = [("exported", "torch.onnx.export" if detail.exported == "onnx" else "torch.export"),
                 ("ONNX ops", _names(detail.onnx_ops)), ("opset", detail.opset),
                 ("eager ran", _names(detail.eager_ops)),
                 ("exported ran", _names(detail.graph_ops))]
    elif isinstance(detail, SpecializedDetail):
        pairs = [("size", detail.size), ("fixed to", detail.value), ("declared", detail.declared),
                 ("symbol", detail.symbol), ("reason (torch)", detail.reason),
                 ("exported", "torch.onnx.export" if detail.exported == "onnx" else
                  "torch.export" if detail.exported else None)]
    elif isinstance(detail, CompileErrorDetail) and (detail.onnx or detail.via):
        pairs = [("exporter", "TorchScript (dynamo=False)" if detail.legacy_exporter else
                  detail.via or "torch.onnx.export"),
                 ("no ONNX op for", detail.onnx_op), ("node", detail.node)]
    else:
        return []
    return [(k, str(v)) for k, v in pairs if v is not None]



_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# torch's labels before a part its reason repeats ("Explanation: ...", "Hint: ...")
_LABEL = re.compile(r"^\s*(?:explanation|hints?|graph break|reason)\s*:\s*", re.IGNORECASE)


def _words(text: str) -> str:
    """Text compared for repeats: lower case, any run of spaces as one."""
    return " ".join(text.lower().split())


def torch_reason_lines(reason: str | None, shown: Sequence[str | None]) -> list[str]:
    """torch's full reason without what the detail already shows (the
    message, the hint, the explanation): each of its lines left out when
    its text, less a label such as "Hint:", is part of one of ``shown``;
    runs of blank lines made one, none at either end. Colours (torch.onnx's
    errors colour their text for a terminal) taken out."""
    if not reason:
        return []
    known = [_words(t) for t in shown if t and t.strip()]
    out: list[str] = []
    for line in _ANSI.sub("", reason).rstrip().splitlines():
        text = _words(_LABEL.sub("", line))
        if text and any(text in k for k in known):
            continue
        if not text and (not out or not out[-1].strip()):
            continue
        out.append(line.rstrip())
    while out and not out[-1].strip():
        out.pop()
    return out


def finding_numbers(f: Finding, value: NodeValue | None = None) -> list[tuple[str, str]]:
    """The numbers of a finding, as (label, text): a divergence's errors are
    its node's per-node value on its call (``value``, `finding_value`: the
    figures the diff view and the nodes table show, written as they write
    them), else the finding's own."""
    nums = divergence_numbers(f.detail) if f.kind in ("divergence", "nan_inf") else []
    if value is not None:
        errors = dict(value_errors(value))
        nums = [(k, errors.get(k, v)) for k, v in nums]
        nums += [(k, v) for k, v in errors.items() if k not in dict(nums)]
    if isinstance(f.detail, DivergenceDetail) and f.detail.exported == "onnx":
        # the other side of an ONNX graph's check is ONNX Runtime, not a compiled graph
        nums = [("ONNX RT vs float64" if k == "compiled vs float64" else k, v) for k, v in nums]
    return nums + export_numbers(f.detail)


def finding_detail(f: Finding, source: str | None, value: NodeValue | None = None) -> list[Line]:
    """What Enter on a problem shows, each thing once: where, the code
    around the line (from the run file's snapshot), the message, torch's
    explanation, the numbers of a divergence (``value``: its node's
    per-node value, `finding_numbers`), the hint, what else torch's reason
    says, and the call chain."""
    out = [Line("title", f"{ICONS.get(f.severity, '?')} {KIND_LABELS.get(f.kind, f.kind)} "
                         f"({f.severity}) {at(f.file, f.line, f.cell) if f.file else '(no user frame)'}"
                         f"{' in ' + f.function if f.function else ''}"
                         f"{'  ×' + str(f.count) if f.count > 1 else ''}")]
    lines = re.split(r"\r\n|\r|\n", source) if source else []
    out += source_excerpt(lines, f.line, code=f.code,
                          caret=f.col is not None or f.kind in CARET_KINDS, col=f.col,
                          end_col=f.end_col)
    out.append(Line("label", "message"))
    out += [Line("text", t) for t in (f.message or "").splitlines() or [""]]
    explanation = (f.detail.explanation
                   if isinstance(f.detail, (GraphBreakDetail, CompileErrorDetail)) else None)
    if explanation and _words(str(explanation)) not in _words(f.message or ""):
        out.append(Line("label", "why"))
        out += [Line("text", t) for t in str(explanation).splitlines()]
    nums = finding_numbers(f, value)
    if nums:
        out.append(Line("label", "numbers" + (f" ({value_source(value)})" if value else "")))
        out += [Line("number", f"{k:>20}  {v}") for k, v in nums]
        own = getattr(f.detail, "max_abs", None) if value is not None else None
        if own is not None and num(own) != num(value.max_abs):
            stage = getattr(f.detail, "stage", None) or "the localising"
            out.append(Line("dim", f"  (stage {stage}'s own compile drew other values: max abs "
                                   f"{num(own)} there)"))
    said = dict(nums)   # what the numbers said already is not said again
    place = [p for p in (
        f"graph {f.graph_id}" if f.graph_id is not None and value is None else "",
        f"node {f.node}" if f.node and said.get("node") != f.node else "",
        f"op {f.op}" if f.op and said.get("target") != f.op else "") if p]
    if place:
        out.append(Line("dim", " · ".join(place)))
    if f.compile_ids:
        out.append(Line("dim", "compile ids " + ", ".join(f.compile_ids)))
    hint, fixes = hint_and_fixes(f.hint, getattr(f.detail, "fixes", None))
    if hint:
        out.append(Line("label", "hint"))
        out += [Line("hint", t) for t in hint.splitlines()]
    if fixes:   # an op with no ONNX translation: each way out on its line
        out += [Line("hint", f"  - {fix}") for fix in fixes]
    out += [Line("text", t) for t in specialized_lines(getattr(f.detail, "specialized", None))]
    rest = torch_reason_lines(f.reason, (f.message, f.hint, explanation))
    if rest:
        out.append(Line("label", "more from torch"))
        out += [Line("text", t) for t in rest]
    if f.stack:
        out.append(Line("label", "call chain (innermost last)"))
        for fr in f.stack:
            out.append(Line("code", f"  {at(fr.file, fr.line, fr.cell)} in {fr.function}"))
            if fr.code:
                out.append(Line("dim", f"      {fr.code.strip()}"))
    return out
