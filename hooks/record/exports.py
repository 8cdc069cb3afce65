"""torch.export failures, recorded at the user's line.

``torch.export.export`` is wrapped while a session runs (the module attribute
only; a program that imported ``export`` before the session began is still
covered when the error reaches the top: the runner records it then). The
wrapper re-raises the very same exception.
"""

from __future__ import annotations

import functools

import torch.export

from ..context import CaptureContext
from ..findings.writer import Findings


class ExportRecorder:
    def __init__(self, ctx: CaptureContext, findings: Findings) -> None:
        self.ctx = ctx
        self.findings = findings
        self._orig = None

    def install(self) -> None:
        if self._orig is not None:
            return
        orig = self._orig = torch.export.export
        ctx, findings = self.ctx, self.findings

        @functools.wraps(orig)
        def export(*args, **kwargs):
            try:
                return orig(*args, **kwargs)
            except Exception as exc:
                if ctx.active:
                    try:
                        findings.export_failure(exc, strict=bool(kwargs.get("strict", False)))
                    except Exception as inner:
                        ctx.internal_error("export-error mapper", inner)
                raise

        export._graphdbg_hook = True
        torch.export.export = export

    def uninstall(self) -> None:
        if self._orig is not None:
            torch.export.export = self._orig
            self._orig = None
