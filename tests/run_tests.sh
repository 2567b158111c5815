#!/usr/bin/env bash
# The test suite: runs every suite, shows its PASS/FAIL lines, and ends with "N passed, N failed".
# Environment: BUILD (build folder), FRAMECHAIN (the binary), PYTHON (with torch, for the reference).
set -u
ONLY=""  # --only SUITE[,SUITE...] runs those suites
if [ "${1:-}" = "--only" ]; then ONLY=${2:?--only needs a suite name}; fi
want() { [ -z "$ONLY" ] || case ",$ONLY," in *",$1,"*) true ;; *) false ;; esac; }
BUILD=${BUILD:-build}
FC=${FRAMECHAIN:-./framechain}
PYTHON=${PYTHON:-python3}
TINY=configs/tiny/starter.conf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/all"

report() {  # report PASS|FAIL name message
    echo "$1 $2: $3" | tee -a "$tmp/all"
}

# run_suite NAME CMD...: the command prints PASS/FAIL lines. A failure too: a non-zero exit without a
# FAIL line, a crash (a signal) even after FAIL lines, and an error of a shell suite's own (bash's
# "FILE.sh: line N: ..."): an arithmetic error in an expect line skips that check without a word.
run_suite() {
    local name=$1
    shift
    want "$name" || return 0
    echo "== $name"
    "$@" > "$tmp/out" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|SKIP) ' "$tmp/out" >> "$tmp/all"
    cat "$tmp/out"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/out"; then
        report FAIL "$name" "exited with status $rc without reporting a failure"
    elif [ $rc -gt 128 ]; then
        report FAIL "$name" "ended by signal $((rc - 128)) after the checks above"
    fi
    local shell_errors
    shell_errors=$(grep -cE '\.sh: line [0-9]+: ' "$tmp/out")
    if [ "$shell_errors" -gt 0 ]; then
        report FAIL "$name" "$shell_errors error(s) of the suite's own shell code, checks lost: $(grep -m1 -E '\.sh: line [0-9]+: ' "$tmp/out")"
    fi
}

# The layer rule of the include graph (docs/architecture.md): no include from a lower layer to a
# higher one, no cycle.
run_suite layers "$PYTHON" tools/include_graph.py --check
run_suite base "$BUILD/test_base"
run_suite exp_poly "$BUILD/test_exp_poly"
run_suite op_table "$BUILD/test_op_table"
run_suite dist_origin "$BUILD/test_dist_origin"
run_suite cuda_standins tests/backend/test_cuda_standins.sh "$FC"
run_suite video_standins tests/video/test_video_standins.sh "$FC"
run_suite model "$BUILD/test_model"
run_suite references "$BUILD/test_references"
run_suite checkpoint "$BUILD/test_checkpoint"
run_suite gradients "$BUILD/test_grad" "$TINY"
run_suite optimizer "$BUILD/test_optim"
run_suite optimizer_model "$BUILD/test_optimizer"
run_suite conv "$BUILD/test_conv"
run_suite attention "$BUILD/test_attention"
run_suite safetensors "$BUILD/test_safetensors"
run_suite video "$BUILD/test_video"
run_suite image "$BUILD/test_image"
run_suite shards "$BUILD/test_shards"
run_suite shard_damage "$BUILD/test_shard_damage"
run_suite loader "$BUILD/test_loader"
run_suite latent_data "$BUILD/test_latent_data"
run_suite synthetic "$BUILD/test_synthetic"
run_suite chain "$BUILD/test_chain"
run_suite sampler "$BUILD/test_sampler"
run_suite metrics "$BUILD/test_metrics"
run_suite drift_guard "$BUILD/test_drift_guard"
run_suite text "$BUILD/test_text"

if want reference; then
echo "== pytorch reference"
if "$PYTHON" tools/reference.py --selftest > "$tmp/out" 2>&1; then
    report PASS reference_selftest "$(grep -c ' ok' "$tmp/out") checks of the PyTorch model against finite differences and its own layout"
