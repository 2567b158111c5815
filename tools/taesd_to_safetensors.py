#!/usr/bin/python3
"""The tiny autoencoders' original pair of .pth files as one safetensors file framechain reads.

    tools/taesd_to_safetensors.py ENCODER.pth DECODER.pth OUT.safetensors

The .pth files of github madebyollin/taesd (taesd_encoder.pth and taesd_decoder.pth, and their
TAESDXL, TAESD3 and TAEF1 siblings) hold the encoder's and the decoder's nn.Sequential state dicts
("0.weight", "1.conv.0.weight", ...). They become diffusers' AutoencoderTiny names:
"encoder.layers.K..." with the same K, and "decoder.layers.K-1..." (the original decoder's layer 0 is
the soft clamp, which has no weights and which diffusers applies in its forward instead). Either file
may be "-" to leave that half out. Values are written as F32. Needs torch (run once, by the user).
"""

import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import write_safetensors  # noqa: E402


def renamed(state, part, shift):
    out = {}
    for name, value in state.items():
        index, _, rest = name.partition(".")
        if not index.isdigit() or not rest:
            raise SystemExit("taesd_to_safetensors: %s tensor '%s' is not a Sequential layer's (K.name)" % (part, name))
        out["%s.layers.%d.%s" % (part, int(index) - shift, rest)] = value.detach().float().cpu().numpy()
    return out


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    enc, dec, out = argv[1:]
    tensors = {}
    if enc != "-":
        tensors.update(renamed(torch.load(enc, map_location="cpu", weights_only=True), "encoder", 0))
    if dec != "-":
        tensors.update(renamed(torch.load(dec, map_location="cpu", weights_only=True), "decoder", 1))
    if not tensors:
        print("taesd_to_safetensors: give at least one of ENCODER.pth and DECODER.pth", file=sys.stderr)
        return 2
    write_safetensors(out, {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()})
    print("taesd_to_safetensors: %d tensors written to %s" % (len(tensors), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
