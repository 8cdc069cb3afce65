"""A tiny randomly initialised Hugging Face GPT-2, compiled, scoring text with labels.

Demonstrates torch.compile on a real third-party model: ``GPT2LMHeadModel``
built from ``GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128,
n_positions=64)`` with random weights (nothing is downloaded: the model is
constructed from the config and the Hugging Face hub is switched to offline
mode before transformers is imported).  The compiled model is called three
times in eval mode with ``labels=input_ids``, the usual way to get the
language-modelling loss from a transformers model.

A plain forward (``compiled(input_ids)``, no labels) compiles to one graph
with no graph breaks.  Passing ``labels`` does graph-break, inside
transformers' own code rather than in this script:

    transformers/modeling_utils.py:4769 (transformers 5.23.0), in the
    ``PreTrainedModel.loss_function`` property, reached from
    transformers/models/gpt2/modeling_gpt2.py:700 (``loss =
    self.loss_function(...)`` in ``GPT2LMHeadModel.forward``).

``GPT2LMHeadModel``'s class name matches no entry of transformers'
``LOSS_MAPPING``, so ``loss_function`` calls ``logger.warning_once(...)``
("loss_type=None ... Using the default loss: ForCausalLMLoss") and Dynamo
cannot trace ``logging.Logger`` methods ("logging.Logger method not supported
for non-export cases").

Expected graphdbg findings: one graph-break site, in a third-party file
(transformers/modeling_utils.py:4769, function ``loss_function``), reported
with this script's ``compiled(input_ids, labels=input_ids)`` call in its
stack; no recompiles. The break site is not in this script, so no line here
carries a plain graph-break expectation comment; the call line instead carries
a library-expectation comment naming the library file and function. Dynamo
logs the break 3 times for the one site, once from each frame that reaches it
(transformers' ``utils/generic.py`` forward ``wrapper``,
``GPT2LMHeadModel.forward`` and the ``loss_function`` property itself);
torch's ``counters["graph_break"]`` sums to 2.

Other transformers features also graph-break under torch.compile in this
version (not used here): ``output_attentions=True`` or
``output_hidden_states=True`` install output-capturing hooks mid-forward
(breaks at transformers/utils/output_capturing.py:239 and
torch/utils/hooks.py:27, plus a recompile).
"""

import os

# Never touch the network: the model is built from a config with random weights.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from sample_cli import parse_args, save_outputs  # noqa: E402


def main():
    args = parse_args("Tiny random GPT-2 under torch.compile, with labels.")
    torch.manual_seed(0)

    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=2,
        vocab_size=128,
        n_positions=64,
        bos_token_id=127,
        eos_token_id=127,
    )
    model = GPT2LMHeadModel(config).eval()
    compiled = torch.compile(model, backend=args.backend)

    outputs = {}
    with torch.no_grad():
        for step in range(3):
            input_ids = torch.randint(0, config.vocab_size, (2, 16))
            out = compiled(input_ids, labels=input_ids)  # graphdbg-expect-library: graph_break transformers/modeling_utils.py loss_function
            outputs[f"logits_{step}"] = out.logits
            outputs[f"loss_{step}"] = out.loss

    if args.save:
        save_outputs(outputs, args.save)
    losses = ", ".join(f"{outputs[f'loss_{s}'].item():.4f}" for s in range(3))
    print(f"hf_gpt2: 3 forward calls with labels, losses [{losses}]")


if __name__ == "__main__":
    main()
