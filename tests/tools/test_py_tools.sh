#!/usr/bin/env bash
# The Python tools on the input that once broke them. compare_runs.py: runs of other architectures
# (depth, width) refused in one line naming a tensor, never compared or crashed on; the loss curves
# over the steps both runs logged, a last window shorter than --window compared too, no step in
# common refused; metrics.jsonl's nan/-nan/inf (printf's) read as numbers, a run's unfinished last line
# skipped with a note; a missing run or checkpoint in one line. torch_train.py: the network framechain
# trains (its parameter count, with and without cond_concat), a missing config or framechain in one
# line. shapes_events.py: one noise-aug level's clip rows (the first, or --level), too few clips and a
# missing draw_shapes in one line. taesd_to_safetensors.py: the two files swapped refused, a missing
# input and an OUT it cannot write in one line. vae_ckpt_to_safetensors.py: an AutoencoderKL in a whole
# SD .ckpt, in its own .pt beside loss/EMA keys, in F16 and BF16, converted to the tensors, dtypes and
# round trip of the same weights written directly; a pickle holding an object refused unloaded (no side
# effect), a UNet's file, an existing OUT, a missing IN or folder in one line. safetensors_io.py: a
# short file's path said once.
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

# ---- safetensors_io.py writes a scalar (shape [], which the format allows) as one, not as shape [1],
# and a transposed view in C order; read back as written ----
"$PY" - "$tmp/scalar.safetensors" > "$tmp/scalar.log" 2>&1 << 'PY'
import json, struct, sys
import numpy as np
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
m = np.arange(6, dtype=np.float32).reshape(2, 3)
write_safetensors(sys.argv[1], {"s": np.array(1.5, np.float32), "t": m.T})
b = open(sys.argv[1], "rb").read()
header = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
back, _ = read_safetensors(sys.argv[1])
ok = header["s"]["shape"] == [] and back["s"].shape == () and float(back["s"]) == 1.5 and (back["t"] == m.T).all()
print("ok" if ok else "wrong", header["s"]["shape"], back["s"].shape, back["t"].tolist())
PY
rc=$?
[ $rc = 0 ] && grep -q '^ok ' "$tmp/scalar.log"
expect safetensors_io_scalar_shape $? "status $rc: $(head -c 200 "$tmp/scalar.log")"

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

# ---- vae_ckpt_to_safetensors.py: a small random AutoencoderKL (autoencoder_reference.py's, the original
# single file's names) saved by torch.save as a whole Stable Diffusion .ckpt (first_stage_model.* beside
# a UNet's and a text encoder's keys, under "state_dict"), as an autoencoder's own .pt (with loss.* and
# model_ema.* keys) and in F16 and BF16: the converted files hold the same tensors, dtypes and bytes as
# the same weights written as safetensors directly, and framechain's round trip of them the same figures ----
if [ $HAVE_TORCH = 1 ]; then
    K=$tmp/kl
    mkdir -p "$K"
    "$PY" - "$K" << 'PY'
import os, sys
import numpy as np
import torch
sys.path.insert(0, "tools")
from autoencoder_reference import kl_original_names, kl_weights
from safetensors_io import write_safetensors
d = sys.argv[1]
w = kl_original_names({k: v.float() for k, v in kl_weights((32, 32), 1, 4, True, torch.Generator().manual_seed(5)).items()}, 2, "")
sd = {"first_stage_model." + k: v for k, v in w.items()}
sd.update({"model.diffusion_model.out.weight": torch.ones(4, 8), "cond_stage_model.proj": torch.ones(3)})
torch.save({"state_dict": sd, "global_step": 5}, d + "/whole.ckpt")
own = dict(w, **{"loss.logvar": torch.zeros(()), "loss.discriminator.main.0.weight": torch.ones(2, 3),
                 "model_ema.decay": torch.tensor(0.9999), "model_ema.encoderconv_inweight": torch.ones(2)})
