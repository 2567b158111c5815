#!/usr/bin/python3
"""The AutoencoderKL of a PyTorch checkpoint as a safetensors file framechain reads.

    tools/vae_ckpt_to_safetensors.py IN.ckpt OUT.safetensors [--overwrite]

IN is a whole Stable Diffusion 1.x/2.x checkpoint (.ckpt: the autoencoder's tensors under
"first_stage_model.", beside the UNet's and the text encoder's) or an autoencoder's own file
(vae-ft-mse-840000-ema-pruned.ckpt, *.vae.pt: "encoder.", "decoder.", the quant convs, often beside
the training's "loss." and "model_ema." keys), its state dict at the top or under "state_dict". OUT
holds the autoencoder's tensors alone, under the names framechain binds (encoder.*, decoder.*,
quant_conv.*, post_quant_conv.*: the prefix stripped); every other key is left out. F32, F16 and BF16
are written as they are (framechain reads all three), any other dtype as F32. IN is read with
torch.load(weights_only=True) and nothing else: a file holding objects beyond tensors is refused, not
loaded, since unpickling them can run code. OUT is written through a temporary file beside it, synced
and renamed into place; an existing OUT is replaced only with --overwrite. Run once, by the user.
"""

import collections
import errno
import inspect
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import SafetensorsError, write_safetensors  # noqa: E402

OWN = ("encoder.", "decoder.", "quant_conv.", "post_quant_conv.")  # what src/model/autoencoder_kl.c binds
PREFIX = "first_stage_model."  # a whole Stable Diffusion checkpoint's
KEPT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}  # the dtypes framechain reads


def refuse(path, why):
    raise SystemExit("vae_ckpt_to_safetensors: %s: %s" % (path, why))


def check_out(out, overwrite, inp):
    """Refused before IN is loaded (a whole checkpoint takes seconds and gigabytes to read)."""
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        refuse(out, "its folder %s %s" % (folder, "is not a folder" if os.path.exists(folder) else "does not exist"))
    if os.path.isdir(out):
        refuse(out, "is a folder")
    if os.path.lexists(out) and not overwrite:
        refuse(out, "exists (--overwrite replaces it)")
    if os.path.exists(out) and os.path.samefile(out, inp):
        refuse(out, "is IN itself: write the safetensors file beside it")


def load(path):
    """IN's top-level object, through torch's weights-only unpickler alone."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(9)
    except OSError as e:
        refuse(path, "cannot read: %s" % e.strerror)
    is_zip = head[:4] == b"PK\x03\x04"  # torch.save's archive; a bare pickle (protocol 2 to 5) is the legacy format
    if not is_zip and not (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5):
        if len(head) == 9 and head[8:9] == b"{":
            refuse(path, "a safetensors file already: give it to --vae as it is")
        refuse(path, "not a PyTorch checkpoint (neither torch.save's zip archive nor a pickle)")
    # mapped, not read, where this torch can (2.1 and on, zip archives): a whole checkpoint's gigabytes
    # then take no memory beyond the autoencoder's tensors
    mmap = {"mmap": True} if is_zip and "mmap" in inspect.signature(torch.load).parameters else {}
    try:
        return torch.load(path, map_location="cpu", weights_only=True, **mmap)
    except Exception as e:  # torch raises many kinds (pickle's, zipfile's, RuntimeError): one line of any
        text = str(e).strip()
        if "Weights only load failed" in text or "WeightsUnpickler" in text:
            what = text.partition("WeightsUnpickler error:")[2].strip().split("\n")[0].split(". ")[0].rstrip(".")
            refuse(path, "holds objects beyond tensors (%s): not loaded, since unpickling them could run code"
                   % (what or "refused by torch's weights-only loader"))
        refuse(path, "cannot read it as a PyTorch checkpoint: %s" % ((text.splitlines() or [type(e).__name__])[0]))


def group(name):
    """A key's family for the messages: model.diffusion_model.*, cond_stage_model.*, loss.*, ..."""
    parts = name.split(".")
    return ".".join(parts[:2 if parts[0] in ("model", "module") and len(parts) > 2 else 1]) + ".*"


def families(names, most=3):
    counts = collections.Counter(group(n) for n in names).most_common()
    shown = ", ".join("%s %d" % kv for kv in counts[:most])
    return shown + (", ..." if len(counts) > most else "")


def what_else(sd):
    """What a state dict without an AutoencoderKL holds, for its refusal."""
    names = [k for k in sd if isinstance(k, str)]
    if "encoder.layers.0.weight" in sd or "decoder.layers.0.weight" in sd:
        return "a tiny autoencoder (encoder.layers.*, AutoencoderTiny's names), whose .safetensors framechain reads"
    if "1.conv.0.weight" in sd or ("1.weight" in sd and "3.conv.0.weight" in sd):
        return "a TAESD half in the original layout (1.conv.0.weight, ...): tools/taesd_to_safetensors.py converts it"
    if not names:
        return "an empty state dict"
    return "%d keys: %s" % (len(names), families(names))


