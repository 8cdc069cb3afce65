"""The page's graphs: one row per graph, each graph's nodes (the first
`NODES_PER_GRAPH` inline, in a collapsed <details>, filterable), and eager
against compiled node by node for each graph checked that way.

Paged, never whole: a graph's nodes beyond `NODES_PER_GRAPH`, and any past
`NODES_IN_PAGE` over all graphs, are counted, not written ("N more not
shown; graphdbg tui RUN shows all"), so a run of 100k nodes makes a page of
a few hundred kB. The rows come from the query layer a page at a time
(`Run.node_page`, `Run.node_values`), as the TUI reads them.
"""

from __future__ import annotations

from ...analysis.values import stats_text, value_errors
from ...analysis.wording import backend_label, export_text, graph_name, model_name
from ...core.format import brief, ms, short
from ...runfile.query import Graph, Node, Run
from .markup import FILTER, esc, note, section, table

# nodes written per graph, and over the whole page
NODES_PER_GRAPH = 200
NODES_IN_PAGE = 5000
# graphs listed (a run that recompiles without end has thousands)
GRAPHS_IN_PAGE = 1000
# per-node values written per checked graph (the differing ones first past it)
VALUES_PER_GRAPH = 200


def graphs_html(run: Run, graphs: list[Graph], uid: str, path: str) -> str:
    """The Graphs section: the table, then each graph's nodes."""
    if not graphs:
        return section("Graphs (0)", note("nothing was compiled or exported in this run"),
                       f"{uid}-graphs")
    tui = f"graphdbg tui {short(path)}"
    shown = graphs[:GRAPHS_IN_PAGE]
    ids = [g.compile_id for g in graphs]
    rows = [_graph_cells(g, ids) for g in shown]
    out = [table(("graph", "function", "compile id", "where", "backend", "nodes", "compile",
                  "calls", "mean call", "eager ref"), rows, "graphs", numeric=(0, 5, 6, 7, 8, 9))]
    if len(shown) < len(graphs):
        out.append(note(f"{len(graphs) - len(shown)} more graphs not shown; {tui} shows all"))
    for g in shown:
        line = export_text(g, run.node_value_calls(g.id) if g.kind == "onnx" else None,
                           0) if g.export is not None else None
        if line:
            out.append(note(line))
    out.append(f'<h3>Nodes</h3><p><input class="filter" type="search" '
               f'placeholder="filter nodes: name, op, target, line, module…" '
               f'oninput="{esc(FILTER)}"></p>'
               + note(f"the first {NODES_PER_GRAPH} nodes of each graph, in graph order (at most "
                      f"{NODES_IN_PAGE} in the page); the filter looks at those. {tui} shows "
                      f"every node, sorted and filtered."))
    budget = NODES_IN_PAGE
    for g in shown:
        html, budget = _graph_nodes(run, g, budget, tui)
        out.append(html)
    return section(f"Graphs ({len(graphs)})", "".join(out), f"{uid}-graphs")


def _graph_cells(g: Graph, compile_ids: list[str | None]) -> tuple[str, ...]:
    took = g.backend_time_s if g.ddp_bucket is not None or g.export is not None else g.compile_time_s
    compile_cell = ("failed" if g.status == "compile_error" else "restarted"
                    if g.status == "restarted" else f"{took:.2f} s" if took else "-")
    ref = "-" if not g.eager_ref_ns else ms(g.eager_ref_ns) + (" ▲" if g.compiled_slower else "")
    return (str(g.id), graph_name(g, False, compile_ids), g.compile_id or "-",
            f"{brief(g.file)}:{g.line}" if g.file else "?", backend_label(g),
            str(g.n_nodes if g.n_nodes is not None else "-"), compile_cell, str(g.calls),
            ms(g.mean_call_ns), ref)


NODE_HEADERS = ("#", "node", "op", "target", "eager time", "where", "shapes", "dtypes", "module")


def _node_cells(n: Node) -> tuple[str, ...]:
    shapes = " ".join("[" + ",".join(map(str, s)) + "]" if isinstance(s, list) else str(s)
                      for s in n.shapes) if n.shapes else "-"
    time = ("input" if n.op == "placeholder" else ms(n.eager_ns)
            if n.op.startswith("call_") and n.eager_ns is not None else "-")
    return (str(n.idx), n.name, n.op, n.target or "-", time,
            f"{brief(n.file)}:{n.line}" if n.file else "-", shapes,
            " ".join(map(str, n.dtypes)) if n.dtypes else "-", n.module_path or "-")


