#!/usr/bin/python3
"""Independent PyTorch reference for the framechain network (docs/network.md).

The C trainer computes the network and its gradients by hand against the op
table in src/backend/backend.h; this file computes the same thing with PyTorch
autograd, written only from docs/network.md, so that the two can be compared.

Usage:
    /usr/bin/python3 tools/reference.py --check DUMP.safetensors [--tol 1e-4]
    /usr/bin/python3 tools/reference.py --selftest

--check   loads a dump written by the C program (parameters, inputs, C outputs
          and C gradients), recomputes forward + loss + backward in float64
          torch and reports the relative error of every C tensor. Exit 0 when
          every error is <= tol, 1 otherwise.
--selftest  checks this module on its own: autograd against central finite
          differences, the patch layout against explicit loops, and the whole
          --check path on a dump written by this file.

Only torch and numpy are needed (Debian's torch 1.13 is enough); the
safetensors format is read and written by hand (tools/safetensors_io.py).
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

from safetensors_io import SafetensorsError, read_safetensors, write_safetensors


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------

CONFIG_KEYS = ("frame_size", "channels", "patch", "width", "depth", "heads",
               "mlp_ratio", "freq_dim", "batch_size", "slots")


def config_from_metadata(meta):
    """Parse the dump's __metadata__ (decimal strings) into an int config."""
    cfg = {}
    for k in CONFIG_KEYS:
        if k not in meta:
            raise ValueError("dump metadata lacks config key %r" % k)
        s = meta[k].strip()
        if not s.isdigit():
            raise ValueError("config key %r = %r is not a decimal integer" % (k, meta[k]))
        cfg[k] = int(s)
    # the conditioning keys (docs/network.md, "Conditioning"), text; absent in older dumps
    cfg["plan"] = meta.get("plan", default_plan(cfg["slots"]))
    cfg["cond_concat"] = meta.get("cond_concat", "none")
    validate_config(cfg)
    return cfg


CONCAT_FRAMES = {"none": 1, "anchor": 2, "anchor+nearest": 3}


def default_plan(slots):
    return " ".join(["anchor:0"] + ["target:%d" % i for i in range(1, slots)])


def parse_plan(text):
    """'anchor:0 context:2 target:4' -> [(kind, offset), ...]."""
    out = []
    for entry in text.replace(",", " ").split():
        kind, off = entry.split(":")
        out.append((kind, float(off)))
    return out


def slot_sources(cfg):
    """For each slot, the slots whose frames its input carries: itself, then
    (cond_concat) the anchor, then its reference: itself when given, for a target
    the given slot nearest in offset (ties: the earlier one in the plan)."""
    plan = parse_plan(cfg.get("plan", default_plan(cfg["slots"])))
    frames = CONCAT_FRAMES[cfg.get("cond_concat", "none")]
    anchor = [i for i, (k, _) in enumerate(plan) if k == "anchor"][0]
    given = [i for i, (k, _) in enumerate(plan) if k != "target"]
    out = []
    for f, (kind, off) in enumerate(plan):
        ref = f if kind != "target" else min(given, key=lambda i: (abs(plan[i][1] - off), i))
        out.append([f, anchor, ref][:frames])
    return out


def validate_config(cfg):
    """The divisibility rules of docs/network.md, checked up front."""
    S, P, D, NH, Fd = (cfg["frame_size"], cfg["patch"], cfg["width"],
                       cfg["heads"], cfg["freq_dim"])
    for k in CONFIG_KEYS:
        if cfg[k] <= 0:
            raise ValueError("config key %r must be positive (got %d)" % (k, cfg[k]))
    if S % P:
        raise ValueError("frame_size %d is not a multiple of patch %d" % (S, P))
    if D % 4:
        raise ValueError("width %d is not a multiple of 4" % D)
    if D % NH:
        raise ValueError("width %d is not a multiple of heads %d" % (D, NH))
    if Fd % 2:
        raise ValueError("freq_dim %d is odd" % Fd)
    if cfg.get("cond_concat", "none") not in CONCAT_FRAMES:
        raise ValueError("cond_concat %r is not one of %s" % (cfg["cond_concat"], ", ".join(CONCAT_FRAMES)))
    plan = parse_plan(cfg.get("plan", default_plan(cfg["slots"])))
    if len(plan) != cfg["slots"] or [k for k, _ in plan].count("anchor") != 1:
        raise ValueError("plan %r: expected %d slots with one anchor" % (cfg.get("plan"), cfg["slots"]))


