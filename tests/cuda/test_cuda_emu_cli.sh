#!/usr/bin/env bash
# The CUDA backend through the whole command line, on the CUDA emulation (build/framechain_emu:
# framechain linked against tests/cuda/emu): train on --device cuda with checkpoints staged through
# page-locked memory for the background writer, resume byte for byte, and generate with the three
# models on cuda-fp32 (the same pixels as on the CPU) and on cuda (bf16); an autoencoder's round trip
# on each device.
# usage: tests/cuda/test_cuda_emu_cli.sh BUILD/framechain_emu
set -u
: "${1:?usage: tests/cuda/test_cuda_emu_cli.sh FRAMECHAIN_EMU}"
. "$(dirname "$0")/../lib.sh"
train() {  # train ROLE RUN: 4 steps of the tiny config on the emulated GPU, a checkpoint every 2
    "$FC" --device cuda train --config "configs/tiny/$1.conf" --run "$2" --steps 4 --set warmup_steps=2 \
        --set checkpoint_every=2 > "$2.log" 2>&1
}

if ! "$FC" --version | grep -q '^  cuda (CUDA emulation'; then
    fail emu_cli_device "$FC does not list the emulated cuda device: $("$FC" --version | tail -2 | tr '\n' ' ')"
    exit 1
fi

# resume: the run again from its step-2 checkpoint gives the same step-4 checkpoint, byte for byte
for role in starter extrapolate interpolate; do
    train $role "$tmp/$role" || { fail emu_cli_train_$role "$(tail -1 "$tmp/$role.log")"; exit 1; }
done
cp -r "$tmp/starter" "$tmp/again"
rm "$tmp/again/ckpt-00000004.safetensors"
train starter "$tmp/again"
rc=$?
if [ $rc = 0 ] && grep -q "resuming .* from step 2" "$tmp/again.log" &&
    cmp -s "$tmp/starter/ckpt-00000004.safetensors" "$tmp/again/ckpt-00000004.safetensors"; then
    pass emu_cli_resume_identical "4 steps on the emulated cuda device, resumed from step 2: the same checkpoint bytes"
else
    fail emu_cli_resume_identical "status $rc: $(grep -m1 -E 'resuming|rror' "$tmp/again.log"); $(cmp "$tmp/starter/ckpt-00000004.safetensors" "$tmp/again/ckpt-00000004.safetensors" 2>&1)"
fi
# a plan over --vram-budget is refused after the run folder is made: the folder made for it goes too,
# one that was there (with a checkpoint in it) stays as it was
"$FC" --device cuda train --config configs/tiny/starter.conf --run "$tmp/over/budget" --steps 2 --vram-budget 0.01 \
    > "$tmp/over.log" 2>&1
rc=$?
before=$(ls -A "$tmp/again" | sort | tr '\n' ' ')
"$FC" --device cuda train --config configs/tiny/starter.conf --run "$tmp/again" --steps 6 --vram-budget 0.01 \
    > "$tmp/over_again.log" 2>&1
rc2=$?
after=$(ls -A "$tmp/again" | sort | tr '\n' ' ')
if [ $rc = 1 ] && [ $rc2 = 1 ] && grep -q "exceeds --vram-budget 0.01 GiB" "$tmp/over.log" && [ ! -e "$tmp/over" ] &&
    [ "$before" = "$after" ]; then
    pass emu_cli_refused_plan_leaves_nothing "a plan over --vram-budget refused (status 1): the run folder it made and its parent made for it removed; an existing one kept as it was ($after)"
else
    fail emu_cli_refused_plan_leaves_nothing "status $rc and $rc2; $(find "$tmp/over" 2>&1 | tr '\n' ' '); before: $before, after: $after; $(tail -1 "$tmp/over.log")"
fi
# heads of 24 values (width 96, 4 heads): the CPU trains them, the CUDA kernels take 16, 32, 64 or 128;
# refused before the run folder is made or a model allocated, and a checkpoint of such a model is
# refused by generate on cuda with one line naming it, nothing written
"$FC" --device cuda train --config configs/tiny/starter.conf --run "$tmp/dh24/run" --steps 1 --set width=96 \
    --set heads=4 > "$tmp/dh24.log" 2>&1
rc=$?
"$FC" --device cpu train --config configs/tiny/starter.conf --run "$tmp/dh24cpu" --steps 1 --set width=96 \
    --set heads=4 > "$tmp/dh24cpu.log" 2>&1
