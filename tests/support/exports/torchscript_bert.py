"""A clean export of a library's model with the TorchScript exporter: a tiny
transformers BERT, exported with dynamo=False (dynamic batch and length),
then run by the program's own InferenceSession on two other shapes. Its
mask and attention helpers convert sizes and flags while the trace runs."""
import onnxruntime as ort
import torch
from transformers import BertConfig, BertModel

torch.manual_seed(0)
cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64)


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bert = BertModel(cfg)

    def forward(self, ids, mask):
        return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state


model = Encoder().eval()
ids = torch.randint(0, 100, (2, 16))
torch.onnx.export(model, (ids, torch.ones(2, 16, dtype=torch.long)), "bert.onnx",
                  input_names=["ids", "mask"], output_names=["out"],
                  dynamic_axes={"ids": {0: "b", 1: "s"}, "mask": {0: "b", 1: "s"}},
                  dynamo=False)  # EXPORT
session = ort.InferenceSession("bert.onnx")
for n in (16, 8):
    x = torch.randint(0, 100, (3, n))
    got = session.run(None, {"ids": x.numpy(), "mask": torch.ones(3, n, dtype=torch.long).numpy()})[0]  # RUN
    print(n, bool(abs(got - model(x, torch.ones(3, n, dtype=torch.long)).detach().numpy()).max() < 1e-4))
