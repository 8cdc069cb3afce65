"""A small hand-written transformer language model, compiled.

Demonstrates a compiled decoder-only transformer: token + position
embeddings, two pre-LayerNorm blocks (causal multi-head self-attention via
``F.scaled_dot_product_attention`` and a GELU MLP, both with residuals), a
final LayerNorm and an LM head.  The compiled model is called three times on
batches of the same shape in eval mode under ``torch.no_grad()``.

Expected graphdbg findings: none -- no graph breaks and no recompiles
(torch counts unique_graphs == 1).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_cli import parse_args, save_outputs


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformerLM(nn.Module):
    def __init__(self, vocab_size=96, d_model=32, n_heads=4, n_layers=2, max_len=32):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def main():
    args = parse_args("Small compiled transformer LM, no graph breaks.")
    torch.manual_seed(0)

    model = TinyTransformerLM().eval()
    compiled = torch.compile(model, backend=args.backend)

    outputs = {}
    with torch.no_grad():
        for step in range(3):
            idx = torch.randint(0, 96, (2, 16))
            outputs[f"logits_{step}"] = compiled(idx)

    if args.save:
        save_outputs(outputs, args.save)
    top = outputs["logits_2"][0, -1].argmax().item()
    print(f"transformer: 3 forward calls, logits {tuple(outputs['logits_2'].shape)}, last argmax {top}")


if __name__ == "__main__":
    main()
