"""Graph breaks and recompiles cut out of the program (docs/repro.md): the
smallest self-contained function with the break or the guard, from the run
file's snapshot of the user's file, and its arguments rebuilt from what Dynamo
recorded (its guards: tensors' shapes, dtypes, strides; Python values it
specialised on). Never imports the user's module. Torch-free: reads the run
file only."""

from __future__ import annotations

import ast
import builtins
import os
import re
import sys
from dataclasses import dataclass, field

from .base import Plan, Refused

_STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"math", "operator", "functools",
                                                          "itertools", "collections", "zlib"}
_BUILTINS = set(dir(builtins))
_DROP_DECORATORS = ("torch.compile", "torch._dynamo", "torch.compiler")


class NotCut(Exception):
    """A function that cannot be cut out, with why."""


# -- the function, from the snapshot ---------------------------------------------------

@dataclass
class Cut:
    name: str
    file: str
    def_line: int             # the program's line of ``def``
    first_line: int           # its first decorator's, where it has one
    params: list[tuple[str, bool]]  # (name, has a default)
    text: str                 # import lines, helpers, the function (decorators dropped)
    line_in_text: int | None  # the finding's line, counted in ``text`` (1-based)
    function_lines: int       # the function's own lines
    file_lines: int
    helpers: list[str] = field(default_factory=list)


def _allowed_module(mod: str) -> bool:
    top = mod.split(".")[0]
    return top == "torch" or top in _STDLIB


def _module_names(tree: ast.Module) -> dict[str, tuple[str, ast.AST]]:
    """Module-level bindings: name -> (kind, node); kind import/function/class/global."""
    out: dict[str, tuple[str, ast.AST]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                out[name] = ("import", ast.Import(names=[a]) if isinstance(node, ast.Import)
                             else ast.ImportFrom(module=node.module, names=[a], level=node.level))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = ("function", node)
        elif isinstance(node, ast.ClassDef):
            out[node.name] = ("class", node)
        else:
            for t in ast.walk(node):
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                    out.setdefault(t.id, ("global", node))
    return out


def _free_names(fn: ast.AST) -> list[str]:
    """Names ``fn`` reads that it does not bind itself (its parameters, its
    locals, its nested functions' too), in order of first use."""
    bound: set[str] = set()
    loads: list[str] = []
    # annotations are not evaluated (the script starts `from __future__ import annotations`)
    notes = [getattr(n, k, None) for n in ast.walk(fn) for k in ("annotation", "returns")]
    skip = {id(x) for a in notes if a is not None for x in ast.walk(a)}
    for node in ast.walk(fn):
        if id(node) in skip:
            continue
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if node.id not in loads:
                    loads.append(node.id)
            else:
                bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise NotCut(f"{getattr(fn, 'name', '?')} declares "
                         f"{'global' if isinstance(node, ast.Global) else 'nonlocal'} "
                         f"{', '.join(node.names)}")
    return [n for n in loads if n not in bound and n not in _BUILTINS]


def _decorators(fn, lines: list[str]) -> None:
    for d in fn.decorator_list:
        text = ast.get_source_segment("\n".join(lines), d) or ""
        if not text.startswith(_DROP_DECORATORS):
            raise NotCut(f"{fn.name} is decorated with @{text} (a decorator graphdbg cannot "
                         f"carry into a standalone script)")


def _self_use(fn) -> str:
    for node in ast.walk(fn):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "self"):
            return f"self.{node.attr}"
    return "self"


def _enclosing(tree: ast.Module, line: int) -> list[ast.AST]:
    """The chain of function/class definitions around ``line``, outermost first."""
    chain: list[ast.AST] = []
    body = tree.body
    while True:
        for node in body:
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and node.lineno <= line <= (node.end_lineno or node.lineno)):
                chain.append(node)
                body = node.body
                break
        else:
            return chain


