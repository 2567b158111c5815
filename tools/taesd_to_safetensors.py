#!/usr/bin/python3
"""The tiny autoencoders' original pair of files as one safetensors file framechain reads.

    tools/taesd_to_safetensors.py ENCODER DECODER OUT.safetensors

The files of github madebyollin/taesd (taesd_encoder.pth and taesd_decoder.pth, and their TAESDXL,
TAESD3 and TAEF1 siblings; the same state dicts come as .safetensors files too) hold the encoder's and
the decoder's nn.Sequential state dicts ("0.weight", "1.conv.0.weight", ...). They become diffusers'
AutoencoderTiny names: "encoder.layers.K..." with the same K, and "decoder.layers.K-1..." (the
original decoder's layer 0 is the soft clamp, which has no weights and which diffusers applies in its
forward instead). Either file may be "-" to leave that half out. A half named *.safetensors is read
as one; any other is a .pth, which needs torch. Values are written as F32. Run once, by the user.
"""

import os
import sys

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import SafetensorsError, read_safetensors, write_safetensors  # noqa: E402


def load_half(path):
    """A half's state dict as numpy arrays: a .safetensors file read as one, anything else through torch."""
    if path.lower().endswith(".safetensors"):
        try:
            return read_safetensors(path)[0]
        except (OSError, SafetensorsError) as e:
            raise SystemExit("taesd_to_safetensors: %s" % e)
    try:
        import torch
    except ImportError as e:
        raise SystemExit("taesd_to_safetensors: %s: a .pth needs torch, and %s cannot import %s (or give the "
                         ".safetensors file of that half)" % (path, sys.executable, e.name))
    return {k: v.detach().float().cpu().numpy() for k, v in
            torch.load(path, map_location="cpu", weights_only=True).items()}


def renamed(state, part, shift):
    out = {}
    for name, value in state.items():
        index, _, rest = name.partition(".")
        if not index.isdigit() or not rest:
            raise SystemExit("taesd_to_safetensors: %s tensor '%s' is not a Sequential layer's (K.name)" % (part, name))
        out["%s.layers.%d.%s" % (part, int(index) - shift, rest)] = value
    return out


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    enc, dec, out = argv[1:]
    tensors = {}
    if enc != "-":
        tensors.update(renamed(load_half(enc), "encoder", 0))
    if dec != "-":
        tensors.update(renamed(load_half(dec), "decoder", 1))
    if not tensors:
        print("taesd_to_safetensors: give at least one of ENCODER and DECODER", file=sys.stderr)
        return 2
    write_safetensors(out, {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()})
    print("taesd_to_safetensors: %d tensors written to %s" % (len(tensors), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
