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
    if not os.path.isfile(path):
        raise SystemExit("taesd_to_safetensors: %s: %s" % (path, "is not a file" if os.path.exists(path)
                                                            else "no such file"))
    if path.lower().endswith(".safetensors"):
        try:
            return read_safetensors(path)[0]
        except SafetensorsError as e:
            raise SystemExit("taesd_to_safetensors: %s" % e)
        except OSError as e:
            raise SystemExit("taesd_to_safetensors: %s: cannot read: %s" % (path, e.strerror))
    try:
        import torch
    except ImportError as e:
        raise SystemExit("taesd_to_safetensors: %s: a .pth needs torch, and %s cannot import %s (or give the "
                         ".safetensors file of that half)" % (path, sys.executable, e.name))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds (pickle's, zipfile's, RuntimeError): one line of any
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SystemExit("taesd_to_safetensors: %s: cannot read it as a PyTorch state dict: %s" % (path, why))
    if not isinstance(state, dict) or not all(hasattr(v, "detach") for v in state.values()):
        raise SystemExit("taesd_to_safetensors: %s: not a state dict of tensors" % path)
    return {k: v.detach().float().cpu().numpy() for k, v in state.items()}


def layers(state, part, path):
    """The Sequential layer index of each tensor name ("K.name") of a half."""
    out = {}
    for name in state:
        index, _, rest = name.partition(".")
        if not index.isdigit() or not rest:
            raise SystemExit("taesd_to_safetensors: %s: %s tensor '%s' is not a Sequential layer's (K.name)"
                             % (path, part, name))
        out[name] = int(index)
    return out


def check_halves(enc, enc_layers, dec, dec_layers):
    """An encoder's layer 0 is its first convolution; a decoder's layer 0 is the soft clamp, which has no
    weights (renamed to layer -1 it would be no layer of AutoencoderTiny): halves given the other way
    round are refused."""
    enc_first = enc_layers is not None and 0 not in enc_layers.values()
    dec_zero = [n for n, k in (dec_layers or {}).items() if k == 0]
    if enc_first and dec_zero:
        raise SystemExit("taesd_to_safetensors: %s and %s look swapped: the DECODER file has tensors of layer 0 (%s), "
                         "as an encoder's file has, and the ENCODER file none; give the encoder's file first"
                         % (enc, dec, dec_zero[0]))
    if dec_zero:
        raise SystemExit("taesd_to_safetensors: %s: the DECODER file has tensors of layer 0 (%s), which a decoder's "
                         "never has (its layer 0 is the clamp): it looks like an encoder's file (swapped?)"
                         % (dec, dec_zero[0]))
    if enc_first:
        raise SystemExit("taesd_to_safetensors: %s: the ENCODER file has no tensor of layer 0 (an encoder's first "
                         "convolution): it looks like a decoder's file (swapped?)" % enc)


def renamed(state, index, part, shift):
    return {"%s.layers.%d.%s" % (part, index[name] - shift, name.partition(".")[2]): value
            for name, value in state.items()}


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    enc, dec, out = argv[1:]
    if enc == "-" and dec == "-":
        print("taesd_to_safetensors: give at least one of ENCODER and DECODER", file=sys.stderr)
        return 2
    enc_state = load_half(enc) if enc != "-" else None
    dec_state = load_half(dec) if dec != "-" else None
    enc_layers = layers(enc_state, "encoder", enc) if enc_state is not None else None
    dec_layers = layers(dec_state, "decoder", dec) if dec_state is not None else None
    check_halves(enc, enc_layers, dec, dec_layers)
    tensors = {}
    if enc_state is not None:
        tensors.update(renamed(enc_state, enc_layers, "encoder", 0))
    if dec_state is not None:
        tensors.update(renamed(dec_state, dec_layers, "decoder", 1))
    if not tensors:
        print("taesd_to_safetensors: %s: no tensor in it" % (enc if enc != "-" else dec), file=sys.stderr)
        return 1
    # through a temporary file beside OUT: a write that fails leaves no part of a file behind
    tmp = "%s.tmp-%d" % (out, os.getpid())
    try:
        write_safetensors(tmp, {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()})
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        print("taesd_to_safetensors: %s: cannot write: %s" % (out, e.strerror or e), file=sys.stderr)
        return 1
    print("taesd_to_safetensors: %d tensors written to %s" % (len(tensors), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