rc_cpu=$?
"$FC" --device cuda generate --starter "$tmp/dh24cpu" --extrapolate "$tmp/dh24cpu" --interpolate "$tmp/dh24cpu" \
    --first-frame shapes:0 --frames 7 --steps 1 --out "$tmp/dh24gen" \
    > "$tmp/dh24gen.log" 2>&1
rc_gen=$?
if [ $rc = 1 ] && [ "$(grep -c 'framechain:' "$tmp/dh24.log")" = 1 ] &&
    grep -q 'width = 96, heads = 4: heads of 24 values.*16, 32, 64, 128' "$tmp/dh24.log" && [ ! -e "$tmp/dh24" ] &&
    [ $rc_cpu = 0 ] && [ $rc_gen = 1 ] && grep -q "dh24cpu/ckpt-00000001.safetensors: width = 96, heads = 4" "$tmp/dh24gen.log" &&
    [ ! -e "$tmp/dh24gen" ]; then
    pass emu_cli_head_dim_refused "train and generate on cuda: $(grep 'framechain:' "$tmp/dh24gen.log")"
else
    fail emu_cli_head_dim_refused "train status $rc ($(ls -A "$tmp/dh24" 2>&1 | tr '\n' ' '); $(tail -1 "$tmp/dh24.log")), cpu $rc_cpu, generate $rc_gen: $(tail -1 "$tmp/dh24gen.log")"
fi
# on a GPU the plan's host part (the checkpoint's staging buffer) against the machine's memory
FRAMECHAIN_TEST_MEM_TOTAL_MIB=1 "$FC" --device cuda train --config configs/tiny/starter.conf --run "$tmp/host" \
    --steps 2 > "$tmp/host.log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "of host memory exceed this machine's 0.00 GiB: .*staging buffer" "$tmp/host.log" &&
    grep -q "^  on the host:" "$tmp/host.log" && [ ! -e "$tmp/host" ]; then
    pass emu_cli_host_plan_refused "a 1 MiB machine: the host part of the plan refused (status 1), no folder left"
else
    fail emu_cli_host_plan_refused "status $rc: $(grep -m1 'framechain:' "$tmp/host.log")"
fi
if grep -q "^checkpoint .*(blocked .* in the background)" "$tmp/starter.log"; then
    pass emu_cli_background_checkpoints "$(grep -c '^checkpoint .*in the background' "$tmp/starter.log") checkpoints written by the background writer"
else
    fail emu_cli_background_checkpoints "no background checkpoint line in the log"
fi

# previews: the EMA stands in for the weights on the device and they are put back byte for byte (the
# bf16 mirror rebuilt from them): the same checkpoint as the run without previews, apart from the config
"$FC" --device cuda train --config configs/tiny/starter.conf --run "$tmp/preview" --steps 4 --set warmup_steps=2 \
    --set checkpoint_every=2 --set sample_every=1 --set preview_budget=1 > "$tmp/preview.log" 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(ckpt_tensors "$tmp/preview/ckpt-00000004.safetensors")" = "$(ckpt_tensors "$tmp/starter/ckpt-00000004.safetensors")" ] &&
    [ -f "$tmp/preview/samples/step-00000004.png" ]; then
    pass emu_cli_preview_restores "a preview after every step on the emulated cuda device: the same step-4 tensors"
else
    fail emu_cli_preview_restores "status $rc: $(tail -1 "$tmp/preview.log")"
fi

