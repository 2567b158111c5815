#!/usr/bin/env bash
# make bench: framechain against PyTorch on the CPU, in one run, the same configs, batch and thread
# count: the train-step time of the tiny, small and medium configs, generation time per frame, and
# for each the fraction of the CPU's fp32 GEMM peak reached (the peak measured here with OpenBLAS
# sgemm on 2048x2048 matrices; the network's model FLOPs counted as in src/model/memplan.c).
#
# The machine is shared and noisy, so the two alternate run by run (framechain, PyTorch,
# framechain, PyTorch, ...): each pair gives one ratio (PyTorch's time over framechain's), and the
# table shows the median ratio with its min and max over the pairs, beside the median times.
# A benchmark, not a test: nothing is asserted.
#
# usage: tools/bench.sh [OUT_DIR]     (THREADS=N, default all cores; PAIRS=N, default 5;
#                                      CONFIGS="tiny small medium" (CONFIGS= for none), GENERATE=1)
# The table goes to the terminal and to OUT_DIR/table.txt (default out/bench/table.txt), replaced
# only once the run is whole: a run stopped half-way, or with a row none of whose pairs ran (then in
# OUT_DIR/table.failed.txt, status 1), leaves the last whole table there.
# OpenBLAS's kernels are those the environment's OPENBLAS_CORETYPE names, else the ones it chose for
# the CPU: `env -u OPENBLAS_CORETYPE make bench` for the latter.
# BUILD: the build folder that holds bench_gemm (make bench passes its own). FC, BUILD and OUT_DIR
# default to the repository's framechain, build/ and out/bench, wherever the script runs from.
set -u
usage="usage: tools/bench.sh [OUT_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "bench: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "bench: too many arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its framechain, configs/, tools/ and out/
OUT=${1:-$root/out/bench}
FC=${FC:-$root/framechain}
BUILD=${BUILD:-$root/build}
THREADS=${THREADS:-$(nproc)}
PAIRS=${PAIRS:-5}
CONFIGS=${CONFIGS-tiny small medium}
GENERATE=${GENERATE:-1}
. "$root/tools/checks.sh"
positive_whole bench "THREADS=$THREADS" "PAIRS=$PAIRS"
case $GENERATE in 0 | 1) ;; *) echo "bench: GENERATE=$GENERATE: 0 or 1" >&2; exit 2 ;; esac
for cfg in $CONFIGS; do
    case $cfg in tiny | small | medium) ;; *) echo "bench: CONFIGS: unknown config '$cfg' (tiny, small, medium)" >&2; exit 2 ;; esac
done
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import torch' 2> /dev/null && echo $p && break; done)}
[ -x "$FC" ] || { echo "bench: $FC is not there or not executable (make bench builds it)" >&2; exit 1; }
[ -x "$BUILD/bench_gemm" ] || { echo "bench: $BUILD/bench_gemm is not there (make bench builds it; BUILD names the build folder)" >&2; exit 1; }
# Whatever PYTHON says (make passes the first Python with numpy), it must import torch.
[ -n "$PYTHON" ] || { echo "bench: no python3 with torch on this machine (apt-get install python3-torch)" >&2; exit 1; }
if ! err=$("$PYTHON" -c 'import torch' 2>&1); then
    echo "bench: $PYTHON cannot import torch ($(tail -1 <<< "$err")): apt-get install python3-torch, or PYTHON=a python with torch" >&2
    exit 1
fi
mkdir -p -- "$OUT"
tmp=$(mktemp -d)
table=$OUT/table.txt
trap 'rm -rf "$tmp"; rm -f -- "$table.partial"' EXIT
# from here on what goes to the terminal goes to the table's file too
exec 3>&1 > >(tee "$table.partial")
tee_pid=$!

