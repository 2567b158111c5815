#!/usr/bin/env bash
# The Python tools on the input that once broke them. compare_runs.py: runs of other architectures
# (depth, width) refused in one line naming a tensor, never compared or crashed on; the loss curves
# over the steps both runs logged, a last window shorter than --window compared too, no step in
# common refused; metrics.jsonl's nan/-nan/inf (printf's) read as numbers, a run's unfinished last line
# skipped with a note; a missing run or checkpoint in one line. torch_train.py: the network framechain
# trains (its parameter count, with and without cond_concat), a missing config or framechain in one
# line. shapes_events.py: one noise-aug level's clip rows (the first, or --level), too few clips and a
# missing draw_shapes in one line. taesd_to_safetensors.py: the two files swapped refused, a missing
# input and an OUT it cannot write in one line. safetensors_io.py: a short file's path said once.
# Checks that need torch print SKIP where $PYTHON has none.
# usage: tests/tools/test_py_tools.sh FRAMECHAIN   (environment: PYTHON, BUILD for draw_shapes)
set -u
. "$(dirname "$0")/../lib.sh"
PY=${PYTHON:-python3}
BUILD=${BUILD:-build}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
HAVE_TORCH=0
"$PY" -c 'import torch' 2> /dev/null && HAVE_TORCH=1

# one_line LOG: the log is one line (a refusal), no Python traceback
one_line() { [ "$(wc -l < "$1")" -eq 1 ] && ! grep -q Traceback "$1"; }
# said LOG: its first line and how many lines, for a check's message
said() { echo "$(head -1 "$1" | cut -c1-200) ($(wc -l < "$1") lines$(grep -q Traceback "$1" && echo ', a traceback'))"; }

# ---- compare_runs.py: four tiny runs (12 steps, checkpoints at 6 and 12): two of the same network,
# one deeper, one wider ----
R=$tmp/runs
mkdir -p "$R"
train() {  # train NAME KEY=VALUE...
    local name=$1 sets=() kv
    shift
    for kv in "$@"; do sets+=(--set "$kv"); done
    if ! "$FC" --threads 1 train --config configs/tiny/starter.conf --run "$R/$name" --steps 12 \
        --set warmup_steps=2 --set checkpoint_every=6 "${sets[@]}" > "$R/$name.log" 2>&1; then
        fail "compare_runs_train_$name" "$(tail -1 "$R/$name.log")"
        exit 1
    fi
}
train A
train B optimizer=adamw
train D3 depth=3
train W width=96
cmp_runs() {  # cmp_runs LOG ARGS...: compare_runs.py's status, stdout and stderr in LOG
    local log=$1
    shift
    "$PY" tools/compare_runs.py --params-step 12 "$@" > "$log" 2>&1
}
# a copy of run B whose metrics.jsonl SED changes
variant() {  # variant NAME SED
    cp -r "$R/B" "$R/$1" && sed -i "$2" "$R/$1/metrics.jsonl"
}

cmp_runs "$tmp/d3a.log" "$R/D3" "$R/A"; s1=$?
cmp_runs "$tmp/ad3.log" "$R/A" "$R/D3"; s2=$?
[ $s1 = 2 ] && [ $s2 = 2 ] && one_line "$tmp/d3a.log" && one_line "$tmp/ad3.log" &&
    grep -q "tensor names differ.*model\.blocks\.2\." "$tmp/d3a.log" && grep -q "tensor names differ.*model\.blocks\.2\." "$tmp/ad3.log"
expect compare_runs_refuses_other_depth $? "status $s1 (depth 3 against 2): $(said "$tmp/d3a.log"); status $s2 (swapped): $(said "$tmp/ad3.log")"

cmp_runs "$tmp/aw.log" "$R/A" "$R/W"; status=$?
[ $status = 2 ] && one_line "$tmp/aw.log" && grep -q "model\.patch_embed\.weight is 64x48 in .* but 96x48 in " "$tmp/aw.log"
expect compare_runs_refuses_other_width $? "status $status: $(said "$tmp/aw.log")"

