"""Failed guards, as torch reports them when it recompiles.

torch's ``recompile_reasons`` artifact holds one reason per cached version of
the code (newest first), each the first guard of that version that failed::

    1/0: a == 2.0      # y = x * a  # rc.py:15 in two
    User stack trace:
      File "/home/me/rc.py", line 15, in two
        y = x * a

or, for guards without a source line, ``tensor 'x' size mismatch at index 0.
expected 4, actual 6`` and ``GLOBAL_STATE changed: grad_mode``. `parse_reason`
splits one into a `GuardFailure`; `current_value` reads what the guarded
expression holds now from the frame being compiled, without running any of the
program's code (no properties, no ``__getattr__``).

Imports no torch: plain text in, plain data out.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field, replace

from graphdbg.core.sourcemap import Frame, parse_traceback

_ENTRY = re.compile(r"^\s*(?P<entry>\d+/\d+): ")
# the name may hold quotes of its own: `tensor 'kwargs['a']['b']' size mismatch ...`
_TENSOR = re.compile(r"^tensor '(?P<name>.+?)' (?P<what>[\w ]+?) mismatch(?P<rest>.*)$")
_EXPECTED = re.compile(r"expected (?P<expected>[^,]+?)(?:, actual (?P<actual>.+?))?\.?$")
_INDEX = re.compile(r"at index (\d+)")
# torch's wrapper of a module compiled whole takes (*args, **kwargs): `args[0]`
# is the module's first argument
_ARG = re.compile(r"^args\[(\d+)\]$")
# a keyword argument (`kwargs['pixel_values']`, as every transformers call passes
# its tensors), or an item of an argument (`kwargs['a']['b']`, `args[0]['b']`)
_KWARG = re.compile(r"^kwargs\[(?P<q>['\"])(?P<key>.+?)(?P=q)\](?P<rest>.*)$")
_ARG_ITEM = re.compile(r"^args\[(?P<index>\d+)\](?P<rest>.+)$")
# a tensor argument that is not one now (None, a number): torch 2.13 says
# "expected type of 'mask' to be a tensor type, ' but found <class 'NoneType'>",
# 2.15 "... to be <class 'torch.Tensor'>, but found <class 'NoneType'>"
_TYPE_OF = re.compile(r"^expected type of '(?P<name>.+?)' to be (?P<expected>.+?),?\s*'?\s*"
                      r"but found (?P<actual>.+)$")
_CLASS = re.compile(r"^<class '(?:[\w.]+\.)?(?P<name>\w+)'>$")
# an attribute read from the class until the object sets its own (a lazily set config field)
_DICT_CONTAINS = re.compile(r"^(?P<neg>not )?___dict_contains\('(?P<key>[^']+)', (?P<obj>.+)\.__dict__\)$")
_CLASS_DEFAULT, _SET_ON_OBJECT = "the class's default", "set on the object"
_COMPARE = re.compile(r"^(?P<lhs>.+?) (?P<op>==|!=|<=|>=|<|>|is not|is) (?P<rhs>.+)$")


@dataclass(frozen=True)
class GuardFailure:
    entry: str | None       # the cached version whose guard failed ("1/0")
    text: str               # the guard as the user spells it (self.drop.training == True)
    kind: str               # size, stride, rank, dtype, device, requires_grad, value,
                            # training, global_state, len, type, id, backend, symbolic,
                            # attribute (the class's default or the object's own), other
    subject: str            # what is guarded: "a", "self.drop.training", "tensor 'x'"
    expression: str | None  # torch's own spelling of the guarded value (for current_value)
    expected: str | None = None
    actual: str | None = None
    index: int | None = None  # the dimension of a size/stride guard
    source: list[tuple[Frame, str]] = field(default_factory=list)  # torch's user stack
    raw: str = ""
    op: str | None = None     # a comparison's operator (`scale == 0.5`, `mask is None`)

    @property
    def key(self) -> str:
        """Stable across the guarded constant: `a == 2.0` and `a == 3.0` are one guard."""
        return f"{self.kind}|{self.subject}|{self.index if self.index is not None else ''}"


def user_spelling(expr: str) -> str:
    """``self._modules['drop'].training`` -> ``self.drop.training``; ``G['FLAG']`` -> ``FLAG``."""
    expr = re.sub(r"\._(?:modules|parameters|buffers)\['([^']+)'\]", r".\1", expr)
    expr = re.sub(r"\b[GL]\['([^']+)'\]", r"\1", expr)
    return expr


_STACK_SLOT = re.compile(r"^___stack\d+$")
_CARRIED = "the value made at "


def carried(g: GuardFailure, file: str | None, resumed: int | None) -> GuardFailure:
    """A guard on ``___stackN``, a value the code after a graph break was
    handed (Dynamo's name for the N-th value on the stack at the break),
    named as the user knows it: the value made at the break's line."""
    if resumed is None or not _STACK_SLOT.match(g.subject):
        return g
    where = f"{os.path.basename(file)}:{resumed}" if file else f"line {resumed}"
    return replace(g, subject=f"{_CARRIED}{where} before the graph break",
                   text=g.text.replace(g.subject, "value"))


def parse_reason(reason: str) -> GuardFailure:
    raw = reason.strip()
    head, _, stack = raw.partition("\nUser stack trace:")
    m = _ENTRY.match(head)
    entry = m["entry"] if m else None
    first = head[m.end():] if m else head
    first = first.splitlines()[0].strip() if first.strip() else ""
    guard = re.split(r"\s{2,}#|\s+# ", first)[0].strip()
    source = parse_traceback(stack) if stack else []
    text = user_spelling(guard)

    t = _TENSOR.match(guard)
    if t:
        what = t["what"].strip().replace(" ", "_")
        arg = _ARG.match(t["name"])
        subject = f"argument {arg.group(1)}" if arg else f"tensor '{t['name']}'"
        e = _EXPECTED.search(t["rest"])
        i = _INDEX.search(t["rest"])
        return GuardFailure(entry, text, what if what in _TENSOR_KINDS else "other",
                            subject, t["name"],
                            e["expected"].strip() if e else None,
                            e["actual"].strip() if e and e["actual"] else None,
                            int(i.group(1)) if i else None, source, raw)
    ty = _TYPE_OF.match(guard)
    if ty:
        subject = user_spelling(ty["name"])
        return GuardFailure(entry, text, "type", subject, ty["name"],
                            _type_name(ty["expected"]), _type_name(ty["actual"]),
                            source=source, raw=raw)
    if guard.startswith("GLOBAL_STATE changed:"):
        what = guard.split(":", 1)[1].strip()
        return GuardFailure(entry, f"global state changed: {what}", "global_state", what,
                            None, source=source, raw=raw)
    if guard.startswith("BACKEND_MATCH"):
        return GuardFailure(entry, "a different backend callable", "backend", "backend",
                            None, source=source, raw=raw)
    for prefix, kind in (("type of ", "type"), ("id of ", "id"), ("len of ", "len")):
        if guard.startswith(prefix):  # older spellings: "len of L['x'] ..."
            subject = user_spelling(guard[len(prefix):].split(" ")[0])
            return GuardFailure(entry, text, kind, subject, None, source=source, raw=raw)
    dc = _DICT_CONTAINS.match(guard)
    if dc:
        expression = f"{dc['obj']}.{dc['key']}"
        return GuardFailure(entry, text, "attribute", user_spelling(expression), expression,
                            _CLASS_DEFAULT if dc["neg"] else _SET_ON_OBJECT,
                            _SET_ON_OBJECT if dc["neg"] else _CLASS_DEFAULT, source=source, raw=raw)
    c = _COMPARE.match(guard)
    if c:
        lhs = c["lhs"].strip()
        kind = "value"
        call = re.match(r"^(len|type|id)\((.+)\)$", lhs)
        if call:
            kind = call.group(1)
        elif re.search(r"___check_(type|obj)_id", lhs):
            kind = "id"
        elif lhs.endswith(".training"):
            kind = "training"
        elif any(re.search(r"\bs\d+\b|\.size\(\)|\.stride\(\)", side)
                 for side in (lhs, c["rhs"])):  # (apart: "s" + "0.5" read as symbol s0)
            kind = "symbolic"
        rhs = c["rhs"].strip()
        # what the guard held for: `scale == 0.5` -> 0.5, `mask is None` -> None,
        # `mask is not None` -> not None, `n < 5` -> < 5
        expected = (rhs if c["op"] in ("==", "is") else
                    f"not {rhs}" if c["op"] in ("!=", "is not") else f"{c['op']} {rhs}")
        return GuardFailure(entry, text, kind, user_spelling(lhs), lhs, expected,
                            source=source, raw=raw, op=c["op"])
    return GuardFailure(entry, text, "other", text, None, source=source, raw=raw)


def _type_name(text: str) -> str:
    """torch's spelling of a type, as the user would say it: `a tensor`, `None`, `int`."""
    text = text.strip()
    if text in ("a tensor type", "<class 'torch.Tensor'>"):
        return "a tensor"
    c = _CLASS.match(text)
    if c:
        return "None" if c["name"] == "NoneType" else c["name"]
    return text


_TENSOR_KINDS = {"size", "stride", "rank", "dtype", "device", "requires_grad", "dispatch_key_set"}


def describe(g: GuardFailure, now: str | None) -> str:
    """What changed, in words: `a changed: was 2.0, now 3.0`."""
    if g.kind in _TENSOR_KINDS or g.kind == "other" and g.subject.startswith("tensor "):
        at = f" (dim {g.index})" if g.index is not None else ""
        was, now = _plain(g.expected), _plain(g.actual or now)
        if was and now:
            return f"{g.subject} {g.kind}{at} changed: was {was}, now {now}"
        if was:
            return f"{g.subject} {g.kind}{at} changed: was {was}"
        return f"{g.subject} {g.kind}{at} changed"
    if g.kind == "global_state":
        return f"global state changed: {g.subject}"
    if g.kind == "backend":
        return "called with a different backend callable"
    if g.kind in ("value", "training", "len", "symbolic") and g.expected is not None:
        op = g.op or "=="
        if op in ("!=", "is not"):
            rhs = g.expected[len('not '):]
            if now is not None and now != rhs:
                # torch spelled the failing condition (`len(d) != 1` with len(d) 2 now)
                return f"{g.subject} changed: was {rhs}, now {now}"
            # the guard failed: it holds that value now
            return f"{g.subject} changed: was {g.expected}, now {now or rhs}"
        if op == "is" and now is None:  # a tensor, an object: not what it was
            return f"{g.subject} changed: was {g.expected}, now not {g.expected}"
        if op not in ("==", "is"):  # `n < 5`
            return f"{g.subject} changed: no longer {g.expected}" + (f" (now {now})" if now else "")
        if now is not None:
            return f"{g.subject} changed: was {g.expected}, now {now}"
        return f"{g.subject} changed: was {g.expected}, now not known (guard {g.text})"
    if g.kind == "type" and g.expected and g.actual:
        return f"{g.subject} changed: was {g.expected}, now {g.actual}"
    if g.kind == "attribute":
        return (f"{g.subject} changed: was {g.expected}, now {g.actual}"
                + (f" ({now})" if now and g.actual == _SET_ON_OBJECT else ""))
    if g.kind in ("type", "id"):
        return f"{g.subject} is a different object now ({g.kind} guard: {g.text})"
    return f"guard failed: {g.text}"


def describe_repeats(g: GuardFailure, changes: list[dict]) -> str:
    """`a changed 3 times: 2.0 -> 3.0 -> 4.0 -> 5.0`, from each failure's
    expected value and the value that failed it."""
    seq: list[str] = []
    for c in changes:
        for v in (_plain(c.get("expected")), _plain(c.get("actual"))):
            if v is not None and (not seq or seq[-1] != v):
                seq.append(v)
    if g.kind in _TENSOR_KINDS:
        at = f" (dim {g.index})" if g.index is not None else ""
        what = f"{g.subject} {g.kind}{at}"
    elif g.kind in ("global_state", "backend"):
        what = g.text
    else:
        what = g.subject
    shown = " -> ".join(seq[:8]) + (" -> ..." if len(seq) > 8 else "")
    return f"{what} changed {len(changes)} times" + (f": {shown}" if shown else "")


def _plain(v: str | None) -> str | None:
    """``requires_grad=1`` -> ``True``: the value without torch's label."""
    if v and v.startswith("requires_grad="):
        return str(v.endswith("1"))
    return v


def hint(g: GuardFailure, now: str | None = None) -> str:
    """What to change, per kind of guard."""
    if g.kind in ("size", "stride", "rank", "symbolic"):
        name, passed = caller_name(g.expression or "x")
        dim = g.index if g.index is not None else 0
        return (f"A tensor's shape changed between calls. If it keeps changing, mark the "
                f"dimension dynamic before the call (torch._dynamo.mark_dynamic({name}, {dim})"
                + (f", on the tensor you pass {passed}" if passed else "")
                + ") or compile with dynamic=True.")
    if g.kind == "training":
        return ("The module switched between train() and eval(): one compile per mode is "
                "expected. Many recompiles here mean many modules or calls toggling mode.")
    if g.kind == "global_state":
        return (f"The function is called with different global state ({g.subject}), e.g. "
                "both under torch.no_grad() and outside it: each state compiles once. "
                "Call it under one state, or expect one compile per state.")
    if g.kind == "dtype":
        return "An input's dtype changed between calls: cast inputs to one dtype before the call."
    if g.kind == "device":
        return "An input moved to another device between calls: keep inputs on one device."
    if g.kind == "requires_grad":
        return ("An input's requires_grad changed between calls: each setting compiles once. "
                "Detach the input, or keep requires_grad the same.")
    if g.kind == "backend":
        return ("A new backend callable was passed on this call: reuse one backend object "
                "(or wrap it in functools.partial once) instead of creating one per call.")
    if g.kind == "len":
        return ("A list/tuple/dict changed length: the graph is specialised on it. Keep its "
                "length fixed, or pass the items as one stacked tensor.")
    if g.kind == "attribute" and g.expected == _CLASS_DEFAULT:
        return (f"{g.subject} was {_CLASS_DEFAULT} when the first graph was compiled, and that "
                f"call set it on the object: the code fills it in lazily, so the next call "
                f"recompiles. Set it before compiling ({g.subject} = "
                f"{now or '...'}, with `self` the object the compiled code runs on) to "
                f"compile once.")
    if _none_or_not(g) and "." in g.subject and g.expected == "None" and now not in (None, "None"):
        # an attribute the code fills in on its first call (transformers' config.problem_type)
        return (f"{g.subject} was None when the first graph was compiled, and that call set "
                f"it: the code fills it in lazily, so the next call recompiles. Set it "
                f"before compiling ({g.subject} = {now}, with `self` the object the compiled "
                f"code runs on: the model) to compile once.")
    if _none_or_not(g):
        return (f"The graph was specialised on whether {g.subject} is None: a call with it "
                f"and one without compile once each. Expected for an optional argument "
                f"used both ways; if it keeps flipping, pass it every time (a default "
                f"tensor instead of None).")
    if g.kind == "type" and g.expected and g.actual:
        return (f"The graph was specialised on {g.subject} being {g.expected}: each type "
                f"compiles once. Pass the same type on every call.")
    if g.kind in ("type", "id"):
        return ("The graph was specialised on one object and a different one was passed "
                "(a new module, function or object per call): reuse the same object.")
    if g.kind == "value" and g.subject.startswith(_CARRIED) and _is_number(g.expected):
        return ("The graph broke at that line (see its graph break), and the code after the "
                "break was compiled for the Python number it was handed then; a new number "
                "compiles it again, every call it changes, up to the recompile limit. Keep "
                "the value a tensor (no .item(); branch with torch.where / torch.cond): the "
                "break and these recompiles go together.")
    if g.kind == "value":
        if g.op not in (None, "==", "is"):  # `n < 5` held when it compiled
            return (f"The graph was specialised on `{g.text}`: each outcome compiles once. "
                    f"Keep it the same across calls, or make {g.subject} a tensor and branch "
                    f"with torch.where / torch.cond.")
        if _is_number(g.expected):
            return (f"The graph was specialised on the Python number {g.subject} = {g.expected}. "
                    f"Pass it as a tensor (torch.tensor({g.subject})) instead of a Python scalar, "
                    f"or compile with dynamic=True; keep it constant if it rarely changes.")
        return (f"The graph was specialised on {g.subject} = {g.expected}: each value compiles "
                "once. Keep it constant across calls, or make it a tensor and branch with "
                "torch.where / torch.cond.")
    return "A guard on the compiled code failed for this call (see the reason)."


def _none_or_not(g: GuardFailure) -> bool:
    """A guard on whether an (optional) argument is None: `mask is None`,
    `mask is not None`, or a tensor argument that is None now."""
    if g.kind == "value" and g.op in ("is", "is not"):
        return g.expected in ("None", "not None")
    return g.kind == "type" and "None" in (g.expected, g.actual)


def caller_name(expr: str) -> tuple[str, str | None]:
    """A guarded tensor as the caller names it, and how the caller passes it:
    ``kwargs['pixel_values']`` -> (``pixel_values``, ``as pixel_values=``);
    ``kwargs['a']['b']`` -> (``a['b']``, ``in a=``); ``args[0]`` (the argument of
    a function taking ``*args``, such as torch's wrapper of a module compiled
    whole) -> (``x``, None)."""
    k = _KWARG.match(expr)
    if k:
        key = k["key"]
        return key + k["rest"], (f"in {key}=" if k["rest"] else f"as {key}=")
    if _ARG.match(expr):
        return "x", None
    a = _ARG_ITEM.match(expr)
    if a:
        return "x" + a["rest"], f"as argument {a['index']}"
    return expr, None


def _is_number(text: str | None) -> bool:
    if text is None:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return text not in ("True", "False")


# The order in which a tensor guard checks an input's properties: a cached
# version that fails on a later one matched the earlier ones.
_TENSOR_ORDER = ["dispatch_key_set", "dtype", "device", "requires_grad", "rank", "size", "stride"]


def newest_change(guards: list[GuardFailure]) -> list[GuardFailure]:
    """The reasons with the one that names this call's change first.

    Torch lists one failure per cached version, newest version first: what
    failed against the newest is what changed since the last compile. Among
    failures on the same tensor, the one of the version that matched the most
    properties (the latest-checked property) is the change that was new."""
    if not guards:
        return guards
    first = guards[0]
    if first.kind not in _TENSOR_ORDER:
        return guards
    same = [g for g in guards if g.kind in _TENSOR_ORDER and g.subject == first.subject]
    best = max(same, key=lambda g: _TENSOR_ORDER.index(g.kind))
    if _TENSOR_ORDER.index(best.kind) == _TENSOR_ORDER.index(first.kind):
        return guards
    return [best] + [g for g in guards if g is not best]


_MISSING = object()


def current_value(g: GuardFailure, f_locals: dict, f_globals: dict,
                  limit: int = 60) -> str | None:
    """What a guard's expression holds in the frame now, as text, or None.

    Only names, instance-dict attributes, constant subscripts of plain
    containers and ``len()`` are followed: nothing of the program runs."""
    if not g.expression:
        return None
    try:
        value = _eval(ast.parse(g.expression, mode="eval").body, f_locals, f_globals)
    except Exception:
        return None
    if value is _MISSING:
        return None
    if g.kind == "requires_grad":  # torch says only what it expected
        rg = getattr(value, "requires_grad", None)
        return f"requires_grad={int(rg)}" if isinstance(rg, bool) else None
    if g.kind in _TENSOR_KINDS or g.kind == "other":
        return None  # torch says what changed in a tensor
    if not _plain_value(value):
        # only plain values are shown: a tensor's repr could be huge (and runs code)
        return f"a {type(value).__name__} (value not shown)"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_CONTAINERS = (set, frozenset, list, tuple, dict)


def _plain_value(value, depth: int = 0, budget: list | None = None) -> bool:
    """A builtin scalar, or a builtin set/frozenset/list/tuple/dict of them
    (exact types: a subclass's repr is the program's code), small enough to
    print: its repr runs none of the program's code (a constant guard on a
    set says ``{1, 2}``, not "a set")."""
    budget = [200] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0 or depth > 3:
        return False
    if type(value) in _SCALARS:
        return True
    if type(value) not in _CONTAINERS:
        return False
    items = list(value.items()) if type(value) is dict else [(v,) for v in value]
    return all(_plain_value(v, depth + 1, budget) for item in items for v in item)


def _eval(node: ast.AST, loc: dict, glob: dict):
    if isinstance(node, ast.Name):
        if node.id in loc:
            return loc[node.id]
        return glob.get(node.id, _MISSING)
    if isinstance(node, ast.Subscript):
        base = node.value
        key = node.slice
        if not isinstance(key, ast.Constant):
            return _MISSING
        if isinstance(base, ast.Name) and base.id in ("L", "G"):
            scope = loc if base.id == "L" else glob
            return scope.get(key.value, _MISSING)
        obj = _eval(base, loc, glob)
        if type(obj) in (dict, list, tuple):
            try:
                return obj[key.value]
            except (KeyError, IndexError, TypeError):
                return _MISSING
        return _MISSING
    if isinstance(node, ast.Attribute):
        obj = _eval(node.value, loc, glob)
        if obj is _MISSING:
            return _MISSING
        d = getattr(type(obj), "__dict__", {})
        if isinstance(d.get(node.attr), property):
            return _MISSING
        try:
            inst = object.__getattribute__(obj, "__dict__")
        except AttributeError:
            return _MISSING
        return inst.get(node.attr, _MISSING)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
            and len(node.args) == 1 and not node.keywords:
        obj = _eval(node.args[0], loc, glob)
        return len(obj) if type(obj) in (dict, list, tuple, str) else _MISSING
    return _MISSING
