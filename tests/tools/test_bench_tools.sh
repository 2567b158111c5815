#!/usr/bin/env bash
# The benchmark tools read what bench_ops prints: bench_ops runs on the tiny config and prints one row
# an op (the ops of a block, their share of the step), and tools/compare_ops.awk, the join behind
# tools/compare_builds.sh, finds every one of those rows and gives the medians and ratios worked out
# here for tables of known times. No timing is asserted (a benchmark is not a test): only that the
# tools still read each other, which a change of bench_ops's columns once broke without a sound.
set -u
. "$(dirname "$0")/../lib.sh"
BUILD=${2:-build}
JOIN=tools/compare_ops.awk

# ---- bench_ops on the tiny config ----
"$BUILD/bench_ops" --device cpu --config configs/tiny/starter.conf --reps 2 > "$tmp/ops.txt" 2>&1
status=$?
if [ $status -ne 0 ]; then
    fail bench_ops_tiny "status $status: $(tail -1 "$tmp/ops.txt")"
    exit 0
fi
# an op row: its name, then ms/call, x/step, ms/step and the share (NN.N%), then the rate
rows=$(grep -cE '^[a-z].* [0-9.]+ +[0-9]+ +[0-9.]+ +[0-9.]+%' "$tmp/ops.txt")
for op in "linear fwd qkv" "linear+gelu bwd fc2" "attention fwd temporal" "qk_norm bwd" "gated_add fwd"; do
    grep -q "^$op " "$tmp/ops.txt" || missing="${missing:-}$op; "
done
[ "$rows" -ge 15 ] && [ -z "${missing:-}" ] && grep -q '^sum ' "$tmp/ops.txt"
expect bench_ops_tiny $? "$rows op rows with their share, and the sum${missing:+; missing: $missing}"

# ---- the join reads every row of two real tables ----
cp "$tmp/ops.txt" "$tmp/ops-base-1.txt" && cp "$tmp/ops.txt" "$tmp/ops-this-1.txt"
awk -v pairs=1 -f "$JOIN" "$tmp/ops-base-1.txt" "$tmp/ops-this-1.txt" > "$tmp/join.txt" 2>&1
# the op rows and the sums' row, each a table against itself: 1.00x, or "-" for an op that takes
# 0.00 ms a step at the table's resolution
joined=$(grep -cE ' ([0-9.]+) +\1 +(1\.00x \(1\.00-1\.00\)|-)$' "$tmp/join.txt")
[ "$joined" -eq $((rows + 1)) ] && grep -qE '^sum .* 1\.00x' "$tmp/join.txt"
expect compare_ops_reads_bench_ops $? "$joined of $((rows + 1)) rows (the ops and the sum) joined, each beside itself; $(head -2 "$tmp/join.txt" | tail -1 | tr -s ' ')"