# the last step's loss of B 1.5 times: only the window that holds step 12 differs
cp -r "$R/B" "$R/B12"
"$PY" - "$R/B/metrics.jsonl" "$R/B12/metrics.jsonl" << 'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
rec = json.loads(lines[11])
rec["loss"] *= 1.5
lines[11] = json.dumps(rec, separators=(",", ":"))
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
cmp_runs "$tmp/w5.log" "$R/A" "$R/B" --window 5; s_same=$?
cmp_runs "$tmp/w5b.log" "$R/A" "$R/B12" --window 5; s_last=$?
[ $s_same = 0 ] && [ $s_last = 1 ] && grep -qE '^ +11-12 ' "$tmp/w5.log" && grep -q '^curve: .* ok$' "$tmp/w5.log" &&
    grep -qE '^ +11-12 ' "$tmp/w5b.log" && grep -q '^curve: .* FAIL$' "$tmp/w5b.log"
expect compare_runs_partial_last_window $? "--window 5 on 12 steps: status $s_same (same losses), $s_last (step 12 differs): \
$(grep -E '^ +11-12|^curve' "$tmp/w5b.log" | tr '\n' ' ')"

cmp_runs "$tmp/w20.log" "$R/A" "$R/B" --window 20; s_same=$?
cmp_runs "$tmp/w20b.log" "$R/A" "$R/B12" --window 20; s_last=$?
[ $s_same = 0 ] && [ $s_last = 1 ] && grep -qE '^ +1-12 ' "$tmp/w20.log" && grep -q '^curve: .* FAIL$' "$tmp/w20b.log"
expect compare_runs_shorter_than_window $? "--window 20 on 12 steps: status $s_same (same losses), $s_last (step 12 differs): \
$(grep -E '^ +1-12|^curve' "$tmp/w20b.log" | tr '\n' ' ')"

variant S100 's/"step":\([0-9]*\)/"step":10\1/'  # steps 101 and on
cmp_runs "$tmp/none.log" "$R/A" "$R/S100"; status=$?
[ $status = 2 ] && one_line "$tmp/none.log" && grep -q "no step in common" "$tmp/none.log"
expect compare_runs_no_common_step $? "status $status: $(said "$tmp/none.log")"

# printf's words for numbers that are not finite: in other keys they are read and ignored; in a loss
# the window is not finite and the curves do not agree
variant NANG '2s/"grad_norm":[^,]*/"grad_norm":nan/; 3s/"grad_norm":[^,]*/"grad_norm":-inf/; 4s/"lr":[^,]*/"lr":inf/'
variant NANL '5s/"loss":[^,]*/"loss":-nan/'
cmp_runs "$tmp/nang.log" "$R/A" "$R/NANG"; s_other=$?
cmp_runs "$tmp/nanl.log" "$R/A" "$R/NANL"; s_loss=$?
[ $s_other = 0 ] && [ $s_loss = 1 ] && ! grep -q Traceback "$tmp/nang.log" "$tmp/nanl.log" &&
    grep -q '^curve: .*(1 not finite) FAIL$' "$tmp/nanl.log"
expect compare_runs_nonfinite_metrics $? "status $s_other (nan, -inf, inf in grad_norm and lr): $(grep '^curve' "$tmp/nang.log" || said "$tmp/nang.log"); \
status $s_loss (a loss of -nan): $(grep '^curve' "$tmp/nanl.log" || said "$tmp/nanl.log")"

# both runs infinite at the same step: no curve to agree on (inf == inf said the window agreed)
variant INFA '5s/"loss":[^,]*/"loss":inf/'
variant INFB '5s/"loss":[^,]*/"loss":inf/'
cmp_runs "$tmp/infs.log" "$R/INFA" "$R/INFB"; status=$?
[ $status = 1 ] && grep -q '^curve: .*(1 not finite) FAIL$' "$tmp/infs.log"
expect compare_runs_both_infinite $? "status $status: $(grep '^curve' "$tmp/infs.log" || said "$tmp/infs.log")"

variant TORN '$a{"step":13,"loss":1.2' && truncate -s -1 "$R/TORN/metrics.jsonl"  # no newline: still being written
cmp_runs "$tmp/torn.log" "$R/A" "$R/TORN"; status=$?
[ $status = 0 ] && grep -q "TORN/metrics.jsonl: line 13 is unfinished .*skipped" "$tmp/torn.log" && ! grep -q Traceback "$tmp/torn.log"
expect compare_runs_unfinished_last_line $? "status $status: $(grep -m1 -E 'unfinished|Error' "$tmp/torn.log" || said "$tmp/torn.log")"

