"""graphdbg.hooks: everything that touches torch while the program runs.

`session.Session` is the one capture lifecycle (`graphdbg run`,
`graphdbg.capture`, `graphdbg.compare`, the pytest plugin); `record/`
observes the program, `check/` runs graphdbg's checks on its graphs,
`findings/` writes what was found at the user's line; `context` is what
recorders share, `compat` what differs between torch releases.

May import `graphdbg.core` and `graphdbg.runfile`. Importing this package
imports torch; `import graphdbg` does not.
"""

from .session import Session

__all__ = ["Session"]
