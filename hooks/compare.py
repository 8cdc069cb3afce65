"""Eager vs compiled: check a compiled graph's call against its own FX graph
interpreted eagerly, judged in float64, and localise a divergence to a node.

Per checked call:
1. reference: an untouched copy of the Dynamo graph interpreted eagerly on the
   same inputs (clones when the graph mutates its inputs), the RNG state rewound
   to what the compiled call saw; judge: the same in float64;
2. compiled vs reference for every output and mutated input, with per-dtype
   tolerances; a difference beyond tolerance is a ``miscompile`` when the
   compiled error against the judge is clearly larger than eager's own (the
   rule of PyTorch's accuracy checks: rmse(judge, compiled) > 2 * rmse(judge,
   eager) + tol/10), ``precision`` otherwise (reported for low-precision dtypes
   only: benign fp32 reordering is not a finding), ``random`` when it starts at
   a random op;
3. localisation: the stage ladder aot_eager -> aot_eager_decomp_partition ->
   the user's backend names the first stage that diverges; within it, one
   compile of the graph with every intermediate as an extra output, else a
   bisection over graph prefixes; then the node alone, on reference inputs,
   separates the guilty op from propagated error.

Everything here runs with graphdbg's eager recorder off, under no_grad, with
the program's RNG state saved and restored: the program computes and compiles
exactly what it would without graphdbg.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx

from .frames import node_target
from .interpreter import RecordingInterpreter

if TYPE_CHECKING:
    from .session import CaptureSession

# (rtol, atol) per dtype: loose enough for reordered reductions, tight enough
# for a changed op.
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_MULTIPLIER = 2.0
_STAGES = ("aot_eager", "aot_eager_decomp_partition")
_RANDOM_NAMES = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
                 "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                 "feature_alpha_dropout", "bernoulli", "bernoulli_", "normal", "normal_",
                 "uniform_", "multinomial", "randperm", "native_dropout", "exponential_",
                 "random_", "rrelu"}


@dataclass
class ValueDiff:
    """How far compiled is from eager for one tensor, judged against float64."""
    max_abs: float
    max_rel: float
    eager_vs_fp64: float | None
    compiled_vs_fp64: float | None
    kind: str            # miscompile | precision | shape | dtype
    dtype: str

    def as_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) and v != v else v)
                for k, v in self.__dict__.items()}


@dataclass
class Localization:
    node: str | None = None
    target: str | None = None
    stage: str | None = None
    method: str | None = None
    compiles: int = 0
    by_stage: dict = field(default_factory=dict)
    isolated: dict | None = None
    diff: ValueDiff | None = None
    undecided: list[str] = field(default_factory=list)
    random: "Localization | None" = None
    seconds: float = 0.0


def _flat(value: Any) -> list:
    out: list = []
    stack = [value]
    while stack:
        v = stack.pop(0)
        if isinstance(v, (list, tuple)):
            stack[0:0] = list(v)
        else:
            out.append(v)
    return out


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (a.to(torch.float64) - b.to(torch.float64))
    d = d[torch.isfinite(d)]
    if d.numel() == 0:
        return 0.0
    return float(torch.sqrt(torch.mean(d * d)))


def compare_values(compiled: Any, eager: Any, judge: Any = None, *,
                   rtol: float | None = None, atol: float | None = None) -> ValueDiff | None:
    """None when close; else how they differ. Non-tensors compare by equality."""
    if not isinstance(compiled, torch.Tensor) or not isinstance(eager, torch.Tensor):
        if isinstance(compiled, torch.Tensor) != isinstance(eager, torch.Tensor):
            return ValueDiff(math.inf, math.inf, None, None, "shape", "?")
        return None
    dtype = str(eager.dtype).replace("torch.", "")
    if compiled.shape != eager.shape:
        return ValueDiff(math.inf, math.inf, None, None, "shape", dtype)
    if compiled.dtype != eager.dtype:
        return ValueDiff(math.inf, math.inf, None, None, "dtype", dtype)
    if not (eager.is_floating_point() or eager.is_complex()):
        if torch.equal(compiled, eager):
            return None
        diff = (compiled.to(torch.float64) - eager.to(torch.float64)).abs()
        return ValueDiff(float(diff.max()), math.inf, None, None, "miscompile", dtype)
    d_rtol, d_atol = DEFAULT_TOLERANCES.get(eager.dtype, (1e-4, 1e-5))
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    c64, e64 = compiled.detach().to(torch.float64), eager.detach().to(torch.float64)
    if torch.allclose(c64, e64, rtol=rtol, atol=atol, equal_nan=True):
        return None
    nan_mismatch = torch.isnan(c64) != torch.isnan(e64)
    both = torch.isfinite(c64) & torch.isfinite(e64)
    abs_err = (c64 - e64).abs()[both]
    max_abs = float(abs_err.max()) if abs_err.numel() else math.inf
    rel = abs_err / e64.abs()[both].clamp_min(atol)
    max_rel = float(rel.max()) if rel.numel() else math.inf
    if bool(nan_mismatch.any()):
        max_abs = max_rel = math.inf
    eager_err = compiled_err = None
    kind = "miscompile"
    if isinstance(judge, torch.Tensor) and judge.shape == eager.shape:
        eager_err, compiled_err = _rmse(judge, e64), _rmse(judge, c64)
        if not bool(nan_mismatch.any()) and compiled_err <= _MULTIPLIER * eager_err + atol / 10:
            kind = "precision"
    return ValueDiff(max_abs, max_rel, eager_err, compiled_err, kind, dtype)


def is_finding(d: ValueDiff | None) -> bool:
    """A miscompile always; a precision difference only in a low-precision dtype."""
    if d is None:
        return False
    if d.kind == "precision":
        return d.dtype in ("float16", "bfloat16")
    return True


def is_random(node: torch.fx.Node) -> bool:
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                "feature_alpha_dropout"):
        training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
        return bool(training) if not isinstance(training, torch.fx.Node) else True
    return name in _RANDOM_NAMES


_INPLACE_FUNCS = {"setitem", "copy_", "index_put_", "scatter_", "masked_fill_"}


def mutates_inputs(gm: torch.fx.GraphModule) -> bool:
    """Conservative: does any node write in place (so inputs need cloning)?"""
    for n in gm.graph.nodes:
        if n.op == "call_method" and str(n.target).endswith("_") and not str(n.target).endswith("__"):
            return True
        if n.op == "call_function":
            name = getattr(n.target, "__name__", "")
            if (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_FUNCS:
                return True
            if n.kwargs.get("inplace") is True or "out" in n.kwargs:
                return True
        if n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            if getattr(mod, "inplace", False) or isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                return True
    return False


def _clone(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes and strides: compiled code asserts the strides
    it was compiled for (a padded slice must stay padded)."""
    t = t.detach()
    if t.is_contiguous() or type(t) not in (torch.Tensor, torch.nn.Parameter):
        return t.clone()
    out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def clone_inputs(args: tuple) -> list:
    return [_clone(a) if isinstance(a, torch.Tensor) else a for a in args]


