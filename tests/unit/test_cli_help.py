"""`graphdbg --help`, `graphdbg run --help` and mistakes on the command line:
the real CLI in a subprocess (none of these imports torch), and its parser
in-process where the point is that every option and example still parses."""

from __future__ import annotations

import re
import shlex

import pytest

from conftest import ROOT, graphdbg
from graphdbg.commands import build_parser, registry
from graphdbg.commands.run import GROUPS, _arguments
from graphdbg.core.options import CaptureOptions, flags
from graphdbg.pytest_plugin import PluginOptions

COLUMNS80 = {"COLUMNS": "80"}


def _env(**more) -> dict:
    from conftest import ENV
    return {**ENV, **COLUMNS80, **more}


def _usage_error(proc) -> tuple[str, str]:
    """(usage line, error line) of a usage error: exit 2, nothing else said."""
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage: "), proc.stderr
    return lines[0], lines[1]


# -- mistakes ---------------------------------------------------------------------------

def test_a_mistyped_option_is_said_by_its_command_with_the_nearest_one(workdir):
    (workdir / "s.py").write_text("print('ran')\n")
    usage, error = _usage_error(graphdbg("run", "--stence", "force_eager", "s.py", cwd=workdir))
    assert usage == "usage: graphdbg run [options] (script.py | -m module) [args ...]"
    assert error == "graphdbg run: error: unrecognized argument: --stence; did you mean --stance?"
    assert not list(workdir.glob("*.run"))       # the program did not run
    usage, error = _usage_error(graphdbg("report", "--jsn", cwd=workdir))
    assert usage.startswith("usage: graphdbg report ")
    assert error == "graphdbg report: error: unrecognized argument: --jsn; did you mean --json?"
    # `--flag=value` too; an extra argument with nothing near it: no guess
    _, error = _usage_error(graphdbg("diff", "a.run", "b.run", "--rtoll=0.1", cwd=workdir))
    assert error.endswith("unrecognized argument: --rtoll=0.1; did you mean --rtol?")
    # a command's own check after parsing: its usage too
    usage, error = _usage_error(graphdbg("diff", "a.run", cwd=workdir))
    assert usage.startswith("usage: graphdbg diff ") and error.startswith("graphdbg diff: error: ")
    usage, error = _usage_error(graphdbg("report", "a.run", "b.run", cwd=workdir))
    assert (usage.split()[:3], error) == (["usage:", "graphdbg", "report"],
                                          "graphdbg report: error: unrecognized argument: b.run")


def test_a_mistyped_command_is_said_with_the_nearest_one(workdir):
    _, error = _usage_error(graphdbg("reprot", "x.run", cwd=workdir))
    assert error == "graphdbg: error: unknown command 'reprot'; did you mean report?"
    _, error = _usage_error(graphdbg("tiu", cwd=workdir))
    assert error == "graphdbg: error: unknown command 'tiu'; did you mean tui?"
    # a script or a run given without its command: the command that takes it
    _, error = _usage_error(graphdbg("train.py", "--lr", "1", cwd=workdir))
    assert error == "graphdbg: error: unknown command 'train.py'; to run a script: " \
                    "graphdbg run train.py"
    _, error = _usage_error(graphdbg("x.run", cwd=workdir))
    assert error == "graphdbg: error: unknown command 'x.run'; to read a run: graphdbg report x.run"
    _, error = _usage_error(graphdbg("frobnicate", cwd=workdir))
    assert error == f"graphdbg: error: unknown command 'frobnicate' (commands: " \
                    f"{', '.join(registry())})"


# -- graphdbg --help ----------------------------------------------------------------------

def test_help_ends_with_examples_that_run(workdir):
    proc = graphdbg("--help", cwd=workdir, env=_env())
    assert proc.returncode == 0
    text = proc.stdout
    examples = text.split("\nexamples:\n")[1]
    lines = [ln.strip() for ln in examples.splitlines() if ln.startswith("  ")]
    commands = [shlex.split(ln, comments=True) for ln in lines]
    # a script, a report, the terminal UI, a diff of two runs, a repro, the pytest plugin
    assert {c[1] for c in commands if c[0] == "graphdbg"} == {"run", "report", "tui", "diff",
                                                               "repro"}
    assert ["pytest", "--graphdbg"] in commands
    assert "--graphdbg" in {f.name for _, _, f in flags(PluginOptions)}
    # each graphdbg line parses as the CLI parses it (the program's own
    # arguments split off first), and diff compares the two runs made above it
    parser, cmds = build_parser(registry()), registry()
    for argv in (c[1:] for c in commands if c[0] == "graphdbg"):
        if hasattr(cmds[argv[0]], "split_argv"):
            argv, _ = cmds[argv[0]].split_argv(argv)
        parser.parse_args(argv)
    made = {c[c.index("-o") + 1] for c in commands if "-o" in c}
    (diff,) = [c for c in commands if c[:2] == ["graphdbg", "diff"]]
    assert set(diff[2:]) == made
    assert all(len(ln) <= 80 for ln in text.splitlines()), text
    assert "`graphdbg COMMAND --help` lists a command's options." in text