torch.save({"state_dict": own}, d + "/own.pt")
torch.save({k: v.half() for k, v in w.items()}, d + "/half.pt")
torch.save({k: v.bfloat16() for k, v in w.items()}, d + "/bf16.pt", _use_new_zipfile_serialization=False)  # the legacy format
write_safetensors(d + "/ref.safetensors", {k: v.numpy() for k, v in w.items()})
write_safetensors(d + "/ref_f16.safetensors", {k: v.half().numpy() for k, v in w.items()})
bits = {k: v.bfloat16().view(torch.int16).numpy().view(np.uint16) for k, v in w.items()}
write_safetensors(d + "/ref_bf16.safetensors", bits, dtypes={k: "BF16" for k in bits})


class Trap:  # unpickled, it makes a folder: a side effect a refused file must not have
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


torch.save({"state_dict": w, "hparams": Trap(d + "/trapped")}, d + "/object.ckpt")
torch.save({"state_dict": w, "hparams": Trap(d + "/trapped-control")}, d + "/control.ckpt")
torch.save({"state_dict": {"model.diffusion_model.input_blocks.0.0.weight": torch.ones(8, 4, 3, 3),
                           "cond_stage_model.transformer.x": torch.ones(2)}}, d + "/unet.ckpt")
PY
    vae() {  # vae NAME ARGS...: status and output in $K/NAME.log
        local name=$1
        shift
        "$PY" tools/vae_ckpt_to_safetensors.py "$@" > "$K/$name.log" 2>&1
    }
    # same_tensors CONVERTED REFERENCE: the same names in the same order, dtypes, shapes and data bytes
    same_tensors() {
        "$PY" - "$1" "$2" << 'PY'
import json, struct, sys
def tensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    return [(k, v["dtype"], v["shape"], blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()], meta
(got, meta), (want, _) = tensors(sys.argv[1]), tensors(sys.argv[2])
diff = [g[:3] for g, w in zip(got, want) if g != w]
if len(got) != len(want) or diff:
    sys.exit("%d tensors against %d; first unlike: %s" % (len(got), len(want), diff[:1]))
print("%d tensors alike (%s), converted_from %s" % (len(got), got[0][1], meta.get("converted_from")))
PY
    }
    round_trip() {  # round_trip FILE: framechain autoencode's description and figures (the timing line left out)
        "$FC" --threads 1 autoencode --vae "$1" --input "$SAMPLES/vtest.avi" --size 32 --frames 2 2>&1 | grep -v ' ms a frame'
    }
    vae whole "$K/whole.ckpt" "$K/whole.safetensors"; s_whole=$?
    vae own "$K/own.pt" "$K/own.safetensors"; s_own=$?
    vae half "$K/half.pt" "$K/half.safetensors"; s_half=$?
    vae bf16 "$K/bf16.pt" "$K/bf16.safetensors"; s_bf16=$?
    report="status $s_whole, $s_own, $s_half, $s_bf16; "
    ok=0
    for pair in whole:ref own:ref half:ref_f16 bf16:ref_bf16; do
        alike=$(same_tensors "$K/${pair%:*}.safetensors" "$K/${pair#*:}.safetensors" 2>&1) || ok=1
        report+="${pair%:*}: $alike; "
    done
    ref=$(round_trip "$K/ref.safetensors")
    ref16=$(round_trip "$K/ref_f16.safetensors")
    [[ $ref =~ round\ trip:\ mean\ PSNR ]] && [ "$(round_trip "$K/whole.safetensors")" = "$ref" ] &&
        [ "$(round_trip "$K/own.safetensors")" = "$ref" ] && [ "$(round_trip "$K/half.safetensors")" = "$ref16" ] || ok=1
    [ $s_whole = 0 ] && [ $s_own = 0 ] && [ $s_half = 0 ] && [ $s_bf16 = 0 ] && [ $ok = 0 ] &&
        grep -q "^vae_ckpt_to_safetensors: 120 tensors of first_stage_model\.\* (the prefix stripped) written to .*whole.safetensors (120 F32); 2 keys left out (model\.diffusion_model\.\* 1, cond_stage_model\.\* 1)$" "$K/whole.log" &&
        grep -q "; 4 keys left out (loss\.\* 2, model_ema\.\* 2)$" "$K/own.log" &&
        grep -q "(120 F16); 0 keys left out$" "$K/half.log" && grep -q "(120 BF16); 0 keys left out$" "$K/bf16.log" &&
        "$PY" tools/safetensors_io.py "$K/whole.safetensors" | grep -q "^meta converted_from = whole.ckpt$" && ! have "$K/*.tmp-*"
    expect vae_ckpt_converted_same_as_safetensors $? "$report$(tail -1 "$K/whole.log"); framechain: $(echo "$ref" | tail -1)"

    # refusals, each one line, status 1, nothing written: a pickle holding a class instance (its
    # unpickling would make a folder, as the control shows: the refused file's made none), a UNet's file,
    # an existing OUT without --overwrite (its bytes kept; replaced with it), a missing IN, OUT's folder missing
    "$PY" -c 'import sys, torch; torch.load(sys.argv[1], weights_only=False)' "$K/control.ckpt" 2> /dev/null
    vae object "$K/object.ckpt" "$K/object.safetensors"; s_obj=$?
    [ -d "$K/trapped-control" ] && [ $s_obj = 1 ] && one_line "$K/object.log" && [ ! -e "$K/trapped" ] &&
        grep -q "object.ckpt: holds objects beyond tensors (.*mkdir.*): not loaded, since unpickling them could run code$" "$K/object.log" &&
        [ ! -e "$K/object.safetensors" ]
    expect vae_ckpt_refuses_objects_unloaded $? "status $s_obj: $(said "$K/object.log"); unpickled: $([ -e "$K/trapped" ] && echo made || echo none) \
(the control's unsafe load: $([ -d "$K/trapped-control" ] && echo made || echo none))"

    vae unet "$K/unet.ckpt" "$K/unet.safetensors"; s_unet=$?
    printf 'keep me' > "$K/taken.safetensors"
    vae taken "$K/own.pt" "$K/taken.safetensors"; s_taken=$?
    kept=$(cmp -s "$K/taken.safetensors" <(printf 'keep me') && echo kept || echo changed)
    vae replace "$K/own.pt" "$K/taken.safetensors" --overwrite; s_replace=$?
    vae noin "$K/no-such.ckpt" "$K/noin.safetensors"; s_noin=$?
    vae nodir "$K/own.pt" "$K/no-such-folder/out.safetensors"; s_nodir=$?
    [ $s_unet = 1 ] && [ $s_taken = 1 ] && [ $s_noin = 1 ] && [ $s_nodir = 1 ] && [ $s_replace = 0 ] &&
        one_line "$K/unet.log" && one_line "$K/taken.log" && one_line "$K/noin.log" && one_line "$K/nodir.log" &&
        grep -q "unet.ckpt: no AutoencoderKL in it .*it holds 2 keys: model\.diffusion_model\.\* 1, cond_stage_model\.\* 1$" "$K/unet.log" &&
        grep -q "taken.safetensors: exists (--overwrite replaces it)$" "$K/taken.log" && [ $kept = kept ] &&
        same_tensors "$K/taken.safetensors" "$K/ref.safetensors" > /dev/null 2>&1 &&
        grep -q "no-such.ckpt: no such file$" "$K/noin.log" && grep -q "out.safetensors: its folder .*no-such-folder does not exist$" "$K/nodir.log" &&
        [ ! -e "$K/unet.safetensors" ] && [ ! -e "$K/noin.safetensors" ] && ! have "$K/*.tmp-*"
    expect vae_ckpt_refusals $? "status $s_unet (a UNet's file): $(said "$K/unet.log"); status $s_taken (OUT exists): $(said "$K/taken.log"), \
its bytes $kept, status $s_replace with --overwrite; status $s_noin (no IN): $(said "$K/noin.log"); status $s_nodir (no folder): $(said "$K/nodir.log")"
else
    echo "SKIP vae_ckpt_converted_same_as_safetensors: no torch for $PY"
    echo "SKIP vae_ckpt_refuses_objects_unloaded: no torch for $PY"
    echo "SKIP vae_ckpt_refusals: no torch for $PY"
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
