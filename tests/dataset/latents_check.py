#!/usr/bin/env python3
"""A latent dataset (prepare --vae) against the frames it was made from, through an independent encoder.

    latents_check.py LATENT_DIR FRAMES_DIR AUTOENCODER.safetensors tiny|kl [SCALE SHIFT]

FRAMES_DIR is the same input prepared without --vae (the same --size, --clip-frames, --overlap). Every
clip's latents, and those of its mirrored frames, are recomputed with tools/autoencoder_reference.py's
encoder (PyTorch, float64) from the frames and compared with the stored F16 values: each within F16's
rounding (2^-11 of the value) plus 1e-4. dataset.json's identity is checked against the file: its
SHA-256, the family, channels, factor, image size and the scaling (the family's, or SCALE and SHIFT). Prints one line; exit 0 when
everything matches.
"""
import hashlib
import json
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import autoencoder_reference as ref  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402


def shards(folder):
    meta = json.load(open(os.path.join(folder, "dataset.json")))
    clips = []
    for s in meta["shards"]:
        tensors, md = read_safetensors(os.path.join(folder, s["file"]))
        for k in range(s["clips"]):
            clips.append((tensors["clip.%d" % k], md["clip.%d.encoding" % k]))
    return meta, clips


def main():
    lat_dir, pix_dir, ae_path, kind = sys.argv[1:5]
    lat_meta, lat_clips = shards(lat_dir)
    pix_meta, pix_clips = shards(pix_dir)
    weights, _ = read_safetensors(ae_path)
    w = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in weights.items()}
    S, F = pix_meta["frame_size"], pix_meta["clip_frames"]
    if kind == "tiny":
        factor, scale, shift, channels, family = 8, 1.0, 0.0, w["encoder.layers.14.weight"].shape[0], "AutoencoderTiny"
    else:
        ch = (32, 32, 64)  # tools/autoencoder_reference.py --make's "kl": widths 32/32/64, one resnet a stage
        factor, scale, shift, channels, family = 4, 0.18215, 0.0, 4, "AutoencoderKL"
    if len(sys.argv) > 6:
        scale, shift = float(sys.argv[5]), float(sys.argv[6])
    if kind == "tiny":
        enc = lambda x: (ref.encode(x, w) - shift) * scale
    else:
        enc = lambda x: ref.kl_encode(x, w, ch, 1, 4, scale, shift)
    ae = lat_meta["autoencoder"]
    sha = hashlib.sha256(open(ae_path, "rb").read()).hexdigest()
    want = {"sha256": sha, "family": family, "factor": factor, "image_size": S, "scale": scale, "shift": shift}
    bad = ["autoencoder.%s %r, not %r" % (k, ae.get(k), v) for k, v in want.items() if ae.get(k) != v]
    if lat_meta["channels"] != channels or lat_meta["frame_size"] * factor != S or lat_meta["format_version"] != 2:
        bad.append("channels %d, frame_size %d, format_version %d" % (lat_meta["channels"], lat_meta["frame_size"],
                                                                        lat_meta["format_version"]))
    if len(lat_clips) != len(pix_clips) or lat_meta["clip_frames"] != F:
        bad.append("%d clips of %d frames, the frames' dataset %d of %d" % (len(lat_clips), lat_meta["clip_frames"],
                                                                           len(pix_clips), F))
    worst, values = 0.0, 0
    for (lat, _), (pix, encoding) in zip(lat_clips, pix_clips):
        raw = zlib.decompress(pix.tobytes()) if encoding == "zlib" else pix.tobytes()
        frames = np.frombuffer(raw, np.uint8).reshape(F, S, S, 3).astype(np.float64) / 127.5 - 1
        x = torch.from_numpy(frames).permute(0, 3, 1, 2)
        with torch.no_grad():
            want = torch.stack([enc(x), enc(torch.flip(x, dims=[3]))], dim=1).numpy()  # (F, 2, C, n, n)
        got = np.asarray(lat, dtype=np.float64)
        if got.shape != want.shape:
            bad.append("latents of shape %s, expected %s" % (got.shape, want.shape))
            break
        err = np.abs(got - want) / (np.abs(want) * 2.0 ** -11 + 1e-4)
        worst, values = max(worst, float(err.max())), values + got.size
    if worst > 1:
        bad.append("a latent differs by %.2f times F16's rounding plus 1e-4" % worst)
    if bad:
        print("latents_check: " + "; ".join(bad))
        return 1
    print("latents_check: %d clips, %d values (each frame and its mirror) within %.2f of F16's rounding of an "
          "independent encoder; sha256, family, factor, scaling as the file and family say"
          % (len(lat_clips), values, worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
