#!/usr/bin/python3
"""An independent PyTorch implementation of the autoencoders framechain reads, to check it.

Written from the published architecture (the tiny autoencoder of github madebyollin/taesd, as
diffusers' AutoencoderTiny lays out its tensors), not from framechain's C. With random weights
(none ship), at a reduced width and on small frames:

    tools/autoencoder_reference.py --make DIR [--width 16] [--latent 4] [--size 32] [--batch 2] [--seed 1]

writes DIR/taesd.safetensors (the weights, F32), DIR/taesd_f16.safetensors (the same rounded to F16)
and DIR/io.safetensors: frames (B, 3, S, S) in [-1, 1] with the latents the encoder makes of them,
and latents (B, L, S/8, S/8) with the frames the decoder makes of them, for each weight file
("f32.*" and "f16.*"); DIR/taesd_encoder.pth and DIR/taesd_decoder.pth, the same weights in the
original repository's layout (for tools/taesd_to_safetensors.py). Then the broken files the loader must refuse in one line:
DIR/bad_missing.safetensors (a block's tensor left out), DIR/bad_shape.safetensors (one misshapen),
DIR/bad_kl.safetensors (an AutoencoderKL's first tensors).
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import write_safetensors  # noqa: E402

ENC_BLOCKS = (1, 3, 3, 3)  # blocks per stage; a stride-2 convolution (no bias) before stages 1-3
DEC_BLOCKS = (3, 3, 3, 1)  # blocks per stage; 2x nearest upsampling and a convolution (no bias) after stages 0-2


def tiny_weights(width, latent, gen):
    """Every tensor of encoder and decoder, by its diffusers name, He-initialised (scaled down so that
    ten residual blocks keep their activations of order one)."""
    w = {}

    def conv(name, cout, cin, bias=True):
        std = 0.5 * (2.0 / (cin * 9)) ** 0.5
        w[name + ".weight"] = torch.randn(cout, cin, 3, 3, generator=gen) * std
        if bias:
            w[name + ".bias"] = torch.randn(cout, generator=gen) * 0.1

    def block(prefix):
        for j in (0, 2, 4):
            conv("%s.conv.%d" % (prefix, j), width, width)

    i = 0
    conv("encoder.layers.%d" % i, width, 3)
    i += 1
    for stage, n in enumerate(ENC_BLOCKS):
        if stage:
            conv("encoder.layers.%d" % i, width, width, bias=False)
            i += 1
        for _ in range(n):
            block("encoder.layers.%d" % i)
            i += 1
    conv("encoder.layers.%d" % i, latent, width)
    conv("decoder.layers.0", width, latent)
    i = 2  # 1: the ReLU
    for stage, n in enumerate(DEC_BLOCKS):
        for _ in range(n):
            block("decoder.layers.%d" % i)
            i += 1
        if stage < len(DEC_BLOCKS) - 1:
            i += 1  # the Upsample
            conv("decoder.layers.%d" % i, width, width, bias=False)
            i += 1
    conv("decoder.layers.%d" % i, 3, width)
    return w


def conv(x, w, name, stride=1):
    return F.conv2d(x, w[name + ".weight"], w.get(name + ".bias"), stride=stride, padding=1)


def block(x, w, prefix):
    h = F.relu(conv(x, w, prefix + ".conv.0"))
    h = F.relu(conv(h, w, prefix + ".conv.2"))
    return F.relu(conv(h, w, prefix + ".conv.4") + x)


def encode(frames, w):
    x = (frames + 1) / 2  # the tiny autoencoders read [0, 1]
    i = 0
    x = conv(x, w, "encoder.layers.0")
    i = 1
    for stage, n in enumerate(ENC_BLOCKS):
        if stage:
            x = conv(x, w, "encoder.layers.%d" % i, stride=2)
            i += 1
        for _ in range(n):
            x = block(x, w, "encoder.layers.%d" % i)
            i += 1
    return conv(x, w, "encoder.layers.%d" % i)


def decode(latents, w):
    x = torch.tanh(latents / 3) * 3
    x = F.relu(conv(x, w, "decoder.layers.0"))
    i = 2
    for stage, n in enumerate(DEC_BLOCKS):
        for _ in range(n):
            x = block(x, w, "decoder.layers.%d" % i)
            i += 1
        if stage < len(DEC_BLOCKS) - 1:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            i += 1
            x = conv(x, w, "decoder.layers.%d" % i)
            i += 1
    x = conv(x, w, "decoder.layers.%d" % i)
    return x * 2 - 1  # [0, 1] to [-1, 1]


def to_np(w):
    return {k: v.detach().double().numpy().astype(np.float32) for k, v in w.items()}


def make(args):
    os.makedirs(args.dir, exist_ok=True)
    gen = torch.Generator().manual_seed(args.seed)
    w32 = {k: v.double() for k, v in tiny_weights(args.width, args.latent, gen).items()}
    w16 = {k: v.half().double() for k, v in w32.items()}
    write_safetensors(os.path.join(args.dir, "taesd.safetensors"), to_np(w32))
    write_safetensors(os.path.join(args.dir, "taesd_f16.safetensors"),
                      {k: v.numpy().astype(np.float16) for k, v in w16.items()})
    S, B, L = args.size, args.batch, args.latent
    frames = (torch.rand(B, 3, S, S, generator=gen, dtype=torch.float64) * 2 - 1)
    latents = torch.randn(B, L, S // 8, S // 8, generator=gen, dtype=torch.float64) * 2
    io = {"frames": frames, "latents": latents}
    for tag, w in (("f32", w32), ("f16", w16)):
        with torch.no_grad():
            io[tag + ".encoded"] = encode(frames, w)
            io[tag + ".decoded"] = decode(latents, w)
    write_safetensors(os.path.join(args.dir, "io.safetensors"),
                      {k: v.numpy().astype(np.float32) for k, v in io.items()})
    # the original layout's pair of .pth files (tools/taesd_to_safetensors.py turns them into taesd.safetensors)
    enc = {k[len("encoder.layers."):]: v.float() for k, v in w32.items() if k.startswith("encoder.")}
    dec = {}
    for k, v in w32.items():
        if k.startswith("decoder."):
            index, rest = k[len("decoder.layers."):].split(".", 1)
            dec["%d.%s" % (int(index) + 1, rest)] = v.float()  # the original decoder's layer 0 is the clamp
    torch.save(enc, os.path.join(args.dir, "taesd_encoder.pth"))
    torch.save(dec, os.path.join(args.dir, "taesd_decoder.pth"))
    # the broken files
    bad = to_np(w32)
    del bad["decoder.layers.7.conv.2.weight"]
    write_safetensors(os.path.join(args.dir, "bad_missing.safetensors"), bad)
    bad = to_np(w32)
    bad["encoder.layers.6.weight"] = bad["encoder.layers.6.weight"][:, :-1]
    write_safetensors(os.path.join(args.dir, "bad_shape.safetensors"), bad)
    write_safetensors(os.path.join(args.dir, "bad_kl.safetensors"),
                      {"encoder.down_blocks.0.resnets.0.conv1.weight": np.zeros((8, 8, 3, 3), np.float32)})
    scale = {k: float(v.abs().max()) for k, v in io.items()}
    print("autoencoder_reference: width %d, %d latent channels, %d frames of %dx%d in %s; largest |value|: %s"
          % (args.width, L, B, S, S, args.dir, ", ".join("%s %.3g" % kv for kv in scale.items())))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--make", dest="dir", required=True)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--latent", type=int, default=4)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    make(p.parse_args())


if __name__ == "__main__":
    main()