# ---- known tables: medians, ratios and their min-max, ops on one side only ----
table() {  # table FILE QKV_MS PROJ_MS [OTHER_OP OTHER_MS]: a bench_ops table with these ms/step
    {
        echo "op                          ms/call   x/step      ms/step   share            rate"
        echo "linear fwd qkv                0.100        4         $2    5.0%    0.186 TFLOP/s"
        echo "linear fwd proj               0.100        4         $3    2.0%    0.167 TFLOP/s"
        [ $# -ge 5 ] && echo "$4                0.100        1         $5    1.0%     16.2 GB/s"
        echo "sum                                                  9.99  (0.000843 TFLOP of model FLOPs)"
    } > "$1"
}
mkdir -p "$tmp/k"
table "$tmp/k/ops-base-1.txt" 4.00 1.00 "old op" 0.50
table "$tmp/k/ops-this-1.txt" 2.00 1.00 "new op" 0.25
table "$tmp/k/ops-base-2.txt" 6.00 1.00 "old op" 0.50
table "$tmp/k/ops-this-2.txt" 2.00 0.50 "new op" 0.25
table "$tmp/k/ops-base-3.txt" 3.00 2.00 "old op" 0.50
table "$tmp/k/ops-this-3.txt" 1.00 1.00 "new op" 0.25
awk -v pairs=3 -f "$JOIN" "$tmp"/k/ops-{base,this}-{1,2,3}.txt > "$tmp/known.txt" 2>&1
# qkv: base 4, 6, 3 (median 4), this 2, 2, 1 (2); ratios 2, 3, 3: 3.00x (2.00-3.00)
# proj: base 1, 1, 2, this 1, 0.5, 1; ratios 1, 2, 2: 2.00x (1.00-2.00)
# sums: base 5.5, 7.5, 5.5, this 3.25, 2.75, 2.25; ratios 1.69, 2.73, 2.44: 2.44x (1.69-2.73)
want="linear fwd qkv 4.000 2.000 3.00x (2.00-3.00)|linear fwd proj 1.000 1.000 2.00x (1.00-2.00)|old op 0.50 -|"
want+="new op - 0.25|sum (each whole table) 5.500 2.750 2.44x (1.69-2.73)|"
got=$(tail -n +2 "$tmp/known.txt" | tr -s ' ' | tr '\n' '|')
[ "$got" = "$want" ]
expect compare_ops_known_tables $? "$got"

# ---- tools/bench_autoencoder.sh makes its random weights once (out/bench/sdvae_random.safetensors):
# a first run stopped while it writes them leaves none, and the next run makes them whole, never
# taking a truncated file as made. Stand-ins for Python (torch and numpy there; the weights written
# half, then failing as a Ctrl-C would, where STUB_WEIGHTS=half) and framechain (one timing line).
# The script runs from a copy of it in a repository of its own ($tmp/ae/repo) and from another folder
# ($tmp/ae/cwd): its out/bench is the repository's, the folder it runs from gets nothing ----
mkdir -p "$tmp/ae/cwd" "$tmp/ae/repo/tools"
cp tools/bench_autoencoder.sh tools/checks.sh "$tmp/ae/repo/tools/"
cat > "$tmp/ae/python" << 'EOF_STUB'
#!/usr/bin/env bash
case "$1 $2" in
    "-c "*) exit 0 ;;
    *"/tools/autoencoder_reference.py --full-kl")
        echo "$STUB_WEIGHTS" > "$3"
        [ "$STUB_WEIGHTS" = whole ] || { echo "KeyboardInterrupt" >&2; exit 1; } ;;
    *"/tools/autoencoder_reference.py --time") echo "pytorch 1.0: encode 2.0 ms a frame, decode 4.0 ms a frame" ;;
    *) exec python3 "$@" ;;
esac
EOF_STUB
cat > "$tmp/ae/framechain" << 'EOF_STUB'
#!/usr/bin/env bash
echo "autoencode: encode 1.0 ms a frame, decode 2.0 ms a frame"
EOF_STUB
chmod +x "$tmp/ae/python" "$tmp/ae/framechain"
bench_ae() {  # bench_ae NAME [VAR=VALUE ...]: the copy's run from $tmp/ae/cwd, its output in $tmp/ae/NAME.txt
    local name=$1
    shift
    (cd "$tmp/ae/cwd" && env STUB_WEIGHTS=$name PYTHON=$tmp/ae/python FC=$tmp/ae/framechain PAIRS=1 "$@" \
        "$tmp/ae/repo/tools/bench_autoencoder.sh") > "$tmp/ae/$name.txt" 2>&1
}
weights=$tmp/ae/repo/out/bench/sdvae_random.safetensors
bench_ae half
s_half=$?
left=$(ls "$tmp/ae/repo/out/bench" 2> /dev/null | tr '\n' ' ')
bench_ae whole
s_whole=$?
[ $s_half -ne 0 ] && [ -z "$left" ] && [ $s_whole -eq 0 ] && [ "$(cat "$weights")" = whole ] &&
    grep -q '^| encode, per frame | 1 ms | 2 ms | 2.00x' "$tmp/ae/whole.txt"
expect bench_autoencoder_stopped_weights_made_again $? \
    "status $s_half stopped (left: ${left:-nothing}), then $s_whole; weights: $(cat "$weights" 2> /dev/null); \
$(tail -1 "$tmp/ae/whole.txt")"
# the repository's out/bench holds the pairs and logs; OUT names another folder
given=$tmp/ae/given
bench_ae whole OUT="$given"
s_given=$?
cwd_holds=$(ls -A "$tmp/ae/cwd" | tr '\n' ' ')
[ $s_whole -eq 0 ] && [ -z "$cwd_holds" ] && [ -s "$tmp/ae/repo/out/bench/autoencoder_pairs.txt" ] &&
    [ -s "$tmp/ae/repo/out/bench/ae_fc.log" ] && [ $s_given -eq 0 ] && [ "$(cat "$given/sdvae_random.safetensors")" = whole ] &&
    [ -s "$given/autoencoder_pairs.txt" ]
