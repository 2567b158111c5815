#!/usr/bin/env bash
# make bench-cuda: framechain against PyTorch 2.x on this machine's GPU, in one run, on the 24 GB
# preset (configs/starter.conf: 0.95 B parameters, 256x256 frames, a window of 7, batch 1): step
# time, frames/s, MFU (model FLOPs over the card's dense bf16 peak) and peak memory; PyTorch with
# bf16 autocast and scaled_dot_product_attention, eager and torch.compile, with and without
# activation checkpointing; then how long a checkpoint blocks training, in the background and
# synchronously. A benchmark, not a test: nothing is asserted.
#
# usage: tools/bench_cuda.sh [OUT_DIR] [CONFIG]     (STEPS=N timed steps, default 12)
#   FC_RUNS picks framechain's rows as recompute:keep_blocks pairs (default "2:auto 2:0 1:0 0:0");
#   PT_RUNS PyTorch's, comma-separated (default "eager,--checkpointing,--compile,--compile --checkpointing";
#   empty leaves PyTorch out); CKPT=0 leaves out the checkpoint timing. PAIRS=N instead alternates the
#   first of FC_RUNS and the first of PT_RUNS run by run, N pairs, and prints the median ratio with its
#   min and max (PyTorch as one process that compiles once: torch_train.py --serve).
set -u
usage="usage: tools/bench_cuda.sh [OUT_DIR] [CONFIG]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "bench_cuda: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 2 ] || { echo "bench_cuda: too many arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its defaults below, wherever this runs from
OUT=${1:-$root/out/bench-cuda}
CONF=${2:-$root/configs/starter.conf}
FC=${FC:-$root/framechain}
STEPS=${STEPS:-12}
. "$root/tools/checks.sh"
positive_whole bench_cuda "STEPS=$STEPS"
[ "${PAIRS:-0}" = 0 ] || positive_whole bench_cuda "PAIRS=$PAIRS"  # 0 or unset: no alternating pairs
PYTHON=${PYTHON:-$(for p in python3 /usr/bin/python3; do $p -c 'import torch' 2> /dev/null && echo $p && break; done)}
mkdir -p "$OUT"
if ! "$FC" --version | grep -q '^  cuda ('; then
    echo "bench-cuda: no usable CUDA backend here: $("$FC" --version | grep '^  cuda' | head -1 | sed 's/^ *//')"
    exit 1
fi
[ -n "$PYTHON" ] || echo "bench-cuda: no python3 with torch: the PyTorch rows are left out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in  # dense bf16 tensor-core peak, TFLOP/s, fp32 accumulation
    *H100*PCIe*) peak=756 ;; *H100*|*H200*|*GH200*) peak=989 ;; *A100*) peak=312 ;;
    *4090*) peak=165 ;; *3090*) peak=71 ;; *) peak=0 ;;
