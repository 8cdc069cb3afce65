"""graphdbg.hooks: everything that touches torch while the program runs.

Importing this package imports torch; `import graphdbg` does not.
"""

from .compat import check_torch
from .session import CaptureSession

__all__ = ["CaptureSession", "check_torch"]
