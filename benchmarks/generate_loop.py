"""The eager generate loop of `make bench` (section `generate`, issue 34).

A transformers Llama (tiny config, random weights, no compile) generates
--new tokens greedily, --calls times; each call is timed by the script itself
and printed as JSON on the last stdout line, so process start and the first
steps can be told apart:

    python benchmarks/generate_loop.py [--hidden 64] [--new 64] [--calls 6]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402


def build(hidden: int = 64, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=2 * hidden, vocab_size=1000,
                      max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    return LlamaForCausalLM(cfg).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--new", type=int, default=64, help="new tokens per generate call")
    ap.add_argument("--calls", type=int, default=6, help="generate calls, each timed")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build(args.hidden, args.layers)
    ids = torch.randint(3, 1000, (1, 8))
    calls_s, out = [], None
    for _ in range(args.calls):
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                             min_new_tokens=args.new, do_sample=False)
        calls_s.append(time.perf_counter() - t0)
    print(json.dumps({"calls_s": calls_s, "tokens": out[0].tolist()}), flush=True)


if __name__ == "__main__":
    main()