@contextlib.contextmanager
def _preserved_rng():
    cpu = torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _set_rng(state: tuple | None) -> None:
    if state is None:
        return
    cpu, cuda = state
    torch.random.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def rng_state() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda


def graph_with_outputs(gm: torch.fx.GraphModule, names: list[str]) -> torch.fx.GraphModule:
    """A copy of ``gm`` that returns the values of ``names`` (and nothing after them)."""
    new = copy.deepcopy(gm)
    by_name = {n.name: n for n in new.graph.nodes}
    out = next(n for n in new.graph.nodes if n.op == "output")
    out.args = (tuple(by_name[x] for x in names),)
    new.graph.eliminate_dead_code()
    new.recompile()
    return new


def single_node_graph(gm: torch.fx.GraphModule, name: str,
                      values: dict[str, Any]) -> tuple[torch.fx.GraphModule, list]:
    """``name`` alone, its tensor inputs as placeholders (others inlined)."""
    node = next(n for n in gm.graph.nodes if n.name == name)
    graph = torch.fx.Graph()
    inputs: list = []
    env: dict[torch.fx.Node, Any] = {}
    for inp in node.all_input_nodes:
        val = values.get(inp.name)
        if isinstance(val, torch.Tensor):
            ph = graph.placeholder(inp.name)
            ph.meta = dict(inp.meta)
            env[inp] = ph
            inputs.append(val)
        else:
            env[inp] = val
    new_node = graph.node_copy(node, lambda n: env[n])
    graph.output((new_node,))
    root = gm if node.op in ("call_module", "get_attr") else torch.nn.Module()
    return torch.fx.GraphModule(root, graph), inputs