# ---------------------------------------------------------------------------
# Elementary functions, written out as in the spec (no fused torch variants)
# ---------------------------------------------------------------------------

def sinusoid(x, d):
    """[cos(x w_0) .. cos(x w_{h-1}), sin(x w_0) .. sin(x w_{h-1})], h = d/2.

    w_k = exp(-ln(10000) k / h). Note: cos first, then sin. x: any shape,
    result: x.shape + (d,).
    """
    half = d // 2
    k = torch.arange(half, dtype=x.dtype, device=x.device)
    w = torch.exp(-math.log(10000.0) * k / half)
    a = x.unsqueeze(-1) * w
    return torch.cat([torch.cos(a), torch.sin(a)], dim=-1)


def layer_norm(x, eps=1e-6):
    """LN over the last axis: biased variance, eps inside the sqrt, no affine."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def silu(x):
    return x * torch.sigmoid(x)


def gelu_tanh(x):
    """GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def modulate(x, shift, scale):
    """LN(x) * (1 + scale) + shift; shift/scale broadcast over a slot's tokens."""
    return layer_norm(x) * (1.0 + scale) + shift


def pos_embed_table(n, D):
    """Fixed 2-D position table (N, D), computed in float64.

    dims [0, D/2) encode the row i, dims [D/2, D) the column j, each as
    [sin(p u_k) for k < D/4, cos(p u_k) for k < D/4], u_k = 10000^(-k/(D/4)).
    Note: sin first here, unlike sinusoid().
    """
    q = D // 4
    k = torch.arange(q, dtype=torch.float64)
    u = 10000.0 ** (-k / q)
    idx = torch.arange(n * n)
    row = (idx // n).to(torch.float64).unsqueeze(1) * u   # token i*n+j -> i
    col = (idx % n).to(torch.float64).unsqueeze(1) * u    # token i*n+j -> j
    return torch.cat([torch.sin(row), torch.cos(row),
                      torch.sin(col), torch.cos(col)], dim=1)


def patchify(xt, P):
    """(B, F, C, S, S) -> (B, F, N, P*P*C).

    patches[b,f,i*n+j,(py*P+px)*C+c] = xt[b,f,c,i*P+py,j*P+px].
    """
    B, F, C, S, _ = xt.shape
    n = S // P
    x = xt.reshape(B, F, C, n, P, n, P)          # b f c i py j px
    x = x.permute(0, 1, 3, 5, 4, 6, 2)            # b f i j py px c
    return x.reshape(B, F, n * n, P * P * C)


def unpatchify(y, P, C):
    """(B, F, N, P*P*C) -> (B, F, C, S, S), the inverse of patchify."""
    B, F, N, _ = y.shape
    n = int(round(math.sqrt(N)))
    y = y.reshape(B, F, n, n, P, P, C)            # b f i j py px c
    y = y.permute(0, 1, 6, 2, 4, 3, 5)            # b f c i py j px
    return y.reshape(B, F, C, n * P, n * P)


# ---------------------------------------------------------------------------
# Modules. Attribute names are chosen so that state_dict keys equal the
# parameter names of docs/network.md, in its storage order.
# ---------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + 1e-6) * weight over the last axis (one head's dh)."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * self.weight


class SelfAttention(nn.Module):
    """Multi-head self-attention over the middle axis of (M, L, D) sequences,
    with per-head RMS norm of q and k (weights of size dh shared by heads)."""

    def __init__(self, D, heads):
        super().__init__()
        self.heads = heads
        self.dh = D // heads
        self.qkv = nn.Linear(D, 3 * D)
        self.q_norm = RMSNorm(self.dh)
        self.k_norm = RMSNorm(self.dh)
        self.proj = nn.Linear(D, D)

    def forward(self, a):
        M, L, D = a.shape
        NH, dh = self.heads, self.dh
        qkv = self.qkv(a)                                     # (M, L, 3D)
        q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]

        def heads(z):                                         # (M, L, D) -> (M, NH, L, dh)
            return z.reshape(M, L, NH, dh).transpose(1, 2)

        q = self.q_norm(heads(q))
        k = self.k_norm(heads(k))
        v = heads(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh)   # (M, NH, L, L)
        attn = torch.softmax(scores, dim=-1)
        o = torch.matmul(attn, v)                             # (M, NH, L, dh)
        o = o.transpose(1, 2).reshape(M, L, D)                # concat heads
        return self.proj(o)


