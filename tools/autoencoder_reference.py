#!/usr/bin/python3
"""An independent PyTorch implementation of the autoencoders framechain reads, to check it.

Written from the published architectures (the tiny autoencoder of github madebyollin/taesd, as
diffusers' AutoencoderTiny lays out its tensors; diffusers' AutoencoderKL), not from framechain's C. With random weights
(none ship), at a reduced width and on small frames:

    tools/autoencoder_reference.py --make DIR [--width 16] [--latent 4] [--size 32] [--batch 2] [--seed 1]
    tools/autoencoder_reference.py --full-kl OUT.safetensors      (an SD VAE's shapes, for benchmarks)
    tools/autoencoder_reference.py --time FILE --size 512 [--frames K] [--threads T]

writes DIR/taesd.safetensors (the weights, F32), DIR/taesd_f16.safetensors (the same rounded to F16)
and DIR/io.safetensors: frames (B, 3, S, S) in [-1, 1] with the latents the encoder makes of them,
and latents (B, L, S/8, S/8) with the frames the decoder makes of them, for each weight file
("f32.*" and "f16.*"); DIR/taesd_encoder.pth and DIR/taesd_decoder.pth, the same weights in the
original repository's layout (for tools/taesd_to_safetensors.py). Then the broken files the loader must refuse in one line:
DIR/bad_missing.safetensors (a block's tensor left out), DIR/bad_shape.safetensors (one misshapen),
DIR/bad_unknown.safetensors (no autoencoder at all). The same for AutoencoderKL, written from
diffusers' architecture: DIR/kl.safetensors (4 latent channels, quant convs, widths 32/32/64, one
resnet a stage), DIR/kl16.safetensors (16, no quant convs, 32/64, two), kl_original.safetensors (kl's
weights under the original single file's names and first_stage_model.), kl_legacy.safetensors
(diffusers' older attention names), bad_kl_missing.safetensors (an attention tensor left out),
bad_kl_half_quant.safetensors (quant_conv without post_quant_conv), bad_kl_both_names.safetensors
(kl's weights under both naming schemes at once), bad_mixed_halves.safetensors (kl's encoder beside
the tiny decoder); their
inputs and outputs in io.safetensors as "kl.*" and "kl16.*" (frames of 16x16). TAEF2 (the tiny
network with a GroupNorm pool in the encoder's last three blocks and the decoder's first three, 32
latent channels): DIR/taef2.safetensors, its .pth pair taef2_encoder.pth and taef2_decoder.pth,
bad_taef2_missing.safetensors (a pool's GroupNorm bias left out), "taef2.*" in io.safetensors.
"""

import argparse
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import write_safetensors  # noqa: E402

ENC_BLOCKS = (1, 3, 3, 3)  # blocks per stage; a stride-2 convolution (no bias) before stages 1-3
DEC_BLOCKS = (3, 3, 3, 1)  # blocks per stage; 2x nearest upsampling and a convolution (no bias) after stages 0-2


POOL_ENC = (11, 12, 13)  # TAEF2: the blocks with a GroupNorm pool, the encoder's deepest stage
POOL_DEC = (2, 3, 4)     # and the decoder's first (diffusers' numbering: the original's 3, 4, 5)


def tiny_weights(width, latent, gen, pool=False, pool_at=(POOL_ENC, POOL_DEC)):
    """Every tensor of encoder and decoder, by its diffusers name, He-initialised (scaled down so that
    ten residual blocks keep their activations of order one). pool: TAEF2's GroupNorm pools in the
    blocks pool_at names (encoder's, decoder's; TAEF2's: POOL_ENC and POOL_DEC) (1x1 conv to 4 width,
    GroupNorm of 4 groups, ReLU, 1x1 conv back)."""
    w = {}

    def conv(name, cout, cin, bias=True):
        std = 0.5 * (2.0 / (cin * 9)) ** 0.5
        w[name + ".weight"] = torch.randn(cout, cin, 3, 3, generator=gen) * std
        if bias:
            w[name + ".bias"] = torch.randn(cout, generator=gen) * 0.1

    def block(prefix):
        for j in (0, 2, 4):
            conv("%s.conv.%d" % (prefix, j), width, width)
        index = int(prefix.rsplit(".", 1)[1])
        if pool and index in (pool_at[0] if prefix.startswith("encoder") else pool_at[1]):
            w[prefix + ".pool.0.weight"] = torch.randn(4 * width, width, 1, 1, generator=gen) * (1.0 / width) ** 0.5
            w[prefix + ".pool.1.weight"] = 1 + 0.1 * torch.randn(4 * width, generator=gen)
            w[prefix + ".pool.1.bias"] = 0.1 * torch.randn(4 * width, generator=gen)
            w[prefix + ".pool.3.weight"] = torch.randn(width, 4 * width, 1, 1, generator=gen) * 0.5 * (0.5 / width) ** 0.5

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
    if prefix + ".pool.0.weight" in w:  # TAEF2: x + conv(ReLU(GroupNorm_4(conv(x)))), both 1x1 without bias
        p = F.conv2d(x, w[prefix + ".pool.0.weight"])
        p = F.relu(F.group_norm(p, 4, w[prefix + ".pool.1.weight"], w[prefix + ".pool.1.bias"], 1e-5))
        x = x + F.conv2d(p, w[prefix + ".pool.3.weight"])
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


