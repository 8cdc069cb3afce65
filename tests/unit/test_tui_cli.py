"""`graphdbg tui` on bad input: one line on stderr, a non-zero exit, no
traceback, and the terminal never taken over. The real CLI in a subprocess
(whose stdin is not a terminal)."""

from __future__ import annotations

import sqlite3

import pytest

from graphdbg.runfile.writer import RunWriter
from graphdbg.runfile.schema import SCHEMA_VERSION

from conftest import graphdbg


def one_line_error(proc) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def small_run(path, **meta) -> None:
    w = RunWriter(str(path))
    w.set_meta(argv=["x.py"], module=False, **meta)
    w.close(exit_status=0, status="complete")


def test_missing_path(tmp_path):
    assert one_line_error(graphdbg("tui", "missing.run", cwd=tmp_path)) == \
        "graphdbg: no such run file: missing.run"


def test_directory_without_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    for args in (("tui",), ("tui", "empty")):
        assert one_line_error(graphdbg(*args, cwd=tmp_path)).startswith("graphdbg: no run file in ")


@pytest.mark.parametrize("kind", ["text", "foreign sqlite", "corrupt", "newer schema"])
def test_bad_run_files(tmp_path, kind):
    path = tmp_path / "bad.run"
    if kind == "text":
        path.write_text("hello\n")
    elif kind == "foreign sqlite":
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE t (x)")
        db.commit()
        db.close()
    elif kind == "corrupt":
        path.write_bytes(b"SQLite format 3\x00" + b"\x13" * 3000)
    else:
        small_run(path, schema_version=SCHEMA_VERSION + 1)
    line = one_line_error(graphdbg("tui", "bad.run", cwd=tmp_path))
    assert line.startswith("graphdbg: ") and "bad.run" in line
    assert ("schema" in line) if kind == "newer schema" else ("not a" in line)


def test_a_bad_second_run_is_named(tmp_path):
    small_run(tmp_path / "a.run")
    (tmp_path / "b.run").write_text("hello\n")
    assert "b.run" in one_line_error(graphdbg("tui", "a.run", "b.run", cwd=tmp_path))


def test_a_good_run_without_a_terminal_says_so(tmp_path):
    small_run(tmp_path / "a.run")
    line = one_line_error(graphdbg("tui", cwd=tmp_path))
    assert "needs a terminal" in line and "graphdbg report" in line
