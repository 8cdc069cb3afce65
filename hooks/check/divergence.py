"""Eager vs compiled: check calls of one compiled graph against the graph
interpreted eagerly, judged in float64, and report where they part ways.

Per checked call:
1. reference: an untouched copy of the Dynamo graph interpreted eagerly on the
   same inputs (clones when the graph mutates its inputs), the RNG state rewound
   to what the compiled call saw; judge: the same in float64; both keep each
   node's value as it was when the node ran (before later in-place writes);
2. compiled vs reference for every output and mutated input (hooks/check/numerics.py),
   and whether outputs alias inputs the same way;
3. a divergence is localised (hooks/check/localize.py) and written as a finding;
   the first checked call with grad enabled also compares input gradients;
4. NaN/Inf that reach an output (or an input the graph writes) are traced
   back to the node where they first appear; consumed ones (a causal mask's
   -inf before softmax) are not findings. On the call whose gradients are
   compared, NaN/Inf gradients (eager, or compiled only) are placed at the
   forward node whose backward first makes them (a prefix bisection, run
   only when they are non-finite).

Everything here runs inside the context's own-work scope (no eager recording,
no compile events), under no_grad, with the program's RNG state saved and
restored: the program computes and compiles exactly what it would without
graphdbg.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import torch
import torch.fx

from graphdbg.runfile.records import NodeTimeRow

from . import checkcost
from ..context import CaptureContext
from ..findings.writer import Findings
from ..placement.modules import node_target
from .gradients import (compare_gradients, eager, grad_inputs, gradients_of, judge_gradients,
                        nonfinite_gradients)
from .interpreter import (NAN, DrawWatchingReference, EagerReference, EagerRun, Float64Judge,
                          LeanPass, first_pass, nonfinite_flags)
from .localize import Localization, Localizer, PrefixGradients
from .nodevalues import node_value_rows, value_summary
from .numerics import Tolerance, ValueDiff, finding, worst
from .subgraphs import (aliased_input, clone_inputs, flat, mark_random,
                        mutates_inputs, output_names, preserved_rng, rng_state, set_rng)
from . import reprorecord, verdicts


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference, or for what cannot have one, a strong one."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _drop_with(compiled_fn: Any, checker: "DivergenceChecker") -> None:
    """When the program lets go of ``compiled_fn``, the checker lets go of
    the gradient check it left pending on it (and of that call's inputs)."""
    ref = weakref.ref(checker)

    def dropped() -> None:
        c = ref()
        if c is not None:
            c.pending_grads = None

    try:
        weakref.finalize(compiled_fn, dropped)
    except TypeError:  # not weakly referenceable: lives as long as the session anyway
        pass


@dataclass(frozen=True)
class Checked:
    """What diverged: output ``output``, or input ``mutated_input`` that the
    graph writes in place."""
    output: int | None = None
    mutated_input: int | None = None


class DivergenceChecker:
    """Checks calls of one compiled graph; owns the untouched graph copy."""

    def __init__(self, ctx: CaptureContext, findings: Findings, graph_id: int,
                 gm: torch.fx.GraphModule, compile_user: Callable, backend: str) -> None:
        o = ctx.options
        self.ctx = ctx
        self.findings = findings
        self.graph_id = graph_id
        self.gm = gm
        self.tol = Tolerance(o.rtol, o.atol)
        self.localizer = Localizer(gm, compile_user, backend, self.tol, o.localize,
                                   ctx.bisect_progress, f"graph {graph_id}",
                                   ctx.localize_budget_s)
        self.needs_clone = mutates_inputs(gm)
        self.checked = 0
        # each node's fastest reference time over the first checked calls:
        # a one-time cost (lazy init, allocator or oneDNN warm-up) is not
        # the node's (None once written)
        self.node_ns: dict[str, int] | None = {}
        self.reported: set[str] = set()
        self.disabled = False
        self.grads_checked = False
        self.values_localized = False
        self.budget_checked = False
        self.pending_grads: tuple | None = None  # (call, inputs, rng, compiled fn) to check
        self.draws_known = False  # which nodes draw random numbers (subgraphs.mark_random)

    # -- per call ---------------------------------------------------------------------
    def wants(self, call_idx: int) -> bool:
        o = self.ctx.options
        if self.disabled or not o.compare:
            return False
        if call_idx < o.compare_first:
            return True
        return bool(o.compare_every) and call_idx % o.compare_every == 0

    def before_call(self, args: tuple) -> tuple | None:
        """What the reference needs, taken before the compiled call runs: the
        inputs only if the graph may change them, the RNG state, grad mode.
        None when the check would not fit in its memory budget (then it is
        off for this graph, with a note)."""
        if not self.budget_checked:
            self.budget_checked = True
            need = checkcost.estimate(self.gm, args)
            limit, what = checkcost.budget(self.ctx.options.compare_memory, args)
            if limit is not None and need > limit:
                self.disabled = True
                self.findings.check_skipped(self.graph_id, need, limit, what)
                return None
        return (clone_inputs(args) if self.needs_clone else None), rng_state(), torch.is_grad_enabled()

    def after_call(self, call_idx: int, snapshot: tuple, args: tuple, compiled_out: Any,
                   compiled_fn: Callable | None = None) -> None:
        try:
            self._check(call_idx, snapshot, args, compiled_out, compiled_fn)
        finally:
            checkcost.release_freed()  # the next phase starts from the program's memory

    def _check(self, call_idx: int, snapshot: tuple, args: tuple, compiled_out: Any,
               compiled_fn: Callable | None) -> None:
        inputs, rng, grad_mode = snapshot
        if inputs is None:
            inputs = list(args)
        # The reference always works on clones: a missed in-place op must never
        # reach the program's own tensors.
        # the reference first runs lean: values freed after their last use,
        # each node's summary kept (first checked call); it runs again whole
        # only when something differs or is NaN/Inf
        tier = self.ctx.options.values
        summarize = None
        if self.checked == 0 and tier != "none":
            summarize = partial(value_summary, tier="health" if tier == "health" else "stats")
        try:
            ref, ref_out, ref_inputs = self._reference(inputs, rng, first_pass(self.gm, summarize))
        except Exception as exc:
            self.disabled = True
            self.ctx.internal_error(f"eager reference of graph {self.graph_id}", exc)
            return
        self.checked += 1
        self._time_nodes(ref.times_ns)
        lean = isinstance(ref, LeanPass)
        if lean and any(ref.flags.values()):  # NaN/Inf: where they come from needs every value
            ref, ref_out, ref_inputs = self._reference(inputs, rng, EagerReference(self.gm))
            lean = False
        origin = None if lean else ref.nonfinite_origin()  # still lean: no NaN/Inf anywhere
        if origin is not None:
            self._nonfinite(origin[0], "eager", call_idx, *origin[1:])

        # outputs as the graph returns them (a node's recorded value is as it
        # was when the node ran, before later in-place writes)
        compiled, eager = flat(compiled_out), flat(ref_out)
        judge, judged = None, [None] * len(eager)
        found = self._compare(compiled, eager, judged, args, ref_inputs)
        if found is not None:
            # they differ beyond tolerance: the float64 judge (run only now, it
            # costs about two eager runs) says whether it is precision, and
            # localisation needs every value of the reference
            if lean or not self.draws_known:
                # whole, and watching which nodes draw random numbers (their
                # differences are the random streams', not miscompiles)
                summaries = ref.summaries if lean else None
                ref, ref_out, ref_inputs = self._reference(
                    inputs, rng, EagerReference(self.gm, summaries=summaries) if self.draws_known
                    else DrawWatchingReference(self.gm, summaries=summaries))
                eager = flat(ref_out)
                if not self.draws_known:
                    self.draws_known = True
                    mark_random(self.gm, ref.drew)
            judge, judged = self._judge(inputs, rng, len(eager))
            found = self._compare(compiled, eager, judged, args, ref_inputs)
        if found is None:
            if self.checked == 1:
                self._node_values(call_idx, ref, judge, compiled, eager, judged)
            self._aliasing(call_idx, compiled, eager, args, ref_inputs)
            if grad_mode and compiled_fn is not None and not self.grads_checked \
                    and grad_inputs(inputs):
                # Not now: the program's own forward activations are alive until
                # its backward, and two more forward-backward runs on top of them
                # would double its peak memory. Before the graph's next call (or
                # when the session ends) they are gone. The inputs are held only
                # while the compiled graph lives: a graph the program drops is
                # freed as without graphdbg, with its inputs (the check is dropped).
                self.grads_checked = True
                self.pending_grads = (call_idx, inputs, rng, _weak(compiled_fn))
                _drop_with(compiled_fn, self)
            return
        d, (name, what) = found
        key = f"{name}|{what}"
        if key in self.reported:
            if self.checked == 1:
                self._node_values(call_idx, ref, judge, compiled, eager, judged)
            return
        self.reported.add(key)
        loc = self.localizer.forward(inputs, rng, ref, judge, d)
        consumed = self._nonfinite_origin(loc, ref, judge)
        # eager's NaN/Inf that reach an output: their nan_inf finding there says it
        said = consumed is not None and f"nonfinite|{loc.node}" in self.reported
        if self.checked == 1 or not self.values_localized:
            # the first checked call, or the call whose divergence was localised
            self.values_localized = True
            self._node_values(call_idx, ref, judge, compiled, eager, judged, loc)
        if loc.node is not None and not said:
            self._record_repro(loc, ref, inputs)
        loc.values = loc.replayed = None  # not kept past this point
        if loc.random is not None:
            loc.random.compiles, loc.random.by_stage = loc.compiles, dict(loc.by_stage)
            self._report(call_idx, what, d, loc.random)
        if (loc.node is not None or loc.random is None) and not said:
            self._report(call_idx, what, d, loc,
                         consumed=consumed if isinstance(consumed, torch.fx.Node) else None)
            if loc.node is not None and loc.diff is not None and loc.diff.max_abs == float("inf"):
                self._compiled_nonfinite(loc.node, call_idx, compiled, args)

    def _record_repro(self, loc: Localization, ref: Any, inputs: list) -> None:
        """What `graphdbg repro` needs (`reprorecord`), once per divergence."""
        try:
            with self.ctx.own_work():
                reprorecord.divergence(self.ctx.writer, self.graph_id, self.gm, loc, ref,
                                       list(inputs), self.localizer.backend,
                                       self.localizer.compile_user, self.tol)
        except Exception as exc:
            self.ctx.internal_error("repro recorder", exc)

    def _record_grad_repro(self, loc: Localization, inputs: list, rng: tuple) -> None:
        """What `graphdbg repro` needs for a divergence of gradients."""
        try:
            with self.ctx.own_work():
                reprorecord.gradient(self.ctx.writer, self.graph_id, self.gm, loc, list(inputs),
                                     rng, self.localizer.backend, self.localizer.compile_user,
                                     self.tol)
        except Exception as exc:
            self.ctx.internal_error("repro recorder", exc)

    def _time_nodes(self, times_ns: dict[str, int]) -> None:
        """Keep each node's fastest time; written after the last of the
        first `--compare-first` checked calls (or by `flush_node_times`)."""
        kept = self.node_ns
        if kept is None:
            return
        for name, ns in times_ns.items():
            if name not in kept or ns < kept[name]:
                kept[name] = ns
        if self.checked >= self.ctx.options.compare_first:
            self.flush_node_times()

    def flush_node_times(self) -> None:
        """Write the node times kept so far (a graph checked fewer times
        than `--compare-first`: at the end, or when a reader asks)."""
        kept, self.node_ns = self.node_ns, None
        for name, ns in (kept or {}).items():
            self.ctx.writer.add(NodeTimeRow(graph_id=self.graph_id, node=name, eager_ns=ns))

    def pending_gradients(self, call_idx: int | None = None, args: tuple | None = None) -> None:
        """The gradient check left pending by a checked call: on the inputs of
        call ``call_idx`` (``args``, about to run) or, at the end, on the
        checked call's own inputs."""
        pending, self.pending_grads = self.pending_grads, None
        if pending is None:
            return
        checked_call, inputs, rng, fn_ref = pending
        compiled_fn = fn_ref()
        if compiled_fn is None:
            return  # the program dropped the compiled graph
        if args is not None:
            self._gradients(call_idx, list(args), rng_state(), compiled_fn)
        else:
            self._gradients(checked_call, inputs, rng, compiled_fn)

    def _compare(self, compiled: list, eager: list, judged: list, args: tuple,
                 ref_inputs: list) -> tuple | None:
        """The worst output difference that is a finding; else, for a graph
        that writes its inputs, the first written input that differs."""
        found = worst(
            (finding(c, e, j if name else None, self.tol), (name, Checked(output=i)))
            for i, (c, e, j, name) in enumerate(zip(compiled, eager, judged, output_names(self.gm))))
        if found is None and self.needs_clone:
            # inputs the graph mutated: the program's tensors now vs the reference's
            found = next(((d, (None, Checked(mutated_input=i)))
                          for i, (now, ref_in) in enumerate(zip(args, ref_inputs))
                          if isinstance(now, torch.Tensor) and isinstance(ref_in, torch.Tensor)
                          and (d := finding(now, ref_in, tol=self.tol)) is not None), None)
        return found

    def _reference(self, inputs: list, rng: tuple, ref: LeanPass | EagerReference) -> tuple:
        """``ref`` (an interpreter of the graph) run eagerly on clones of the
        inputs and the compiled call's random draws: (ref, its output, the clones)."""
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            ref_inputs = clone_inputs(inputs)
            return ref, ref.run(*ref_inputs), ref_inputs

    def _judge(self, inputs: list, rng: tuple, n_out: int) -> tuple:
        """The graph in float64 on the same inputs and random draws: the
        interpreter (its values kept, for localisation) and its outputs."""
        with preserved_rng(), torch.no_grad():
            set_rng(rng)
            judge = Float64Judge(self.gm)
            try:
                return judge, flat(judge.run(*clone_inputs(inputs)))
            except Exception:  # some graphs have no float64 meaning (dtype-specific ops)
                return None, [None] * n_out

    def _node_values(self, call_idx: int, ref: LeanPass | EagerReference,
                     judge: Float64Judge | None, compiled: list, eager: list,
                     judged: list, loc: Localization | None = None) -> None:
        """Per-node values eager vs compiled (and float64) of this call:
        the run file's node_values table (hooks/check/nodevalues.py)."""
        tier = self.ctx.options.values
        if tier == "none":
            return
        try:
            rows = node_value_rows(self.graph_id, call_idx, self.gm, ref, judge, compiled,
                                   eager, judged, self.tol,
                                   "health" if tier == "health" else "stats", loc,
                                   self.localizer.backend)
        except Exception as exc:
            self.ctx.internal_error(f"node values of graph {self.graph_id}", exc)
            return
        writer = self.ctx.writer
        def text(stats: dict | None) -> str | None:
            return None if stats is None else json.dumps(stats, separators=(",", ":"), default=str)

        for row in rows:
            writer.add(row._replace(eager_stats=text(row.eager_stats),
                                    compiled_stats=text(row.compiled_stats),
                                    fp64_stats=text(row.fp64_stats)))

    def _aliasing(self, call_idx: int, compiled: list, eager: list, args: tuple,
                  ref_inputs: list) -> None:
        """An output that is a view of an input in one mode and a copy in the other."""
        if "aliasing" in self.reported:
            return
        for i, (c, e) in enumerate(zip(compiled, eager)):
            if isinstance(c, torch.Tensor) and isinstance(e, torch.Tensor):
                a_c, a_e = aliased_input(c, args), aliased_input(e, ref_inputs)
                if a_c != a_e:
                    self.reported.add("aliasing")
                    self.findings.aliasing(self.graph_id, call_idx, i, a_c, a_e)
                    return

    def _gradients(self, call_idx: int, inputs: list, rng: tuple, compiled_fn: Callable) -> None:
        """Input and parameter gradients, same upstream gradient, compiled vs
        eager; a divergence maps to the forward line whose backward is wrong.
        NaN/Inf gradients map to the forward line whose backward first makes
        them: eager's (the program's own), else the compiled ones."""
        try:
            g_c = gradients_of(compiled_fn, inputs, rng)
            g_e = gradients_of(eager(self.gm), inputs, rng)
            final = compare_gradients(g_c, g_e, None, self.tol)
            if final is not None:  # the float64 judge only when they differ
                checkcost.release_freed()  # the judge's peak on top of the program's, not ours
                final = compare_gradients(g_c, g_e, judge_gradients(self.gm, inputs, rng), self.tol)
        except Exception as exc:
            self.ctx.internal_error(f"gradient check of graph {self.graph_id}", exc)
            return
        finally:
            checkcost.release_freed()
        prefixes = PrefixGradients(self.localizer, inputs, rng)
        if final is not None and "grad" not in self.reported:
            self.reported.add("grad")
            loc = self.localizer.backward(inputs, rng, final, prefixes)
            if loc.node is not None:
                self._record_grad_repro(loc, inputs, rng)
            self._report(call_idx, Checked(output=0), final, loc, direction="backward")
        bits_e, bad_e = nonfinite_gradients(g_e)
        bits_c, bad_c = nonfinite_gradients(g_c)
        if not (bits_e or bits_c):
            return
        where, bits, bad = ("eager", bits_e, bad_e) if bits_e else ("compiled", bits_c, bad_c)
        try:
            loc = self.localizer.backward_nonfinite(inputs, rng, where, prefixes)
        except Exception as exc:
            self.ctx.internal_error(f"non-finite gradient search of graph {self.graph_id}", exc)
            return
        if loc.node is None:
            return
        positions = grad_inputs(inputs)
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        names = [_input_name(str(placeholders[positions[i]].target))
                 if positions[i] < len(placeholders) else f"input {positions[i]}" for i in bad]
        if f"nonfinite_grad|{loc.node}" in self.reported or f"nonfinite|{loc.node}" in self.reported:
            return  # said, or the gradient of a forward NaN/Inf already reported there
        self.reported.add(f"nonfinite_grad|{loc.node}")
        self.findings.nonfinite(
            self.graph_id, self.localizer.nodes[loc.node], where, call_idx,
            value="NaN" if bits & NAN else "Inf", direction="backward", gradient_of=names,
            compiled_too=bool(bits_c) if where == "eager" else None,
            masked_by=_masked_by(self.localizer.nodes[loc.node]), loc=loc)

    def _nonfinite_origin(self, loc: Localization, ref: Any, judge: Float64Judge | None
                          ) -> torch.fx.Node | bool | None:
        """Eager's NaN/Inf behind the divergence localised at ``loc.node``:
        ``loc`` moved to the node that first made them (`verdicts`); returns
        the node that turned them finite again, True when none did, None when
        the divergence is not about eager's NaN/Inf."""
        flags = getattr(ref, "flags", None)
        if loc.node is None or loc.diff is None or not flags:
            return None
        node = self.localizer.nodes[loc.node]
        found = verdicts.nonfinite_origin(
            node, loc.diff, flags, lambda n: judge.values.get(n) if judge is not None else None)
        if found is None:
            return None
        origin, diff, consumed = found
        if origin is not node:
            loc.node, loc.diff, loc.target, loc.isolated = (origin.name, diff,
                                                            node_target(origin), None)
            loc.method = f"{loc.method}, eager's {diff.value} traced back"
        return consumed if consumed is not None else True

    def _report(self, call_idx: int, what: Checked, final: ValueDiff, loc: Localization,
                direction: str = "forward", consumed: torch.fx.Node | None = None) -> None:
        node = self.localizer.nodes.get(loc.node) if loc.node else None
        # random only where the node drew (the draws of nodes before it were replayed)
        kind = verdicts.kind((loc.diff or final).kind, node)
        self.findings.divergence(self.graph_id, node, call_idx, kind, final, loc,
                                 output=what.output, mutated_input=what.mutated_input,
                                 direction=direction, consumed=consumed)

    def _compiled_nonfinite(self, name: str, call_idx: int, compiled: list, args: tuple) -> None:
        """The first divergent node is NaN/Inf compiled only: a finding when
        they reach an output, or an input the graph writes."""
        out = nonfinite_flags(compiled)
        written = nonfinite_flags(list(args)) if self.needs_clone and not out else 0
        bits = out or written
        if bits:
            self._nonfinite(name, "compiled", call_idx, "NaN" if bits & NAN else "Inf",
                            "an output" if out else "an input written in place")

    def _nonfinite(self, name: str, where: str, call_idx: int, value: str = "NaN/Inf",
                   reaches: str | None = None, from_inf: str | None = None) -> None:
        if f"nonfinite|{name}" in self.reported:
            return
        self.reported.add(f"nonfinite|{name}")
        nodes = self.localizer.nodes
        self.findings.nonfinite(self.graph_id, nodes[name], where, call_idx, value=value,
                                reaches=reaches, from_inf=nodes.get(from_inf) if from_inf else None)

    # -- failures ---------------------------------------------------------------------
    def locate_failure(self, call_idx: int, args: tuple, exc: BaseException) -> None:
        """A compiled call raised: replay the graph node by node to name the
        node (and line) that fails on these inputs."""
        # every value kept: the custom-op fake check reads them (fakecheck.at_replay_failure)
        interp = EagerRun(self.gm, garbage_collect_values=False)
        with preserved_rng(), torch.no_grad():
            try:
                interp.run(*clone_inputs(args))
            except Exception as replay_exc:
                if interp.current is not None:
                    self.findings.compiled_call_failed(self.graph_id, call_idx, interp.current,
                                                       exc, replay_exc)
                return
        # eager runs it fine: only the compiled code fails on these inputs
        self.findings.compiled_call_failed(self.graph_id, call_idx, None, exc, None)


_MASKING = {"where", "masked_fill", "masked_fill_", "masked_scatter"}


def _masked_by(node: torch.fx.Node) -> torch.fx.Node | None:
    """A ``torch.where``/``masked_fill`` downstream of ``node`` that selects
    among values computed from it (not its mask): the where-trap, in which
    the masked-out branch's NaN gradient still flows back (0 * inf)."""
    seen, stack = set(), [node]
    while stack:
        cur = stack.pop()
        for user in cur.users:
            if user in seen:
                continue
            seen.add(user)
            name = user.target if isinstance(user.target, str) else \
                getattr(user.target, "__name__", "")
            name = name.split(".")[0]  # aten overloads: where.self
            if user.op in ("call_function", "call_method") and name in _MASKING:
                mask_pos = 0 if user.op == "call_function" and name == "where" else 1
                if any(a is cur for i, a in enumerate(user.args) if i != mask_pos):
                    return user
            stack.append(user)
    return None


def _input_name(target: str) -> str:
    """A graph input as the program names it: ``L_x_`` -> ``x``,
    ``L_self_modules_fc_parameters_weight_`` -> ``self.fc.weight``."""
    name = target
    if len(name) > 2 and name[0] in "LG" and name[1] == "_":
        name = name[2:]
    name = name.rstrip("_") or target
    for part in ("_modules_", "_parameters_", "_buffers_"):
        name = name.replace(part, ".")
    return name
