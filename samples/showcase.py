"""graphdbg showcase: a tiny char-level language model, one graph break and
one recompile (``make demo`` runs samples/demo.py: it adds a miscompile).

What happens:

* eager pre-processing: a few strings are encoded into character ids and
  split into (input, next-character target) pairs;
* the model (embeddings, dropout, two pre-LayerNorm transformer blocks, LM
  head) is wrapped with ``torch.compile``;
* two training steps run in train mode: compiled forward, cross-entropy loss,
  backward, AdamW step, ``zero_grad``;
* ``model.eval()`` is called and the compiled model runs once more to score
  the same inputs; the ``training`` flag that Dropout reads is guarded, so
  this call recompiles ``forward``;
* eager post-processing: greedy next-character predictions are decoded and
  printed.

Every forward call goes through ``report_activation``, a debugging helper
that prints the norm of the hidden state with ``.item()``; Dynamo cannot put
``.item()`` in the graph, so the compiled forward graph-breaks there.

Expected graphdbg findings: one graph break, at the ``.item()`` line in
``report_activation``, and one recompile, where a Dropout's ``training`` guard
failed (both lines carry an expectation comment).  Torch's own counters for a run:
1 recompile; ``counters["graph_break"]`` sums to 3 (all at the same line:
the break is hit while inlining the helper into ``forward``, again when the
helper runs as its own frame, and once more when ``forward`` is recompiled).
Grad mode is kept enabled for the eval call so that ``training`` is the only
guard that changes.

Under inductor (the default) graphdbg's eager check also notes, as a warning,
that the dropout on the embeddings draws different random numbers compiled
than eager (inductor has its own random stream), and checks the rest of the
graph with the compiled draws replayed. Under aot_eager the draws match.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args, save_outputs

ALPHABET = "abcdefghijklmnopqrstuvwxyz .,!?"
TEXTS = [
    "graphs break, guards fail.",
    "compile once, run often!",
    "why did it recompile?",
    "debug the dynamo trace.",
]
SEQ_LEN = 24


def encode(texts, seq_len):
    """Eager pre-processing: characters -> ids, padded/truncated to seq_len + 1."""
    rows = []
    for text in texts:
        ids = [ALPHABET.index(ch) for ch in text.lower() if ch in ALPHABET][: seq_len + 1]
        ids += [ALPHABET.index(" ")] * (seq_len + 1 - len(ids))
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.long)


def decode(ids):
    return "".join(ALPHABET[i] for i in ids.tolist())


def report_activation(name, h):
    print(f"[debug] {name} norm = {h.norm().item():.3f}")  # graphdbg-expect: graph_break


class Block(nn.Module):
    def __init__(self, d_model, n_heads, p_drop):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.drop = nn.Dropout(p_drop)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, d)))  # graphdbg-expect: recompile
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyCharLM(nn.Module):
    def __init__(self, vocab_size=len(ALPHABET), d_model=32, n_heads=2, n_layers=2, max_len=32, p_drop=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(p_drop)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, p_drop) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        report_activation("hidden", x)
        return self.head(self.ln_f(x))


def main():
    args = parse_args("graphdbg demo: one graph break, one recompile.")
    torch.manual_seed(0)

    data = encode(TEXTS, SEQ_LEN)
    inputs, targets = data[:, :-1], data[:, 1:]

    model = TinyCharLM()
    compiled = torch.compile(model, backend=args.backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    model.train()
    losses = []
    for _ in range(2):
        logits = compiled(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())

    model.eval()
    eval_logits = compiled(inputs).detach()
    eval_loss = F.cross_entropy(eval_logits.reshape(-1, eval_logits.shape[-1]), targets.reshape(-1))

    predictions = eval_logits.argmax(dim=-1)
    sample = decode(predictions[0])

    outputs = {
        "eval_logits": eval_logits,
        "train_losses": torch.stack(losses),
        "eval_loss": eval_loss,
    }
    outputs.update({f"param.{name}": p for name, p in model.named_parameters()})
    if args.save:
        save_outputs(outputs, args.save)
    print(
        f"showcase: train loss {losses[0].item():.4f} -> {losses[-1].item():.4f}, "
        f"eval loss {eval_loss.item():.4f}, greedy {sample!r}"
    )


if __name__ == "__main__":
    main()
