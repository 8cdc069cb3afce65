"""The problems view: every finding in order, `n`/`N`, the preview under
the table and the detail Enter opens. No textual."""

from __future__ import annotations

import re
from collections.abc import Sequence

from graphdbg.core.format import at
from graphdbg.analysis.wording import CARET_KINDS, hint_and_fixes, specialized_lines
from graphdbg.runfile.details import (CompileErrorDetail, DivergenceDetail, GraphBreakDetail,
                                      NanInfDetail, SpecializedDetail)
from graphdbg.runfile.query import SEVERITIES, Finding
from .common import ICONS, KIND_LABELS, Line, one_line, source_excerpt, where

# -- problems --------------------------------------------------------------------------

PROBLEM_COLUMNS = (("severity", "sev"), ("kind", "kind"), ("where", "where"),
                   ("message", "message"))


class ProblemsModel:
    """Every finding by severity (errors, warnings, info; each by first
    appearance), the selected one, and `n`/`N`."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        self.findings = sorted(findings, key=lambda f: (order.get(f.severity, 9), f.id))
        self.cursor = 0

    def __len__(self) -> int:
        return len(self.findings)

    @staticmethod
    def cells(f: Finding) -> tuple[str, str, str, str]:
        times = f" ×{f.count}" if f.count > 1 else ""
        return (f"{ICONS.get(f.severity, '?')} {f.severity}", KIND_LABELS.get(f.kind, f.kind),
                where(f.file, f.line, f.cell), one_line(f.message) + times)

    def rows(self) -> list[tuple[str, str, str, str]]:
        return [self.cells(f) for f in self.findings]

    @property
    def current(self) -> Finding | None:
        return self.findings[self.cursor] if self.findings else None

    def select(self, index: int) -> Finding | None:
        if self.findings:
            self.cursor = max(0, min(index, len(self.findings) - 1))
        return self.current

    def select_id(self, finding_id: int) -> Finding | None:
        for i, f in enumerate(self.findings):
            if f.id == finding_id:
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

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def summary(self) -> str:
        """"1 error, 2 warnings, 1 info" ("no problems" without one)."""
        c = self.counts()
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


def finding_detail(f: Finding, source: str | None) -> list[Line]:
    """What Enter on a problem shows: where, the code around the line (from
    the run file's snapshot), the message, torch's full reason, the numbers
    of a divergence, the hint, and the call chain."""
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
    nums = divergence_numbers(f.detail) if f.kind in ("divergence", "nan_inf") else []
    if isinstance(f.detail, DivergenceDetail) and f.detail.exported == "onnx":
        # the other side of an ONNX graph's check is ONNX Runtime, not a compiled graph
        nums = [("ONNX RT vs float64" if k == "compiled vs float64" else k, v) for k, v in nums]
    nums += export_numbers(f.detail)
    if nums:
        out.append(Line("label", "numbers"))
        out += [Line("number", f"{k:>20}  {v}") for k, v in nums]
    if f.graph_id is not None or f.node or f.op:
        out.append(Line("dim", " · ".join(p for p in (
            f"graph {f.graph_id}" if f.graph_id is not None else "",
            f"node {f.node}" if f.node else "", f"op {f.op}" if f.op else "") if p)))
    if f.compile_ids:
        out.append(Line("dim", "compile ids " + ", ".join(f.compile_ids)))
    hint, fixes = hint_and_fixes(f.hint, getattr(f.detail, "fixes", None))
    if hint:
        out.append(Line("label", "hint"))
        out += [Line("hint", t) for t in hint.splitlines()]
    if fixes:   # an op with no ONNX translation: each way out on its line
        out += [Line("hint", f"  - {fix}") for fix in fixes]
    out += [Line("text", t) for t in specialized_lines(getattr(f.detail, "specialized", None))]
    if f.reason and f.reason.strip() != (f.message or "").strip():
        out.append(Line("label", "reason (torch)"))
        # (torch.onnx's errors colour their text for a terminal: shown plain here)
        out += [Line("text", t) for t in _ANSI.sub("", f.reason).rstrip().splitlines()]
    explanation = (f.detail.explanation
                   if isinstance(f.detail, (GraphBreakDetail, CompileErrorDetail)) else None)
    if explanation:
        out.append(Line("label", "explanation"))
        out += [Line("text", t) for t in str(explanation).splitlines()]
    if f.stack:
        out.append(Line("label", "call chain (innermost last)"))
        for fr in f.stack:
            out.append(Line("code", f"  {at(fr.file, fr.line, fr.cell)} in {fr.function}"))
            if fr.code:
                out.append(Line("dim", f"      {fr.code.strip()}"))
    return out