expect bench_autoencoder_out_of_the_repository $? \
    "status $s_whole, then with OUT $s_given; the folder it ran from holds: ${cwd_holds:-nothing}; \
the repository's out/bench: $(ls "$tmp/ae/repo/out/bench" 2> /dev/null | tr '\n' ' '); OUT: $(ls "$given" 2> /dev/null | tr '\n' ' ')"

# ---- tools/bench.sh (make bench) on stand-ins: framechain (a train run's metrics.jsonl and speed line,
# generate's windows and time; the third run of each fails, as a crash would), PyTorch (its step and
# window times) and bench_gemm (a 100 GFLOP/s peak). The table goes to the terminal and to
# OUT_DIR/table.txt, renamed into place only when whole ----
bb=$tmp/bb
mkdir -p "$bb/build" "$bb/cwd"
printf '#!/bin/sh\necho "sgemm 2048x2048x2048, 2 threads: 100.0 GFLOP/s (best of 5; OpenBLAS'"'"'s Haswell kernels)"\n' \
    > "$bb/build/bench_gemm"
cat > "$bb/framechain" << 'EOF_STUB'
#!/usr/bin/env bash
# runs: 1 at 10 ms a step (0.61 s for 61 frames), 2 at 20 (1.22 s), the 3rd fails (a train run after 4 steps)
[ "$1" = --version ] && { echo "framechain stub"; exit 0; }
[ "$1" = inspect ] && { echo "parameters   1234  (stub)"; exit 0; }
args=("$@")
while [ $# -gt 0 ] && [ "$1" != train ] && [ "$1" != generate ]; do shift; done
cmd=$1 run="" out=""
for ((i = 0; i < ${#args[@]}; i++)); do
    [ "${args[i]}" = --run ] && run=${args[i + 1]}
    [ "${args[i]}" = --out ] && out=${args[i + 1]}
done
[[ $run == */starter || $run == */extrapolate || $run == */interpolate ]] && exit 0  # generate's models
n=$(($(cat "$STUB_DIR/$cmd" 2> /dev/null || echo 0) + 1))
echo $n > "$STUB_DIR/$cmd"
if [ $n -ge 3 ]; then  # a crash part-way: a train run has written some steps (which must not count)
    [ "$cmd" = train ] && mkdir -p "$run" &&
        for s in 1 2 3 4; do echo "{\"step\":$s,\"loss\":1.0,\"step_ms\":30.0}"; done > "$run/metrics.jsonl"
    echo "framechain: stub crash"
    exit 1
fi
[ $n = 2 ] && [ -n "${STUB_STOP:-}" ] && kill -INT 0
if [ "$cmd" = train ]; then
    mkdir -p "$run"
    for s in 1 2 3 4 5; do echo "{\"step\":$s,\"loss\":1.0,\"step_ms\":$((10 * n)).0}"; done > "$run/metrics.jsonl"
    echo "speed: $((10 * n)).0 ms per step, 0.001 TFLOP per step"
else
    # generate's own lines (src/cmd_generate.c)
    echo "generate: 61 frames of 32x32 on cpu: 20 windows (starter step 2, extrapolate step 2, interpolate step 2), ..."
    echo "generate: wrote $out (61 frames in $(awk -v n=$n 'BEGIN { print 0.61 * n }') s)"
fi
EOF_STUB
cat > "$bb/python" << 'EOF_STUB'
#!/usr/bin/env bash
case "$1" in
    -c) [[ $2 == *__version__* ]] && echo "1.0-stub"; exit 0 ;;
    -) cat > /dev/null; echo 1e8; exit 0 ;;  # the forward FLOPs of one window
esac
[[ " $* " == *" --sample "* ]] && echo '{"window_ms": 61.0}' || echo '{"step_ms": 40.0}'
EOF_STUB
chmod +x "$bb/build/bench_gemm" "$bb/framechain" "$bb/python"
bench_stub() {  # bench_stub NAME [VAR=VALUE ...] [WRAPPER ...]: tools/bench.sh on the stand-ins, 3 pairs, into $bb/out
    local name=$1
    shift
    rm -f "$bb/train" "$bb/generate"
    env STUB_DIR="$bb" FC="$bb/framechain" BUILD="$bb/build" PYTHON="$bb/python" PAIRS=3 CONFIGS=tiny "$@" \
        tools/bench.sh "$bb/out" > "$bb/$name.txt" 2> "$bb/$name.err"
}
bench_stub whole
status=$?
rows=$(grep -cE '^(train step, tiny|generate, small) ' "$bb/whole.txt")
[ $status -eq 0 ] && [ "$rows" = 2 ] && grep -qx "bench: the table is in $bb/out/table.txt" "$bb/whole.txt" &&
    [ "$(head -n -1 "$bb/whole.txt")" = "$(cat "$bb/out/table.txt")" ] && [ ! -e "$bb/out/table.txt.partial" ]
expect bench_table_to_file $? "status $status, $rows rows; $(tail -1 "$bb/whole.txt"); $(wc -l < "$bb/out/table.txt" 2> /dev/null) lines in table.txt"
# the % of the sgemm peak is each pair's (the model FLOPs over the pair's time), then the median, as the
# ratio is; the pair whose framechain run failed (the last) drops out of both. Train: 1e9 FLOPs a step
# in 10 and 20 ms: 100% and 50%, median 75%; PyTorch at 40 ms: 25%. Generation: 20 windows of 10
# forward passes of 1e8 FLOPs over 61 frames in 10 and 20 ms a frame: 32.8% and 16.4%, median 24.6%;
# PyTorch at 20 ms: 16.4%
got=$(grep -E '^(train step, tiny|generate, small) ' "$bb/whole.txt" | tr -s ' ' | tr '\n' '|')
want="train step, tiny (ms) 15.00 40.00 3.00x 2.00-4.00 75.0% 25.0% 2|"
want+="generate, small (ms/frame) 15.00 20.00 1.50x 1.00-2.00 24.6% 16.4% 2|"
[ "$got" = "$want" ]
expect bench_peak_of_the_pairs $? "$got"
# each failed run is named under the table, with its pair and its last line, not only on the terminal
fails=$(grep -F '(failed: ' "$bb/out/table.txt" | tr -s ' ' | tr '\n' '|')
[ "$fails" = " (failed: framechain's tiny run 3: framechain: stub crash)| (failed: framechain's generation run 3: framechain: stub crash)|" ]
expect bench_failures_in_the_table $? "${fails:-no failure named in table.txt}"
# run from another folder, with no OUT_DIR, a copy of the script in a repository of its own writes the
# repository's out/bench; the folder it ran from gets nothing
mkdir -p "$bb/repo/tools" "$bb/cwd"
cp tools/bench.sh tools/checks.sh "$bb/repo/tools/"
rm -f "$bb/train" "$bb/generate"
(cd "$bb/cwd" && env STUB_DIR="$bb" FC="$bb/framechain" BUILD="$bb/build" PYTHON="$bb/python" PAIRS=3 CONFIGS=tiny \
    "$bb/repo/tools/bench.sh") > "$bb/elsewhere.txt" 2>&1
status=$?
cwd_holds=$(ls -A "$bb/cwd" | tr '\n' ' ')
[ $status -eq 0 ] && [ -z "$cwd_holds" ] && [ -s "$bb/repo/out/bench/table.txt" ] &&
    grep -qx "bench: the table is in $bb/repo/out/bench/table.txt" "$bb/elsewhere.txt"
expect bench_out_of_the_repository $? "status $status; the folder it ran from holds: ${cwd_holds:-nothing}; $(tail -1 "$bb/elsewhere.txt")"
# a run stopped half-way (framechain's stand-in at its second run sends SIGINT to the run's process
# group, as a Ctrl-C does) leaves the last whole table
cp "$bb/out/table.txt" "$bb/table-before.txt"
bench_stub stopped STUB_STOP=1 setsid --wait
status=$?
[ $status -ne 0 ] && cmp -s "$bb/table-before.txt" "$bb/out/table.txt" && [ ! -e "$bb/out/table.txt.partial" ]
expect bench_stopped_keeps_table $? "status $status; left: $(ls "$bb/out" | tr '\n' ' ')"

# ---- run from another folder with no OUT_DIR, a copy of each of the other benchmark scripts in a
# repository of its own (a framechain there that names MPI but fails every run, no build/) makes its
# folder under the repository's out/ before it stops; the folder it ran from gets nothing ----
mkdir -p "$tmp/lit/repo/tools" "$tmp/lit/cwd"
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "framechain stub"; echo "  MPI (stub)"; exit 0; }\nexit 1\n' \
    > "$tmp/lit/repo/framechain" && chmod +x "$tmp/lit/repo/framechain"
out_of_repository bench_scripts_out_of_the_repository "bench_cuda:bench-cuda bench_dist:bench-dist bench_routes:bench-routes route_loss:route-loss" -u FC -u CONFIG -u BENCH_OPS PAIRS=1 STEPS=1 PYTHON=false

# ---- the benchmarks' counts (PAIRS, REPS) are said at once when they are no count: PAIRS=abc once
# ran the whole of make bench and replaced the last table by one of failed rows (status 0), REPS=0
# printed inf frames/s, PAIRS=0 left compare_builds waiting on the terminal ----
mkdir -p "$tmp/bt" && echo "the last whole table" > "$tmp/bt/table.txt"
PAIRS=abc CONFIGS=tiny GENERATE=0 timeout 60 tools/bench.sh "$tmp/bt" > "$tmp/bt/abc.log" 2>&1
s_bench=$?
REPS=0 timeout 60 tools/bench_prepare.sh 64 > "$tmp/bt/reps.log" 2>&1
s_prep=$?
PAIRS=0 LOG="$tmp/bt/log" timeout 60 tools/compare_builds.sh "$tmp/bt/base" cpu configs/tiny/starter.conf 3 < /dev/null > "$tmp/bt/cmp.log" 2>&1
s_cmp=$?
[ "$s_bench $s_prep $s_cmp" = "2 2 2" ] && [ "$(cat "$tmp/bt/table.txt")" = "the last whole table" ] &&
    grep -q "^bench: PAIRS=abc: a whole number from 1 up is needed$" "$tmp/bt/abc.log" &&
    grep -q "^bench_prepare: REPS=0: a whole number from 1 up is needed$" "$tmp/bt/reps.log" &&
    grep -q "^compare_builds: PAIRS=0: a whole number from 1 up is needed$" "$tmp/bt/cmp.log" && [ ! -e "$tmp/bt/log" ]
expect bench_counts_said_first $? "status $s_bench (bench PAIRS=abc), $s_prep (bench_prepare REPS=0), $s_cmp (compare_builds PAIRS=0); \
$(head -1 "$tmp/bt/abc.log"); table: $(head -1 "$tmp/bt/table.txt")"

# ---- a row none of whose pairs ran (here framechain's and PyTorch's stand-ins both fail): the run is
# not whole, the last table stays, this run's beside it, status 1 ----
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "framechain stand-in"; exit 0; }\necho "framechain: stand-in fails"; exit 1\n' > "$tmp/bt/fc" &&
    printf '#!/bin/sh\nexit 0\n' > "$tmp/bt/python" && chmod +x "$tmp/bt/fc" "$tmp/bt/python"