# ---- AutoencoderKL (diffusers' names; 32 GroupNorm groups, eps 1e-6, SiLU) ----

def kl_weights(ch, layers, latent, quant, gen):
    """Every tensor of an AutoencoderKL of stage widths ch (encoder order), `layers` resnets a stage."""
    w = {}

    def conv(name, cout, cin, k=3):
        std = 0.5 * (2.0 / (cin * k * k)) ** 0.5
        w[name + ".weight"] = torch.randn(cout, cin, k, k, generator=gen) * std
        w[name + ".bias"] = torch.randn(cout, generator=gen) * 0.1

    def norm(name, c):
        w[name + ".weight"] = 1 + 0.2 * torch.randn(c, generator=gen)
        w[name + ".bias"] = 0.2 * torch.randn(c, generator=gen)

    def resnet(name, cin, cout):
        norm(name + ".norm1", cin)
        conv(name + ".conv1", cout, cin)
        norm(name + ".norm2", cout)
        conv(name + ".conv2", cout, cout)
        if cin != cout:
            conv(name + ".conv_shortcut", cout, cin, 1)

    def mid(part, c):
        resnet(part + ".mid_block.resnets.0", c, c)
        norm(part + ".mid_block.attentions.0.group_norm", c)
        for p in ("to_q", "to_k", "to_v", "to_out.0"):  # Linear: (C, C)
            w["%s.mid_block.attentions.0.%s.weight" % (part, p)] = torch.randn(c, c, generator=gen) * (0.5 / c ** 0.5)
            w["%s.mid_block.attentions.0.%s.bias" % (part, p)] = torch.randn(c, generator=gen) * 0.1
        resnet(part + ".mid_block.resnets.1", c, c)

    n = len(ch)
    conv("encoder.conv_in", ch[0], 3)
    prev = ch[0]
    for i in range(n):
        for j in range(layers):
            resnet("encoder.down_blocks.%d.resnets.%d" % (i, j), prev, ch[i])
            prev = ch[i]
        if i < n - 1:
            conv("encoder.down_blocks.%d.downsamplers.0.conv" % i, ch[i], ch[i])
    mid("encoder", ch[-1])
    norm("encoder.conv_norm_out", ch[-1])
    conv("encoder.conv_out", 2 * latent, ch[-1])
    if quant:
        conv("quant_conv", 2 * latent, 2 * latent, 1)
        conv("post_quant_conv", latent, latent, 1)
    conv("decoder.conv_in", ch[-1], latent)
    mid("decoder", ch[-1])
    prev = ch[-1]
    for i in range(n):
        c = ch[n - 1 - i]
        for j in range(layers + 1):
            resnet("decoder.up_blocks.%d.resnets.%d" % (i, j), prev, c)
            prev = c
        if i < n - 1:
            conv("decoder.up_blocks.%d.upsamplers.0.conv" % i, c, c)
    norm("decoder.conv_norm_out", ch[0])
    conv("decoder.conv_out", 3, ch[0])
    return w


def kl_resnet(x, w, name):
    h = F.conv2d(F.silu(F.group_norm(x, 32, w[name + ".norm1.weight"], w[name + ".norm1.bias"], 1e-6)),
                 w[name + ".conv1.weight"], w[name + ".conv1.bias"], padding=1)
    h = F.conv2d(F.silu(F.group_norm(h, 32, w[name + ".norm2.weight"], w[name + ".norm2.bias"], 1e-6)),
                 w[name + ".conv2.weight"], w[name + ".conv2.bias"], padding=1)
    if name + ".conv_shortcut.weight" in w:
        x = F.conv2d(x, w[name + ".conv_shortcut.weight"], w[name + ".conv_shortcut.bias"])
    return x + h