# A run that failed: its line on the terminal, and under the table among the notes (the pair drops
# out of its row, whose n then says fewer pairs than PAIRS)
failed() {
    echo "bench: $1" >&2
    echo "  (failed: $1)" >> "$tmp/notes"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# row WHAT FC_TIMES PT_TIMES FLOPS: one line of the table from the pairs' times (same units) and the
# model FLOPs of one unit of the time in each pair's framechain run (0 where it said none): the % of
# the peak is each pair's, then their median, as the ratio is
rows_failed=0  # rows none of whose pairs ran: such a run is not whole, and leaves the last table as it was
row() {
    local what=$1 fc=$2 pt=$3 flop=$4 line
    line=$(paste <(tr ' ' '\n' <<< "$fc") <(tr ' ' '\n' <<< "$pt") <(tr ' ' '\n' <<< "$flop") |
        awk -v w="$what" -v pk="$peak" '
        NF == 3 && $1 > 0 && $2 > 0 { n++; f[n] = $1; p[n] = $2; r[n] = $2 / $1
            if ($3 > 0) { m++; fpk[m] = 100 * $3 / ($1 / 1e3) / (pk * 1e9); ppk[m] = 100 * $3 / ($2 / 1e3) / (pk * 1e9) }
        }
        function med(a, n,   i, j, t, b) { for (i = 1; i <= n; i++) b[i] = a[i]
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
            lo = b[1]; hi = b[n]; return (n % 2) ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
        END {
            if (!n) { printf "%-28s %12s\n", w, "failed"; exit }
            mf = med(f, n); mp = med(p, n); mr = med(r, n); rlo = lo; rhi = hi
            printf "%-28s %12.2f %12.2f %7.2fx %6.2f-%-6.2f", w, mf, mp, mr, rlo, rhi
            if (m) printf " %8.1f%% %8.1f%% %3d\n", med(fpk, m), med(ppk, m), n
            else printf " %9s %9s %3d\n", "-", "-", n }')
    echo "$line"
    case $line in *" failed") rows_failed=$((rows_failed + 1)) ;; esac
}

peak=$("$BUILD/bench_gemm" --threads "$THREADS" | tee "$OUT/gemm.txt" | sed -nE 's/.*: ([0-9.]+) GFLOP.*/\1/p')
# Both programs call the same OpenBLAS (PyTorch through libblas), whose kernels this line names
kernels=$(sed -nE "s/.*OpenBLAS's (.*)\)$/\1/p" "$OUT/gemm.txt")
torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads; $(date -u +%F)"
echo "$("$FC" --version | head -1) against PyTorch $torch_version; sgemm peak $peak GFLOP/s"
echo "OpenBLAS's $kernels (both programs)"
printf '%-28s %12s %12s %8s %13s %9s %9s %3s\n' "what" "framechain" "pytorch" "ratio" "(min-max)" "fc peak" "pt peak" \
    "n"

# ---- training steps ----
for cfg in $CONFIGS; do
    case $cfg in
        tiny) steps=60 conf=configs/tiny/starter.conf ;;
        small) steps=25 conf=configs/small/starter.conf ;;
        medium) steps=6 conf=configs/bench/medium.conf ;;
        *) echo "bench: unknown config $cfg"; continue ;;
    esac
    fc_ms="" pt_ms="" flops=""
    for r in $(seq "$PAIRS"); do
        rm -rf "$tmp/run"
        ok=1
        "$FC" --threads "$THREADS" --device cpu train --config "$root/$conf" --run "$tmp/run" --steps $steps \
            --set checkpoint_every=100000 > "$tmp/fc.log" 2>&1 ||
            { ok=0; failed "framechain's $cfg run $r: $(tail -1 "$tmp/fc.log")"; }
        # the median step after 2 (metrics.jsonl's step_ms), as PyTorch's below: the speed line's mean
        # would let one slow step of a noisy machine count against framechain alone; a run that failed
        # part-way counts none of its steps (its pair drops out)
        ms=$(sed -nE 's/.*"step":([0-9]+),.*"step_ms":([0-9.]+).*/\1 \2/p' "$tmp/run/metrics.jsonl" 2> /dev/null |
            awk '$1 >= 3 { print $2 }' | median)
        [ $ok = 1 ] || ms=0
        fc_ms="$fc_ms ${ms:-0}"
        tflop=$(sed -nE 's/^speed: .* ([0-9.e+-]+) TFLOP per step.*/\1/p' "$tmp/fc.log")
        flops="$flops $(awk -v t="${tflop:-0}" 'BEGIN { print t * 1e12 }')"
        # PyTorch times steps - 2 steps after 2 of warm-up, as framechain's steady state leaves out 2
        "$PYTHON" "$root/tools/torch_train.py" --framechain "$FC" --config "$root/$conf" --threads "$THREADS" \
            --steps $((steps - 2)) --warmup 2 --json > "$tmp/pt.json" 2> "$tmp/pt.err" ||
            failed "PyTorch's $cfg run $r: $(tail -1 "$tmp/pt.err")"
        pt_ms="$pt_ms $(sed -nE 's/.*"step_ms": ([0-9.e+-]+).*/\1/p' "$tmp/pt.json" | awk '{ printf "%.2f", $1 }')"
    done
    params=$("$FC" inspect --config "$root/$conf" | sed -nE 's/^parameters +([0-9]+) .*/\1/p')
    row "train step, $cfg (ms)" "${fc_ms# }" "${pt_ms# }" "${flops# }"
    echo "  ($cfg: $conf, $params parameters; framechain ms: ${fc_ms# }; PyTorch ms: ${pt_ms# })" >> "$tmp/notes"
