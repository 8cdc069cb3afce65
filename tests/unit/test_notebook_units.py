"""The notebook's pieces that need no kernel: `import graphdbg` imports no
IPython, a capture's wording when code compiled before it ran, the cell that
only calls the magic, the magic's options (tests/e2e/test_notebook.py runs a
real notebook)."""

from __future__ import annotations

import linecache
import subprocess
import sys

from graphdbg.analysis.wording import compiled_before_text


def test_import_graphdbg_imports_no_ipython():
    code = ("import sys, graphdbg, graphdbg.display\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('IPython', 'ipykernel', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    import graphdbg
    assert callable(graphdbg.load_ipython_extension)


def test_compiled_before_wording():
    assert compiled_before_text(None) is None
    assert compiled_before_text({"graphs": 1}).startswith(
        "1 graph was compiled before this capture: their breaks and recompiles are not in it")
    assert compiled_before_text({"graphs": 3}).startswith("3 graphs were compiled before")
    assert "reset=True" in compiled_before_text({"graphs": 0})


def test_not_under_ipython_in_tests():
    from graphdbg.display import in_ipython
    assert not in_ipython()


def test_a_cell_that_only_calls_the_magic_is_not_the_users():
    from graphdbg.hooks.placement import cells, internal
    magic, user = "/tmp/ipykernel_1/111.py", "/tmp/ipykernel_1/222.py"
    linecache.cache[magic] = (1, None, ["get_ipython().run_cell_magic('graphdbg', '', 'f()')\n"],
                              magic)
    linecache.cache[user] = (1, None, ["f()\n"], user)
    try:
        assert cells.runs_magic(magic) and not cells.runs_magic(user)
        assert internal.is_internal(magic) and not internal.is_internal(user)
    finally:
        del linecache.cache[magic], linecache.cache[user]


def test_the_magics_options_are_the_captures():
    from graphdbg.notebook import parser
    args = parser().parse_args(["--reset", "--backend", "aot_eager", "-o", "x.run",
                                "--values", "none", "--compare-first", "1"])
    assert (args.reset, args.backend, args.output, args.values, args.compare_first) == \
        (True, "aot_eager", "x.run", "none", 1)