# -- graphdbg run --help ----------------------------------------------------------------

def _entries(text: str) -> dict[str, list[str]]:
    """Option -> its help lines, from argparse's help at 80 columns (a help
    starts on the option's line, or on the next when the option is long)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^  (-\S+(?: \S+)?(?:, -\S+(?: \S+)?)*)(?:\s{2,}(\S.*))?$", line)
        if m:
            current = m[1]
            out[current] = [m[2]] if m[2] else []
        elif current and re.match(r"^ {20,}\S", line):
            out[current].append(line.strip())
        else:
            current = None
    return out


def test_run_help_is_grouped_one_short_line_an_option(workdir):
    proc = graphdbg("run", "--help", cwd=workdir, env=_env())
    assert proc.returncode == 0
    text = proc.stdout
    titles = [t for _, t, _ in GROUPS]
    assert [ln[:-1] for ln in text.splitlines() if ln[:-1] in titles and ln.endswith(":")] \
        == titles
    entries = _entries(text)
    flagged = {f.name for _, _, f in flags(CaptureOptions)} | {"-m", "--output", "-q", "--tui",
                                                                 "--html"}
    shown = {name for entry in entries for name in re.findall(r"(?<![\w-])(-[\w-]+)", entry)}
    assert flagged <= shown, flagged - shown
    long = {e: h for e, h in entries.items() if len(h) != 1 and not e.startswith("-h")}
    assert long == {}, long       # one line each, at 80 columns
    assert all(len(ln) <= 80 for ln in text.splitlines())
    # each group's options, in it; every capture option in one of them
    keys = {key for key, _, _ in GROUPS}
    assert all(f.group in keys for _, _, f in flags(CaptureOptions))
    section = text.split("\nchecks against eager:\n")[1].split("\n\n", 2)
    assert "--compare-first N" in section[1] and "--profile" not in section[1]
    # the launcher forms a user tries, said where the options are
    launcher = text.split("\nunder a launcher:\n")[1]
    assert "accelerate launch -m graphdbg run train.py" in launcher
    assert "--no_python graphdbg run" in launcher
    assert "torchrun --nproc-per-node 8 --no-python graphdbg run train.py" in launcher
    assert len(text.splitlines()) < 70


# a value each option takes, and what CaptureOptions makes of it
VALUES = {"--values": ("full", "full"), "--keep": ("attn", "attn"),
          "--tensor-budget": ("2", 2 * 2**20), "--compare-first": ("5", 5),
          "--compare-every": ("7", 7), "--compare-memory": ("100", 100.0),
          "--rtol": ("0.5", 0.5), "--atol": ("0.25", 0.25), "--localize": ("bisect", "bisect"),
          "--stance": ("force_eager", "force_eager"), "--eager-steps": ("2,5", (2, 5)),
          "--max-ops": ("9", 9), "--py-spy-rate": ("50", 50),
          "--profile-steps": ("0,0,1,1", (0, 0, 1, 1))}


@pytest.mark.parametrize("name,kw,group", _arguments(), ids=[a[0] for a in _arguments()])
def test_every_run_option_still_works(name, kw, group):
    parser = build_parser(registry())
    field = kw["dest"]
    if "action" in kw:       # a switch: the opposite of its default
        argv, want = ["run", name, "s.py"], kw["action"] == "store_true"
    else:
        value, want = VALUES[name]
        argv = ["run", name, value, "s.py"]
    args = parser.parse_args(argv)
    options = CaptureOptions.from_flags(vars(args))
    assert getattr(options, field) == want != getattr(CaptureOptions(), field)
    assert args.script == "s.py"


def test_docs_say_every_run_option_in_full():
    text = (ROOT / "docs" / "options.md").read_text()
    parser = build_parser(registry())
    run = parser._subparsers._group_actions[0].choices["run"]
    names = {s for a in run._actions for s in a.option_strings if s.startswith("--")
             or s in ("-m", "-o", "-q")} - {"--help"}
    rows = "\n".join(ln for ln in text.splitlines() if ln.startswith("| `"))
    missing = {n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", rows)}
    assert missing == set()