def _function_at(tree: ast.Module, name: str, def_line: int):
    """The definition ``def name`` whose first line (or a decorator's) is ``def_line``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if first <= def_line <= node.lineno:
                return node
    return None


def cut(source: str, file: str, fn_node, line: int | None) -> Cut:
    """``fn_node`` of ``source`` cut out with what it needs, or NotCut."""
    tree = ast.parse(source)
    lines = source.splitlines()
    chain = _enclosing(tree, fn_node.lineno)
    outer = [n for n in chain if n.lineno != fn_node.lineno]
    if outer:
        o = outer[-1]
        if isinstance(o, ast.ClassDef):
            first = fn_node.args.args[0].arg if fn_node.args.args else None
            what = (f"it uses {_self_use(fn_node)} (an attribute of the object)"
                    if first == "self" else "it belongs to the class")
            raise NotCut(f"{fn_node.name} is a method of {o.name}"
                         f"{' (an nn.Module)' if _is_module(o) else ''}: {what}, which a "
                         f"standalone script would have to rebuild")
        raise NotCut(f"{fn_node.name} is defined inside {o.name}: it may use {o.name}'s "
                     f"locals (a closure), which a standalone script cannot rebuild")
    names = _module_names(tree)
    imports: list[str] = []
    helpers: list[ast.AST] = []
    seen = {fn_node.name}
    todo = [fn_node]
    while todo:
        fn = todo.pop(0)
        _decorators(fn, lines)
        for n in _free_names(fn):
            kind, node = names.get(n, (None, None))
            where = f"{fn.name} uses {n}"
            if kind is None:
                raise NotCut(f"{where}, which is defined nowhere in {os.path.basename(file)} "
                             f"(a star import or a name set at run time)")
            if kind == "class":
                raise NotCut(f"{where} (a class defined in your program)")
            if kind == "global":
                raise NotCut(f"{where} (a global variable of your program)")
            if kind == "import":
                mod = node.names[0].name if isinstance(node, ast.Import) else (node.module or "")
                if getattr(node, "level", 0) or not _allowed_module(mod):
                    raise NotCut(f"{where} (imported from {'.' * getattr(node, 'level', 0)}{mod}, "
                                 f"which is neither torch nor the standard library)")
                text = ast.unparse(node)
                if text not in imports:
                    imports.append(text)
            elif kind == "function" and n not in seen:
                seen.add(n)
                helpers.append(node)
                todo.append(node)
    if "torch" not in {i.split()[1] for i in imports if i.startswith("import ")}:
        imports.insert(0, "import torch")
    head = "\n".join(["from __future__ import annotations", ""] + imports) + "\n\n\n"
    parts, at, line_in_text = [], head.count("\n"), None
    for h in helpers + [fn_node]:  # verbatim, decorators left out; the finding's line found
        body = "\n".join(lines[h.lineno - 1:h.end_lineno])
        if line and h.lineno <= line <= h.end_lineno:
            line_in_text = at + (line - h.lineno) + 1
        parts.append(body + ("\n\n\n" if h is not fn_node else "\n"))
        at += body.count("\n") + 3
    a = fn_node.args
    if a.vararg or a.kwarg:
        raise NotCut(f"{fn_node.name} takes *{(a.vararg or a.kwarg).arg}: graphdbg rebuilds "
                     f"named arguments only")
    pos = a.posonlyargs + a.args
    params = [(x.arg, i >= len(pos) - len(a.defaults)) for i, x in enumerate(pos)]
    params += [(x.arg, d is not None) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
    first = min([fn_node.lineno] + [d.lineno for d in fn_node.decorator_list])
    return Cut(fn_node.name, file, fn_node.lineno, first, params, head + "".join(parts),
               line_in_text, fn_node.end_lineno - fn_node.lineno + 1, len(lines),
               [h.name for h in helpers])


def _is_module(cls: ast.ClassDef) -> bool:
    return any("Module" in ast.unparse(b) for b in cls.bases)


# -- arguments, from Dynamo's guards ---------------------------------------------------

_SRC = r"L\['(\w+)'\](?:\[(\d+)\])?"   # a local, or an item of a local list/tuple
_GUARD_MGR = re.compile(r"GuardManager: source=" + _SRC + r", .*?type=<class '([\w.]+)'>")
_TENSOR = re.compile(r"TENSOR_MATCH: check_tensor\(" + _SRC + r", \w+, DispatchKeySet\(([^)]*)\), "
                     r"torch\.(\w+), device=([^,]+), requires_grad=(\w+), size=\[([^\]]*)\], "
                     r"stride=\[([^\]]*)\]\)")
_EQUALS = re.compile(r"EQUALS_MATCH: " + _SRC + r" == (.+?)\s*(?:#.*)?$")
_ID = re.compile(r"ID_MATCH: ___check_obj_id\(L\['(\w+)'\],")
_LENGTH = re.compile(r"LENGTH_CHECK: len\(L\['(\w+)'\]\) == (\d+)")
# sizes the program marked dynamic (torch._dynamo.mark_dynamic): a guard on the marks
_DYNAMIC = re.compile(r"getattr\(L\['(\w+)'\], '_dynamo_dynamic_indices'|"
                      r"hasattr\(L\['(\w+)'\], '_dynamo_dynamic_indices'\) == True")
# a value Dynamo checked the type of only (its value did not shape the trace): any will do
_ANY = {"bool": False, "int": 2, "float": 2.0, "str": ""}


def _dims(text: str) -> list:
    return [None if s.strip() == "None" else int(s) for s in text.split(",") if s.strip()]


def args_of(guards: str | None) -> dict[str, dict]:
    """{local name: spec} of a compile's guards on its frame's own locals:
    {"tensor": {shape, stride, dtype, requires_grad, device, marked}},
    {"value": python literal} (``"any": True`` where only its type was
    checked), {"seq": "list"|"tuple", "items": [spec, ...]}, or
    {"unknown": type name} (guarded on, value not recorded)."""
    types: dict[tuple, str] = {}
    found: dict[tuple, dict] = {}
    marked, ids, lengths = set(), set(), {}
    for ln in (guards or "").splitlines():
        m = _GUARD_MGR.search(ln)
        if m:
            types.setdefault((m.group(1), m.group(2)), m.group(3).rpartition(".")[2])
            continue
        m = _TENSOR.search(ln)
        if m:
            name, i, keys, dtype, device, grad, size, stride = m.groups()
            found.setdefault((name, i), {"tensor": {
                "shape": _dims(size), "stride": _dims(stride), "dtype": dtype,
                "requires_grad": grad == "True", "device": "cuda" if "CUDA" in keys else "cpu"}})
            continue
        m = _EQUALS.search(ln)
        if m:
            try:
                found.setdefault((m.group(1), m.group(2)),
                                 {"value": ast.literal_eval(m.group(3).strip())})
            except (ValueError, SyntaxError):
                pass
            continue
        for rx, into in ((_ID, ids), (_DYNAMIC, marked)):
            m = rx.search(ln)
            if m:
                into.add(next(g for g in m.groups() if g))
        m = _LENGTH.search(ln)
        if m:
            lengths[m.group(1)] = int(m.group(2))
    for (name, i), typ in types.items():
        if (name, i) in found:
            continue
        if typ == "NoneType":
            found[(name, i)] = {"value": None}
        elif typ in _ANY and i is None and name not in ids:
            found[(name, i)] = {"value": _ANY[typ], "any": True}
    out: dict[str, dict] = {}
    for (name, i), spec in found.items():
        if i is None:
            out[name] = spec
            if name in marked and "tensor" in spec:
                spec["tensor"]["marked"] = True
    for (name, i), typ in types.items():
        if i is not None or name in out:
            continue
        n = lengths.get(name)
        items = [found.get((name, str(k))) for k in range(n or 0)]
        if typ in ("list", "tuple") and n is not None and all(items):
            out[name] = {"seq": typ, "items": items}
        else:  # guarded on, but not on a value a script can rebuild
            out[name] = {"unknown": typ}
    return out


def _frame_compiles(compiles: list[dict], name: str, file: str, def_lines) -> list[dict]:
    """The compiles of function ``name`` (its first line, with or without its
    decorators, in ``def_lines``) and of the resume functions after its breaks."""
    base = os.path.basename(file)
    resume = f"torch_dynamo_resume_in_{name}_at_"
    return [c for c in compiles
            if os.path.basename(c.get("co_filename") or "") == base
            and (c.get("co_name") == name and c.get("co_firstlineno") in def_lines
                 or (c.get("co_name") or "").startswith(resume))]


def _from_graphs(run, name: str, file: str) -> dict[str, dict]:
    """Tensor arguments from graph placeholders (``L_x_``), where no guard named them."""
    out: dict[str, dict] = {}
    for g in run.graphs():
        if g.function != name or g.file != file:
            continue
        for n in run.nodes(g.id):
            if n.op != "placeholder":
                continue
            m = re.match(r"^L_(\w+?)_$", n.target or "")
            shape = (n.shapes or [None])[0]
            if m and isinstance(shape, list) and all(isinstance(s, int) for s in shape):
                out.setdefault(m.group(1), {"tensor": {"shape": shape, "stride": None,
                                                       "dtype": (n.dtypes or ["float32"])[0],
                                                       "requires_grad": False, "device": "cpu"}})
    return out


def _sized(call: dict[str, dict]) -> dict[str, dict]:
    """Dynamic sizes (None in a guard) given values: distinct, at least 2,
    unlike any other size (so duck sizing adds no equality of its own)."""
    flat = [x for v in call.values() for x in (v.get("items") or [v])]
    used = {s for v in flat if "tensor" in v for s in v["tensor"]["shape"] if isinstance(s, int)}
    n = 5
    for v in flat:
        t = v.get("tensor")
        if not t:
            continue
        if None in t["shape"]:
            t["dynamic"] = [i for i, s in enumerate(t["shape"]) if s is None]
        for i, s in enumerate(t["shape"]):
            if s is None:
                while n in used:
                    n += 1
                t["shape"][i] = n
                used.add(n)
                t["stride"] = None
    return call


def _call(c: Cut, found: dict[str, dict], number: int) -> dict[str, dict]:
    """The call's arguments. One Dynamo never guarded on was not read by the
    traced code: the script passes None (or leaves its default)."""
    call = {}
    for p, has_default in c.params:
        spec = found.get(p)
        if spec is None:
            if not has_default:
                call[p] = {"value": None, "unread": True}
            continue
        if "unknown" in spec:
            raise Refused(f"finding {number}: {c.name}'s argument {p!r} (a {spec['unknown']}) "
                          f"was guarded on by Dynamo but its value was not recorded, so a "
                          f"script cannot rebuild the call")
        call[p] = spec
    return call


# -- plans -----------------------------------------------------------------------------

def _snapshot(run, file: str, number: int) -> str:
    src = run.source(file) if file else None
    if src is None:
        raise Refused(f"finding {number}: the run file has no snapshot of "
                      f"{os.path.basename(file or '?')}, so there is no source to cut out")
    return src


def reason_key(reason: str | None) -> str:
    """A break reason's first line that says what broke (torch's gb_type),
    past the generic 'Encountered graph break when attempting to trace ...'."""
    for ln in (reason or "").splitlines():
        ln = ln.strip()
        if ln.startswith("Graph Break Reason:"):
            ln = ln[len("Graph Break Reason:"):].strip()
        if ln and not ln.startswith(("Encountered graph break", "Graph break in user code")):
            return ln
    return ""


def graph_break(run, number: int, f) -> Plan:
    if not f.file or not f.line:
        raise Refused(f"finding {number} (graph_break) has no line in your code to cut out")
    src = _snapshot(run, f.file, number)
    tree = ast.parse(src)
    compiles = run.compiles()
    chain = [n for n in _enclosing(tree, f.line) if not isinstance(n, ast.ClassDef)]
    if not chain:
        raise Refused(f"finding {number}: line {f.line} is not inside a function")
    # the innermost function first; then the one Dynamo compiled, if it is another
    candidates = [chain[-1]]
    by_id = {c["compile_id"]: c for c in compiles}
    for cid in f.compile_ids:
        c = by_id.get(cid) or {}
        node = _function_at(tree, c.get("co_name") or "", c.get("co_firstlineno") or -1)
        if node is not None and node not in candidates:
            candidates.append(node)
    whys = []
    for node in candidates:
        try:
            c = cut(src, f.file, node, f.line)
        except NotCut as exc:
            whys.append(str(exc))
            continue
        if c.line_in_text is None:
            whys.append(f"{node.name} and what it calls do not contain line {f.line}")
            continue
        ours = _frame_compiles(compiles, c.name, f.file, (c.def_line, c.first_line))
        first = [x for x in ours if x["compile_id"] in f.compile_ids] + \
                [x for x in ours if x["compile_id"] not in f.compile_ids]
        found: dict[str, dict] = {}
        for x in first:
            for k, v in args_of(x.get("guards")).items():
                found.setdefault(k, v)
        for k, v in _from_graphs(run, c.name, f.file).items():
            found.setdefault(k, v)
        try:
            call = _sized(_call(c, found, number))
        except Refused as exc:
            whys.append(str(exc).split(": ", 1)[1])
            continue
        key = (getattr(f.detail, "gb_type", None) or reason_key(f.reason))
        spec = {"kind": "graph_break", "function": c.name, "text": c.text,
                "line": c.line_in_text, "program_line": f.line, "reason": key,
                "calls": [call], "file": os.path.basename(f.file)}
        what = (f"Graph break at {os.path.basename(f.file)}:{f.line} ({key}): {c.name}() cut "
                f"out of the file, {c.function_lines} of its {c.file_lines} lines"
                + (f" (with {', '.join(c.helpers)})" if c.helpers else "") + ".")
        return Plan(number, "graph_break", spec, b"", what, None)
    raise Refused(f"finding {number} (graph break at {os.path.basename(f.file)}:{f.line}) cannot "
                  f"be cut out: " + "; ".join(whys))


# the failed guard, as torch words it: the line, without its compile id and comment
def guard_key(reason: str | None) -> str:
    first = (reason or "").strip().splitlines()[0] if (reason or "").strip() else ""
    first = re.sub(r"^-?\s*\d+/\d+:\s*", "", first)
    first = first.split("  #")[0]
    return " ".join(first.split())


def _shape_of(key: str) -> str:
    """A guard's text without its numbers (one guard failing on other values)."""
    return re.sub(r"\d+(\.\d+)?", "N", key)