done

# ---- generation: frames of a chain of small models (trained a few steps: the time does not depend on it) ----
if [ "$GENERATE" = 1 ]; then
    for role in starter extrapolate interpolate; do
        "$FC" --threads "$THREADS" --device cpu train --config "$root/configs/small/$role.conf" --run "$tmp/$role" \
            --steps 2 > /dev/null 2>&1
    done
    frames=61
    euler=10
    fc_frame="" pt_frame="" pair_windows="" windows=0
    for r in $(seq "$PAIRS"); do
        rm -rf "$tmp/gen"
        "$FC" --threads "$THREADS" --device cpu generate --starter "$tmp/starter" --extrapolate "$tmp/extrapolate" \
            --interpolate "$tmp/interpolate" --first-frame shapes:1 --frames $frames --steps $euler --out "$tmp/gen" \
            --sharpness-guard 0 --quiet > "$tmp/gen.log" 2>&1 ||  # the guard: not in the PyTorch sampler
            failed "framechain's generation run $r: $(tail -1 "$tmp/gen.log")"
        s=$(sed -nE 's/^generate: wrote .* \(([0-9]+) frames in ([0-9.]+) s\)$/\2/p' "$tmp/gen.log")
        k=$(sed -nE 's/.*: ([0-9]+) windows.*/\1/p' "$tmp/gen.log")
        pair_windows="$pair_windows ${k:-0}"
        [ -n "$k" ] && windows=$k
        fc_frame="$fc_frame $(awk -v s="${s:-0}" -v n=$frames 'BEGIN { print 1e3 * s / n }')"
        "$PYTHON" "$root/tools/torch_train.py" --framechain "$FC" --config "$root/configs/small/starter.conf" \
            --threads "$THREADS" --sample $euler --steps 5 --warmup 1 --json > "$tmp/pts.json" 2> "$tmp/pts.err" ||
            failed "PyTorch's generation run $r: $(tail -1 "$tmp/pts.err")"
        w=$(sed -nE 's/.*"window_ms": ([0-9.e+-]+).*/\1/p' "$tmp/pts.json")
        pt_frame="$pt_frame $(awk -v w="${w:-0}" -v k="${k:-0}" -v n=$frames 'BEGIN { print w * k / n }')"
    done
    fwd=$("$PYTHON" - "$FC" "$root" <<'EOF'
import subprocess, sys
sys.path.insert(0, sys.argv[2] + "/tools")
import torch_train
raw = torch_train.resolve_config(sys.argv[1], sys.argv[2] + "/configs/small/starter.conf", ["batch_size=1"])
cfg = {k: int(raw[k]) for k in ("frame_size", "channels", "patch", "width", "depth", "heads", "mlp_ratio",
                                "freq_dim", "batch_size")}
cfg["slots"] = len(raw["plan"].split())
cfg["cond_concat"] = raw.get("cond_concat", "none")  # the frames each slot's input carries
print(torch_train.model_step_flops(cfg, 1) / 3)  # one forward pass of one window
EOF
)
    row "generate, small (ms/frame)" "${fc_frame# }" "${pt_frame# }" \
        "$(for k in $pair_windows; do
               awk -v f="${fwd:-0}" -v e=$euler -v k="$k" -v n=$frames 'BEGIN { print f * e * k / n }'
           done)"
    echo "(generation: $frames frames = $windows windows of $euler Euler steps; PyTorch samples the same number of windows at batch 1)"
fi
echo "(ratio: PyTorch's time over framechain's in each of n alternating pairs, the median and the min-max; the times:"
echo " medians; a step time is the median step after 2 warm-up steps, framechain's and PyTorch's alike; peak: % of the"
echo " sgemm peak the model FLOPs reach in each pair, the median)"
cat "$tmp/notes" 2> /dev/null
exec >&3 3>&-  # the table's end: tee has all of it once it exits
if ! wait "$tee_pid"; then
    echo "bench: could not write the table to $table" >&2
    exit 1
fi
if [ "$rows_failed" -gt 0 ]; then
    mv -f -- "$table.partial" "$OUT/table.failed.txt"
    echo "bench: $rows_failed row(s) failed in every pair (the lines above say why): $table stays as it was; this run's table is in $OUT/table.failed.txt" >&2
    exit 1
fi
if ! mv -f -- "$table.partial" "$table"; then
    echo "bench: could not write the table to $table" >&2
    exit 1
fi
echo "bench: the table is in $table"
