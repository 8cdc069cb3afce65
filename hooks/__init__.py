"""graphdbg.hooks: everything that touches torch while the program runs.

Importing this package imports torch; `import graphdbg` does not.
"""

from .session import CaptureSession, check_torch_version

__all__ = ["CaptureSession", "check_torch_version"]