_CHANGES = [
    (re.compile(r"^tensor '(\w+)' size mismatch at index (\d+)\. expected \d+, actual (\d+)$"),
     "size"),
    (re.compile(r"^tensor '(\w+)' stride mismatch at index (\d+)\. expected \d+, actual (\d+)$"),
     "stride"),
    (re.compile(r"^tensor '(\w+)' dtype mismatch\. expected \w+, actual (\w+)$"), "dtype"),
    (re.compile(r"^tensor '(\w+)' requires_grad mismatch\. expected requires_grad=(\d)$"), "grad"),
    (re.compile(r"^(\d+) <= (\w+)\.size\(\)\[(\d+)\]$"), "below"),
    (re.compile(r"^(\w+)\.size\(\)\[(\d+)\] <= (\d+)$"), "above"),
    (re.compile(r"^(\w+) == (.+)$"), "value"),
]
_SCALAR_TYPES = {"Float": "float32", "Double": "float64", "Half": "float16",
                 "BFloat16": "bfloat16", "Long": "int64", "Int": "int32", "Short": "int16",
                 "Char": "int8", "Byte": "uint8", "Bool": "bool"}


def _changed(call: dict, key: str, actual: str | None, number: int) -> dict:
    """The call after the guard's change (its arguments as the recompiling call had them)."""
    import copy
    new = copy.deepcopy(call)
    for rx, kind in _CHANGES:
        m = rx.match(key)
        if not m:
            continue
        if kind == "below":  # a dynamic size's lower bound failed: the size was below it
            m = re.match(r"^(\d+) <= (\w+)\.size\(\)\[(\d+)\]$", key)
            name, i, size = m.group(2), int(m.group(3)), int(m.group(1)) - 1
        elif kind == "above":
            name, i, size = m.group(1), int(m.group(2)), int(m.group(3)) + 1
        if kind in ("below", "above"):
            t = (new.get(name) or {}).get("tensor")
            if t is None or size < 0:
                break
            t["shape"][i], t["stride"] = size, None
            return new
        name = m.group(1)
        if name not in new:
            break
        t = new[name].get("tensor")
        if kind in ("size", "stride") and t:
            t["shape" if kind == "size" else "stride"][int(m.group(2))] = int(m.group(3))
            if kind == "size":
                t["stride"] = None
            return new
        if kind == "dtype" and t and m.group(2) in _SCALAR_TYPES:
            t["dtype"] = _SCALAR_TYPES[m.group(2)]
            return new
        if kind == "grad" and t:
            t["requires_grad"] = m.group(2) != "1"
            return new
        if kind == "value" and "value" in new[name] and actual is not None:
            try:
                new[name] = {"value": ast.literal_eval(actual)}
            except (ValueError, SyntaxError):
                break
            return new
        break
    raise Refused(f"finding {number}: graphdbg cannot tell the recompiling call's arguments "
                  f"from the failed guard `{key}`")