def autoencoder(sd, path):
    """The AutoencoderKL's tensors of the state dict under framechain's names, and the prefix they had."""
    has = {p: ("%sencoder.conv_in.weight" % p) in sd or ("%sdecoder.conv_in.weight" % p) in sd for p in ("", PREFIX)}
    if all(has.values()):  # one would be written and the other dropped: which one was meant?
        refuse(path, "holds two autoencoders, under encoder.* and first_stage_model.encoder.*: a file must hold one")
    if not any(has.values()):
        refuse(path, "no AutoencoderKL in it (no encoder.conv_in.weight or decoder.conv_in.weight, with or without "
               "first_stage_model.); it holds %s" % what_else(sd))
    prefix = PREFIX if has[PREFIX] else ""
    return {k[len(prefix):]: v for k, v in sd.items() if isinstance(k, str) and torch.is_tensor(v) and
            k.startswith(prefix) and k[len(prefix):].startswith(OWN)}, prefix


def arrays(tensors, path):
    """numpy arrays of the tensors, each in its dtype where framechain reads it, else F32; the dtypes
    write_safetensors takes for BF16 (held as uint16: numpy has no bfloat16); the count of each dtype."""
    out, dtypes, counts = {}, {}, collections.Counter()
    for name, t in tensors.items():
        try:
            t = t.detach().cpu().contiguous()
            st = KEPT.get(t.dtype)
            if st is None:
                counts["F32 (from %s)" % str(t.dtype).replace("torch.", "")] += 1
                t, st = t.float(), "F32"
            else:
                counts[st] += 1
            if st == "BF16":
                out[name], dtypes[name] = t.view(torch.int16).numpy().view(np.uint16), "BF16"
            else:
                out[name] = t.numpy()
        except (RuntimeError, TypeError) as e:  # a sparse or quantized tensor, say
            refuse(path, "tensor %s: not an array of numbers (%s)" % (name, str(e).strip().split("\n")[0]))
    return out, dtypes, counts


def into_place(tmp, out, overwrite):
    """tmp renamed to out. Without --overwrite never over a file that appeared since it was checked: a
    link fails where out exists (a file system without links gets the check again, then a rename)."""
    if overwrite:
        os.replace(tmp, out)
        return
    try:
        os.link(tmp, out)
    except OSError as e:
        if e.errno == errno.EEXIST:
            refuse(out, "exists (written while IN was converted): --overwrite replaces it")
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(out):
            refuse(out, "exists (written while IN was converted): --overwrite replaces it")
        os.replace(tmp, out)
        return
    os.unlink(tmp)


def main(argv):
    if argv[1:] in (["--help"], ["-h"]):
        print(__doc__.strip())
        return 0
    args = [a for a in argv[1:] if a != "--overwrite"]
    if len(args) != 2 or any(a.startswith("-") for a in args):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    inp, out = args
    overwrite = "--overwrite" in argv[1:]
    if not os.path.isfile(inp):
        refuse(inp, "is not a file" if os.path.exists(inp) else "no such file")
    check_out(out, overwrite, inp)
    top = load(inp)
    sd = top.get("state_dict") if isinstance(top, dict) and isinstance(top.get("state_dict"), dict) else top
    if not isinstance(sd, dict):
        refuse(inp, "holds a %s, not a state dict" % type(sd).__name__)
    tensors, prefix = autoencoder(sd, inp)
    values, dtypes, counts = arrays(tensors, inp)
    kept = {prefix + k for k in tensors}
    left = [k if isinstance(k, str) else repr(k) for k in sd if k not in kept]
    meta = {"converted_from": os.path.basename(inp), "converted_by": "tools/vae_ckpt_to_safetensors.py",
            "source_prefix": prefix or "none"}
    folder = os.path.dirname(out) or "."
    # through a temporary file beside OUT, on the disk before it takes OUT's name: a write that fails
    # or a crash leaves no part of a file under OUT's name
    tmp = "%s.tmp-%d" % (out, os.getpid())
    try:
        write_safetensors(tmp, values, meta, dtypes=dtypes, fsync=True)
        into_place(tmp, out, overwrite)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            refuse(out, "cannot write: %s" % (e.strerror or e))
        if isinstance(e, SafetensorsError):
            refuse(out, "cannot write: %s" % e)
        raise
    try:  # the new name on the disk too
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # a file system that cannot sync a folder (some network ones): the file is there
        pass
    print("vae_ckpt_to_safetensors: %d tensors of %s written to %s (%s); %d keys left out%s"
          % (len(values), "first_stage_model.* (the prefix stripped)" if prefix else "encoder.*, decoder.* and the quant convs",
             out, ", ".join("%d %s" % (n, dt) for dt, n in sorted(counts.items())), len(left),
             " (%s)" % families(left) if left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