class MLP(nn.Module):
    def __init__(self, D, hidden):
        super().__init__()
        self.fc1 = nn.Linear(D, hidden)
        self.fc2 = nn.Linear(hidden, D)

    def forward(self, x):
        return self.fc2(gelu_tanh(self.fc1(x)))


class Block(nn.Module):
    """adaLN-modulated spatial attention, temporal attention and MLP."""

    def __init__(self, D, heads, mlp_ratio):
        super().__init__()
        self.adaLN = nn.Linear(D, 9 * D)
        self.attn_s = SelfAttention(D, heads)
        self.attn_t = SelfAttention(D, heads)
        self.mlp = MLP(D, mlp_ratio * D)

    def forward(self, x, sc):
        """x: (B, F, N, D) tokens; sc: (B, F, D) = SiLU(c)."""
        B, F, N, D = x.shape
        mod = self.adaLN(sc).unsqueeze(2)                     # (B, F, 1, 9D)
        (shift_s, scale_s, gate_s, shift_t, scale_t, gate_t,
         shift_m, scale_m, gate_m) = mod.split(D, dim=-1)

        # spatial: the N tokens of one slot form a sequence -> (B*F, N, D)
        a = modulate(x, shift_s, scale_s).reshape(B * F, N, D)
        x = x + gate_s * self.attn_s(a).reshape(B, F, N, D)

        # temporal: one patch position across the F slots -> (B*N, F, D)
        a = modulate(x, shift_t, scale_t).permute(0, 2, 1, 3).reshape(B * N, F, D)
        o = self.attn_t(a).reshape(B, N, F, D).permute(0, 2, 1, 3)
        x = x + gate_t * o

        x = x + gate_m * self.mlp(modulate(x, shift_m, scale_m))
        return x


class TimestepEmbed(nn.Module):
    """c = mlp.2(SiLU(mlp.0(sinusoid(1000 t, Fd))))."""

    def __init__(self, Fd, D):
        super().__init__()
        self.freq_dim = Fd
        self.mlp = nn.Sequential(nn.Linear(Fd, D), nn.SiLU(), nn.Linear(D, D))

    def forward(self, t):
        return self.mlp(sinusoid(1000.0 * t, self.freq_dim))


class FinalLayer(nn.Module):
    def __init__(self, D, ppc):
        super().__init__()
        self.adaLN = nn.Linear(D, 2 * D)
        self.linear = nn.Linear(D, ppc)

    def forward(self, x, sc):
        D = x.shape[-1]
        fm = self.adaLN(sc).unsqueeze(2)                      # (B, F, 1, 2D)
        shift, scale = fm[..., :D], fm[..., D:]
        return self.linear(modulate(x, shift, scale))