def recompile(run, number: int, f) -> Plan:
    d = f.detail
    name, def_line = getattr(d, "function", None), getattr(d, "def_line", None)
    events = getattr(d, "events", None) or []
    if not name or not def_line or not events:
        raise Refused(f"finding {number} (recompile) does not name the function recompiled")
    def_file = getattr(d, "def_file", None) or ""
    files = [p for p in [f.file] + [fr.file for fr in (f.stack or ())] + run.source_files()
             if p and os.path.basename(p) == os.path.basename(def_file)]
    src = None
    for p in files:
        text = run.source(p)
        if text is not None:
            node = _function_at(ast.parse(text), name, def_line)
            if node is not None:
                src, file = text, p
                break
    if src is None:
        raise Refused(f"finding {number}: the run file has no snapshot of {def_file} with "
                      f"{name}() at line {def_line}")
    try:
        c = cut(src, file, node, f.line if f.file == file else None)
    except NotCut as exc:
        raise Refused(f"finding {number} (recompile of {name}()) cannot be cut out: {exc}")
    cid = events[0]["compile_id"]
    frame = cid.split("/")[0]
    by_id = {x["compile_id"]: x for x in run.compiles()}
    reasons = events[0].get("reasons") or []
    key = guard_key(reasons[0] if reasons else getattr(d, "guard", ""))
    # a storm (the finding keeps its last events only): its function's first recompile, when
    # that one failed on the same guard (the values in it aside)
    second = (by_id.get(f"{frame}/1") or {}).get("recompile_reason")
    if second and _shape_of(guard_key(second)) == _shape_of(key):
        key = guard_key(second)
    elif cid.split("/")[1] != "1":
        raise Refused(f"finding {number}: {name}()'s first recompile failed on another guard "
                      f"than this finding's; graphdbg cuts out a function's first recompile "
                      f"only (the calls before the later ones are not all recorded)")
    first = by_id.get(f"{frame}/0")
    if first is None or not first.get("guards"):
        raise Refused(f"finding {number}: the guards of {name}()'s first compile were not "
                      f"recorded")
    found = args_of(first["guards"])
    call1 = _sized(_call(c, found, number))
    changes = getattr(d, "changes", None) or []
    actual = changes[0].get("actual") if changes else None
    call2 = _changed(call1, key, actual, number)
    dynamic = any(v.get("tensor") and v["tensor"].get("dynamic") and not v["tensor"].get("marked")
                  for v in call1.values())
    spec = {"kind": "recompile", "function": c.name, "text": c.text, "guard": key,
            "calls": [call1, call2], "dynamic": dynamic, "file": os.path.basename(file),
            "line": c.line_in_text, "program_line": def_line}
    storm = getattr(d, "frame_recompiles", None) or f.count or 1
    what = (f"Recompile of {c.name}() ({os.path.basename(file)}:{def_line}), failed guard "
            f"`{key}`: {c.name}() cut out of the file, {c.function_lines} of its "
            f"{c.file_lines} lines" + (f" (with {', '.join(c.helpers)})" if c.helpers else "")
            + (f"; the first of its {storm} recompiles" if storm > 1 else "") + ".")
    return Plan(number, "recompile", spec, b"", what, None)