else
    cat "$tmp/out"
    report FAIL reference_selftest "tools/reference.py --selftest failed"
fi
# The network against the PyTorch reference: as configured, then with the given frames concatenated
# to every slot's input (cond_concat, with a context slot so that the nearest given frame is not the anchor).
reference_check() {  # name, then dump_reference options
    local name=$1; shift
    if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
        report FAIL "$name" "$PYTHON cannot import torch (install python3-torch)"
    elif ! "$BUILD/dump_reference" --config "$TINY" --out "$tmp/ref.safetensors" --threads 2 "$@" > "$tmp/out" 2>&1; then
        report FAIL "$name" "dump_reference failed: $(tail -1 "$tmp/out")"
    else
        "$PYTHON" tools/reference.py --check "$tmp/ref.safetensors" --tol 1e-4 > "$tmp/out" 2>&1
        local rc=$?
        cat "$tmp/out"
        local summary
        summary=$(grep 'tensors compared' "$tmp/out" | tail -1)
        if [ $rc -eq 0 ]; then report PASS "$name" "${summary:-ok}"; else report FAIL "$name" "${summary:-status $rc}"; fi
    fi
}
reference_check pytorch_reference
reference_check pytorch_reference_concat --set cond_concat=anchor+nearest \
    --set "plan=anchor:0 context:2 target:4 target:5 target:6"
# a plan of MAX_SLOTS (32) slots; the anchor alone concatenated, with recompute, one head and 2x2 patches
reference_check pytorch_reference_32_slots --set depth=1 --set batch_size=1 \
    --set "plan=anchor:0$(for i in $(seq 1 31); do printf ' target:%d' $i; done)"
reference_check pytorch_reference_anchor_recompute --set cond_concat=anchor --set recompute=2 --set keep_blocks=1 \
    --set heads=1 --set patch=2 --set "plan=context:-8 context:-4 anchor:0 target:4"
fi

# The tiny autoencoder against an independent PyTorch implementation (random weights, width 16).
if want autoencoder || want autoencode_cli || want prepare_vae; then
if "$PYTHON" tools/autoencoder_reference.py --make "$tmp/ae" > "$tmp/out" 2>&1 &&
    "$PYTHON" tools/taesd_to_safetensors.py "$tmp/ae/taesd_encoder.pth" "$tmp/ae/taesd_decoder.pth" \
        "$tmp/ae/converted.safetensors" >> "$tmp/out" 2>&1 &&
    "$PYTHON" tools/taesd_to_safetensors.py "$tmp/ae/taef2_encoder.pth" "$tmp/ae/taef2_decoder.pth" \
        "$tmp/ae/taef2_converted.safetensors" >> "$tmp/out" 2>&1; then
    run_suite autoencoder "$BUILD/test_autoencoder" "$tmp/ae"
    run_suite autoencode_cli env PYTHON="$PYTHON" tests/cli/test_autoencode.sh "$FC" "$tmp/ae"
    run_suite prepare_vae env PYTHON="$PYTHON" tests/dataset/test_prepare_vae.sh "$FC" "$tmp/ae"
else
    report FAIL autoencoder_reference "tools/autoencoder_reference.py or taesd_to_safetensors.py failed: $(tail -1 "$tmp/out")"
fi
fi

if want determinism; then
echo "== determinism"
dump() {  # dump THREADS SEED OUT
    "$BUILD/dump_reference" --config "$TINY" --threads "$1" --seed "$2" --out "$3" > /dev/null 2>&1
}
if dump 1 7 "$tmp/a1" && dump 1 7 "$tmp/b1" && dump 2 7 "$tmp/a2" && dump 2 7 "$tmp/b2" && dump 2 8 "$tmp/c2"; then
    for pair in "a1 b1 same_seed_1_thread" "a2 b2 same_seed_2_threads" "a1 a2 1_thread_equals_2_threads"; do
        set -- $pair
        if cmp -s "$tmp/$1" "$tmp/$2"; then
            report PASS "determinism_$3" "$(stat -c %s "$tmp/$1") bytes identical (weights, inputs, output, every gradient)"
        else
            report FAIL "determinism_$3" "$(cmp "$tmp/$1" "$tmp/$2" | head -1)"
        fi
    done
    if cmp -s "$tmp/a2" "$tmp/c2"; then
        report FAIL determinism_seed_matters "seeds 7 and 8 gave the same bytes"
    else
        report PASS determinism_seed_matters "seeds 7 and 8 differ"
    fi
