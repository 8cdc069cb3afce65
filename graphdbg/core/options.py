"""What a capture records and checks: one dataclass from the command line (or
`graphdbg.capture(...)`, `graphdbg.compare(...)`) down to the recorders.

Imports neither torch nor textual: the CLI builds it before torch is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

VALUE_TIERS = ("none", "health", "stats", "full")
LOCALIZE_MODES = ("auto", "bisect")


@dataclass(frozen=True)
class CaptureOptions:
    values: str = "stats"             # none | health | stats | full (per tensor)
    eager: bool = True                # record eager aten ops
    max_ops: int = 200_000            # eager ops kept one row each; later ones only summarised
    keep: str | None = None           # --values full: regex on op name / module path / graph function
    tensor_budget: int = 64 * 2**20   # --values full: most tensor bytes kept
    compare: bool = True              # check compiled graphs against eager
    compare_first: int = 3            # ... on their first N calls
    compare_every: int = 0            # ... and every N-th call after (0: never)
    compare_memory: float | None = None  # MiB a check may take (None: half the free memory)
    rtol: float | None = None         # tolerances of that check (None: per dtype)
    atol: float | None = None
    localize: str = "auto"            # auto (intermediate outputs, then bisection) | bisect
    kernel_times: bool = True         # time inductor's kernels per user line (provenance tracking)
    check_graphs: bool = True         # lint every graph before the backend gets it
    progress: bool = False            # rich status line and progress bars on stderr

    def __post_init__(self) -> None:
        if self.values not in VALUE_TIERS:
            raise ValueError(f"values must be one of {VALUE_TIERS}, not {self.values!r}")
        if self.localize not in LOCALIZE_MODES:
            raise ValueError(f"localize must be one of {LOCALIZE_MODES}, not {self.localize!r}")
        if self.keep is not None:
            re.compile(self.keep)  # re.error for a bad pattern, before anything runs

    @classmethod
    def from_kwargs(cls, **kwargs) -> "CaptureOptions":
        """Options from keyword arguments; an unknown name is a TypeError
        that lists the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown capture option(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)