# generate: 9 frames with each device; cuda-fp32 against the CPU pixel for pixel
RUNS=(--starter "$tmp/starter" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate")
for dev in cpu cuda-fp32 cuda; do
    if ! "$FC" --device $dev generate "${RUNS[@]}" --first-frame shapes:0 --frames 9 --steps 2 --out "$tmp/gen-$dev" \
        --quiet > "$tmp/gen-$dev.log" 2>&1; then
        fail emu_cli_generate_$dev "$(tail -1 "$tmp/gen-$dev.log")"
        continue
    fi
    n=$(ls "$tmp/gen-$dev" | grep -c '^frame-.*\.png$')
    if [ "$n" = 9 ]; then pass emu_cli_generate_$dev "9 frames on $dev"; else fail emu_cli_generate_$dev "$n frames"; fi
done
same=0
for f in "$tmp"/gen-cpu/*.png; do cmp -s "$f" "$tmp/gen-cuda-fp32/$(basename "$f")" && same=$((same + 1)); done
if [ "$same" = 9 ]; then
    pass emu_cli_generate_fp32_is_cpu "all 9 frames of cuda-fp32 identical to the CPU's"
else
    fail emu_cli_generate_fp32_is_cpu "$same of 9 frames identical to the CPU's"
fi

# autoencode: an AutoencoderKL and a tiny autoencoder (random weights, tools/autoencoder_reference.py)
# through the whole program on each device: the round trip's PSNR within 0.01 dB of the CPU's
PYTHON=${PYTHON:-python3}
if "$PYTHON" tools/autoencoder_reference.py --make "$tmp/ae" > "$tmp/ae.log" 2>&1; then
    for vae in kl taesd; do
        size=$([ $vae = kl ] && echo 32 || echo 64)
        for dev in cpu cuda-fp32 cuda; do
            "$FC" --device $dev autoencode --vae "$tmp/ae/$vae.safetensors" --input "$SAMPLES/vtest.avi" --size $size \
                --frames 2 > "$tmp/ae-$vae-$dev.log" 2>&1
        done
        psnr() { sed -n 's/^round trip: mean PSNR \([0-9.]*\) dB.*/\1/p' "$tmp/ae-$vae-$1.log"; }
        cpu=$(psnr cpu) f32=$(psnr cuda-fp32) b16=$(psnr cuda)
        if [ -n "$cpu" ] && awk -v a="$cpu" -v b="$f32" -v c="$b16" 'BEGIN { d1 = a - b; d2 = a - c;
            exit !(d1 < 0.01 && d1 > -0.01 && d2 < 0.01 && d2 > -0.01) }'; then
            pass emu_cli_autoencode_$vae "round trip on cpu, cuda-fp32, cuda: $cpu, $f32, $b16 dB"
        else
            fail emu_cli_autoencode_$vae "round trip on cpu, cuda-fp32, cuda: '$cpu', '$f32', '$b16' ($(tail -1 "$tmp/ae-$vae-cuda.log"))"
        fi
    done
    # latent space: a tiny autoencoder's latents (prepared on the CPU), the three tiny models trained on
    # them on the emulated device, generate --vae on each device: cuda-fp32 within 40 dB of the CPU's frames
    "$FC" --device cpu prepare --vae "$tmp/ae/taesd.safetensors" --input "$SAMPLES/vtest.avi" --out "$tmp/lat" \
        --size 64 --clip-frames 25 > "$tmp/lat.log" 2>&1
    for role in starter extrapolate interpolate; do
        "$FC" --device cuda train --config "configs/tiny/$role.conf" --set frame_size=8 --set channels=4 \
            --set patch=2 --data "$tmp/lat" --run "$tmp/lat-$role" --steps 4 > "$tmp/lat-$role.log" 2>&1
    done
    for dev in cpu cuda-fp32 cuda; do
        "$FC" --device $dev generate --starter "$tmp/lat-starter" --extrapolate "$tmp/lat-extrapolate" \
            --interpolate "$tmp/lat-interpolate" --first-frame "$SAMPLES/Megamind.avi" --frames 9 --steps 2 \
            --vae "$tmp/ae/taesd.safetensors" --out "$tmp/lgen-$dev" --quiet > "$tmp/lgen-$dev.log" 2>&1
    done
    cmp_frames=$("$PYTHON" - "$tmp/lgen-cpu" "$tmp/lgen-cuda-fp32" "$tmp/lgen-cuda" <<'PY'
import math, os, sys
sys.path.insert(0, "tests/report")
from pngread import load_png
def psnr(a, b):
    mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)
    return 99.0 if mse == 0 else 10 * math.log10(255 * 255 / mse)
names = sorted(f for f in os.listdir(sys.argv[1]) if f.endswith(".png"))
for d in sys.argv[2:]:
    if sorted(f for f in os.listdir(d) if f.endswith(".png")) != names:
        print("frames differ in number: %s" % d)
        sys.exit(1)
pixels = lambda path: b"".join(load_png(path)[2])
worst = min(psnr(pixels(os.path.join(sys.argv[1], n)), pixels(os.path.join(sys.argv[2], n))) for n in names)
print("%d frames; cuda-fp32 against cpu: worst frame %.1f dB" % (len(names), worst))
sys.exit(0 if len(names) == 9 and worst >= 40 else 1)
PY
)
    if [ $? = 0 ]; then
        pass emu_cli_latent_generate "trained on latents on the emulated device, generate --vae on cpu, cuda-fp32, cuda: $cmp_frames"
    else
        fail emu_cli_latent_generate "$cmp_frames; $(tail -1 "$tmp/lgen-cuda.log")"
    fi