FC="$tmp/bt/fc" PYTHON="$tmp/bt/python" BUILD="$bb/build" PAIRS=1 THREADS=1 CONFIGS=tiny GENERATE=0 timeout 120 tools/bench.sh "$tmp/bt" \
    > "$tmp/bt/failed.log" 2>&1
status=$?
[ $status -eq 1 ] && [ "$(cat "$tmp/bt/table.txt")" = "the last whole table" ] && grep -q "^train step, tiny (ms) .* failed$" "$tmp/bt/table.failed.txt" &&
    grep -q "^bench: 1 row(s) failed in every pair" "$tmp/bt/failed.log"
expect bench_failed_row_keeps_last_table $? "status $status: $(tail -1 "$tmp/bt/failed.log" | cut -c1-160); table: $(head -1 "$tmp/bt/table.txt")"

# ---- make bench-cuda's pairs: one PyTorch process that warms up once, timing a round when told ----
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch' 2> /dev/null; then
    echo "SKIP torch_train_serve: no torch for $PY"
    exit 0
fi
printf 'go\ngo\nquit\ngo\n' | "$PY" tools/torch_train.py --framechain "$FC" --config configs/tiny/starter.conf --steps 2 \
    --warmup 1 --serve --json > "$tmp/serve.txt" 2> "$tmp/serve.err"
