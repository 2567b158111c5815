#!/usr/bin/env bash
# framechain autoencode: a tiny autoencoder's round trip on vtest.avi, and an AutoencoderKL's (random weights from
# tools/autoencoder_reference.py, so the PSNR is low; test_autoencoder checks the numbers against
# PyTorch): the lines it prints, the decoded frames written, the same output twice, the defaults (8
# frames of 256x256); refusals in one
# line: a misshapen tensor, a size that is no multiple of 8, a file with half an autoencoder, an
# existing --out.
# usage: tests/cli/test_autoencode.sh FRAMECHAIN DIR   (DIR made by tools/autoencoder_reference.py --make)
set -u
. "$(dirname "$0")/../lib.sh"
dir=${2:?usage: test_autoencode.sh FRAMECHAIN DIR}
VIDEO=$SAMPLES/vtest.avi

"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 5 --out "$tmp/rt" > "$tmp/a.log" 2>&1
rc=$?
last=$(tail -1 "$tmp/a.log")
pngs=$(ls "$tmp/rt" 2> /dev/null | grep -c '^frame-.*\.png$')
[ $rc -eq 0 ] && [[ $last =~ ^round\ trip:\ mean\ PSNR\ [0-9.]+\ dB\ over\ 5\ frames ]] && [ "$pngs" = 5 ]
expect autoencode_round_trip $? "exit $rc; $pngs frames written; $last"
grep -q '^autoencode: TAESD (tiny autoencoder), width 16, 4 latent channels, 8x, encoder and decoder' "$tmp/a.log" &&
    grep -q 'latents (4, 8, 8)' "$tmp/a.log"
expect autoencode_describes $? "$(head -2 "$tmp/a.log" | tr '\n' ' ')"
"$FC" autoencode --vae "$dir/taesd_f16.safetensors" --input "$VIDEO" --size 64 --frames 5 > "$tmp/b.log" 2>&1
rc_b=$?
"$FC" autoencode --vae "$dir/taesd_f16.safetensors" --input "$VIDEO" --size 64 --frames 5 > "$tmp/c.log" 2>&1
rc_c=$?
[ $rc_b -eq 0 ] && [ $rc_c -eq 0 ] && tail -1 "$tmp/b.log" | grep -q '^round trip: mean PSNR' &&
    [ "$(tail -1 "$tmp/b.log")" = "$(tail -1 "$tmp/c.log")" ]
expect autoencode_repeatable $? "twice: $(tail -1 "$tmp/c.log")"

"$FC" autoencode --vae "$dir/kl_original.safetensors" --input "$VIDEO" --size 32 --frames 2 > "$tmp/kl.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '^autoencode: AutoencoderKL (original layout, first_stage_model.), widths 32/32/64' "$tmp/kl.log" &&
    grep -q 'latents (4, 8, 8)' "$tmp/kl.log" && tail -1 "$tmp/kl.log" | grep -q '^round trip: mean PSNR'
expect autoencode_kl $? "exit $rc; $(head -1 "$tmp/kl.log"); $(tail -1 "$tmp/kl.log")"

# without --size and --frames: 8 frames of 256x256 (the PNGs written, read back: their count and header)
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --out "$tmp/defaults" > "$tmp/d.log" 2>&1
rc=$?
pngs=$(ls "$tmp/defaults" 2> /dev/null | grep -c '^frame-.*\.png$')
size=$("$PYTHON" -c 'import struct, sys; print("%dx%d" % struct.unpack(">II", open(sys.argv[1], "rb").read()[16:24]))' \
    "$tmp/defaults/frame-000000.png" 2> /dev/null)
[ $rc -eq 0 ] && [ "$pngs" = 8 ] && [ "$size" = 256x256 ] && grep -q 'over 8 frames' "$tmp/d.log"
expect autoencode_defaults $? "exit $rc; $pngs frames written of ${size:-?} (expected 8 of 256x256); $(tail -1 "$tmp/d.log")"

# an image is one frame: without --frames, that frame; with --frames 3, refused by name
ffmpeg -v error -i "$VIDEO" -frames:v 1 "$tmp/first.png"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/first.png" --size 64 > "$tmp/img.log" 2>&1
rc=$?
[ $rc -eq 0 ] && tail -1 "$tmp/img.log" | grep -q 'over 1 frame (min'
expect autoencode_image_one_frame $? "exit $rc; $(tail -1 "$tmp/img.log")"

refused() {  # NAME STATUS PATTERN ARGS...: exit STATUS, one line matching PATTERN, no --out left
    local name=$1 want=$2 pattern=$3 rc
    shift 3
    "$FC" autoencode "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq "$want" ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "$pattern" "$tmp/err" && [ ! -e "$tmp/none.gif" ]
    expect "$name" $? "exit $rc: $(cat "$tmp/err")"
}
refused autoencode_bad_tensor 1 "tensor encoder.layers.6.weight is F32 (16, 15, 3, 3), expected" \
    --vae "$dir/bad_shape.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
refused autoencode_bad_size 2 "size 60: the autoencoders take sides that are multiples of 8" \
    --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 60
"$PYTHON" - "$dir/taesd.safetensors" "$tmp/decoder_only.safetensors" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
t, _ = read_safetensors(sys.argv[1])
write_safetensors(sys.argv[2], {k: v for k, v in t.items() if k.startswith("decoder.")})
PY
refused autoencode_half 1 "decoder only, 0.08 M parameters: a round trip needs both the encoder and the decoder" \
    --vae "$tmp/decoder_only.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
refused autoencode_image_more_frames 2 "frames 3: .*first.png is an image, one frame" \
    --vae "$dir/taesd.safetensors" --input "$tmp/first.png" --size 64 --frames 3
refused autoencode_out_exists 1 "exists" --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --out "$tmp/rt"
refused autoencode_overwrite_without_out 2 "overwrite: it goes with --out" --vae "$dir/taesd.safetensors" --input "$VIDEO" \
    --size 64 --overwrite

# SIGINT part-way (once the first frames are decoded into the output): exit 130, nothing of --out left
mkdir -p "$tmp/stop"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 256 --frames 400 --out "$tmp/stop/int.mp4" \
    > "$tmp/stop.log" 2>&1 &
pid=$!
started() { ls -a "$tmp/stop" | grep -q partial; }
wait_until 60 $pid started
kill -INT $pid 2> /dev/null
wait $pid
rc=$?
left=$(ls -A "$tmp/stop" | wc -l)
expect autoencode_sigint_removes_output $(( rc != 130 || left != 0 || $(grep -c '^autoencode: stopped by SIGINT' "$tmp/stop.log") != 1 )) \
    "exit $rc, $left files left in the output's folder: $(tail -1 "$tmp/stop.log")"
