"""The command line every sample shares: `--backend NAME` and `--save PATH`.

Samples are ordinary user scripts; this module sits beside them and is found
through sys.path[0] (the script's folder) both under `python` and `graphdbg run`.
"""

import argparse


def parse_args(description, backend_help="torch.compile backend (default: inductor)"):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--backend", default="inductor", help=backend_help)
    parser.add_argument("--save", default=None, help="save final outputs to this .safetensors file")
    return parser.parse_args()


def save_outputs(outputs, path):
    """Save a dict of tensors (detached, contiguous, on the CPU) with safetensors."""
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu().clone() for k, v in outputs.items()}, path)