def kl_attention(x, w, name):
    B, C, H, W = x.shape
    h = F.group_norm(x, 32, w[name + ".group_norm.weight"], w[name + ".group_norm.bias"], 1e-6)
    t = h.reshape(B, C, H * W).transpose(1, 2)  # tokens (B, HW, C)
    q = F.linear(t, w[name + ".to_q.weight"], w[name + ".to_q.bias"])
    k = F.linear(t, w[name + ".to_k.weight"], w[name + ".to_k.bias"])
    v = F.linear(t, w[name + ".to_v.weight"], w[name + ".to_v.bias"])
    p = torch.softmax(q @ k.transpose(1, 2) / C ** 0.5, dim=-1)
    o = F.linear(p @ v, w[name + ".to_out.0.weight"], w[name + ".to_out.0.bias"])
    return x + o.transpose(1, 2).reshape(B, C, H, W)


def kl_mid(x, w, part):
    x = kl_resnet(x, w, part + ".mid_block.resnets.0")
    x = kl_attention(x, w, part + ".mid_block.attentions.0")
    return kl_resnet(x, w, part + ".mid_block.resnets.1")


def kl_encode(frames, w, ch, layers, latent, scale, shift):
    x = F.conv2d(frames, w["encoder.conv_in.weight"], w["encoder.conv_in.bias"], padding=1)
    for i in range(len(ch)):
        for j in range(layers):
            x = kl_resnet(x, w, "encoder.down_blocks.%d.resnets.%d" % (i, j))
        if i < len(ch) - 1:
            x = F.pad(x, (0, 1, 0, 1))
            x = F.conv2d(x, w["encoder.down_blocks.%d.downsamplers.0.conv.weight" % i],
                         w["encoder.down_blocks.%d.downsamplers.0.conv.bias" % i], stride=2)
    x = kl_mid(x, w, "encoder")
    x = F.silu(F.group_norm(x, 32, w["encoder.conv_norm_out.weight"], w["encoder.conv_norm_out.bias"], 1e-6))
    x = F.conv2d(x, w["encoder.conv_out.weight"], w["encoder.conv_out.bias"], padding=1)
    if "quant_conv.weight" in w:
        x = F.conv2d(x, w["quant_conv.weight"], w["quant_conv.bias"])
    mean = x[:, :latent]
    return (mean - shift) * scale


def kl_decode(z, w, ch, layers, scale, shift):
    x = z / scale + shift
    if "post_quant_conv.weight" in w:
        x = F.conv2d(x, w["post_quant_conv.weight"], w["post_quant_conv.bias"])
    x = F.conv2d(x, w["decoder.conv_in.weight"], w["decoder.conv_in.bias"], padding=1)
    x = kl_mid(x, w, "decoder")
    n = len(ch)
    for i in range(n):
        for j in range(layers + 1):
            x = kl_resnet(x, w, "decoder.up_blocks.%d.resnets.%d" % (i, j))
        if i < n - 1:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            x = F.conv2d(x, w["decoder.up_blocks.%d.upsamplers.0.conv.weight" % i],
                         w["decoder.up_blocks.%d.upsamplers.0.conv.bias" % i], padding=1)
    x = F.silu(F.group_norm(x, 32, w["decoder.conv_norm_out.weight"], w["decoder.conv_norm_out.bias"], 1e-6))
    return F.conv2d(x, w["decoder.conv_out.weight"], w["decoder.conv_out.bias"], padding=1)


