"""A tiny transformers GPT-2 exported to ONNX, then run in ONNX Runtime: a
clean export, nothing to report."""
import torch
import transformers

transformers.logging.set_verbosity_error()
config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=128, n_positions=64,
                                 use_cache=False, bos_token_id=0, eos_token_id=0)
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(config).eval()
ids = torch.randint(0, 128, (2, 16))
program = torch.onnx.export(model, (ids,), kwargs={"use_cache": False}, dynamo=True,  # EXPORT_CALL
                            verbose=False)
logits = program(torch.randint(0, 128, (2, 16)))[0]
print("logits", tuple(logits.shape))
