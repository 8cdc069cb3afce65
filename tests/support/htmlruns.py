"""Run files written by hand for the HTML page's tests and benchmark (no
torch): `synthetic(path, graphs, nodes)` is a run of graphs x nodes with
node times and per-node values (one first divergent node per graph), a few
findings and a source snapshot; ``evil`` puts markup in every string the run
file holds (source and its file's name, messages, hints, names, targets,
modules, argv)."""

from __future__ import annotations

from pathlib import Path

from graphdbg.runfile.records import NodeRow, NodeTimeRow, NodeValueRow
from graphdbg.runfile.writer import RunWriter

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
EVIL = f"{SCRIPT} {IMG}"

STATS = '{"min":-1.5,"max":2.25,"mean":0.01,"std":0.98,"norm":31.6,"nan":0,"inf":0}'


def synthetic(path: Path, graphs: int = 2, nodes: int = 50, *, evil: bool = False,
              findings: int = 6, lines: int = 200) -> Path:
    """A run file at ``path`` (its source beside it, model.py)."""
    bad = f" {EVIL}" if evil else ""
    # (a file name may hold markup too: all but "/")
    src = path.parent / (f"model{IMG}.py" if evil else "model.py")
    src.write_text("".join(f"    h{j} = self.layer_{j}(h{j - 1})  # step {j}{bad}\n"
                           for j in range(1, lines + 1)))
    w = RunWriter(str(path), commit_interval=1e9, batch_rows=200_000, durable=False)
    w.set_meta(argv=["train.py", *([EVIL] if evil else [])], cwd=str(path.parent), module=False,
               values="stats", device="cpu", python="3.x", torch="2.13.0+cpu", graphdbg="test")
    frames = [w.frame_id(str(src), ln, f"block{ln % 7}") for ln in range(1, lines + 1)]
    for g in range(1, graphs + 1):
        w.put_graph(g, compile_id=f"{g - 1}/0", backend="inductor" + bad,
                    code_name=f"forward{bad}", code_file=str(src), code_line=1, n_nodes=nodes,
                    n_ops=nodes - 2, n_inputs=2, backend_time_s=1.5, compile_time_s=2.0,
                    status="compiled", graph_code="def forward(self, x):\n    ...\n")
        for i in range(nodes):
            op = "placeholder" if i < 2 else "output" if i == nodes - 1 else "call_function"
            name = f"n{i}" + (bad if i == 3 else "")
            w.add(NodeRow(g, i, name, op, "torch.relu" + bad, "[[64,256]]", '["float32"]',
                          frames[(g + i) % lines], None, f"blocks.{i % 12}.mlp{bad}", "Linear",
                          "x, w"))
            w.add(NodeTimeRow(g, name, 1000 + (i * 7919) % 2_000_000))
            status = "first divergent" if i == nodes // 2 else "ok"
            err = 0.5 if status != "ok" else 1e-7
            w.add(NodeValueRow(g, 0, name, status, "miscompile" if status != "ok" else None,
                               "intermediate outputs (aot_eager)", err, err * 10, 1e-7, err,
                               STATS, STATS, STATS))
    kinds = (("graph_break", "warning"), ("recompile", "warning"), ("divergence", "error"),
             ("nan_inf", "error"), ("compile_error", "error"), ("check_skipped", "info"))
    for i in range(findings):
        kind, severity = kinds[i % len(kinds)]
        w.diagnostic(f"k{i}", kind=kind, severity=severity, message=f"finding {i}{bad}",
                     reason=f"torch's reason{bad}", hint=f"try this{bad}",
                     user_frame=frames[(i * 17) % lines], graph_id=1 + i % graphs,
                     node=f"n{i % nodes}", compile_id=f"{i % graphs}/0")
    w.close(exit_status=0, status="complete", wall_s=12.0)
    return path


# -- Debian's headless chromium, for the browser test and the benchmark -----------------

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def browser_missing() -> str | None:
    """What keeps a headless chromium from starting here (None: nothing)."""
    import importlib.util
    import os
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def chromium(user_data_dir: Path, console_log: bool = False):
    """A Selenium driver of Debian's chromium through Debian's chromedriver
    (both paths given: Selenium Manager never downloads a browser), headless,
    with the flags that keep it off this machine's closed network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1200,900",
                 f"--user-data-dir={user_data_dir}"):
        opts.add_argument(flag)
    if console_log:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
