"""graphdbg's demo (``make demo`` runs it): a small classifier, compiled,
scores a data set in batches, with three problems graphdbg finds and places.

* A miscompile. The model is compiled with ``FaultyBackend`` (from
  divergence_faulty.py, beside this file): a backend that scales the output
  of ``torch.tanh`` by 1.01, then compiles with the real backend named by
  ``--backend`` (default ``inductor``; ``make demo`` uses ``aot_eager``, the
  quickest). The scores come out wrong, with no error; graphdbg finds the
  ``tanh`` line, its node, and that the op is wrong on its own inputs.
* A graph break: a debugging ``print`` in ``forward``. Dynamo cannot put a
  print into a graph, so ``forward`` is compiled as two graphs, before and
  after it.
* A recompile: 100 rows in batches of 32 leave a last batch of 4; the size
  guard fails at the call with that batch, and both graphs are compiled
  again, for any batch size.

Expected graphdbg findings: one divergence (a miscompile, error) at the
``torch.tanh`` line, one graph break at the ``print``, one recompile at the
call with the last batch (each line carries an expectation comment).
Torch's own counters: 4 graphs; 2 recompiles (``forward`` and the code
after the print, each compiled again); ``counters["graph_break"]`` 2 (the
print, met again when ``forward`` is recompiled).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from divergence_faulty import FaultyBackend
from sample_cli import parse_args, save_outputs


class Block(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Classifier(nn.Module):
    def __init__(self, d_in=16, d=32, hidden=64, classes=4):
        super().__init__()
        self.stem = nn.Linear(d_in, d)
        self.block1 = Block(d, hidden)
        self.block2 = Block(d, hidden)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.block1(self.stem(x))
        print("hidden:", h.shape)  # graphdbg-expect: graph_break
        h = torch.tanh(h)  # graphdbg-expect: divergence
        h = self.block2(h)
        return self.head(self.norm(h))


def main():
    args = parse_args("graphdbg demo: a miscompile, a graph break, a recompile.",
                      backend_help="real backend the faulty one wraps (default: inductor)")
    torch.manual_seed(0)
    model = Classifier().eval()
    compiled = torch.compile(model, backend=FaultyBackend(args.backend))
    rows = torch.randn(100, 16)

    scores = []
    with torch.no_grad():
        for batch in rows.split(32):  # 32, 32, 32 and a last batch of 4
            scores.append(compiled(batch))  # graphdbg-expect: recompile
        compiled_scores = torch.cat(scores)
        eager_scores = model(rows)

    if args.save:
        save_outputs({"compiled": compiled_scores, "eager": eager_scores}, args.save)
    wrong = (compiled_scores - eager_scores).abs().max().item()
    print(f"demo: scored {len(rows)} rows; max |compiled - eager| = {wrong:.3e}")


if __name__ == "__main__":
    main()