class GraphChecker:
    """Checks calls of one compiled graph; owns the untouched graph copy."""

    def __init__(self, session: "CaptureSession", graph_id: int, gm: torch.fx.GraphModule,
                 compile_user: Callable[[torch.fx.GraphModule, list], Callable]) -> None:
        self.session = session
        self.graph_id = graph_id
        self.gm = gm
        self.compile_user = compile_user
        self.needs_clone = mutates_inputs(gm)
        self.nodes = {n.name: n for n in gm.graph.nodes}
        self.random_nodes = [n.name for n in gm.graph.nodes if is_random(n)]
        self.checked = 0
        self.reported: set[str] = set()
        self.disabled = False
        self.grads_checked = False
        self.last_values: dict[str, Any] = {}

    # -- per call ---------------------------------------------------------------------
    def wants(self, call_idx: int) -> bool:
        s = self.session
        if self.disabled or not s.compare:
            return False
        if call_idx < s.compare_first:
            return True
        return bool(s.compare_every) and call_idx % s.compare_every == 0

    def before_call(self, args: tuple) -> tuple[list | None, tuple]:
        """What the reference needs, taken before the compiled call runs: the
        inputs only if the graph may change them, and the RNG state."""
        return (clone_inputs(args) if self.needs_clone else None), rng_state(), torch.is_grad_enabled()

    def after_call(self, call_idx: int, snapshot: tuple, args: tuple, compiled_out: Any,
                   compiled_fn: Callable | None = None) -> None:
        inputs, rng, grad_mode = snapshot
        if inputs is None:
            inputs = list(args)
        # The reference always works on clones: a missed in-place op must never
        # reach the program's own tensors.
        with _preserved_rng(), torch.no_grad():
            _set_rng(rng)
            ref_inputs = clone_inputs(inputs)
            ref = RecordingInterpreter(self.gm)
            try:
                ref_out = ref.run(*ref_inputs)
            except Exception as exc:
                self.disabled = True
                self.session.internal_error(f"eager reference of graph {self.graph_id}", exc)
                return
            _set_rng(rng)
            judge = RecordingInterpreter(self.gm, float64=True)
            try:
                judge.run(*clone_inputs(inputs))
            except Exception:
                judge = None  # some graphs have no float64 meaning (dtype-specific ops)
        self.checked += 1
        self._record_timings(ref)
        if ref.first_nonfinite:
            self._report_nonfinite(ref.first_nonfinite, "eager", call_idx)

        out_node = next(n for n in self.gm.graph.nodes if n.op == "output")
        out_names = [a.name if isinstance(a, torch.fx.Node) else None for a in _flat(out_node.args[0])]
        pairs = list(zip(_flat(compiled_out), _flat(ref_out), out_names))
        worst: tuple[ValueDiff, str | None, int] | None = None
        for i, (c, e, name) in enumerate(pairs):
            j = judge.values.get(name) if judge is not None and name else None
            d = compare_values(c, e, j, rtol=self.session.rtol, atol=self.session.atol)
            if is_finding(d) and (worst is None or _rank(d) > _rank(worst[0])):
                worst = (d, name, i)
        # inputs the graph mutated: the program's tensors now vs the reference's
        if self.needs_clone:
            for i, (now, ref_in) in enumerate(zip(args, ref_inputs)):
                if isinstance(now, torch.Tensor) and isinstance(ref_in, torch.Tensor):
                    d = compare_values(now, ref_in, rtol=self.session.rtol, atol=self.session.atol)
                    if is_finding(d) and worst is None:
                        worst = (d, None, -1 - i)
        # aliasing: an output that is a view of an input in one and a copy in the other
        if worst is None and "aliasing" not in self.reported:
            for i, (c, e) in enumerate(zip(_flat(compiled_out), _flat(ref_out))):
                if isinstance(c, torch.Tensor) and isinstance(e, torch.Tensor):
                    a_c, a_e = _aliases(c, args), _aliases(e, ref_inputs)
                    if a_c != a_e:
                        self.reported.add("aliasing")
                        self.session.report_aliasing(self, call_idx, i, a_c, a_e)
                        break
        if worst is None:
            if grad_mode and compiled_fn is not None and not self.grads_checked:
                self.grads_checked = True
                self.check_gradients(call_idx, inputs, rng, compiled_fn, ref_out)
            return
        d, name, index = worst
        key = f"{name}|{index}"
        if key in self.reported:
            return
        self.reported.add(key)
        loc = self.localize(inputs, rng, ref, judge, d)
        if loc.random is not None:
            loc.random.compiles, loc.random.by_stage = loc.compiles, dict(loc.by_stage)
            loc.random.target = node_target(self.nodes[loc.random.node])
            self.session.report_divergence(self, call_idx, index, d, loc.random)
        if loc.node is not None or loc.random is None:
            self.session.report_divergence(self, call_idx, index, d, loc)
            if loc.node is not None and loc.diff is not None and loc.diff.max_abs == math.inf:
                self._report_nonfinite(loc.node, "compiled", call_idx)

    # -- localisation -----------------------------------------------------------------
    def _run_compiled(self, fn: Callable, inputs: list, rng: tuple) -> Any:
        _set_rng(rng)
        return fn(*clone_inputs(inputs))

    def _compile(self, stage: str, gm: torch.fx.GraphModule, inputs: list,
                 loc: Localization | None = None) -> Callable:
        if loc is not None:
            loc.compiles += 1
            loc.by_stage[stage] = loc.by_stage.get(stage, 0) + 1
        if stage == "user":
            return self.compile_user(gm, list(inputs))
        from torch._dynamo.backends.registry import lookup_backend
        return lookup_backend(stage)(gm, list(inputs))

    def _outputs_diverge(self, stage: str, gm: torch.fx.GraphModule, names: list[str],
                         inputs: list, rng: tuple, ref: RecordingInterpreter,
                         judge: RecordingInterpreter | None,
                         loc: Localization) -> list[ValueDiff | None]:
        fn = self._compile(stage, gm, inputs, loc)
        with _preserved_rng(), torch.no_grad():
            out = _flat(self._run_compiled(fn, inputs, rng))
        self.last_values = dict(zip(names, out))
        result = []
        for name, value in zip(names, out):
            j = judge.values.get(name) if judge is not None else None
            d = compare_values(value, ref.values.get(name), j,
                               rtol=self.session.rtol, atol=self.session.atol)
            result.append(d if is_finding(d) else None)
        return result

    def localize(self, inputs: list, rng: tuple, ref: RecordingInterpreter,
                 judge: RecordingInterpreter | None, final: ValueDiff) -> Localization:
        loc = Localization(diff=final)
        progress = self.session.bisect_progress(f"graph {self.graph_id}: localizing divergence")
        t0 = time.perf_counter()
        try:
            candidates = [n.name for n in self.gm.graph.nodes
                          if n.op in ("call_function", "call_method", "call_module")
                          and isinstance(ref.values.get(n.name), torch.Tensor)
                          and ref.values[n.name].is_floating_point()]
            if not candidates:
                return loc
            # 1. the stage ladder, then the user's backend: each compiles the whole
            #    graph with every intermediate as an extra output (one compile per stage)
            stages = [st for st in _STAGES if st != self.session_backend_name()]
            if self.session.localize != "bisect":
                stages.append("user")
            loc.stage = "user"
            for stage in stages:
                progress.step("compiling the graph with every intermediate as an output"
                              if stage == "user" else f"checking stage {stage}")
                try:
                    full = graph_with_outputs(self.gm, candidates)
                    diffs = self._outputs_diverge(stage, full, candidates, inputs, rng, ref, judge, loc)
                except Exception as exc:
                    what = "the user's backend" if stage == "user" else f"stage {stage}"
                    loc.undecided.append(
                        f"{what} failed on the graph with extra outputs: {type(exc).__name__}: {exc}"[:300])
                    continue
                if not any(diffs):
                    continue
                first = next(i for i, d in enumerate(diffs) if d)
                found = Localization(node=candidates[first], stage=stage, diff=diffs[first],
                                     method="intermediate outputs")
                if not is_random(self.nodes[found.node]):
                    loc.node, loc.stage, loc.diff, loc.method = found.node, stage, found.diff, found.method
                    break
                # different random draws: say so once, replay them, keep checking
                if loc.random is None:
                    loc.random = found
                after = self._beyond_random(candidates, dict(self.last_values), inputs, rng, found)
                if after is not None:
                    loc.node, loc.stage, loc.diff, loc.method = after.node, stage, after.diff, after.method
                    break
            if loc.node is None and loc.random is not None:
                return loc  # nothing but random streams
            # 3. bisection over prefixes when fusion matters (or the above failed)
            if loc.node is None:
                loc.method = "bisection"
                lo, hi = 0, len(candidates) - 1
                known_bad = None
                total = max(1, math.ceil(math.log2(max(2, len(candidates)))))
                progress.start_bar(total, f"bisecting {len(candidates)} nodes")
                while lo < hi:
                    mid = (lo + hi) // 2
                    name = candidates[mid]
                    try:
                        d = self._outputs_diverge(loc.stage, graph_with_outputs(self.gm, [name]),
                                                  [name], inputs, rng, ref, judge, loc)[0]
                    except Exception as exc:
                        loc.undecided.append(f"{name}: backend failed on the prefix graph "
                                             f"({type(exc).__name__})")
                        lo = mid + 1  # cannot decide here: look later, say so
                        progress.advance()
                        continue
                    if d:
                        hi, known_bad = mid, d
                    else:
                        lo = mid + 1
                    progress.advance()
                loc.node = candidates[lo]
                loc.diff = known_bad or final
            # 4. the node alone, on the reference's inputs
            if loc.node is not None:
                progress.step(f"checking {loc.node} in isolation")
                loc.target = node_target(self.nodes[loc.node])
                loc.isolated = self._isolated(loc, ref, judge)
        finally:
            progress.end()
            loc.seconds = time.perf_counter() - t0
        return loc

    def _beyond_random(self, candidates: list[str], compiled: dict[str, Any], inputs: list,
                       rng: tuple, found: Localization) -> Localization | None:
        """Random ops draw differently compiled; replay the compiled draws in
        the eager reference and keep checking the rest of the graph."""
        overrides = {n: compiled[n] for n in self.random_nodes if n in compiled}
        with _preserved_rng(), torch.no_grad():
            _set_rng(rng)
            ref = RecordingInterpreter(self.gm, overrides=overrides)
            ref.run(*clone_inputs(inputs))
            _set_rng(rng)
            try:
                judge = RecordingInterpreter(self.gm, float64=True, overrides={
                    k: v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for k, v in overrides.items()})
                judge.run(*clone_inputs(inputs))
            except Exception:
                judge = None
        for name in candidates:
            if name in overrides:
                continue
            j = judge.values.get(name) if judge is not None else None
            d = compare_values(compiled.get(name), ref.values.get(name), j,
                               rtol=self.session.rtol, atol=self.session.atol)
            if is_finding(d):
                return Localization(node=name, target=node_target(self.nodes[name]),
                                    stage=found.stage, diff=d,
                                    method="intermediate outputs, random draws replayed")
        return None

    def _isolated(self, loc: Localization, ref: RecordingInterpreter,
                  judge: RecordingInterpreter | None) -> dict:
        try:
            gm1, inputs = single_node_graph(self.gm, loc.node, ref.values)
            fn = self._compile(loc.stage, gm1, inputs, loc)
            with _preserved_rng(), torch.no_grad():
                out = _flat(fn(*clone_inputs(inputs)))[0]
        except Exception as exc:
            return {"decided": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
        j = judge.values.get(loc.node) if judge is not None else None
        d = compare_values(out, ref.values[loc.node], j, rtol=self.session.rtol, atol=self.session.atol)
        return {"decided": True, "diverges": is_finding(d),
                "max_abs": d.max_abs if d else 0.0, "max_rel": d.max_rel if d else 0.0}

    def session_backend_name(self) -> str:
        return self.session.writer.graph(self.graph_id).get("backend") or ""

    # -- failures ---------------------------------------------------------------------
    def locate_failure(self, call_idx: int, args: tuple, exc: BaseException) -> None:
        """A compiled call raised: replay the graph node by node to name the
        node (and line) that fails on these inputs."""
        interp = RecordingInterpreter(self.gm)
        with _preserved_rng(), torch.no_grad():
            try:
                interp.run(*clone_inputs(args))
            except Exception as replay_exc:
                node = interp.current
                if node is not None:
                    self.session.runtime_failure_at_node(self, call_idx, node, exc, replay_exc)
                return
        # eager runs it fine: only the compiled code fails on these inputs
        self.session.runtime_failure_at_node(self, call_idx, None, exc, None)

    # -- gradients --------------------------------------------------------------------
    def _grads(self, run: Callable, inputs: list, ups_seed: int,
               float64: bool = False) -> list | None:
        """Gradients of the graph inputs that require grad, for upstream
        gradients drawn from a private generator (the program's RNG is untouched)."""
        args, leaves = [], []
        for a in inputs:
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point():
                leaf = _clone(a)
                if float64:
                    leaf = leaf.to(torch.float64)
                leaf.requires_grad_(True)
                leaves.append(leaf)
                args.append(leaf)
            else:
                args.append(_clone(a) if isinstance(a, torch.Tensor) else a)
        if not leaves:
            return None
        with torch.enable_grad():
            out = run(*args)
        outs = [o for o in _flat(out)
                if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
        if not outs:
            return None
        gen = torch.Generator().manual_seed(ups_seed)
        ups = [torch.randn(tuple(o.shape), generator=gen, dtype=torch.float64).to(o.dtype) for o in outs]
        grads = torch.autograd.grad(outs, leaves, ups, allow_unused=True)
        return [g if g is not None else torch.zeros_like(l) for g, l in zip(grads, leaves)]

    def _grads_diverge(self, run_c: Callable, inputs: list, rng: tuple,
                       gm: torch.fx.GraphModule | None = None) -> ValueDiff | None:
        """Compiled (run_c) vs eager vs float64 gradients of the inputs of ``gm``
        (the whole graph by default, or a prefix of it)."""
        gm = gm or self.gm
        with _preserved_rng():
            _set_rng(rng)
            g_c = self._grads(run_c, inputs, 0)
            _set_rng(rng)
            g_e = self._grads(lambda *a: RecordingInterpreter(gm).run(*a), inputs, 0)
            _set_rng(rng)
            try:
                g_j = self._grads(lambda *a: RecordingInterpreter(gm, float64=True).run(*a),
                                  inputs, 0, float64=True)
            except Exception:
                g_j = None
        if g_c is None or g_e is None:
            return None
        worst = None
        for i, (c, e) in enumerate(zip(g_c, g_e)):
            j = g_j[i] if g_j is not None else None
            d = compare_values(c, e, j, rtol=self.session.rtol, atol=self.session.atol)
            if is_finding(d) and (worst is None or _rank(d) > _rank(worst)):
                worst = d
        return worst

    def check_gradients(self, call_idx: int, inputs: list, rng: tuple, compiled_fn: Callable,
                        ref_out: Any) -> None:
        """Input and parameter gradients, same upstream gradient, compiled vs
        eager; a divergence is bisected over forward prefixes, so it maps to the
        forward line whose backward is wrong."""
        try:
            final = self._grads_diverge(compiled_fn, inputs, rng)
        except Exception as exc:
            self.session.internal_error(f"gradient check of graph {self.graph_id}", exc)
            return
        if final is None or "grad" in self.reported:
            return
        self.reported.add("grad")
        loc = Localization(diff=final, stage="user", method="bisection (backward)")
        candidates = [n.name for n in self.gm.graph.nodes
                      if n.op in ("call_function", "call_method", "call_module")
                      and isinstance(n.meta.get("example_value"), torch.Tensor)
                      and n.meta["example_value"].is_floating_point()
                      and n.meta["example_value"].requires_grad]
        progress = self.session.bisect_progress(f"graph {self.graph_id}: localizing gradient divergence")
        t0 = time.perf_counter()
        try:
            lo, hi = 0, len(candidates) - 1
            progress.start_bar(max(1, math.ceil(math.log2(max(2, len(candidates))))),
                               f"bisecting {len(candidates)} nodes (forward + backward)")
            while lo < hi:
                mid = (lo + hi) // 2
                sub = graph_with_outputs(self.gm, [candidates[mid]])
                try:
                    fn = self._compile("user", sub, inputs, loc)
                    d = self._grads_diverge(fn, inputs, rng, gm=sub)
                except Exception as exc:
                    loc.undecided.append(f"{candidates[mid]}: {type(exc).__name__}")
                    d = None
                if d:
                    hi, loc.diff = mid, d
                else:
                    lo = mid + 1
                progress.advance()
            if candidates:
                loc.node = candidates[lo]
                loc.target = node_target(self.nodes[loc.node])
        finally:
            progress.end()
            loc.seconds = time.perf_counter() - t0
        self.session.report_divergence(self, call_idx, 0, final, loc, direction="backward")

    # -- records ----------------------------------------------------------------------
    def _record_timings(self, ref: RecordingInterpreter) -> None:
        if self.checked == 1:
            self.session.record_node_times(self.graph_id, ref.times_ns)

    def _report_nonfinite(self, name: str, where: str, call_idx: int) -> None:
        if f"nonfinite|{name}" in self.reported:
            return
        self.reported.add(f"nonfinite|{name}")
        self.session.report_nonfinite(self, name, where, call_idx)


def _aliases(out: torch.Tensor, inputs) -> int | None:
    """Index of the input whose storage ``out`` shares, if any."""
    try:
        ptr = out.untyped_storage().data_ptr()
    except Exception:
        return None
    for i, a in enumerate(inputs):
        if isinstance(a, torch.Tensor):
            try:
                if a.untyped_storage().data_ptr() == ptr:
                    return i
            except Exception:
                continue
    return None


def _rank(d: ValueDiff) -> tuple:
    return (d.kind == "miscompile", d.max_rel if math.isfinite(d.max_rel) else 1e300)