class FramechainDiT(nn.Module):
    """The framechain video diffusion transformer of docs/network.md.

    forward(xt (B,F,C,S,S), t (B,F), offset (B,F)) -> pred (B,F,C,S,S).
    assemble(xt) -> xin (B,F,Cin,S,S), the network's input (cond_concat);
    forward_input(xin, t, offset) -> pred.
    """

    def __init__(self, cfg):
        super().__init__()
        validate_config(cfg)
        self.cfg = dict(cfg)
        S, C, P = cfg["frame_size"], cfg["channels"], cfg["patch"]
        D, L, NH = cfg["width"], cfg["depth"], cfg["heads"]
        R, Fd = cfg["mlp_ratio"], cfg["freq_dim"]
        self.C, self.P, self.D, self.Fd = C, P, D, Fd
        ppc = P * P * C
        n = S // P
        self.sources = slot_sources(cfg)                      # (F, frames a slot's input carries)
        ppc_in = ppc * len(self.sources[0])

        # registration order == storage order of the spec's parameter table
        self.patch_embed = nn.Linear(ppc_in, D)
        self.offset_embed = nn.Linear(Fd, D)
        self.t_embed = TimestepEmbed(Fd, D)
        self.blocks = nn.ModuleList([Block(D, NH, R) for _ in range(L)])
        self.final = FinalLayer(D, ppc)
        # fixed table, not a parameter, kept out of state_dict
        self.register_buffer("pos", pos_embed_table(n, D), persistent=False)

    def assemble(self, xt):
        """Slot f's input: its frame, then the frames of self.sources[f][1:], on the channel axis."""
        return torch.stack([torch.cat([xt[:, s] for s in src], dim=1) for src in self.sources], dim=1)

    def forward(self, xt, t, offset):
        return self.forward_input(self.assemble(xt), t, offset)

    def forward_input(self, xin, t, offset):
        B, F = t.shape
        x = self.patch_embed(patchify(xin, self.P))          # (B, F, N, D)
        oe = self.offset_embed(sinusoid(offset, self.Fd))     # (B, F, D)
        x = x + self.pos.to(x.dtype) + oe.unsqueeze(2)
        c = self.t_embed(t)                                   # (B, F, D)
        sc = silu(c)
        for blk in self.blocks:
            x = blk(x, sc)
        y = self.final(x, sc)                                 # (B, F, N, PPC)
        return unpatchify(y, self.P, self.C)


def masked_mse(pred, v, mask):
    """sum_{b,f} mask * sum_{c,y,x} (pred - v)^2 / (sum(mask) * C*S*S).

    The mean squared error over target slots only (mask 1 on targets).
    """
    B, F, C, S, _ = pred.shape
    per_slot = ((pred - v) ** 2).sum(dim=(2, 3, 4))          # (B, F)
    return (mask * per_slot).sum() / (mask.sum() * (C * S * S))


def rectified_flow_target(x0, e, t):
    """xt = (1 - t) x0 + t e and v = e - x0, t (B, F) broadcast per slot."""
    tt = t.reshape(t.shape + (1,) * (x0.dim() - t.dim()))
    return (1.0 - tt) * x0 + tt * e, e - x0


# ---------------------------------------------------------------------------
# Random init (the spec's `random` init, for the self-test)
# ---------------------------------------------------------------------------

