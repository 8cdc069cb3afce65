"""Placement: the one layer that decides "the user's line".

- `internal` — what is never the user's (torch, graphdbg, the standard
  library, launchers, generated code, a decorator's wrapper where it passes
  the call on);
- `stack` — the live user stack and its innermost frame (`StackWalker` for
  the eager hot path);
- `nodes` — the user line of an FX node, of a stack torch wrote as text, of an
  exception's traceback; `creation` — where the user's code made a node or a
  module; `modules` — which module runs, by its name in the model;
- `guards` — the line behind a shape guard (ShapeEnv's ``sloc``, else where
  `exports.ShapeSites` saw torch add it); `exports` — the user's stack while
  an export traces (`shape_stack`, live or Dynamo's), kept for each guard and
  unbacked symbol, and torch.onnx's capture strategies;
- `columns` — the caret's span on a line; `cells` — notebook cells as IPython
  names them.

Everything here runs at capture; the chosen site is stored in the run file
(`frames.internal` included), and readers never decide again. Below
`record`, `check` and `findings` (tests/unit/test_structure.py), and the only
package that reads live frames.
"""
