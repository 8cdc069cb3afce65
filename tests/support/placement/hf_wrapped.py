"""A transformers model compiled whole, whose forward runs inside the
library's decorators (``can_return_tuple``, ``merge_with_config_defaults``,
``capture_outputs``: functools.wraps wrappers). Dynamo compiles the outer
wrapper as the frame, and the model's input is first read by a wrapper's own
code (``capture_outputs`` reads its ``**kwargs``). The graph input must not
sit in a wrapper: at the model's own line that uses it, else at the ``def``
of the forward the wrappers wrap (tests/e2e/test_placement_wrappers.py).
A tiny config built here: nothing is downloaded."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
torch.manual_seed(0)
model = LlamaForCausalLM(config).eval()
lm = torch.compile(model, backend="aot_eager")              # MARK compile lm
base = torch.compile(model.model, backend="aot_eager")      # MARK compile base


class Classifier(torch.nn.Module):
    """The user's own module around the library's model."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.head = torch.nn.Linear(64, 2)

    def forward(self, ids):                                 # MARK classifier def
        logits = self.lm(input_ids=ids).logits              # MARK classifier lm
        return self.head(logits[:, -1])


clf = torch.compile(Classifier(model).eval(), backend="aot_eager")   # MARK compile clf
ids = torch.randint(0, 64, (1, 8))
with torch.no_grad():
    lm(input_ids=ids)                                       # MARK call lm
    base(input_ids=ids)                                     # MARK call base
    clf(ids)                                                # MARK call clf
print("done")