cmp_runs "$tmp/norun.log" "$tmp/no-such-run" "$R/A"; s_run=$?
cmp_runs "$tmp/nockpt.log" "$R/A" "$R/B" --params-step 50; s_ckpt=$?
[ $s_run = 2 ] && [ $s_ckpt = 2 ] && one_line "$tmp/norun.log" && one_line "$tmp/nockpt.log" &&
    grep -q "no-such-run: no such run folder" "$tmp/norun.log" && grep -q "ckpt-00000050.safetensors: no checkpoint of step 50" "$tmp/nockpt.log"
expect compare_runs_missing_run_or_checkpoint $? "status $s_run (no run): $(said "$tmp/norun.log"); status $s_ckpt (no checkpoint): $(said "$tmp/nockpt.log")"

# ---- torch_train.py: framechain's network, the same parameters ----
if [ $HAVE_TORCH = 1 ]; then
    report=""
    ok=0
    for cc in none anchor+nearest; do
        theirs=$("$FC" inspect --config configs/tiny/starter.conf --set cond_concat=$cc 2> /dev/null | sed -n 's/^parameters  *\([0-9]*\) .*/\1/p')
        "$PY" tools/torch_train.py --framechain "$FC" --config configs/tiny/starter.conf --set cond_concat=$cc --steps 1 \
            --warmup 0 --threads 1 --json > "$tmp/tt-$cc.log" 2>&1
        ours=$(sed -n 's/.*"params": \([0-9]*\),.*/\1/p' "$tmp/tt-$cc.log")
        [ -n "$theirs" ] && [ "$ours" = "$theirs" ] || ok=1
        report+="cond_concat=$cc: framechain ${theirs:-?}, torch_train ${ours:-none ($(tail -1 "$tmp/tt-$cc.log" | cut -c1-120))}; "
    done
    expect torch_train_params_match_framechain $ok "$report"

    "$PY" tools/torch_train.py --framechain "$FC" --config "$tmp/no-such.conf" > "$tmp/ttconf.log" 2>&1; s_conf=$?
    mkdir -p "$tmp/elsewhere"
    (cd "$tmp/elsewhere" && "$PY" "$OLDPWD/tools/torch_train.py" --config "$OLDPWD/configs/tiny/starter.conf") > "$tmp/ttfc.log" 2>&1; s_fc=$?
    [ $s_conf -ne 0 ] && [ $s_fc -ne 0 ] && one_line "$tmp/ttconf.log" && one_line "$tmp/ttfc.log" &&
        grep -q "no-such.conf: no such file" "$tmp/ttconf.log" && grep -q "\./framechain: cannot run it" "$tmp/ttfc.log"
    expect torch_train_config_or_framechain_missing $? "status $s_conf (no config file): $(said "$tmp/ttconf.log"); \
status $s_fc (no ./framechain): $(said "$tmp/ttfc.log")"
else
    echo "SKIP torch_train_params_match_framechain: no torch for $PY"
    echo "SKIP torch_train_config_or_framechain_missing: no torch for $PY"
fi

# ---- shapes_events.py: an eval TSV of two noise-aug levels (a default eval's), the gains of level 0
# (clip k: 10 + k dB) far from those of 0.1 (k % 3 dB) ----
{
    printf 'section\tnoise_aug\tframe\tpsnr_chain\tpsnr_copy\tssim_chain\tssim_copy\tmean\tcontrast\tsharpness\t'
    printf 'real_mean\treal_contrast\treal_sharpness\tpsnr_hold0\tssim_hold0\tmotion_chain\tmotion_real\n'
    for level in 0 0.1; do
        for k in 1 2 3 4 5 6 7 8; do
            gain=$([ $level = 0 ] && echo $((10 + k)) || echo $((k % 3)))
            printf 'clip\t%s\t%d\t%d.5\t20.5\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\n' $level $k $((20 + gain))
        done
    done
} > "$tmp/levels.tsv"
events() {  # events NAME ARGS...: shapes_events.py's status and output in $tmp/NAME.log
    local name=$1
    shift
    "$PY" tools/shapes_events.py "$@" > "$tmp/$name.log" 2>&1
}
if [ ! -x "$BUILD/draw_shapes" ]; then
    fail shapes_events_one_level "no $BUILD/draw_shapes (make builds it; BUILD names the build folder)"