def init_random_(model, gen):
    """Nothing zero: Linear weights Xavier-uniform, biases U[-0.1, 0.1],
    norm weights U[0.9, 1.1] (the spec's test init, drawn with torch's RNG)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            u = torch.rand(p.shape, generator=gen, dtype=torch.float64)
            if name.endswith("norm.weight"):
                p.copy_(0.9 + 0.2 * u)
            elif name.endswith(".bias"):
                p.copy_(-0.1 + 0.2 * u)
            else:
                fan_out, fan_in = p.shape
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                p.copy_(-bound + 2.0 * bound * u)


# ---------------------------------------------------------------------------
# Comparison against a C dump
# ---------------------------------------------------------------------------

INPUT_KEYS = ("input.xt", "input.t", "input.offset", "input.v", "input.mask")
OUTPUT_KEYS = ("output.pred", "output.loss")


def rel_error(c, ref):
    """max|c - ref| / max(max|ref|, 1e-30); inf when c is not finite."""
    c = np.asarray(c, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(c)) or not np.all(np.isfinite(ref)):
        return float("inf")
    diff = float(np.max(np.abs(c - ref))) if c.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return diff / max(scale, 1e-30)


def compute_reference(cfg, params, inputs, dtype):
    """Forward + masked MSE + backward in `dtype`.

    Returns an ordered dict name -> numpy float64 array with the names the C
    dump uses: output.pred, output.loss, grad.<param> (state_dict order),
    grad.input.xin (the gradient of the network's input, assemble(xt)).
    """
    model = FramechainDiT(cfg).to(dtype)
    sd = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)).to(dtype)
          for k, v in params.items()}
    model.load_state_dict(sd, strict=True)
    T = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)).to(dtype)
         for k, v in inputs.items()}
    xin = model.assemble(T["input.xt"]).detach().requires_grad_(True)
    pred = model.forward_input(xin, T["input.t"], T["input.offset"])
    loss = masked_mse(pred, T["input.v"], T["input.mask"])
    model.zero_grad()
    loss.backward()
    out = {"output.pred": pred.detach().double().numpy(),
           "output.loss": loss.detach().double().reshape(1).numpy()}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().double().numpy()
    out["grad.input.xin"] = xin.grad.detach().double().numpy()
    return out


def run_check(path, tol, log=print):
    """The --check command. Returns True when the dump agrees within tol."""
    try:
        tensors, meta = read_safetensors(path)
    except (OSError, SafetensorsError) as e:
        log("reference: cannot read dump: %s" % e)
        return False
    try:
        cfg = config_from_metadata(meta)
    except ValueError as e:
        log("reference: %s: %s" % (path, e))
        return False
    log("reference: config " + " ".join("%s=%d" % (k, cfg[k]) for k in CONFIG_KEYS)
        + " cond_concat=%s plan=%s" % (cfg["cond_concat"], cfg["plan"].replace(" ", ",")))

    S, C, B, F = cfg["frame_size"], cfg["channels"], cfg["batch_size"], cfg["slots"]
    skeleton = FramechainDiT(cfg)
    pshapes = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    pnames = list(pshapes)

    # --- key bookkeeping: every parameter present, nothing unknown ---------
    problems = []
    expected = {"input.xt": (B, F, C, S, S), "input.t": (B, F),
                "input.offset": (B, F), "input.v": (B, F, C, S, S),
                "input.mask": (B, F), "output.pred": (B, F, C, S, S),
                "output.loss": (1,),
                "grad.input.xin": (B, F, C * len(skeleton.sources[0]), S, S)}
    for n in pnames:
        expected[n] = pshapes[n]
        expected["grad." + n] = pshapes[n]
    for k, shape in expected.items():
        if k not in tensors:
            what = "parameter" if k in pshapes else "tensor"
            problems.append("dump lacks %s %r" % (what, k))
        elif tuple(tensors[k].shape) != shape:
            problems.append("%r has shape %s, expected %s"
                            % (k, tuple(tensors[k].shape), shape))
        elif tensors[k].dtype.kind != "f":
            problems.append("%r has non-float dtype %s" % (k, tensors[k].dtype))
    for k in tensors:
        if k in expected:
            continue
        if k.startswith("input.") or k.startswith("output."):
            log("reference: note: ignoring extra dump tensor %r" % k)
        else:
            problems.append("dump has %r, which the module does not know" % k)
    if problems:
        for p in problems:
            log("reference: FAIL: " + p)
        return False

    params = {n: tensors[n] for n in pnames}
    inputs = {k: tensors[k] for k in INPUT_KEYS}
    if float(np.sum(inputs["input.mask"])) == 0.0:
        log("reference: FAIL: input.mask is all zero (no target slot), the loss "
            "is undefined: the test setup is broken")
        return False

    # --- recompute in float64 (the reference) and float32 (for information)
    ref = compute_reference(cfg, params, inputs, torch.float64)
    ref32 = compute_reference(cfg, params, inputs, torch.float32)

    failures, zero_grads = [], []
    worst, worst_name = -1.0, None
    worst32, worst32_name = -1.0, None
    for name, r in ref.items():
        rel = rel_error(tensors[name], r)
        maxref = float(np.max(np.abs(r))) if r.size else 0.0
        flag = ""
        if not rel <= tol:
            failures.append(name)
            flag = "  FAIL"
        if name.startswith("grad.") and maxref == 0.0:
            zero_grads.append(name)
            flag += "  ZERO-REF"
        log("%-44s rel %.3e  max|ref| %.3e%s" % (name, rel, maxref, flag))
        if rel > worst:
            worst, worst_name = rel, name
        rel32 = rel_error(ref32[name], r)
        if rel32 > worst32:
            worst32, worst32_name = rel32, name

    log("reference: %d tensors compared, worst rel error %.3e (%s)"
        % (len(ref), worst, worst_name))
    log("reference: (info) float32 torch vs float64 torch: worst rel error "
        "%.3e (%s)" % (worst32, worst32_name))
    ok = True
    if failures:
        log("reference: FAIL: %d tensor(s) above tol %.1e: %s"
            % (len(failures), tol, ", ".join(failures)))
        ok = False
    if zero_grads:
        log("reference: FAIL: reference gradient is all zero for %s: the dump "
            "does not exercise every gradient (test setup problem)"
            % ", ".join(zero_grads))
        ok = False
    return ok


# ---------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------

SELFTEST_CFG = dict(frame_size=8, channels=3, patch=4, width=16, depth=1,
                    heads=2, mlp_ratio=4, freq_dim=8, batch_size=2, slots=3,
                    plan="anchor:0 context:3 target:1", cond_concat="anchor+nearest")


def _selftest_inputs(cfg, gen, dtype=torch.float64):
    """Random window: slot 0 clean anchor (t = 0), others noisy targets."""
    B, F, C, S = cfg["batch_size"], cfg["slots"], cfg["channels"], cfg["frame_size"]
    x0 = torch.randn(B, F, C, S, S, generator=gen, dtype=dtype)
    e = torch.randn(B, F, C, S, S, generator=gen, dtype=dtype)
    mask = torch.ones(B, F, dtype=dtype)
    mask[:, 0] = 0.0
    t = torch.rand(B, 1, generator=gen, dtype=dtype).expand(B, F) * mask
    offset = torch.arange(F, dtype=dtype).expand(B, F) - 1.0
    xt, v = rectified_flow_target(x0, e, t)
    return {"input.xt": xt, "input.t": t.contiguous(), "input.offset": offset.contiguous(),
            "input.v": v, "input.mask": mask}


def selftest():
    """Checks the module against finite differences and the --check path on
    dumps written here. Returns True when everything passes."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    cfg = SELFTEST_CFG
    ok = True

    def report(label, good, detail=""):
        nonlocal ok
        ok &= bool(good)
        print("selftest: %-52s %s%s" % (label, "ok" if good else "FAIL",
                                        ("  " + detail) if detail else ""))

    # --- layout helpers against explicit loops -----------------------------
    S, C, P = cfg["frame_size"], cfg["channels"], cfg["patch"]
    n = S // P
    x = torch.randn(2, 3, C, S, S, generator=gen, dtype=torch.float64)
    pt = patchify(x, P)
    good = True
    for i in range(n):
        for j in range(n):
            for py in range(P):
                for px in range(P):
                    for c in range(C):
                        good &= bool(pt[1, 2, i * n + j, (py * P + px) * C + c]
                                     == x[1, 2, c, i * P + py, j * P + px])
    good &= bool(torch.equal(unpatchify(pt, P, C), x))
    report("patchify index formula, unpatchify inverse", good)

    s = sinusoid(torch.tensor([0.5], dtype=torch.float64), 8)[0]
    wk = [math.exp(-math.log(10000.0) * k / 4) for k in range(4)]
    want = [math.cos(0.5 * w) for w in wk] + [math.sin(0.5 * w) for w in wk]
    report("sinusoid order (cos then sin)",
           max(abs(a - b) for a, b in zip(s.tolist(), want)) < 1e-15)

    D = cfg["width"]
    pos = pos_embed_table(n, D)
    i, j, q = 1, 0, D // 4
    want = ([math.sin(i * 10000.0 ** (-k / q)) for k in range(q)]
            + [math.cos(i * 10000.0 ** (-k / q)) for k in range(q)]
            + [math.sin(j * 10000.0 ** (-k / q)) for k in range(q)]
            + [math.cos(j * 10000.0 ** (-k / q)) for k in range(q)])
    report("position table layout (row then column, sin then cos)",
           max(abs(a - b) for a, b in zip(pos[i * n + j].tolist(), want)) < 1e-15)

    # --- parameter names, shapes and order ---------------------------------
    model = FramechainDiT(cfg).double()
    R, Fd, NH = cfg["mlp_ratio"], cfg["freq_dim"], cfg["heads"]
    ppc, dh = P * P * C, D // NH
    report("slot sources: itself, the anchor, the nearest given frame",
           slot_sources(cfg) == [[0, 0, 0], [1, 0, 1], [2, 0, 0]])
    want = [("patch_embed.weight", (D, 3 * ppc)), ("patch_embed.bias", (D,)),
            ("offset_embed.weight", (D, Fd)), ("offset_embed.bias", (D,)),
            ("t_embed.mlp.0.weight", (D, Fd)), ("t_embed.mlp.0.bias", (D,)),
            ("t_embed.mlp.2.weight", (D, D)), ("t_embed.mlp.2.bias", (D,))]
    for l in range(cfg["depth"]):
        b = "blocks.%d." % l
        want += [(b + "adaLN.weight", (9 * D, D)), (b + "adaLN.bias", (9 * D,))]
        for a in ("attn_s", "attn_t"):
            want += [(b + a + ".qkv.weight", (3 * D, D)), (b + a + ".qkv.bias", (3 * D,)),
                     (b + a + ".q_norm.weight", (dh,)), (b + a + ".k_norm.weight", (dh,)),
                     (b + a + ".proj.weight", (D, D)), (b + a + ".proj.bias", (D,))]
        want += [(b + "mlp.fc1.weight", (R * D, D)), (b + "mlp.fc1.bias", (R * D,)),
                 (b + "mlp.fc2.weight", (D, R * D)), (b + "mlp.fc2.bias", (D,))]
    want += [("final.adaLN.weight", (2 * D, D)), ("final.adaLN.bias", (2 * D,)),
             ("final.linear.weight", (ppc, D)), ("final.linear.bias", (ppc,))]
    got = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    report("state_dict names/shapes/order == spec table", got == want)

    # --- autograd vs central finite differences ----------------------------
    init_random_(model, gen)
    inputs = _selftest_inputs(cfg, gen)
    xt = inputs["input.xt"].clone().requires_grad_(True)

    def loss_fn():
        return masked_mse(model(xt, inputs["input.t"], inputs["input.offset"]),
                          inputs["input.v"], inputs["input.mask"])

    loss = loss_fn()
    model.zero_grad()
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    grads["input.xt"] = xt.grad.clone()
    nonzero = all(float(g.abs().max()) > 0 for g in grads.values())
    report("every gradient non-zero under the random init", nonzero)

    tensors = dict(model.named_parameters())
    tensors["input.xt"] = xt
    h, worst, worst_name = 1e-6, 0.0, None
    picks = 3
    with torch.no_grad():
        for name, p in tensors.items():
            flat_idx = torch.randint(0, p.numel(), (picks,), generator=gen).tolist()
            # also probe the largest-gradient entry, where a bug shows most
            flat_idx.append(int(grads[name].abs().reshape(-1).argmax()))
            for fi in flat_idx:
                idx = np.unravel_index(fi, tuple(p.shape))
                orig = float(p[idx])
                p[idx] = orig + h
                lp = float(loss_fn())
                p[idx] = orig - h
                lm = float(loss_fn())
                p[idx] = orig
                fd = (lp - lm) / (2 * h)
                ag = float(grads[name][idx])
                err = abs(fd - ag) / max(abs(ag), 1e-3)
                if err > worst:
                    worst, worst_name = err, "%s%s" % (name, list(idx))
    report("autograd vs central differences (all tensors)", worst < 1e-5,
           "worst %.2e at %s" % (worst, worst_name))

    # masked slots must not influence the loss
    with torch.no_grad():
        v2 = inputs["input.v"].clone()
        v2[:, 0] += 100.0
        l2 = masked_mse(model(xt, inputs["input.t"], inputs["input.offset"]),
                        v2, inputs["input.mask"])
    report("masked_mse ignores mask-0 slots", abs(float(l2) - float(loss)) < 1e-12)

    # temporal attention mixes slots, spatial attention alone would not
    with torch.no_grad():
        x2 = xt.detach().clone()
        x2[:, 2] += 1.0
        p1 = model(xt, inputs["input.t"], inputs["input.offset"])
        p2 = model(x2, inputs["input.t"], inputs["input.offset"])
    report("slots interact (temporal attention)",
           float((p1[:, 0] - p2[:, 0]).abs().max()) > 1e-6)

    # --- the --check path on dumps written here ----------------------------
    # Weights rounded to float32 first, so the float64 outputs differ from the
    # reference only by their own rounding to float32.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.float().double())
    inputs32 = {k: v.float().double() for k, v in inputs.items()}
    params = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    ref = compute_reference(cfg, params, {k: v.numpy() for k, v in inputs32.items()},
                            torch.float64)
    dump = {}
    for k, v in params.items():
        dump[k] = v.astype(np.float32)
    for k in INPUT_KEYS:
        dump[k] = inputs32[k].numpy().astype(np.float32)
    for k, v in ref.items():
        dump[k] = v.astype(np.float32)
    meta = {k: str(v) for k, v in cfg.items()}

    quiet = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dump.safetensors")

        def check(d, m=meta, tol=1e-4):
            write_safetensors(path, d, m)
            quiet.clear()
            return run_check(path, tol, log=quiet.append)

        good = check(dump)
        report("--check accepts a faithful dump", good, quiet[-2] if good else
               " | ".join(quiet[-3:]))
        if not good:
            print("\n".join(quiet))

        bad = dict(dump)
        bad["grad.blocks.0.attn_t.k_norm.weight"] = dump["grad.blocks.0.attn_t.k_norm.weight"] * 1.01
        report("--check rejects a 1% gradient error", not check(bad))

        bad = dict(dump)
        del bad["blocks.0.mlp.fc2.bias"]
        report("--check rejects a missing parameter", not check(bad))

        bad = dict(dump)
        bad["blocks.0.mlp.fc3.weight"] = dump["blocks.0.mlp.fc2.weight"]
        report("--check rejects an unknown parameter", not check(bad))

        bad = dict(dump)
        bad["grad.final.linear.bias"] = np.zeros_like(dump["grad.final.linear.bias"])
        bad["final.linear.bias"] = np.zeros_like(dump["final.linear.bias"])
        bad["final.linear.weight"] = np.zeros_like(dump["final.linear.weight"])
        check(bad)
        report("--check flags an all-zero reference gradient",
               any("all zero" in line for line in quiet))

        # reader strictness: truncated file, overlapping ranges
        write_safetensors(path, dump, meta)
        with open(path, "rb") as fh:
            blob = fh.read()
        with open(path, "wb") as fh:
            fh.write(blob[:-4])
        try:
            read_safetensors(path)
            report("reader rejects a truncated file", False)
        except SafetensorsError:
            report("reader rejects a truncated file", True)
        hdr = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
        raw = json.dumps(hdr).encode()
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw + bytes(12))
        try:
            read_safetensors(path)
            report("reader rejects overlapping data ranges", False)
        except SafetensorsError:
            report("reader rejects overlapping data ranges", True)

    print("selftest: %s" % ("passed" if ok else "FAILED"))
    return ok


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", metavar="DUMP.safetensors",
                   help="compare a C dump against float64 torch")
    g.add_argument("--selftest", action="store_true",
                   help="check this module on its own")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="largest accepted relative error (default 1e-4)")
    args = ap.parse_args(argv)
    if args.selftest:
        return 0 if selftest() else 1
    return 0 if run_check(args.check, args.tol) else 1


if __name__ == "__main__":
    sys.exit(main())
