"""Compiles the bytecode of graphdbg's runtime dependencies in this venv
(`python tools/bytecode.py`, run by the Makefile with the venv's python).

uv installs without bytecode; pip would compile every file it installs. What
a user runs (torch, Textual, rich, sympy, ...) is compiled here, on every
core: without it, where PYTHONDONTWRITEBYTECODE is set (these machines set
it), each import of torch compiles it anew (4.4 s against 1.9 s). The test
extra's packages are left out: transformers and pandas alone are 4,300
files, of which the suite imports a few hundred, compiled as it imports them
(`make test` writes bytecode). That halves the set-up's compile (about 10 s
of `make demo` and `make test` here). A file that does not compile (a
package's test data) is skipped, as pip skips it.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys

try:
    from packaging.requirements import Requirement
except ImportError:  # pytest brings packaging; pip vendors it
    from pip._vendor.packaging.requirements import Requirement


def runtime_paths(root: str = "graphdbg") -> list[str]:
    """The top-level packages and modules of ``root``'s dependencies, and
    theirs, without extras."""
    seen, todo, paths = set(), [root], set()
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:   # a marker's package for another platform
            continue
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
        if key != root:
            # a file outside site-packages (`../../bin/...`) is a script, not a module
            paths.update(str(dist.locate_file(f.parts[0])) for f in dist.files or ()
                         if f.suffix == ".py" and f.parts[0] != "..")
    return sorted(paths)


def main() -> int:
    subprocess.call([sys.executable, "-m", "compileall", "-q", "-j", "0", *runtime_paths()],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
