"""`import graphdbg`, the CLI and `graphdbg --help` stay light: no torch, no textual."""

import re
import subprocess
import sys

from conftest import ENV


def test_cli_and_package_do_not_import_torch_or_textual():
    code = ("import sys, graphdbg, graphdbg.cli, graphdbg.reporters.report, graphdbg.runfile.writer, "
            "graphdbg.core.sourcemap, graphdbg.runner\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=ENV, check=True).stdout.strip()
    assert out == "[]"


def test_help_lists_commands_and_run_options():
    out = subprocess.run([sys.executable, "-m", "graphdbg", "--help"], capture_output=True,
                         text=True, env=ENV, check=True).stdout
    # the commands listed one a line under COMMAND, each with its help text
    listed = re.findall(r"^ {4}(\w+) {2,}\S", out, re.M)
    assert set(listed) == {"run", "report", "diff", "tui", "explain", "repro"}, out
    out = subprocess.run([sys.executable, "-m", "graphdbg", "run", "--help"],
                         capture_output=True, text=True, env=ENV, check=True).stdout
    for opt in ("--output", "--values", "--quiet", "-m MODULE", "--no-eager", "--max-ops"):
        assert opt in out


def test_query_layer_views_and_commands_import_no_torch_textual_or_rich():
    # every command module (registry() imports them all); rich only inside functions
    code = ("import sys, graphdbg.runfile.query, graphdbg.reporters.report, graphdbg.reporters.diff, graphdbg.analysis.diff, graphdbg.core.format\n"
            "from graphdbg.commands import registry\n"
            "assert {'run', 'report', 'diff'} <= set(registry())\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m.split('.')[0] in ('torch', 'textual', 'rich'))\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=ENV, check=True).stdout.strip()
    assert out == "[]"


def test_tui_model_imports_no_textual_or_torch():
    # the view state is tested without a terminal; only app.py loads textual
    code = ("import sys, graphdbg.tui.model.run\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m.split('.')[0] in ('torch', 'textual', 'rich'))\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=ENV, check=True).stdout.strip()
    assert out == "[]"
