"""The one error type the CLI turns into a single line on stderr and an exit code."""


class GraphdbgError(Exception):
    """A user-facing failure: printed as one line, no traceback."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