esac
echo "machine: $gpu (bf16 peak $peak TFLOP/s); $(date -u +%F); $CONF"
# "peak GiB" is the program's own high-water mark (framechain's device allocations, PyTorch's
# max_memory_allocated); "card GiB" is the most nvidia-smi saw in use on the card during the run, less
# what was in use before it: the CUDA context, cuBLAS's workspaces and the allocators' slack counted.
printf '%-58s %10s %10s %10s %8s %10s %10s\n' "what" "ms/step" "frames/s" "TFLOP/s" "MFU" "peak GiB" "card GiB"
row() {  # row LABEL MS FRAMES_PER_S TFLOPS PEAK_GIB CARD_GIB
    awk -v w="$1" -v ms="$2" -v fps="$3" -v tf="$4" -v pg="$5" -v cg="$6" -v pk="$peak" 'BEGIN {
        printf "%-58s %10.1f %10.1f %10.1f %7.1f%% %10.2f %10s\n", w, ms, fps, tf, (pk > 0 ? 100 * tf / pk : 0), pg,
               (cg == "-" ? "-" : sprintf("%.2f", cg)) }'
}
card_watch() {  # card_watch: sample the card's memory in use every 100 ms until card_peak
    card_idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$OUT/card.txt" 2> /dev/null &
    card_pid=$!
}
card_peak() {  # GiB above the idle reading, the most seen since card_watch
    kill "$card_pid" 2> /dev/null
    wait "$card_pid" 2> /dev/null
    awk -v idle="${card_idle:-0}" '$1 + 0 > m { m = $1 + 0 } END { printf "%.2f", (m > idle ? m - idle : 0) / 1024 }' "$OUT/card.txt"
}
# fc_row RECOMPUTE:KEEP [SUFFIX]: one framechain run, its row, its log fc-recomputeR-keepK[SUFFIX].log
# (pairs: one a pair); sets ms
fc_row() {
    local rc=${1%:*} keep=${1#*:} budget=24  # auto resolves against the 24 GB card's budget
    [ "$rc" = 0 ] && budget=1000            # keeping everything needs more: measured all the same
    local log="$OUT/fc-recompute$rc-keep$keep${2:-}.log"
    rm -rf "$OUT/run"
    card_watch
    "$FC" --device cuda train --config "$CONF" --run "$OUT/run" --steps $((STEPS + 2)) --set warmup_steps=2 \
        --set checkpoint_every=100000 --set keep_checkpoints=1 --set recompute=$rc --set keep_blocks=$keep \
        --vram-budget $budget > "$log" 2>&1
    local card l
    card=$(card_peak)
    l=$(grep '^speed' "$log")
    ms=$(echo "$l" | sed -nE 's/^speed: ([0-9.]+) ms.*/\1/p')
    row "framechain (bf16, recompute $rc, keep_blocks $keep)" "$ms" \
        "$(echo "$l" | sed -nE 's/.* ([0-9.]+) frames\/s.*/\1/p')" "$(echo "$l" | sed -nE 's/.* ([0-9.]+) TFLOP\/s$/\1/p')" \
        "$(sed -nE 's/^peak .* ([0-9.]+) GiB measured.*/\1/p' "$log")" "$card"
    rm -rf "$OUT/run"
}
# pt_json_row OPTIONS JSON CARD_GIB: the row of one torch_train.py --json result; sets ms
pt_json_row() {
    local j=$2
    get() { echo "$j" | sed -nE "s/.*\"$1\": ([0-9.e+-]+).*/\1/p"; }
    ms=$(get step_ms)
    row "pytorch $("$PYTHON" -c 'import torch; print(torch.__version__)') bf16 sdpa ${1:-eager}" "$ms" \
        "$(get frames_per_s)" "$(get tflops)" "$(get peak_gib)" "$3"
}
# pt_row OPTIONS: one PyTorch run ("eager" or torch_train.py's options), its row; sets ms (empty if it failed)
pt_row() {
    local opts=$1
    ms=""
    [ "$opts" = eager ] && opts=""
    card_watch
    # shellcheck disable=SC2086
    if ! "$PYTHON" "$root/tools/torch_train.py" --framechain "$FC" --config "$CONF" --device cuda --bf16 --sdpa $opts \
        --steps "$STEPS" --warmup 3 --json > "$OUT/pt.json" 2> "$OUT/pt.err"; then
        card_peak > /dev/null
        tail -3 "$OUT/pt.err"
        return
    fi
    local card
    card=$(card_peak)
    pt_json_row "$opts" "$(cat "$OUT/pt.json")" "$card"
}
IFS=, read -r -a pt_runs <<< "${PT_RUNS-eager,--checkpointing,--compile,--compile --checkpointing}"
if [ "${PAIRS:-0}" -gt 0 ]; then
    # The first of FC_RUNS against the first of PT_RUNS, alternating run by run, PAIRS times: each
    # pair's ratio (PyTorch's ms over framechain's), the median with its min and max. PyTorch runs
    # as one process that warms up (and compiles) once, then times a round of STEPS steps whenever
    # told (torch_train.py --serve), idle on the card while framechain runs: a process with torch.compile
    # took about 150 s at the preset on an H200, and the next was not done after 94 s. Its rows'
    # "card GiB" is "-" (its memory is already held when a round starts).
    fc_first=${FC_RUNS:-2:auto}
    fc_first=${fc_first%% *}
    [ -n "$PYTHON" ] && [ ${#pt_runs[@]} -gt 0 ] || { echo "bench-cuda: PAIRS needs PyTorch and PT_RUNS"; exit 1; }
    pt_opts=${pt_runs[0]}
    [ "$pt_opts" = eager ] && pt_opts=""
    # shellcheck disable=SC2086
    coproc PT { "$PYTHON" "$root/tools/torch_train.py" --framechain "$FC" --config "$CONF" --device cuda --bf16 --sdpa \
        $pt_opts --steps "$STEPS" --warmup 3 --serve --json 2> "$OUT/pt.err"; }
    pt_in=${PT[1]} pt_out=${PT[0]}
    t0=$(date +%s)
    read -r j <&"$pt_out" && [ "$j" = '{"ready": true}' ] || {
        echo "bench-cuda: PyTorch did not start: $(tail -3 "$OUT/pt.err")"; exit 1; }
    echo "PyTorch ready (its warm-up and compilation) in $(($(date +%s) - t0)) s"
    fc_ms="" pt_ms=""
    for p in $(seq "$PAIRS"); do
        fc_row "$fc_first" "-pair$p"
        fc_ms="$fc_ms ${ms:-0}"
        echo go >&"$pt_in"
        if read -r j <&"$pt_out"; then
            pt_json_row "$pt_opts" "$j" -
            pt_ms="$pt_ms ${ms:-0}"
        else
            echo "bench-cuda: PyTorch stopped: $(tail -3 "$OUT/pt.err")"
            pt_ms="$pt_ms 0"
            break
        fi
    done
    echo quit >&"$pt_in" 2> /dev/null
    wait
    paste <(tr ' ' '\n' <<< "${fc_ms# }") <(tr ' ' '\n' <<< "${pt_ms# }") | awk -v n_pairs="$PAIRS" '
        NF == 2 && $1 > 0 && $2 > 0 { n++; r[n] = $2 / $1 }
        END { if (!n) { print "pairs: none completed"; exit }
              for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
              printf "pairs: PyTorch over framechain, median %.3fx (%.3f-%.3f over %d of %d pairs)\n",
                     (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2, r[1], r[n], n, n_pairs }'
    exit 0
fi
# recompute:keep_blocks: the presets' (2:auto), then less memory (2:0, 1:0), then none re-run (0)
for rk in ${FC_RUNS:-2:auto 2:0 1:0 0:0}; do fc_row "$rk"; done
for opts in "${pt_runs[@]}"; do
    [ -n "$PYTHON" ] || break
    pt_row "$opts"
done
[ "${CKPT:-1}" = 0 ] && exit 0
echo "checkpoints (training blocked per checkpoint):"
for mode in async sync; do
    rm -rf "$OUT/run"
    "$FC" --device cuda train --config "$CONF" --run "$OUT/run" --steps 40 --set warmup_steps=2 \
        --set checkpoint_every=20 --set keep_checkpoints=1 $([ $mode = sync ] && echo --sync-checkpoints) \
        > "$OUT/ckpt-$mode.log" 2>&1
    echo "  $mode: $(grep -m1 -E '^checkpoint .*ckpt-00000020' "$OUT/ckpt-$mode.log" | sed -E 's/^checkpoint [^ ]* //')"
done
rm -rf "$OUT/run"
