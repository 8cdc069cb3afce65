"""argparse as graphdbg's commands use it: a mistake on the command line is
said by the command it was made in (its own usage line, not graphdbg's), with
the nearest known name when there is one, and exit status 2."""

from __future__ import annotations

import argparse
import difflib
import os

# `graphdbg --help` ends with these: each line a shell can run as it is (the
# tests parse every `graphdbg ...` line, and check `pytest --graphdbg`)
EXAMPLES = """\
examples:
  graphdbg run train.py --epochs 1       # run a script, capture a run file
  graphdbg run -m mypkg.train            # the same for a module
  graphdbg report                        # summarise the newest run file here
  graphdbg tui                           # the newest run in the terminal UI
  graphdbg run -o eager.run --stance force_eager train.py
  graphdbg run -o compiled.run train.py
  graphdbg diff eager.run compiled.run   # where eager and compiled part ways
  graphdbg repro compiled.run 1          # finding 1 as a standalone script
  pytest --graphdbg                      # the pytest plugin: record every test

`graphdbg COMMAND --help` lists a command's options."""


def nearest(word: str, known) -> str | None:
    """The known name closest to a mistyped one, if any is close."""
    # two letters swapped (`reprot`) is report, though `repro` shares more letters in order
    swapped = [k for k in known if len(k) == len(word) and sorted(k) == sorted(word)]
    if swapped:
        return swapped[0]
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """An argparse parser whose leftover arguments are its own error (argparse
    hands a subcommand's to the top-level parser, which prints its usage)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self._unrecognized(extras))
        return parsed, extras

    def _unrecognized(self, extras: list[str]) -> str:
        text = f"unrecognized argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}"
        known = [s for a in self._actions for s in a.option_strings]
        for extra in extras:
            if extra.startswith("-"):
                near = nearest(extra.split("=", 1)[0], known)
                if near:
                    return f"{text}; did you mean {near}?"
        return text


def unknown_command(word: str, commands) -> str:
    """What to say of ``graphdbg WORD`` when WORD is no command: a script or a
    run given without its command, else the nearest command."""
    if word.endswith(".run") or os.path.isdir(word):
        return f"unknown command {word!r}; to read a run: graphdbg report {word}"
    if word.endswith(".py") or os.path.isfile(word):
        return f"unknown command {word!r}; to run a script: graphdbg run {word}"
    near = nearest(word, commands)
    if near:
        return f"unknown command {word!r}; did you mean {near}?"
    return f"unknown command {word!r} (commands: {', '.join(commands)})"
