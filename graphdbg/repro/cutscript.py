"""repro.py's text for a graph break or a recompile: the function cut out of
the program (`cutout.py`), verbatim, called with arguments rebuilt from what
Dynamo recorded, compiled with ``backend="eager"`` as the program compiled it
(not ``fullgraph=True``: that changes what Dynamo does, a ``Tensor.item()``
becomes an unbacked scalar, so the break is read from torch's own
graph-break log). Exit 1 (and REPRODUCED)
while the break or the recompile is there, 0 once it is gone, another status
when the script fails some other way. Pure text work: no torch here."""

from __future__ import annotations

HEAD = '''#!/usr/bin/env python
"""{what}

Written by `graphdbg repro` from {source}. Run: python repro.py
Exit status 1: reproduced (the problem is there); 0: gone; other: something else failed.
The function below is the program's own ({file}), cut out of it verbatim.
"""
'''

_COMMON = '''

import logging  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402,F811


def _make(spec):
    """An argument as the program passed it: a tensor of the recorded shape,
    stride, dtype (random values), a list or tuple of them, or the Python value
    Dynamo specialised on ("any": one whose type only Dynamo checked; None for
    one it did not read before the break, "unread")."""
    if "items" in spec:
        items = [_make(x) for x in spec["items"]]
        return tuple(items) if spec["seq"] == "tuple" else items
    if "tensor" not in spec:
        return spec["value"]
    t = spec["tensor"]
    shape = t["shape"]
    dtype = getattr(torch, t["dtype"])
    stride = t.get("stride")
    if stride is None or None in stride:
        x = torch.empty(shape, dtype=dtype, device=t.get("device", "cpu"))
    else:
        x = torch.empty_strided(shape, stride, dtype=dtype, device=t.get("device", "cpu"))
    x = x.normal_() if dtype.is_floating_point else x.random_(0, 4) if dtype != torch.bool else x.fill_(True)
    if t.get("marked"):  # the program marked these sizes dynamic
        for i in t.get("dynamic", []):
            torch._dynamo.mark_dynamic(x, i)
    return x.requires_grad_(t.get("requires_grad", False)) if dtype.is_floating_point else x


class _Log(logging.Handler):
    """Collects one of torch's log artifacts (the text TORCH_LOGS would print)."""

    def __init__(self, artifact, logger):
        super().__init__()
        self.messages = []
        torch._logging.set_logs(**{{artifact: True}})
        self.logger = logging.getLogger(logger)
        self.logger.addHandler(self)
        for name in ("torch", "torch._dynamo"):  # collected here, not printed to stderr too
            for h in logging.getLogger(name).handlers:
                h.addFilter(lambda r: r.name != logger)

    def emit(self, record):
        self.messages.append(record.getMessage())


def _key(reason):
    """What broke: the reason's first line past 'Encountered graph break ...'."""
    for line in reason.splitlines():
        line = line.strip()
        if line.startswith("Graph Break Reason:"):
            line = line[len("Graph Break Reason:"):].strip()
        if line and not line.startswith(("Encountered graph break", "Graph break in user code")):
            return line
    return ""
'''

_BREAK_MAIN = '''

FUNCTION = {function!r}
EXPECTED = ({reason!r}, {line})  # the break's reason, and its line in this file (the program's {program_line})
CALL = {call!r}


def _main():
    torch.manual_seed(0)
    args = {{k: _make(v) for k, v in CALL.items()}}
    print(f"compiling {{FUNCTION}}() as the program did (backend eager), reading torch's graph-break log")
    log = _Log("graph_breaks", "torch._dynamo.symbolic_convert.__graph_breaks")
    failed = None
    try:
        torch.compile({function}, backend="eager")(**args)
    except Exception as exc:  # after the break, maybe: an argument passed as None (see _make)
        failed = f"{{type(exc).__name__}}: {{(str(exc).splitlines() or [''])[0]}}"
    seen = []
    for m in log.messages:
        at = m.splitlines()[0].rpartition(":")[2]
        seen.append((_key(m), int(at) if at.isdigit() else None))
        print(f"graph break at line {{seen[-1][1]}}: {{seen[-1][0]}}")
    if EXPECTED in seen:
        if failed:
            print(f"(the call failed after the break: {{failed}})")
        print("REPRODUCED: the same graph break at the same line as in the program")
        return 1
    if failed:
        print(f"the call failed: {{failed}}")
        return 2
    if not seen:
        print("no graph break: the whole function compiled into one graph (the problem is gone)")
        return 0
    print(f"not the program's break ({{EXPECTED[0]}} at line {{EXPECTED[1]}})")
    return 2


if __name__ == "__main__":
    sys.exit(_main())
'''

_RECOMPILE_MAIN = '''

FUNCTION = {function!r}
EXPECTED = {guard!r}  # the guard that failed in the program
CALLS = {calls!r}  # the call compiled first, then the one that recompiled it


def _guard(reason):
    """A failed guard as torch words it: without its compile id and comment."""
    import re
    line = re.sub(r"^-?\\s*\\d+/\\d+:\\s*", "", reason.strip()).split("  #")[0]
    return " ".join(line.split())


def _main():
    torch.manual_seed(0)
    log = _Log("recompiles", "torch._dynamo.guards.__recompiles")
    compiled = torch.compile({function}, backend="eager"{dynamic})
    for i, call in enumerate(CALLS, 1):
        print(f"call {{i}}: " + ", ".join(
            f"{{k}}={{tuple(v['tensor']['shape']) if 'tensor' in v else v['value']!r}}"
            for k, v in call.items()))
        compiled(**{{k: _make(v) for k, v in call.items()}})
    failed = []
    for m in log.messages:
        lines = [ln.strip() for ln in m.splitlines()]
        if f"Recompiling function {{FUNCTION}} " in lines[0] + " ":
            failed += [_guard(ln[1:]) for ln in lines[2:] if ln.startswith("- ") and "/" in ln[:8]]
    for g in failed:
        print(f"recompiled: guard failed: {{g}}")
    if EXPECTED in failed:
        print("REPRODUCED: the second call recompiled on the same failed guard as in the program")
        return 1
    if not failed:
        print("no recompile: the second call reused the first compile (the problem is gone)")
        return 0
    print(f"recompiled on another guard than the program's ({{EXPECTED}})")
    return 2


if __name__ == "__main__":
    sys.exit(_main())
'''


def _head(spec: dict, what: str, source: str) -> str:
    return HEAD.format(what=what, source=source, file=spec["file"]) + "\n" + spec["text"]


def graph_break(spec: dict, what: str, source: str) -> str:
    head = _head(spec, what, source)
    # the cut-out text starts right after HEAD: its line numbers move by HEAD's length
    line = spec["line"] + HEAD.format(what=what, source=source, file=spec["file"]).count("\n") + 1
    return head + _COMMON.format() + _BREAK_MAIN.format(
        function=spec["function"], reason=spec["reason"], line=line,
        program_line=spec["program_line"], call=spec["calls"][0])


def recompile(spec: dict, what: str, source: str) -> str:
    return _head(spec, what, source) + _COMMON.format() + _RECOMPILE_MAIN.format(
        function=spec["function"], guard=spec["guard"], calls=spec["calls"],
        dynamic=", dynamic=True" if spec.get("dynamic") else "")