else
    BUILD=$BUILD events first "$tmp/levels.tsv"; s_first=$?
    BUILD=$BUILD events second --level 0.1 "$tmp/levels.tsv"; s_second=$?
    BUILD=$BUILD events other --level 0.5 "$tmp/levels.tsv"; s_other=$?
    [ "$s_first $s_second" = "0 0" ] && [ $s_other -ne 0 ] && one_line "$tmp/other.log" &&
        grep -q "levels.tsv: 8 clips at noise-aug level 0 " "$tmp/first.log" && grep -q '^all  *8 clips  +14.50 dB' "$tmp/first.log" &&
        grep -q "levels.tsv: 8 clips at noise-aug level 0.1 " "$tmp/second.log" && grep -q '^all  *8 clips  +1.12 dB' "$tmp/second.log" &&
        grep -q "no clip rows at noise-aug level 0.5 (the file's levels: 0, 0.1)" "$tmp/other.log"
    expect shapes_events_one_level $? "status $s_first (default): $(head -2 "$tmp/first.log" | tr '\n' ' ' | cut -c1-220); \
status $s_second (--level 0.1): $(sed -n 2p "$tmp/second.log"); status $s_other (--level 0.5): $(said "$tmp/other.log")"

    head -2 "$tmp/levels.tsv" > "$tmp/one.tsv"
    BUILD=$BUILD events one "$tmp/one.tsv"; status=$?
    [ $status -ne 0 ] && one_line "$tmp/one.log" && grep -q "one.tsv: 1 clip at noise-aug level 0: the fit needs more than 3" "$tmp/one.log"
    expect shapes_events_too_few_clips $? "status $status: $(said "$tmp/one.log")"
fi
BUILD=$tmp/no-build events nobuild "$tmp/levels.tsv"; status=$?
[ $status -ne 0 ] && one_line "$tmp/nobuild.log" && grep -q "no-build/draw_shapes: cannot run it" "$tmp/nobuild.log"
expect shapes_events_missing_draw_shapes $? "status $status: $(said "$tmp/nobuild.log")"

# ---- taesd_to_safetensors.py: an encoder's and a decoder's Sequential state dicts (the encoder's
# layer 0 a convolution, the decoder's layer 0 the clamp, without weights), as .safetensors halves ----
T=$tmp/taesd
mkdir -p "$T"
"$PY" - "$T" << 'PY'
import sys
import numpy as np
sys.path.insert(0, "tools")
from safetensors_io import write_safetensors
z = lambda *s: np.zeros(s, np.float32)
write_safetensors(sys.argv[1] + "/enc.safetensors", {"0.weight": z(4, 3, 3, 3), "0.bias": z(4), "1.conv.0.weight": z(4, 4, 3, 3)})
write_safetensors(sys.argv[1] + "/dec.safetensors", {"1.weight": z(4, 4, 3, 3), "1.bias": z(4), "3.conv.0.weight": z(4, 4, 3, 3)})
PY
taesd() {  # taesd NAME ARGS...: status and output in $T/NAME.log
    local name=$1
    shift
    "$PY" tools/taesd_to_safetensors.py "$@" > "$T/$name.log" 2>&1
}
taesd right "$T/enc.safetensors" "$T/dec.safetensors" "$T/right.safetensors"; s_right=$?
taesd swapped "$T/dec.safetensors" "$T/enc.safetensors" "$T/swapped.safetensors"; s_swapped=$?
taesd dec_only - "$T/enc.safetensors" "$T/dec_only.safetensors"; s_dec=$?
[ $s_right = 0 ] && "$PY" tools/safetensors_io.py "$T/right.safetensors" | grep -q '^decoder\.layers\.0\.weight ' &&
    [ $s_swapped = 1 ] && one_line "$T/swapped.log" && grep -q "look swapped" "$T/swapped.log" &&
    [ $s_dec = 1 ] && one_line "$T/dec_only.log" && grep -q "looks like an encoder's file" "$T/dec_only.log" &&
    [ ! -e "$T/swapped.safetensors" ] && [ ! -e "$T/dec_only.safetensors" ]