def kl_original_names(w, n, prefix):
    """The same tensors as the original single file names them (decoder stages numbered from the deepest;
    the attention's projections as 1x1 convolutions)."""
    out = {}
    for name, v in w.items():
        parts = name.split(".")
        if parts[1] in ("down_blocks", "up_blocks"):
            i = int(parts[2])
            if parts[1] == "up_blocks":
                i = n - 1 - i
            head = "%s.%s.%d" % (parts[0], "down" if parts[1] == "down_blocks" else "up", i)
            if parts[3] == "resnets":
                rest = ".".join(parts[5:]).replace("conv_shortcut", "nin_shortcut")
                name = "%s.block.%s.%s" % (head, parts[4], rest)
            else:  # downsamplers.0.conv / upsamplers.0.conv
                name = "%s.%s.%s" % (head, "downsample" if parts[3] == "downsamplers" else "upsample", ".".join(parts[5:]))
        elif parts[1] == "mid_block":
            if parts[2] == "resnets":
                name = "%s.mid.block_%d.%s" % (parts[0], int(parts[3]) + 1, ".".join(parts[4:]))
            else:
                proj = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out": "proj_out"}[parts[4]]
                rest = parts[-1]
                name = "%s.mid.attn_1.%s.%s" % (parts[0], proj, rest)
                if proj != "norm" and rest == "weight":
                    v = v.reshape(v.shape[0], v.shape[1], 1, 1)
        elif parts[1] == "conv_norm_out":
            name = "%s.norm_out.%s" % (parts[0], parts[2])
        out[prefix + name] = v
    return out


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
    write_safetensors(os.path.join(args.dir, "bad_unknown.safetensors"),
                      {"model.diffusion_model.input_blocks.0.0.weight": np.zeros((8, 8, 3, 3), np.float32)})
    # AutoencoderKL: SD-like (4 latent channels, quant convs, 0.18215) at widths 32/32/64 with one resnet a
    # stage (factor 4), and SD3-like (16, none, 1.5305 and 0.0609) at 32/64 with two (factor 2)
    kl = {"kl": ((32, 32, 64), 1, 4, True, 0.18215, 0.0), "kl16": ((32, 64), 2, 16, False, 1.5305, 0.0609)}
    for tag, (ch, layers, L, quant, sc, sh) in kl.items():
        w = {k: v.double() for k, v in kl_weights(ch, layers, L, quant, gen).items()}
        write_safetensors(os.path.join(args.dir, tag + ".safetensors"), to_np(w))
        f = 2 ** (len(ch) - 1)
        kf = torch.rand(B, 3, 16, 16, generator=gen, dtype=torch.float64) * 2 - 1
        kz = torch.randn(B, L, 16 // f, 16 // f, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            io[tag + ".frames"], io[tag + ".latents"] = kf, kz
            io[tag + ".encoded"] = kl_encode(kf, w, ch, layers, L, sc, sh)
            io[tag + ".decoded"] = kl_decode(kz, w, ch, layers, sc, sh)
        if tag == "kl":
            write_safetensors(os.path.join(args.dir, "kl_original.safetensors"),
                              to_np(kl_original_names(w, len(ch), "first_stage_model.")))
            legacy = {k.replace("to_q.", "query.").replace("to_k.", "key.").replace("to_v.", "value.")
                      .replace("to_out.0.", "proj_attn."): v for k, v in w.items()}
            write_safetensors(os.path.join(args.dir, "kl_legacy.safetensors"), to_np(legacy))
            bad = to_np(w)
            del bad["decoder.mid_block.attentions.0.to_k.weight"]
            write_safetensors(os.path.join(args.dir, "bad_kl_missing.safetensors"), bad)
            bad = to_np(w)
            del bad["post_quant_conv.weight"], bad["post_quant_conv.bias"]
            write_safetensors(os.path.join(args.dir, "bad_kl_half_quant.safetensors"), bad)
            both = to_np(w)
            both.update(to_np(kl_original_names(w, len(ch), "first_stage_model.")))
            write_safetensors(os.path.join(args.dir, "bad_kl_both_names.safetensors"), both)
            mixed = {k: v for k, v in to_np(w).items() if k.startswith(("encoder.", "quant_conv."))}
            mixed.update({k: v for k, v in to_np(w32).items() if k.startswith("decoder.")})
            write_safetensors(os.path.join(args.dir, "bad_mixed_halves.safetensors"), mixed)
    # TAEF2: the tiny network with GroupNorm pools and 32 latent channels; its .pth pair; one pool tensor missing
    w = {k: v.double() for k, v in tiny_weights(args.width, 32, gen, pool=True).items()}
    write_safetensors(os.path.join(args.dir, "taef2.safetensors"), to_np(w))
    tf = torch.rand(B, 3, S, S, generator=gen, dtype=torch.float64) * 2 - 1
    tz = torch.randn(B, 32, S // 8, S // 8, generator=gen, dtype=torch.float64) * 2
    with torch.no_grad():
        io["taef2.frames"], io["taef2.latents"] = tf, tz
        io["taef2.encoded"], io["taef2.decoded"] = encode(tf, w), decode(tz, w)
    torch.save({k[len("encoder.layers."):]: v.float() for k, v in w.items() if k.startswith("encoder.")},
               os.path.join(args.dir, "taef2_encoder.pth"))
    dec = {}
    for k, v in w.items():
        if k.startswith("decoder."):
            index, rest = k[len("decoder.layers."):].split(".", 1)
            dec["%d.%s" % (int(index) + 1, rest)] = v.float()
    torch.save(dec, os.path.join(args.dir, "taef2_decoder.pth"))
    bad = to_np(w)
    del bad["decoder.layers.3.pool.1.bias"]
    write_safetensors(os.path.join(args.dir, "bad_taef2_missing.safetensors"), bad)
    # pools where TAEF2 has none: the first encoder block and the last decoder block (full resolution,
    # where the pool's 4 x width map is the largest of the network) and the encoder's second stage
    w = {k: v.double() for k, v in tiny_weights(args.width, 32, gen, pool=True, pool_at=((1, 3), (17,))).items()}
    write_safetensors(os.path.join(args.dir, "taef2_anywhere.safetensors"), to_np(w))
    with torch.no_grad():
        io["taef2_anywhere.encoded"], io["taef2_anywhere.decoded"] = encode(tf, w), decode(tz, w)
    write_safetensors(os.path.join(args.dir, "io.safetensors"),
                      {k: v.numpy().astype(np.float32) for k, v in io.items()})
    scale = {k: float(v.abs().max()) for k, v in io.items()}
    print("autoencoder_reference: width %d, %d latent channels, %d frames of %dx%d in %s; largest |value|: %s"
          % (args.width, args.latent, B, S, S, args.dir, ", ".join("%s %.3g" % kv for kv in scale.items())))


def full_kl(path, seed):
    """Random weights of Stable Diffusion 1.x's VAE shapes (widths 128/256/512/512, two resnets a
    stage, 4 latent channels, quant convs): 83.7 M parameters, for the benchmarks."""
    gen = torch.Generator().manual_seed(seed)
    w = kl_weights((128, 256, 512, 512), 2, 4, True, gen)
    write_safetensors(path, to_np(w))
    print("autoencoder_reference: %.1f M parameters of an SD VAE's shapes in %s"
          % (sum(v.numel() for v in w.values()) / 1e6, path))


def time_kl(path, size, frames, threads, device="cpu"):
    """PyTorch (eager, fp32) encode and decode of `frames` random frames through the AutoencoderKL in
    path, one frame at a time as framechain autoencode runs them, on the CPU or a GPU (cuda; each
    time taken after the GPU has finished); the time a frame of each."""
    import time
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from safetensors_io import read_safetensors
    torch.set_num_threads(threads)
    t, _ = read_safetensors(path)
    w = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)).to(device) for k, v in t.items()}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    # fp32 without TF32 on both sides, as framechain's autoencoder convolutions run
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    ch, i = [], 0
    while "encoder.down_blocks.%d.resnets.0.conv1.weight" % i in w:
        ch.append(w["encoder.down_blocks.%d.resnets.0.conv1.weight" % i].shape[0])
        i += 1
    layers = sum(1 for k in w if k.startswith("encoder.down_blocks.0.resnets.") and k.endswith("conv1.weight"))
    latent = w["encoder.conv_out.weight"].shape[0] // 2
    gen = torch.Generator().manual_seed(1)
    enc = dec = 0.0
    with torch.no_grad():
        for _ in range(frames):
            x = (torch.rand(1, 3, size, size, generator=gen) * 2 - 1).to(device)
            sync()
            t0 = time.perf_counter()
            z = kl_encode(x, w, ch, layers, latent, 0.18215, 0.0)
            sync()
            t1 = time.perf_counter()
            kl_decode(z, w, ch, layers, 0.18215, 0.0)
            sync()
            enc, dec = enc + t1 - t0, dec + time.perf_counter() - t1
    where = "%d threads" % threads if device == "cpu" else device
    print("pytorch %s: encode %.1f ms a frame, decode %.1f ms a frame (%d frames of %dx%d, %s)"
          % (torch.__version__, 1e3 * enc / frames, 1e3 * dec / frames, frames, size, size, where))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--make", dest="dir")
    p.add_argument("--full-kl", metavar="OUT", help="write random weights of an SD VAE's shapes to OUT")
    p.add_argument("--time", metavar="FILE", help="time PyTorch's encode and decode with the AutoencoderKL in FILE")
    p.add_argument("--frames", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="where --time runs: cpu or cuda")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--latent", type=int, default=4)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.full_kl:
        full_kl(args.full_kl, args.seed)
    elif args.time:
        time_kl(args.time, args.size, args.frames, args.threads, args.device)
    elif args.dir:
        make(args)
    else:
        p.error("give --make DIR, --full-kl OUT or --time FILE")


if __name__ == "__main__":
    main()