def _graph_nodes(run: Run, g: Graph, budget: int, tui: str) -> tuple[str, int]:
    """A graph's first nodes in a collapsed <details>, and what is left of
    the page's budget."""
    total = g.n_nodes if g.n_nodes is not None else run.node_count(g.id)
    take = max(0, min(NODES_PER_GRAPH, budget))
    nodes = run.node_page(g.id, 0, take) if take else []
    title = (f"graph {g.id}: {model_name(g)} at "
             f"{brief(g.file) + ':' + str(g.line) if g.file else '?'}, {total} nodes")
    body = table(NODE_HEADERS, map(_node_cells, nodes), "nodes", numeric=(0, 4))
    rest = total - len(nodes)
    more = note(f"{rest} more not shown; {tui} shows all") if rest > 0 else ""
    return (f'<details class="graph"><summary>{esc(title)}</summary>'
            f'<div class="scroll">{body}</div>{more}</details>', budget - len(nodes))


VALUE_HEADERS = ("#", "node", "status", "where", "max abs", "max rel", "eager", "compiled",
                 "eager↔f64", "comp↔f64", "float64", "target")


def diff_html(run: Run, uid: str, path: str) -> str:
    """Eager against compiled node by node, for each graph with per-node
    values (`Run.node_values`, the TUI's `d`): the first divergent node, then
    the rows (all of them up to `VALUES_PER_GRAPH`, else the differing ones)."""
    ids = run.node_value_graphs()
    if not ids:
        return ""
    out = [note("each checked graph's nodes on its first checked call (or the call whose "
                "divergence was localised): eager (the graph run node by node) against "
                "compiled, each judged against float64; the compiled side is known at the "
                "graph's outputs and, after a divergence, at the intermediates the "
                "localising compile returned")]
    for gid in ids:
        out.append(_graph_diff(run, gid, path))
    return section("Eager vs compiled, node by node", "".join(out), f"{uid}-diff")


def _graph_diff(run: Run, gid: int, path: str) -> str:
    g = run.graph(gid)
    call = run.node_value_call(gid)
    count = run.node_value_count(gid, call)
    differing = run.node_value_count(gid, call, True)
    only_differing = count > VALUES_PER_GRAPH
    values = run.node_values(gid, call, limit=VALUES_PER_GRAPH, differing_only=only_differing)
    other = "ONNX Runtime" if g is not None and g.kind == "onnx" else "compiled"
    name = (f"graph {gid}" + (f" ({g.function} at {brief(g.file)}:{g.line})"
                              if g is not None and g.function else ""))
    first = run.first_divergent_node(gid)
    said = (f"first divergent: {first.node}"
            + (f" at {brief(first.file)}:{first.line}" if first.file else "")
            + (f" (call {first.call_idx})" if first.call_idx != call else "")
            if first is not None else "no node differs")
    rows, classes = [], []
    for v in values:
        e = dict(value_errors(v))
        status = v.status + (f" ({v.kind})" if v.kind and v.status != "ok" else "")
        rows.append((str(v.idx) if v.idx is not None else "-", v.node, status,
                     f"{brief(v.file)}:{v.line}" if v.file else "-", e["max abs"], e["max rel"],
                     stats_text(v.eager_stats), stats_text(v.compiled_stats),
                     e["eager vs float64"], e["compiled vs float64"], stats_text(v.fp64_stats),
                     v.target or "-"))
        classes.append(v.status.replace(" ", "-") if v.differs else None)
    onnx = {"comp↔f64": "ORT↔f64", "compiled": other} if other != "compiled" else {}
    headers = tuple(onnx.get(h, h) for h in VALUE_HEADERS)
    shown = (f"the {len(values)} differing of {count} nodes" if only_differing
             else f"{count} nodes")
    rest = (note(f"{count - len(values)} more not shown; graphdbg tui {short(path)} (key d) "
                 f"shows all") if len(values) < count else "")
    # a graph where something differs is open; the others one line each
    return (f'<details class="diff"{" open" if differing else ""}><summary>'
            f'<b>Eager vs {esc(other)}: {esc(name)}, call {call}</b>: {differing} of {count} '
            f'nodes differ; <b>{esc(said)}</b></summary><p class="dim">shown: {esc(shown)}</p>'
            f'<div class="scroll">{table(headers, rows, "values", classes, numeric=(0, 4, 5, 8, 9))}'
            f"</div>{rest}</details>")