status=$?
# the ready line, then one result for each "go" before "quit" (none after it), each its own step_ms
rounds=$(grep -cE '^\{"tool": "pytorch".*"step_ms": [0-9.]+' "$tmp/serve.txt")
[ $status -eq 0 ] && [ "$(head -1 "$tmp/serve.txt")" = '{"ready": true}' ] && [ "$rounds" = 2 ] &&
    [ "$(wc -l < "$tmp/serve.txt")" = 3 ]
expect torch_train_serve $? "status $status, $rounds rounds for the two \"go\" before \"quit\"; $(tail -1 "$tmp/serve.err")"

# bench_cuda.sh PAIRS end to end where the emulated GPU is built: framechain (on the emulation) and
# PyTorch (on the CPU, through a stand-in for python that trades cuda for cpu) alternate; a stand-in
# nvidia-smi answers the card's name and memory.
if [ ! -x "$BUILD/framechain_emu" ]; then
    echo "SKIP bench_cuda_pairs: no $BUILD/framechain_emu (the CUDA toolkit's headers)"
    exit 0
fi
mkdir -p "$tmp/bin"
printf '#!/bin/sh\ncase "$*" in *name*) echo "NVIDIA H200" ;; *) echo 1000 ;; esac\n' > "$tmp/bin/nvidia-smi"
{
    echo '#!/bin/bash'
    echo 'a=(); for x in "$@"; do case $x in cuda) a+=(cpu) ;; --bf16|--sdpa) ;; *) a+=("$x") ;; esac; done'
    echo "exec $PY \"\${a[@]}\""
} > "$tmp/bin/py"
chmod +x "$tmp/bin/nvidia-smi" "$tmp/bin/py"
PATH=$tmp/bin:$PATH FC=$BUILD/framechain_emu PYTHON=$tmp/bin/py PAIRS=2 STEPS=1 PT_RUNS=eager CKPT=0 \
    timeout 300 tools/bench_cuda.sh "$tmp/bc" configs/tiny/starter.conf > "$tmp/bc.txt" 2>&1
