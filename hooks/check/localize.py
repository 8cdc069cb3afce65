"""Where in a graph compiled and eager part ways.

1. the stage ladder aot_eager -> aot_eager_decomp_partition -> the user's
   backend names the first stage that diverges: each compiles the graph once
   with every intermediate as an extra output;
2. else (fusion hides intermediates, or ``localize="bisect"``) one search for
   the first divergent node over graph prefixes, about log2(N) compiles: the
   same `first_divergent` serves values (forward) and gradients (a prefix's
   backward, so a wrong backward maps to its forward line), and places
   non-finite gradients (the first prefix whose gradients are NaN/Inf);
3. the node alone, on the reference's inputs, separates the guilty op from
   propagated error.

Random ops draw differently compiled: said once, the compiled draws are
replayed in the reference and the rest of the graph is still checked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx

from ..placement.modules import node_target
from .gradients import compare_gradients, eager, gradients_of, judge_gradients, nonfinite_gradients
from .interpreter import AsRanValues, Float64Judge
from .numerics import Tolerance, ValueDiff, finding
from ..progress import BisectProgress
from .subgraphs import (COMPUTE_OPS, clone_inputs, flat, graph_with_outputs, is_random,
                        preserved_rng, set_rng, single_node_graph)

STAGES = ("aot_eager", "aot_eager_decomp_partition")


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
    # compiled values of the intermediates (stage ``values_stage``) when a
    # stage with every intermediate as an output diverged (node_values)
    values: dict | None = field(default=None, repr=False, compare=False)
    values_stage: str | None = None
    # random ops that drew differently: the reference's (and judge's) values
    # with ``values``' draws replayed, {node: value} each (node_values)
    replayed: tuple | None = field(default=None, repr=False, compare=False)


def first_divergent(names: list[str], probe: Callable[[str], ValueDiff | None],
                    undecided: list[str], progress: BisectProgress, label: str,
                    failed: Callable[[str, BaseException], str],
                    over: Callable[[], str | None] = lambda: None,
                    ) -> tuple[int | None, ValueDiff | None]:
    """Index of the first of ``names`` whose prefix diverges (``probe``
    returns a finding), assuming every later prefix diverges too, and the
    finding at that index. A probe that raises cannot decide: the search
    looks later and ``undecided`` says why. ``over()`` says why the search
    must stop now (its time is up): the index is then None."""
    lo, hi, bad = 0, len(names) - 1, None
    progress.start_bar(max(1, math.ceil(math.log2(max(2, len(names))))), label)
    while lo < hi:
        why = over()
        if why:
            undecided.append(why)
            return None, bad
        mid = (lo + hi) // 2
        try:
            d = probe(names[mid])
        except Exception as exc:
            undecided.append(failed(names[mid], exc))
            d = None
        if d:
            hi, bad = mid, d
        else:
            lo = mid + 1
        progress.advance()
    return lo, bad


class Localizer:
    """Localises divergences in one graph (``gm``, the untouched Dynamo graph)."""

    def __init__(self, gm: torch.fx.GraphModule, compile_user: Callable, backend: str,
                 tol: Tolerance, mode: str, progress: Callable[[str], BisectProgress],
                 title: str, budget_s: float | None = None) -> None:
        """``budget_s``: the most seconds one localisation may take (a rank of
        a distributed job: the other ranks wait for it in their next
        collective); None: no limit."""
        self.budget_s = budget_s
        self.gm = gm
        self.nodes = {n.name: n for n in gm.graph.nodes}
        self.compile_user = compile_user
        self.backend = backend
        self.tol = tol
        self.mode = mode
        self.progress = progress
        self.title = title

    def _over(self, t0: float) -> Callable[[], str | None]:
        def over() -> str | None:
            if self.budget_s is None or time.perf_counter() - t0 <= self.budget_s:
                return None
            return (f"stopped after {self.budget_s:.0f} s: a rank of a distributed job must not "
                    f"keep the others waiting in their next collective; localise it in one "
                    f"process (graphdbg.compare on the module and these inputs)")
        return over

    @property
    def random_nodes(self) -> list[str]:
        """Nodes that drew random numbers (known once a check found a divergence)."""
        return [n.name for n in self.gm.graph.nodes if is_random(n)]

    def compile(self, stage: str, gm: torch.fx.GraphModule, inputs: list,
                loc: Localization | None = None) -> Callable:
        if loc is not None:
            loc.compiles += 1
            loc.by_stage[stage] = loc.by_stage.get(stage, 0) + 1
        if stage == "user":
            return self.compile_user(gm, list(inputs))
        from torch._dynamo.backends.registry import lookup_backend
        return lookup_backend(stage)(gm, list(inputs))

    def _outputs(self, stage: str, names: list[str], inputs: list, rng: tuple,
                 ref: AsRanValues, judge: AsRanValues | None,
                 loc: Localization) -> tuple[list[ValueDiff | None], dict[str, Any]]:
        """The graph compiled at ``stage`` with ``names`` as its outputs: the
        finding per name, and the compiled values."""
        fn = self.compile(stage, graph_with_outputs(self.gm, names, ref.as_ran), inputs, loc)
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            out = flat(fn(*clone_inputs(inputs)))
        values = dict(zip(names, out))
        diffs = [finding(v, ref.values.get(n), judge.values.get(n) if judge is not None else None,
                         self.tol) for n, v in values.items()]
        return diffs, values

    # -- values ------------------------------------------------------------------------
    def forward(self, inputs: list, rng: tuple, ref: AsRanValues,
                judge: AsRanValues | None, final: ValueDiff) -> Localization:
        loc = Localization(diff=final)
        progress = self.progress(f"{self.title}: localizing divergence")
        t0 = time.perf_counter()
        try:
            candidates = [n.name for n in self.gm.graph.nodes if n.op in COMPUTE_OPS
                          and isinstance(ref.values.get(n.name), torch.Tensor)
                          and ref.values[n.name].is_floating_point()]
            if not candidates:
                return loc
            stages = [st for st in STAGES if st != self.backend]
            if self.mode != "bisect":
                stages.append("user")
            loc.stage = "user"
            over = self._over(t0)
            for stage in stages:
                why = over()
                if why:
                    loc.undecided.append(why)
                    return loc
                progress.step("compiling the graph with every intermediate as an output"
                              if stage == "user" else f"checking stage {stage}")
                try:
                    diffs, values = self._outputs(stage, candidates, inputs, rng, ref, judge, loc)
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
                loc.values, loc.values_stage = values, stage
                if loc.random is not None:  # its figures from the compile the values are from
                    self._refigure(loc.random, candidates, diffs, stage)
                if not is_random(self.nodes[found.node]):
                    loc.node, loc.stage, loc.diff, loc.method = found.node, stage, found.diff, found.method
                    break
                # different random draws: say so once, replay them, keep checking
                if loc.random is None:
                    found.target = node_target(self.nodes[found.node])
                    loc.random = found
                after = self._beyond_random(candidates, values, inputs, rng, found)
                loc.replayed, found.replayed = found.replayed, None
                if after is not None:
                    loc.node, loc.stage, loc.diff, loc.method = after.node, stage, after.diff, after.method
                    break
            if loc.node is None and loc.random is not None:
                return loc  # nothing but random streams
            if loc.node is None:  # fusion hides intermediates (or bisect asked for)
                loc.method = "bisection"

                def probe(name: str) -> ValueDiff | None:
                    return self._outputs(loc.stage, [name], inputs, rng, ref, judge, loc)[0][0]

                i, bad = first_divergent(
                    candidates, probe, loc.undecided, progress, f"bisecting {len(candidates)} nodes",
                    lambda name, exc: f"{name}: backend failed on the prefix graph ({type(exc).__name__})",
                    over)
                if i is None:
                    return loc
                loc.node, loc.diff = candidates[i], bad or final
            progress.step(f"checking {loc.node} in isolation")
            loc.target = node_target(self.nodes[loc.node])
            loc.isolated = self._isolated(loc, ref, judge)
        finally:
            progress.end()
            loc.seconds = time.perf_counter() - t0
        return loc

    def _refigure(self, random: Localization, candidates: list[str],
                  diffs: list[ValueDiff | None], stage: str) -> None:
        """A later stage's compile whose intermediates become the per-node
        values: the random finding (stage: where the draws first differed)
        takes its figures from the same compile, and says so. Where its node
        draws alike in this compile, its figures stay with the earlier one."""
        d = diffs[candidates.index(random.node)]
        if stage == random.stage:
            return
        name = (lambda st: self.backend if st == "user" else st)
        if d is None:
            random.method = (f"intermediate outputs; figures from stage {name(random.stage)}'s "
                             f"compile (in {name(stage)}'s, the node values', it draws as eager)")
            return
        random.diff = d
        random.method = f"intermediate outputs; figures from stage {name(stage)}'s compile, as the node values"

    def _beyond_random(self, candidates: list[str], compiled: dict[str, Any], inputs: list,
                       rng: tuple, found: Localization) -> Localization | None:
        """Random ops draw differently compiled; replay the compiled draws in
        the eager reference and keep checking the rest of the graph."""
        overrides = {n: compiled[n] for n in self.random_nodes if n in compiled}
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            ref = AsRanValues(self.gm, overrides)  # values only: no NaN/Inf traced here
            ref.run(*clone_inputs(inputs))
            set_rng(rng)
            try:
                judge = Float64Judge(self.gm, overrides={
                    k: v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for k, v in overrides.items()})
                judge.run(*clone_inputs(inputs))
            except Exception:
                judge = None
        found.replayed = (ref.values, judge.values if judge is not None else None)
        for name in candidates:
            if name in overrides:
                continue
            d = finding(compiled.get(name), ref.values.get(name),
                        judge.values.get(name) if judge is not None else None, self.tol)
            if d is not None:
                return Localization(node=name, target=node_target(self.nodes[name]),
                                    stage=found.stage, diff=d,
                                    method="intermediate outputs, random draws replayed")
        return None

    def _isolated(self, loc: Localization, ref: AsRanValues,
                  judge: AsRanValues | None) -> dict:
        try:
            # its inputs as it read them (after any in-place writes into them)
            gm1, inputs = single_node_graph(self.gm, loc.node,
                                            {**ref.values, **ref.seen.get(loc.node, {})})
            fn = self.compile(loc.stage, gm1, inputs, loc)
            with preserved_rng(), torch.no_grad():
                out = flat(fn(*clone_inputs(inputs)))[0]
        except Exception as exc:
            return {"decided": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
        d = finding(out, ref.values[loc.node],
                    judge.values.get(loc.node) if judge is not None else None, self.tol)
        return {"decided": True, "diverges": d is not None,
                "max_abs": d.max_abs if d else 0.0, "max_rel": d.max_rel if d else 0.0}

    # -- gradients ---------------------------------------------------------------------
    def grad_candidates(self) -> list[str]:
        """Forward nodes whose backward can carry a gradient, in graph order."""
        return [n.name for n in self.gm.graph.nodes if n.op in COMPUTE_OPS
                and isinstance(n.meta.get("example_value"), torch.Tensor)
                and n.meta["example_value"].is_floating_point()
                and n.meta["example_value"].requires_grad]

    def backward(self, inputs: list, rng: tuple, final: ValueDiff,
                 prefixes: PrefixGradients | None = None) -> Localization:
        """The forward node whose backward makes the gradients diverge: the
        first prefix whose input gradients (compiled vs eager) diverge."""
        loc = Localization(diff=final, stage="user", method="bisection (backward)")
        prefixes = prefixes or PrefixGradients(self, inputs, rng)
        candidates = self.grad_candidates()
        progress = self.progress(f"{self.title}: localizing gradient divergence")
        t0 = time.perf_counter()
        try:
            if candidates:
                i, bad = first_divergent(
                    candidates, lambda name: prefixes.diverge(name, loc), loc.undecided, progress,
                    f"bisecting {len(candidates)} nodes (forward + backward)",
                    lambda name, exc: f"{name}: {type(exc).__name__}", self._over(t0))
                if i is not None:
                    loc.node, loc.diff = candidates[i], bad or final
                    loc.target = node_target(self.nodes[loc.node])
        finally:
            progress.end()
            loc.seconds = time.perf_counter() - t0
        return loc

    def backward_nonfinite(self, inputs: list, rng: tuple, where: str,
                           prefixes: PrefixGradients | None = None) -> Localization:
        """The forward node whose backward first makes the gradients NaN/Inf
        in the ``where`` ("eager" or "compiled") run: the first prefix whose
        input gradients are non-finite. Eager prefixes are interpreted, not
        compiled."""
        loc = Localization(stage="user" if where == "compiled" else None,
                           method="bisection (backward)")
        prefixes = prefixes or PrefixGradients(self, inputs, rng)
        candidates = self.grad_candidates()
        progress = self.progress(f"{self.title}: localizing non-finite gradients")
        t0 = time.perf_counter()

        def probe(name: str) -> int:
            grads = prefixes.compiled(name, loc) if where == "compiled" else prefixes.eager(name)
            return nonfinite_gradients(grads)[0]

        try:
            if candidates:
                i, _ = first_divergent(
                    candidates, probe, loc.undecided, progress,
                    f"bisecting {len(candidates)} nodes (forward + backward)",
                    lambda name, exc: f"{name}: {type(exc).__name__}", self._over(t0))
                if i is not None:
                    loc.node = candidates[i]
                    loc.target = node_target(self.nodes[loc.node])
        finally:
            progress.end()
            loc.seconds = time.perf_counter() - t0
        return loc


class PrefixGradients:
    """Input gradients of forward prefixes (the graph up to one node, that
    node's value its only output) for one call's inputs, RNG state and
    upstream-gradient seed: each prefix is compiled at most once and each
    gradient computed once, shared by the divergence and non-finite searches."""

    def __init__(self, localizer: Localizer, inputs: list, rng: tuple) -> None:
        self.localizer = localizer
        self.inputs = inputs
        self.rng = rng
        self._subs: dict[str, torch.fx.GraphModule] = {}
        self._grads: dict[tuple[str, str], Any] = {}  # list, None or the exception

    def _sub(self, name: str) -> torch.fx.GraphModule:
        if name not in self._subs:
            self._subs[name] = graph_with_outputs(self.localizer.gm, [name])
        return self._subs[name]

    def eager(self, name: str) -> list | None:
        key = (name, "eager")
        if key not in self._grads:
            self._grads[key] = gradients_of(eager(self._sub(name)), self.inputs, self.rng)
        return self._grads[key]

    def compiled(self, name: str, loc: Localization) -> list | None:
        key = (name, "compiled")
        if key not in self._grads:
            try:
                fn = self.localizer.compile("user", self._sub(name), self.inputs, loc)
                self._grads[key] = gradients_of(fn, self.inputs, self.rng)
            except Exception as exc:  # said once per prefix, not compiled again
                self._grads[key] = exc
        got = self._grads[key]
        if isinstance(got, Exception):
            raise got
        return got

    def diverge(self, name: str, loc: Localization) -> ValueDiff | None:
        g_c = self.compiled(name, loc)
        g_e = self.eager(name)
        return compare_gradients(g_c, g_e, judge_gradients(self._sub(name), self.inputs, self.rng),
                                 self.localizer.tol)