expect taesd_refuses_swapped_files $? "status $s_right (in order), $s_swapped (swapped): $(said "$T/swapped.log"); \
status $s_dec (an encoder's file as the decoder): $(said "$T/dec_only.log")"

taesd nopth "$T/no-such_encoder.pth" "$T/dec.safetensors" "$T/x.safetensors"; s_in=$?
taesd nodir "$T/enc.safetensors" "$T/dec.safetensors" "$T/no-such-folder/out.safetensors"; s_dir=$?
mkdir -p "$T/a-folder"
taesd isdir "$T/enc.safetensors" "$T/dec.safetensors" "$T/a-folder"; s_isdir=$?
[ $s_in = 1 ] && [ $s_dir = 1 ] && [ $s_isdir = 1 ] && one_line "$T/nopth.log" && one_line "$T/nodir.log" && one_line "$T/isdir.log" &&
    grep -q "no-such_encoder.pth: no such file" "$T/nopth.log" && grep -q "no-such-folder/out.safetensors: cannot write" "$T/nodir.log" &&
    grep -q "a-folder: cannot write" "$T/isdir.log" && [ -z "$(ls -A "$T/a-folder")" ] && ! have "$T/*.tmp-*"
expect taesd_missing_input_unwritable_out $? "status $s_in (no .pth): $(said "$T/nopth.log"); status $s_dir (no folder): \
$(said "$T/nodir.log"); status $s_isdir (OUT a folder): $(said "$T/isdir.log")"

if [ $HAVE_TORCH = 1 ]; then  # the original .pth pair swapped (the decoder's layer 0 would become layer -1)
    "$PY" -c 'import sys, torch
torch.save({"0.weight": torch.zeros(4, 3, 3, 3), "0.bias": torch.zeros(4)}, sys.argv[1] + "/enc.pth")
torch.save({"1.weight": torch.zeros(4, 4, 3, 3), "1.bias": torch.zeros(4)}, sys.argv[1] + "/dec.pth")' "$T"
    taesd pth "$T/dec.pth" "$T/enc.pth" "$T/pth.safetensors"; status=$?
    [ $status = 1 ] && one_line "$T/pth.log" && grep -q "look swapped" "$T/pth.log" && [ ! -e "$T/pth.safetensors" ]
    expect taesd_refuses_swapped_pth $? "status $status: $(said "$T/pth.log")"
else
    echo "SKIP taesd_refuses_swapped_pth: no torch for $PY"
fi

# ---- safetensors_io.py: a file too short for the header, a missing file: the path said once; a
# listing whose reader has gone (head): no traceback ----
printf abc > "$tmp/junk.bin"
"$PY" tools/safetensors_io.py "$tmp/junk.bin" > "$tmp/junk.log" 2>&1; s_junk=$?
"$PY" tools/safetensors_io.py "$tmp/no-such.safetensors" > "$tmp/nofile.log" 2>&1; s_no=$?
{ sleep 0.3; "$PY" tools/safetensors_io.py "$R/A/ckpt-00000012.safetensors" 2> "$tmp/pipe.err"; echo $? > "$tmp/pipe.rc"; } | true
[ $s_junk = 1 ] && [ $s_no = 1 ] && one_line "$tmp/junk.log" && one_line "$tmp/nofile.log" &&
    [ "$(grep -o 'junk\.bin' "$tmp/junk.log" | wc -l)" = 1 ] && grep -q "junk.bin: file is 3 bytes" "$tmp/junk.log" &&
    [ "$(grep -o 'no-such\.safetensors' "$tmp/nofile.log" | wc -l)" = 1 ] && ! grep -q Traceback "$tmp/pipe.err"
expect safetensors_io_says_path_once $? "status $s_junk (3 bytes): $(said "$tmp/junk.log"); status $s_no (missing): \
$(said "$tmp/nofile.log"); into a closed pipe: status $(cat "$tmp/pipe.rc"), $(wc -l < "$tmp/pipe.err") lines on stderr"
exit 0