status=$?
fc_rows=$(grep -c '^framechain (bf16' "$tmp/bc.txt") pt_rows=$(grep -c '^pytorch .* eager ' "$tmp/bc.txt")
[ $status -eq 0 ] && [ "$fc_rows" = 2 ] && [ "$pt_rows" = 2 ] && grep -q 'PyTorch ready' "$tmp/bc.txt" &&
    grep -qE '^pairs: PyTorch over framechain, median [0-9.]+x \([0-9.]+-[0-9.]+ over 2 of 2 pairs\)$' "$tmp/bc.txt"
expect bench_cuda_pairs $? "status $status, $fc_rows framechain and $pt_rows PyTorch rows: $(tail -1 "$tmp/bc.txt")"

# route_loss.sh on the emulated GPU: the fp8 routes' losses beside the defaults', step by step,
# from the same batches (the first step's loss the same both ways: the final layer starts at zero),
# and the summary line.
FC=$BUILD/framechain_emu CONFIG=configs/tiny/starter.conf STEPS=3 EVERY=1 timeout 120 tools/route_loss.sh "$tmp/rl" \
    > "$tmp/rl.txt" 2>&1
status=$?
rows=$(grep -cE '^ +[123] +[0-9.]+ +[0-9.]+ ' "$tmp/rl.txt")
[ $status -eq 0 ] && [ "$rows" = 3 ] && grep -qE '^ +1 +([0-9.]+) +\1 ' "$tmp/rl.txt" &&
    grep -q 'fp8_fwd=1,fp8_dgrad=1,fp8_wgrad=1' "$tmp/rl/route.log" && ! grep -q 'fp8_fwd=1' "$tmp/rl/default.log" &&
    grep -qE '^the smoothed loss over the second half: fp8_fwd=1,fp8_dgrad=1,fp8_wgrad=1 against the defaults [-+][0-9.]+%' "$tmp/rl.txt"
expect route_loss $? "status $status, $rows step rows: $(tail -1 "$tmp/rl.txt")"

