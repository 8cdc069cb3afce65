"""graphdbg's own work on a captured graph, run as the program's observer
(own-work scope: nothing it does is recorded as the program's):

- `interpreter` — the node runners, one `torch.fx.Interpreter` subclass per
  job (the eager reference, the float64 judge, the lean first pass);
- `divergence` — eager against compiled, per checked call; `numerics` judges
  a difference; `localize` finds its first node; `gradients` the backward's;
  `subgraphs` cuts graphs and watches random draws; `nodevalues` writes each
  node's values; `checkcost` the check's memory;
- `lint` — malformed graphs (`graphdbg.check_graph`); `fakecheck` — a custom
  op's fake implementation against the real one.
"""
