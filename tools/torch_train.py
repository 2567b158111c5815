#!/usr/bin/python3
"""The PyTorch peer of `framechain train`, for side-by-side benchmarks.

The same network (tools/reference.py, written from docs/network.md, its LayerNorm, RMS norm, GELU
and SiLU swapped for PyTorch's fused functions of the same values), the same
objective and batch: rectified flow with a logit-normal t on target slots,
context slots noised to t ~ U[0, noise_aug_max], the anchor clean, masked MSE
over the targets, gradient-norm clipping, an EMA of the weights; torch's AdamW
(fp32 moments; fused on CUDA). The config is resolved by `framechain inspect
--config`, so both programs read the same keys with the same defaults.

Usage:
    /usr/bin/python3 tools/torch_train.py --config configs/small/starter.conf
        [--set key=value ...] [--device cpu|cuda] [--steps N] [--warmup N]
        [--threads N] [--bf16] [--compile] [--sdpa] [--checkpointing] [--json]

--bf16           autocast to bf16 (CUDA), fp32 master weights as in framechain
--compile        torch.compile the model (torch 2.x)
--sdpa           attention by F.scaled_dot_product_attention (flash/efficient kernels)
--checkpointing  recompute each block in the backward pass (torch.utils.checkpoint)
--sample S       instead of training: the time to sample one window at batch 1 with S Euler
                 steps (S forward passes, no gradients), the median of --steps windows
--serve          after the warm-up (and torch.compile's compilation) print {"ready": true}, then
                 time --steps steps for each line "go" read on stdin, one JSON line each, until
                 "quit" or the end of stdin: a benchmark that alternates this with another program
                 pays the compilation once (tools/bench_cuda.sh PAIRS)

Prints the median step time over --steps timed steps after --warmup, frames/s,
model TFLOP/s (the FLOP count of src/model/memplan.c: model_step_flops) and the peak
memory; --json prints one JSON object instead. Random clean windows stand in
for data (a fixed batch): the data pipeline is not what is measured.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    import torch.utils.checkpoint
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def resolve_config(framechain, path, sets):
    """key -> value string of the whole config, as framechain resolves it (tools/bench.sh calls it too)."""
    return inspect_config(framechain, path, sets)[0]


def inspect_config(framechain, path, sets):
    """resolve_config's dict, and the number of parameters framechain's network of it has (inspect's
    `parameters` line; None where it prints none). A config or a framechain that cannot be used ends
    the program with one line."""
    if not os.path.isfile(path):
        sys.exit("torch_train: --config %s: %s" % (path, "is not a file" if os.path.exists(path) else "no such file"))
    cmd = [framechain, "inspect", "--config", path]
    for s in sets:
        cmd += ["--set", s]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        sys.exit("torch_train: --framechain %s: cannot run it: %s (build it with make, or give --framechain PATH)"
                 % (framechain, e.strerror))
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or ["status %d, no message" % res.returncode])[-1]
        sys.exit("torch_train: %s inspect --config %s failed: %s" % (framechain, path, why))
    cfg, params, lines = {}, None, res.stdout.splitlines()
    end = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    for line in lines[:end]:  # the config ends at the first blank line
        key, _, rest = line.partition("=")
        cfg[key.strip()] = rest.split("#")[0].strip()
    for line in lines[end:]:
        f = line.split()
        if len(f) >= 2 and f[0] == "parameters" and f[1].isdigit():
            params = int(f[1])
            break
    return cfg, params


def model_step_flops(c, B):
    """3 x 2 x the forward multiply-adds (src/model/memplan.c: model_step_flops)."""
    n = c["frame_size"] // c["patch"]
    N, F_ = n * n, c["slots"]
    S, D = B * F_, c["width"]
    T, RD = S * N, c["mlp_ratio"] * D
    PPC, Fd = c["patch"] ** 2 * c["channels"], c["freq_dim"]
    PPCin = PPC * reference.CONCAT_FRAMES[c.get("cond_concat", "none")]  # the frames each slot's input carries
    embed = T * PPCin * D + 2 * S * Fd * D + S * D * D
    block = S * D * 9 * D + 2 * (T * D * 3 * D + T * D * D) + 2 * T * D * RD + 2 * (S * N * N * D + B * N * F_ * F_ * D)
    final = S * D * 2 * D + T * D * PPC
    return 6.0 * (embed + c["depth"] * block + final)


def sdpa_forward(self, a):
    """SelfAttention.forward with F.scaled_dot_product_attention (same math)."""
    M, L, D = a.shape
    NH, dh = self.heads, self.dh
    qkv = self.qkv(a)
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]

    def heads(z):
        return z.reshape(M, L, NH, dh).transpose(1, 2)

    q, k, v = self.q_norm(heads(q)), self.k_norm(heads(k)), heads(v)
    o = F.scaled_dot_product_attention(q, k, v)
    return self.proj(o.transpose(1, 2).reshape(M, L, D))


def sample_windows(a, fwd, dev, offsets, is_target, cfg):
    """Euler sampling of one window at batch 1: targets from noise, the others clean."""
    Fs, C, S = cfg["slots"], cfg["channels"], cfg["frame_size"]
    tgt = is_target.reshape(1, Fs, 1, 1, 1)

    def window():
        x = torch.where(tgt, torch.randn(1, Fs, C, S, S, device=dev), torch.rand(1, Fs, C, S, S, device=dev))
        for k in range(a.sample):
            level = 1.0 - k / a.sample
            t = torch.where(is_target, torch.full((1, Fs), level, device=dev), torch.zeros(1, Fs, device=dev))
            with torch.no_grad(), torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
                v = fwd(x, t, offsets).float()
            x = torch.where(tgt, x - v / a.sample, x)
        if a.device == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        window()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        window()
        times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times)
    res = {"tool": "pytorch", "torch": torch.__version__, "config": a.config, "device": a.device,
           "threads": torch.get_num_threads(), "euler_steps": a.sample, "window_ms": ms}
    if a.json:
        print(json.dumps(res))
    else:
        print("pytorch %s (%s, %d threads): %.2f ms per window of %d Euler steps (median of %d)" %
              (torch.__version__, a.device, res["threads"], ms, a.sample, a.steps))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--framechain", default="./framechain")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--sdpa", action="store_true")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)

    raw, fc_params = inspect_config(a.framechain, a.config, a.set)
    slots = raw["plan"].split()
    # every key of the network (reference.FramechainDiT's, as reference.py --check takes them from a
    # checkpoint): the sizes, the slots' plan and the given frames concatenated to each slot's input
    cfg = {k: int(raw[k]) for k in reference.CONFIG_KEYS if k != "slots"}
    cfg["slots"] = len(slots)
    cfg["plan"] = raw["plan"]
    cfg["cond_concat"] = raw.get("cond_concat", "none")
    B, Fs, C, S = cfg["batch_size"], cfg["slots"], cfg["channels"], cfg["frame_size"]
    kinds = [s.split(":")[0] for s in slots]
    offsets = torch.tensor([float(s.split(":")[1]) for s in slots], device=dev).expand(B, Fs)
    is_target = torch.tensor([k == "target" for k in kinds], device=dev).expand(B, Fs)
    is_context = torch.tensor([k == "context" for k in kinds], device=dev).expand(B, Fs)
    mask = is_target.float()
    t_mean, t_std = float(raw["t_logit_mean"]), float(raw["t_logit_std"])
    aug_max, clip = float(raw["noise_aug_max"]), float(raw["grad_clip"])
    ema_decay = float(raw["ema_decay"])

    if a.sdpa:
        if not hasattr(F, "scaled_dot_product_attention"):
            sys.exit("--sdpa needs torch 2.x (this is %s)" % torch.__version__)
        reference.SelfAttention.forward = sdpa_forward
    # PyTorch's own fused ops where reference.py writes an op out (it is written from docs/network.md
    # to check framechain against, not for speed): the same values (LayerNorm without affine, eps inside
    # the root; GELU's tanh form; SiLU; the RMS norm with rsqrt), PyTorch at its fastest
    reference.layer_norm = lambda x, eps=1e-6: F.layer_norm(x, x.shape[-1:], eps=eps)
    reference.gelu_tanh = lambda x: F.gelu(x, approximate="tanh")
    reference.silu = F.silu
    reference.RMSNorm.forward = lambda self, x: x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * self.weight
    torch.manual_seed(int(raw["seed"]))
    try:
        model = reference.FramechainDiT(cfg)
    except ValueError as e:
        sys.exit("torch_train: %s: %s" % (a.config, e))
    n_params = sum(p.numel() for p in model.parameters())
    if fc_params is not None and n_params != fc_params:  # not the network framechain trains: no peer
        sys.exit("torch_train: %s: the PyTorch model has %d parameters, framechain's %d: not the same network"
                 % (a.config, n_params, fc_params))
    reference.init_random_(model, torch.Generator().manual_seed(1))  # on the CPU, then moved
    model = model.to(dev)
    if a.checkpointing:
        block_forward = reference.Block.forward

        def checkpointed(self, x, sc):
            return torch.utils.checkpoint.checkpoint(block_forward, self, x, sc, use_reentrant=False)


        reference.Block.forward = checkpointed
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(raw["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(raw["lr"]), betas=(float(raw["beta1"]), float(raw["beta2"])),
                            eps=float(raw["adam_eps"]),
                            # its fastest path on each device: fused kernels on CUDA, the multi-tensor
                            # (foreach) loop on the CPU, which torch 1.x does not pick by itself there
                            **({"fused": True} if a.device == "cuda" else {"foreach": True}))
    ema = [p.detach().clone() for p in params]
    fwd = torch.compile(model) if a.compile else model

    x0 = torch.rand(B, Fs, C, S, S, device=dev) * 2 - 1

    if a.sample > 0:
        return sample_windows(a, fwd, dev, offsets[:1], is_target[:1], cfg)

    def step():
        t = torch.sigmoid(torch.randn(B, Fs, device=dev) * t_std + t_mean)
        t = torch.where(is_target, t, torch.where(is_context, torch.rand(B, Fs, device=dev) * aug_max,
                                                  torch.zeros_like(t)))
        e = torch.randn_like(x0)
        xt, v = reference.rectified_flow_target(x0, e, t)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
            pred = fwd(xt, t, offsets)
        loss = reference.masked_mse(pred.float(), v, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        with torch.no_grad():
            if hasattr(torch, "_foreach_lerp_"):
                torch._foreach_lerp_(ema, params, 1.0 - ema_decay)
            else:  # torch 1.x: the same update in two multi-tensor passes, no Python loop
                torch._foreach_mul_(ema, ema_decay)
                torch._foreach_add_(ema, params, alpha=1.0 - ema_decay)
        return loss

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    flops = model_step_flops(cfg, B)

    def timed_round():  # --steps timed steps: their median and the peak memory over them
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times, loss = [], None
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step()
            sync()
            times.append(time.perf_counter() - t0)
        ms = 1e3 * statistics.median(times)
        if a.device == "cuda":
            peak = torch.cuda.max_memory_allocated() / 2**30
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        return {"tool": "pytorch", "torch": torch.__version__, "config": a.config, "device": a.device,
                "threads": torch.get_num_threads(), "bf16": a.bf16, "compile": a.compile, "sdpa": a.sdpa,
                "checkpointing": a.checkpointing, "params": sum(p.numel() for p in params), "batch": B,
                "step_ms": ms, "frames_per_s": 1e3 / ms * B * Fs, "tflop_per_step": flops / 1e12,
                "tflops": flops / ms / 1e9, "peak_gib": peak, "loss": float(loss)}

    if a.serve:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip() != "go":
                break
            print(json.dumps(timed_round()), flush=True)
        return 0
    res = timed_round()
    ms, peak = res["step_ms"], res["peak_gib"]
    if a.json:
        print(json.dumps(res))
    else:
        print("pytorch %s (%s, %d threads%s%s%s%s): %.2f ms per step (median of %d), %.1f frames/s, %.4g TFLOP/s, "
              "peak %.2f GiB" % (torch.__version__, a.device, res["threads"], ", bf16" if a.bf16 else "",
                                 ", compile" if a.compile else "", ", sdpa" if a.sdpa else "",
                                 ", checkpointing" if a.checkpointing else "", ms, a.steps,
                                 res["frames_per_s"], res["tflops"], peak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