# route_winners.sh, which picks the routes gpu_run.sh times against PyTorch: on known outputs of
# bench_routes.sh and route_loss.sh (a set faster in every pair taken; one pair slower, or fp8
# without a loss curve, or the loss moved past MAX_LOSS, left), then on bench_routes.sh's own output
# on the emulated GPU (each set named with the smallest ratio bench_routes printed for it).
{
    echo "== adam8_warp=1 against the default"
    echo "step: the default over adam8_warp=1, median 1.052x (1.041-1.060 over 3 pairs)"
    echo "== fp8_fwd=1,fp8_dgrad=1 against the default"
    echo "step: the default over fp8_fwd=1,fp8_dgrad=1, median 1.080x (1.070-1.090 over 3 pairs)"
    echo "step: the default over qk_norm_fused=1, median 1.010x (0.990-1.020 over 3 pairs)"
} > "$tmp/won-routes.txt"
echo "the smoothed loss over the second half: fp8_fwd=1,fp8_dgrad=1 against the defaults -0.35% on average (-0.9% to +0.1%)" \
    > "$tmp/won-loss.txt"
got=$(tools/route_winners.sh "$tmp/won-routes.txt" "$tmp/won-loss.txt" 2> /dev/null)
strict=$(MAX_LOSS=0.3 tools/route_winners.sh "$tmp/won-routes.txt" "$tmp/won-loss.txt" 2> /dev/null)
no_curve=$(tools/route_winners.sh "$tmp/won-routes.txt" 2> "$tmp/won.err")
[ "$got" = "adam8_warp=1,fp8_fwd=1,fp8_dgrad=1" ] && [ "$strict" = "adam8_warp=1" ] && [ "$no_curve" = "adam8_warp=1" ] &&
    grep -q 'qk_norm_fused=1 left: not faster in every pair (smallest ratio 0.990)' "$tmp/won.err" &&
    grep -q 'fp8_fwd=1,fp8_dgrad=1 left: .*no loss curve' "$tmp/won.err"
expect route_winners_known $? "'$got', at MAX_LOSS=0.3 '$strict', without the loss curve '$no_curve'"
# a loss curve that diverged (NaN) leaves its route out, whatever its speed
echo "the smoothed loss over the second half: fp8_fwd=1,fp8_dgrad=1 against the defaults -nan% on average (-nan% to -nan%)" \
    > "$tmp/won-nan.txt"
got=$(tools/route_winners.sh "$tmp/won-routes.txt" "$tmp/won-nan.txt" 2> "$tmp/won-nan.err")
[ "$got" = "adam8_warp=1" ] && grep -q 'fp8_fwd=1,fp8_dgrad=1 left: .*not a number (-nan)' "$tmp/won-nan.err"
expect route_winners_nan_loss $? "'$got': $(grep fp8 "$tmp/won-nan.err")"
FC=$BUILD/framechain_emu CONFIG=configs/tiny/starter.conf STEPS=1 PAIRS=1 OPS=0 ROUTES="adam8_warp fp8_fwd" \
    timeout 120 tools/bench_routes.sh "$tmp/br" > "$tmp/br.txt" 2>&1
status=$?
won=$(tools/route_winners.sh "$tmp/br.txt" 2> "$tmp/br-won.err")
ok=1
for set in adam8_warp=1 fp8_fwd=1; do
    lo=$(sed -nE "s/^step: the default over $set, median [0-9.]+x \(([0-9.]+)-.*/\1/p" "$tmp/br.txt")
    grep -q "^route_winners: $set .*smallest ratio $lo" "$tmp/br-won.err" || ok=0
done
[ $status -eq 0 ] && [ $ok = 1 ] && ! grep -q fp8 <<< "$won"
expect route_winners_reads_bench_routes $? "status $status, taken '$won': $(tr '\n' ' ' < "$tmp/br-won.err")"

# ---- compare_builds.sh on two prebuilt bundles (a GPU machine compiles nothing): both sides' tables
# joined and both speed lines, the config by absolute path; a missing THIS_BUNDLE refused by name ----
mkdir -p "$tmp/cb-base" "$tmp/cb-this"
cp "$FC" "$BUILD/bench_ops" "$tmp/cb-base/" && cp "$FC" "$BUILD/bench_ops" "$tmp/cb-this/"
THIS_BUNDLE=$tmp/cb-this LOG=$tmp/cb-log OPS_ARGS="--reps 1" timeout 300 tools/compare_builds.sh "$tmp/cb-base" cpu \
    configs/tiny/starter.conf 3 > "$tmp/cb.txt" 2>&1
