"""`import graphdbg`, the CLI and `graphdbg --help` stay light: no torch, no textual."""

import subprocess
import sys

from conftest import ENV


def test_cli_and_package_do_not_import_torch_or_textual():
    code = ("import sys, graphdbg, graphdbg.cli, graphdbg.report, graphdbg.runfile, "
            "graphdbg.sourcemap, graphdbg.runner\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=ENV, check=True).stdout.strip()
    assert out == "[]"


def test_help_lists_commands_and_run_options():
    out = subprocess.run([sys.executable, "-m", "graphdbg", "--help"], capture_output=True,
                         text=True, env=ENV, check=True).stdout
    assert "run" in out and "report" in out
    out = subprocess.run([sys.executable, "-m", "graphdbg", "run", "--help"],
                         capture_output=True, text=True, env=ENV, check=True).stdout
    for opt in ("--output", "--values", "--quiet", "-m MODULE", "--no-eager", "--max-ops"):
        assert opt in out