else
    report FAIL determinism "dump_reference failed"
fi
fi

run_suite cli tests/cli/test_cli.sh "$FC"
run_suite process tests/cli/test_process.sh "$FC"
run_suite training env PYTHON="$PYTHON" tests/train/test_train.sh "$FC"
run_suite run_folder tests/train/test_run_folder.sh "$FC"
run_suite train_damage env PYTHON="$PYTHON" tests/train/test_train_damage.sh "$FC"
run_suite powerloss tests/train/test_powerloss.sh "$FC" "$BUILD"
run_suite lineage env PYTHON="$PYTHON" tests/train/test_lineage.sh "$FC"
# With the CUDA emulation's program (built wherever the toolkit's headers are) the GPU ranks' path runs too.
run_suite distributed env PYTHON="$PYTHON" tests/train/test_dist.sh "$FC" \
    "$([ -x "$BUILD/framechain_emu" ] && echo "$BUILD/framechain_emu")"
run_suite prepare tests/dataset/test_prepare.sh "$FC"
run_suite prepare_media env PYTHON="$PYTHON" tests/dataset/test_prepare_media.sh "$FC"
run_suite generate tests/chain/test_generate.sh "$FC"
run_suite eval tests/chain/test_eval.sh "$FC"
run_suite score tests/chain/test_score.sh "$FC"
run_suite plot tests/report/test_plot.sh "$FC"
run_suite preview env PYTHON="$PYTHON" tests/report/test_preview.sh "$FC"
# The benchmark tools read what bench_ops prints (no timing asserted).
run_suite bench_tools tests/tools/test_bench_tools.sh "$FC" "$BUILD"
# make eval's script stops at its data before it trains (no model trained here); the eval scripts' tables.
run_suite eval_tools tests/tools/test_eval_tools.sh "$FC"
# make demo's script when its footage changes under its runs (one-step models, no generation).
run_suite demo_tools tests/tools/test_demo_tools.sh "$FC"
# The Python tools on the input that once broke them (their torch checks SKIP where PYTHON has no torch).
run_suite py_tools env PYTHON="$PYTHON" BUILD="$BUILD" tests/tools/test_py_tools.sh "$FC"
# The CUDA backend against the CPU (prints SKIP and passes nothing without a GPU).
run_suite cuda "$BUILD/test_cuda"
# The CUDA backend's kernels on the CPU (tests/cuda/emu); built wherever the CUDA toolkit's headers are,
# with the sanitizers in the sanitizer build.
if [ -x "$BUILD/test_cuda_emu" ]; then
    # on the emulation's second GPU, as rank 1 of a machine: a thread that forgets to select it stops the run
    run_suite cuda_emulated "$BUILD/test_cuda_emu" --quick --no-timings --gpu 1
    run_suite cuda_emulated_cli env PYTHON="$PYTHON" tests/cuda/test_cuda_emu_cli.sh "$BUILD/framechain_emu"
elif want cuda_emulated; then
    echo "SKIP cuda_emulated: the CUDA toolkit's headers were not found (CUDA_INC=): no $BUILD/test_cuda_emu" | tee -a "$tmp/all"
fi

passed=$(grep -c '^PASS ' "$tmp/all")
failed=$(grep -c '^FAIL ' "$tmp/all")
echo
grep '^FAIL ' "$tmp/all" | sed 's/^/  /'
grep '^SKIP ' "$tmp/all" | sed 's/^SKIP /  SKIPPED /'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
