"""What the caches gave a compile, in words that agree with its phases
(shared by the report's compile-time table, its TUI line and the JSON).

torch counts hits and misses of inductor's FX graph cache and AOT
autograd's cache per compile. A hit loads the compiled graph (its generated
wrapper module and kernels, the `cache` phase); when the kernel binaries are
not in inductor's kernel cache, they are compiled again while loading (the
`cpp` phase). So a row never says a plain "hit" beside a C++ compile.
"""

from __future__ import annotations

from ..runfile.query import CompileTime

CACHE_NOTE = ("cache load: the compiled graph loaded from inductor's FX graph cache or AOT "
              "autograd's cache (its generated wrapper module and kernels); \"C++ rebuilt\": "
              "the cached graph's C++ kernels were not in the kernel cache and were compiled "
              "again while it loaded (the C++ compile column)")


def cache_text(c: CompileTime) -> str:
    """"miss" (compiled), "FX hit" / "AOT hit" (loaded whole, nothing
    built), "FX hit, C++ rebuilt", "FX 1 hit, 1 miss" (some of its graphs
    loaded, others compiled), "-" (no cache consulted)."""
    fx, aot = c.fx_cache or {}, c.aot_cache or {}
    hits, misses = fx.get("hits", 0), fx.get("misses", 0)
    which = "FX" if hits else "AOT" if aot.get("hits") and not aot.get("misses") else None
    if which and not misses:
        return f"{which} hit, C++ rebuilt" if c.phases.get("cpp", 0.0) >= 0.0005 else f"{which} hit"
    if hits and misses:
        return f"FX {hits} hit{'s' * (hits != 1)}, {misses} miss{'es' * (misses != 1)}"
    return "miss" if misses else "-"


def shows_cache_load(times: list[CompileTime]) -> bool:
    """Whether any of ``times`` spent time loading from a cache (the note applies)."""
    return any(c.phases.get("cache", 0.0) >= 0.0005 for c in times)
