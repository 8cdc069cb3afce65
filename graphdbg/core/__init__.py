"""The floor under everything: what every package of graphdbg needs.

- `options` — `CaptureOptions`: every capture option, with its flag, help
  and default (the CLI and the pytest plugin are made from it);
- `errors` — `GraphdbgError`: a one-line message and an exit code;
- `format` — paths, durations and numbers as every view writes them;
- `sourcemap` — which frame is the user's (outside torch and graphdbg);
- `version`.

Imports nothing of graphdbg, and neither torch, rich nor textual.
"""