else
    fail emu_cli_autoencode "tools/autoencoder_reference.py --make failed: $(tail -1 "$tmp/ae.log")"
fi

# FRAMECHAIN_CUDA_ROUTES: a route switched on is named in the device's description; an unknown
# name or a value other than 0 or 1 stops the program with one line that lists the routes.
desc=$(FRAMECHAIN_CUDA_ROUTES=attn_gemm=1 "$FC" --version 2>&1 | grep '^  cuda (')
if echo "$desc" | grep -qE 'routes dgelu_epilogue=0,attn_gemm=1(,[a-z_0-9]+=[01])*\)$'; then
    pass emu_cli_routes_named "$desc"
else
    fail emu_cli_routes_named "no routes in: $desc"
fi
# cuda-fp32 names only the routes it can take: the fp8 routes and the GELU epilogue are bf16 GEMMs'
desc=$(FRAMECHAIN_CUDA_ROUTES=fp8_fwd=1,attn_gemm=1 "$FC" --version 2>&1 | grep '^  cuda-fp32 (')
if echo "$desc" | grep -q 'routes attn_gemm=1,' && ! echo "$desc" | grep -qE 'fp8|dgelu'; then
    pass emu_cli_routes_named_fp32 "$desc"
else
    fail emu_cli_routes_named_fp32 "bf16 routes or none in: $desc"
fi
for bad in nosuch=1 attn_gemm=2 attn_gemm; do
    out=$(FRAMECHAIN_CUDA_ROUTES=$bad "$FC" --device cuda train --config configs/tiny/starter.conf --run "$tmp/routes" \
        --steps 1 2>&1)
    rc=$?
    if [ $rc != 0 ] && [ "$(echo "$out" | grep -c 'FRAMECHAIN_CUDA_ROUTES')" = 1 ] && echo "$out" | grep -q 'routes: ' &&
        [ ! -e "$tmp/routes" ]; then
        pass emu_cli_routes_refused_$bad "status $rc: $(echo "$out" | grep FRAMECHAIN_CUDA_ROUTES)"
    else
        fail emu_cli_routes_refused_$bad "status $rc: $(echo "$out" | tail -2 | tr '\n' ' ')"
    fi
done

# A run trained on the CPU and resumed on the emulated GPU (--extend past its end): it goes on, says
# where its steps were made, and the lineage of its next checkpoint records the change; a resume on the
# same device says nothing of it
"$FC" --device cpu train --config configs/tiny/starter.conf --run "$tmp/moved" --steps 2 --set checkpoint_every=2 \
    > "$tmp/moved1.log" 2>&1
"$FC" --device cuda-fp32 train --config configs/tiny/starter.conf --run "$tmp/moved" --steps 4 --extend \
    --set checkpoint_every=2 > "$tmp/moved2.log" 2>&1
rc=$?
"$FC" --device cuda-fp32 train --config configs/tiny/starter.conf --run "$tmp/moved" --steps 6 --extend \
    --set checkpoint_every=2 > "$tmp/moved3.log" 2>&1
rc3=$?
"$FC" inspect "$tmp/moved/ckpt-00000006.safetensors" > "$tmp/moved.inspect" 2>&1
if [ $rc = 0 ] && [ $rc3 = 0 ] &&
    grep -q "^$tmp/moved: its steps to 2 were made on cpu (fp32), the next on cuda-fp32 (fp32) (recorded in its lineage)$" "$tmp/moved2.log" &&
    ! grep -q "were made on" "$tmp/moved3.log" && grep -q "^device  *cuda-fp32 (fp32)$" "$tmp/moved.inspect" &&
    [ "$(grep -c "^  device changed at step 2: cpu (fp32) -> cuda-fp32 (fp32)$" "$tmp/moved.inspect")" = 1 ]; then
    pass emu_cli_device_change_recorded "$(grep 'were made on' "$tmp/moved2.log")"
else
    fail emu_cli_device_change_recorded "status $rc and $rc3: $(grep -m1 -E 'made on|^framechain' "$tmp/moved2.log"); inspect: $(grep -E '^device|changed' "$tmp/moved.inspect" | tr '\n' ' ')"
fi
