#!/usr/bin/env bash
# make bench: framechain against PyTorch on the CPU, in one run, the same configs, batch and thread
# count: the train-step time of the tiny and small configs (median of REPS runs each), generation
# time per frame, and for each the fraction of the CPU's fp32 GEMM peak reached (the peak measured
# here with OpenBLAS sgemm on 2048x2048 matrices; the network's model FLOPs counted as in
# src/model/memplan.c). A benchmark, not a test: nothing is asserted.
#
# usage: tools/bench.sh [OUT_DIR]     (THREADS=N, default all cores; REPS=N, default 3)
set -u
OUT=${1:-out/bench}
FC=${FC:-./framechain}
THREADS=${THREADS:-$(nproc)}
REPS=${REPS:-3}
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import torch' 2> /dev/null && echo $p && break; done)}
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$FC" ] && [ -x build/bench_gemm ] || { echo "bench: build first (make bench does)"; exit 1; }
[ -n "$PYTHON" ] || { echo "bench: no python3 with torch (apt-get install python3-torch)"; exit 1; }

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

peak=$(build/bench_gemm --threads "$THREADS" | tee "$OUT/gemm.txt" | sed -nE 's/.*: ([0-9.]+) GFLOP.*/\1/p')
torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads; $(date -u +%F)"
echo "framechain $("$FC" --version | head -1 | cut -d' ' -f2) against PyTorch $torch_version; sgemm peak $peak GFLOP/s"
printf '%-28s %12s %12s %8s %14s %14s\n' "what" "framechain" "pytorch" "ratio" "fc % of peak" "pt % of peak"

# ---- training steps ----
for cfg in tiny small; do
    steps=$([ $cfg = tiny ] && echo 60 || echo 25)
    conf=configs/$cfg/starter.conf
    fc_ms=() pt_ms=()
    for r in $(seq "$REPS"); do
        rm -rf "$tmp/run"
        "$FC" --threads "$THREADS" --device cpu train --config "$conf" --run "$tmp/run" --steps $steps \
            --set checkpoint_every=100000 > "$tmp/fc.log" 2>&1
        fc_ms+=("$(sed -nE 's/^speed: ([0-9.]+) ms per step.*/\1/p' "$tmp/fc.log")")
        tflop=$(sed -nE 's/^speed: .* ([0-9.e+-]+) TFLOP per step.*/\1/p' "$tmp/fc.log")
        "$PYTHON" tools/torch_train.py --framechain "$FC" --config "$conf" --threads "$THREADS" --steps $((steps - 5)) \
            --warmup 3 --json > "$tmp/pt.json" 2> "$tmp/pt.err"
        pt_ms+=("$(sed -nE 's/.*"step_ms": ([0-9.e+-]+).*/\1/p' "$tmp/pt.json")")
    done
    fc=$(printf '%s\n' "${fc_ms[@]}" | median)
    pt=$(printf '%s\n' "${pt_ms[@]}" | median)
    awk -v w="train step, $cfg (ms)" -v f="$fc" -v p="$pt" -v fl="$tflop" -v pk="$peak" 'BEGIN {
        printf "%-28s %12.2f %12.2f %7.2fx %13.1f%% %13.1f%%\n", w, f, p, p / f, 100 * fl * 1e12 / (f / 1e3) / (pk * 1e9),
               100 * fl * 1e12 / (p / 1e3) / (pk * 1e9) }'
done

# ---- generation: frames of a chain of small models (trained a few steps: the time does not depend on it) ----
for role in starter extrapolate interpolate; do
    "$FC" --threads "$THREADS" --device cpu train --config configs/small/$role.conf --run "$tmp/$role" --steps 2 \
        > /dev/null 2>&1
done
frames=61
euler=10
fc_s=()
for r in $(seq "$REPS"); do
    rm -rf "$tmp/gen"
    "$FC" --threads "$THREADS" --device cpu generate --starter "$tmp/starter" --extrapolate "$tmp/extrapolate" \
        --interpolate "$tmp/interpolate" --first-frame shapes:1 --frames $frames --steps $euler --out "$tmp/gen" \
        --quiet > "$tmp/gen.log" 2>&1
    fc_s+=("$(sed -nE 's/.*\(([0-9]+) frames, ([0-9.]+) s\).*/\2/p' "$tmp/gen.log")")
done
windows=$(sed -nE 's/.*: ([0-9]+) windows.*/\1/p' "$tmp/gen.log")
"$PYTHON" tools/torch_train.py --framechain "$FC" --config configs/small/starter.conf --threads "$THREADS" \
    --sample $euler --steps 5 --warmup 1 --json > "$tmp/pts.json" 2> "$tmp/pts.err"
pt_window=$(sed -nE 's/.*"window_ms": ([0-9.e+-]+).*/\1/p' "$tmp/pts.json")
fc=$(printf '%s\n' "${fc_s[@]}" | median)
fwd=$("$PYTHON" - "$FC" <<'EOF'
import subprocess, sys
sys.path.insert(0, "tools")
import torch_train
raw = torch_train.resolve_config(sys.argv[1], "configs/small/starter.conf", ["batch_size=1"])
cfg = {k: int(raw[k]) for k in ("frame_size", "channels", "patch", "width", "depth", "heads", "mlp_ratio",
                                "freq_dim", "batch_size")}
cfg["slots"] = len(raw["plan"].split())
print(torch_train.model_step_flops(cfg, 1) / 3)  # one forward pass of one window
EOF
)
awk -v w="generate, small (ms/frame)" -v f="$fc" -v pw="$pt_window" -v n=$frames -v win="${windows:-0}" \
    -v e=$euler -v fl="$fwd" -v pk="$peak" 'BEGIN {
    fm = 1e3 * f / n; pm = pw * win / n; flops = fl * e * win / n
    printf "%-28s %12.2f %12.2f %7.2fx %13.1f%% %13.1f%%\n", w, fm, pm, pm / fm, 100 * flops / (fm / 1e3) / (pk * 1e9),
           100 * flops / (pm / 1e3) / (pk * 1e9) }'
echo "(generation: $frames frames = $windows windows of $euler Euler steps; PyTorch samples the same number of windows at batch 1)"
echo "(ratio: PyTorch's time over framechain's; medians of $REPS runs; framechain's step time is its steady state after 2 steps)"