status=$?
[ $status -eq 0 ] && grep -q '^== prebuilt: base' "$tmp/cb.txt" && grep -qE '^linear fwd qkv +[0-9.]+ +[0-9.]+ ' "$tmp/cb.txt" &&
    grep -q '^base: speed: ' "$tmp/cb.txt" && grep -q '^this: speed: ' "$tmp/cb.txt" &&
    [ -s "$tmp/cb-log/train-base-1.log" ] && [ -s "$tmp/cb-log/train-this-1.log" ]
expect compare_builds_prebuilt $? "status $status: $(grep -E '^(== prebuilt|base:|this:)' "$tmp/cb.txt" | cut -c1-60 | tr '\n' ' ')"
THIS_BUNDLE=$tmp/nowhere LOG=$tmp/cb-log tools/compare_builds.sh "$tmp/cb-base" cpu configs/tiny/starter.conf > "$tmp/cb2.txt" 2>&1
status=$?
[ $status -eq 2 ] && grep -q "THIS_BUNDLE ($tmp/nowhere) holds no framechain and bench_ops" "$tmp/cb2.txt"
expect compare_builds_prebuilt_missing $? "status $status: $(head -1 "$tmp/cb2.txt")"

# ---- gpu_check.sh's ranks' part (PART=dist) with a stub bundle and nvidia-smi: a run whose final
# tensors differ from the run they must equal, or a run that fails, fails the part (it exited 0) ----
mkdir -p "$tmp/gc/bundle/lib" "$tmp/gc/bin"
printf '#!/bin/sh\necho "NVIDIA stub, 1 MiB, 0"\n' > "$tmp/gc/bin/nvidia-smi"
cat > "$tmp/gc/bundle/framechain" << 'EOF_STUB'
#!/usr/bin/env bash
# a stand-in: --version; train --run DIR writes DIR/ckpt-00000008.safetensors (an 8-byte header size,
# a header, the tensors' bytes), the tensors' bytes "differ" where its options hold $STUB_DIFFER,
# and it fails where they hold $STUB_FAIL
[ "$1" = --version ] && { echo "framechain stub"; exit 0; }
args="$*" run=""
while [ $# -gt 0 ]; do [ "$1" = --run ] && run=$2; shift; done
[ -n "${STUB_FAIL:-}" ] && [[ $args == *"$STUB_FAIL"* ]] && { echo "framechain: stub refuses"; exit 1; }
bytes=same
[ -n "${STUB_DIFFER:-}" ] && [[ $args == *"$STUB_DIFFER"* ]] && bytes=differ
mkdir -p "$run" && { printf '\002\000\000\000\000\000\000\000{}'; echo "$bytes"; } > "$run/ckpt-00000008.safetensors"
echo "speed: 1.0 ms per step"
EOF_STUB
chmod +x "$tmp/gc/bin/nvidia-smi" "$tmp/gc/bundle/framechain"
gpu_dist() { PATH="$tmp/gc/bin:$PATH" BUNDLE=$tmp/gc/bundle PART=dist timeout 60 tools/gpu_check.sh "$tmp/gc/log-$1" \
    > "$tmp/gc/$1.txt" 2>&1; }
gpu_dist same
status=$?
runs=$(grep -cE '^(plain|nccl-alone|nccl-alone-after|mpi-alone): one rank; final tensors [0-9a-f]{12}' "$tmp/gc/same.txt")
[ $status -eq 0 ] && [ "$runs" = 4 ] && ! grep -q FAIL "$tmp/gc/same.txt"
expect gpu_check_dist_same $? "status $status, $runs of 4 one-rank runs with their tensors"
STUB_DIFFER="overlap_grads=0" gpu_dist differ
status=$?
[ $status -eq 1 ] && grep -q "^nccl-alone-after: FAIL: its final tensors are not plain's" "$tmp/gc/differ.txt" &&
    [ "$(grep -c FAIL "$tmp/gc/differ.txt")" = 1 ]
expect gpu_check_dist_differ $? "status $status: $(grep FAIL "$tmp/gc/differ.txt" | head -2 | tr '\n' ' ')"
STUB_FAIL="collectives=mpi" gpu_dist fails
status=$?
[ $status -eq 1 ] && grep -q "^mpi-alone: FAILED: framechain: stub refuses" "$tmp/gc/fails.txt"
expect gpu_check_dist_failed_run $? "status $status: $(grep FAIL "$tmp/gc/fails.txt" | head -1)"

