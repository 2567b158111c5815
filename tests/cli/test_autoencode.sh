#!/usr/bin/env bash
# framechain autoencode: a tiny autoencoder's round trip on vtest.avi, and an AutoencoderKL's (random weights from
# tools/autoencoder_reference.py, so the PSNR is low; test_autoencoder checks the numbers against
# PyTorch): the lines it prints, the decoded frames written, the same output twice, the defaults (8
# frames of 256x256); refusals in one
# line: a misshapen tensor, a size that is no multiple of the file's factor (8, or 4 for the small
# AutoencoderKL, whose 20 is taken), a file with half an autoencoder, an
# existing --out, the original layout's halves as .safetensors (converted, the same round trip); an
# autoencoder inside a whole checkpoint read without the rest of it; a PyTorch checkpoint named as such;
# the frames streamed (the peak memory of 2 frames for 16), a clip shorter than asked for failing at its
# end, the output removed.
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

# an autoencoder inside a whole checkpoint (first_stage_model.*) beside 160 MB of other tensors: only its
# own tensors are read, so the peak memory is the plain file's (it was the whole file's), the round trip the same
"$PYTHON" - "$dir/kl_original.safetensors" "$tmp/whole.safetensors" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
t, _ = read_safetensors(sys.argv[1])
t["model.diffusion_model.out.weight"] = np.zeros((160, 1024, 256), np.float32)
write_safetensors(sys.argv[2], t)
PY
# In the sanitizer build freed memory would wait in ASan's quarantine (256 MB) and count as resident:
# it is switched off for these measurements (the variable means nothing to other builds).
peak_kib() {  # ARGS...: framechain ARGS, its stdout in $tmp/peak.log; prints its peak resident memory in KiB
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0" "$PYTHON" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$tmp/peak.log" "$FC" --threads 1 "$@"
}
plain=$(peak_kib autoencode --vae "$dir/kl_original.safetensors" --input "$VIDEO" --size 32 --frames 1)
plain_last=$(tail -1 "$tmp/peak.log")
whole=$(peak_kib autoencode --vae "$tmp/whole.safetensors" --input "$VIDEO" --size 32 --frames 1)
whole_last=$(tail -1 "$tmp/peak.log")
[[ $plain_last =~ ^round\ trip ]] && [ "$whole_last" = "$plain_last" ] && [ $((whole - plain)) -lt 32768 ]
expect autoencode_whole_checkpoint_reads_its_tensors $? "peak $((whole / 1024)) MiB against the autoencoder's own file's $((plain / 1024)) MiB; $whole_last"
rm -f "$tmp/whole.safetensors"

# the frames are streamed, each read, encoded, decoded and written before the next is read: 16 frames of
# 256x256 take the peak memory of 2 (all of them were held first: 0.8 MiB a frame more), the output
# folder the same PNGs frame for frame
short=$(peak_kib autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 256 --frames 2 --out "$tmp/stream2")
long=$(peak_kib autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 256 --frames 16 --out "$tmp/stream16")
long_last=$(tail -1 "$tmp/peak.log")
frame_kib=$((3 * 256 * 256 * 4 / 1024))
[[ $long_last =~ over\ 16\ frames ]] && [ $((long - short)) -lt $frame_kib ] && [ $((short - long)) -lt $frame_kib ] &&
    cmp -s "$tmp/stream2/frame-000001.png" "$tmp/stream16/frame-000001.png" && [ -e "$tmp/stream16/frame-000015.png" ]
expect autoencode_streams_frames $? "peak $((long / 1024)) MiB for 16 frames of 256x256, $((short / 1024)) MiB for 2 (a frame is $frame_kib KiB); $long_last"
rm -rf "$tmp/stream2" "$tmp/stream16"

# a video written says what made it (its comment tag)
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 3 --out "$tmp/rt.mkv" > /dev/null 2>&1
got=$(ffprobe -v error -show_entries format_tags=comment -of default=nw=1:nk=1 "$tmp/rt.mkv" 2>&1)
[ "$got" = "$("$FC" --version | head -1) autoencode: vae $dir/taesd.safetensors, input $VIDEO, 3 frames of 64x64 on cpu" ]
expect autoencode_comment $? "the comment tag: $got"
# ... at the input's frame rate (vtest.avi's 10; it was 12 whatever the input), or --fps's
rate=$(ffprobe -v error -select_streams v:0 -show_entries stream=r_frame_rate -of csv=p=0 "$tmp/rt.mkv" 2>&1)
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 3 --out "$tmp/rt24.mkv" --fps 24 \
    > /dev/null 2>&1
rate24=$(ffprobe -v error -select_streams v:0 -show_entries stream=r_frame_rate -of csv=p=0 "$tmp/rt24.mkv" 2>&1)
[ "$rate" = 10/1 ] && [ "$rate24" = 24/1 ]
expect autoencode_keeps_input_rate $? "the input's rate: $rate; with --fps 24: $rate24"

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
# a still FFmpeg reads (a BMP) is one frame too; a video of one frame asked for 8 says it is one frame
ffmpeg -v error -i "$VIDEO" -frames:v 1 "$tmp/first.bmp"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/first.bmp" --size 64 > "$tmp/bmp.log" 2>&1
rc=$?
ffmpeg -v error -i "$VIDEO" -frames:v 1 -c:v ffv1 "$tmp/one.mkv"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/one.mkv" --size 64 > "$tmp/one.log" 2>&1
rc1=$?
[ $rc -eq 0 ] && tail -1 "$tmp/bmp.log" | grep -q 'over 1 frame (min' && [ $rc1 -eq 1 ] &&
    grep -q "one.mkv: one frame (a still image?), fewer than the 8 asked for$" "$tmp/one.log"
expect autoencode_still_bmp_one_frame $? "first.bmp: exit $rc, $(tail -1 "$tmp/bmp.log"); one.mkv: exit $rc1, $(tail -1 "$tmp/one.log")"
# a high-speed camera's 2000 frames a second: the output at 1000, the most a video holds, and a line
# that says so (it was written at 25, 80 times slower, without a word)
ffmpeg -v error -y -f lavfi -i testsrc=s=64x64:r=2000 -frames:v 6 -pix_fmt yuv420p "$tmp/fast.mp4"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/fast.mp4" --size 64 --frames 4 --out "$tmp/fast_rt.mp4" \
    > "$tmp/fast.log" 2>&1
rc=$?
rate=$(ffprobe -v error -select_streams v:0 -show_entries stream=avg_frame_rate -of csv=p=0 "$tmp/fast_rt.mp4" 2> /dev/null)
[ $rc -eq 0 ] && [ "$rate" = 1000/1 ] &&
    grep -q "fast_rt.mp4 at 1000 frames a second, the most a video holds (the input has 2000)" "$tmp/fast.log"
expect autoencode_fast_input_rate $? "exit $rc, rate $rate: $(grep 'frames a second' "$tmp/fast.log")"

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
refused autoencode_bad_size 2 "size 60: $dir/taesd.safetensors takes sides that are multiples of 8" \
    --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 60
# the sides are the file's factor's multiples, as prepare takes them: 20 for the AutoencoderKL that
# shrinks by 4 (it was refused as no multiple of 8, whatever the file)
"$FC" autoencode --vae "$dir/kl.safetensors" --input "$VIDEO" --size 20 --frames 2 > "$tmp/kl20.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q 'latents (4, 5, 5)' "$tmp/kl20.log" && tail -1 "$tmp/kl20.log" | grep -q '^round trip: mean PSNR'
expect autoencode_size_by_factor $? "exit $rc: $(head -3 "$tmp/kl20.log" | tr '\n' ' ')"
refused autoencode_bad_size_kl 2 "size 18: $dir/kl.safetensors takes sides that are multiples of 4" \
    --vae "$dir/kl.safetensors" --input "$VIDEO" --size 18
"$PYTHON" - "$dir/taesd.safetensors" "$tmp/decoder_only.safetensors" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
t, _ = read_safetensors(sys.argv[1])
write_safetensors(sys.argv[2], {k: v for k, v in t.items() if k.startswith("decoder.")})
PY
refused autoencode_half 1 "decoder only, 0.08 M parameters: a round trip needs both the encoder and the decoder" \
    --vae "$tmp/decoder_only.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
# a tensor under the autoencoder's own names that its network does not read (a resnet more in a stage
# of an AutoencoderKL, a layer more in a TAESD decoder): refused naming it (it was left out silently,
# and the round trip ran another network than the file's, status 0)
"$PYTHON" - "$dir/kl.safetensors" "$dir/taesd.safetensors" "$tmp/kl_extra.safetensors" "$tmp/taesd_extra.safetensors" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
t, _ = read_safetensors(sys.argv[1])
t.update({k.replace("resnets.0.", "resnets.1."): v for k, v in t.items() if k.startswith("encoder.down_blocks.1.resnets.0.")})
write_safetensors(sys.argv[3], t)
t, _ = read_safetensors(sys.argv[2])
t["decoder.layers.30.weight"] = np.zeros((16, 16, 3, 3), np.float32)
write_safetensors(sys.argv[4], t)
PY
refused autoencode_kl_unread_tensor 1 "tensor encoder.down_blocks.1.resnets.1.[a-z0-9_.]* is read by no layer of the network its other tensors make, AutoencoderKL" \
    --vae "$tmp/kl_extra.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
refused autoencode_taesd_unread_tensor 1 "tensor decoder.layers.30.weight is read by no layer of the network its other tensors make, TAESD" \
    --vae "$tmp/taesd_extra.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
# inspect describes an autoencoder's file as the commands that run it read it (a half too), or says
# why they cannot (status 1); it listed the tensors alone
"$PYTHON" - "$dir/kl.safetensors" "$dir/taesd.safetensors" "$tmp/kl_dec_half.safetensors" "$tmp/taesd_pt.safetensors" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
t, _ = read_safetensors(sys.argv[1])  # a decoder cut from a whole file: it keeps quant_conv, which it never runs
write_safetensors(sys.argv[3], {k: v for k, v in t.items() if not k.startswith("encoder.")})
t, _ = read_safetensors(sys.argv[2])  # as diffusers writes it: with {"format": "pt"}
write_safetensors(sys.argv[4], t, {"format": "pt"})
PY
"$FC" inspect "$tmp/decoder_only.safetensors" > "$tmp/insp_half.txt" 2>&1
rc_half=$?
"$FC" inspect "$tmp/kl_dec_half.safetensors" > "$tmp/insp_kl_half.txt" 2>&1
rc_kl=$?
"$FC" inspect "$tmp/taesd_pt.safetensors" > "$tmp/insp_pt.txt" 2>&1
rc_pt=$?
[ $rc_kl = 0 ] && grep -q '^autoencoder: AutoencoderKL .*decoder only' "$tmp/insp_kl_half.txt" &&
    [ $rc_pt = 0 ] && grep -q '^autoencoder: TAESD (tiny autoencoder), width 16, 4 latent channels, 8x, encoder and decoder' "$tmp/insp_pt.txt"
expect inspect_describes_cut_half_and_diffusers_file $? "a KL decoder with quant_conv: status $rc_kl, $(tail -1 "$tmp/insp_kl_half.txt" | cut -c1-100); with format pt: status $rc_pt, $(tail -1 "$tmp/insp_pt.txt" | cut -c1-100)"
"$FC" inspect "$dir/bad_shape.safetensors" > "$tmp/insp_bad.txt" 2>&1
rc_bad=$?
[ $rc_half = 0 ] && grep -q '^autoencoder: TAESD (tiny autoencoder), width 16, 4 latent channels, 8x, decoder only' "$tmp/insp_half.txt" &&
    [ $rc_bad = 1 ] && grep -q '^NOT USABLE as an autoencoder: .*tensor encoder.layers.6.weight is F32 (16, 15, 3, 3)' "$tmp/insp_bad.txt"
expect inspect_describes_autoencoder $? "status $rc_half: $(tail -1 "$tmp/insp_half.txt"); status $rc_bad: $(tail -1 "$tmp/insp_bad.txt" | cut -c1-120)"
# the original layout's halves (nn.Sequential's names) as .safetensors files: each refused naming its
# half and the converter, which turns the pair into the file the round trip of taesd.safetensors reads
"$PYTHON" - "$dir/taesd.safetensors" "$tmp/orig_encoder.safetensors" "$tmp/orig_decoder.safetensors" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
t, _ = read_safetensors(sys.argv[1])
for path, part, shift in ((sys.argv[2], "encoder.layers.", 0), (sys.argv[3], "decoder.layers.", 1)):
    half = {}
    for k, v in t.items():
        if k.startswith(part):
            index, _, rest = k[len(part):].partition(".")
            half["%d.%s" % (int(index) + shift, rest)] = v
    write_safetensors(path, half)
PY
refused autoencode_original_encoder_half 1 "orig_encoder.safetensors: a TAESD encoder in the original layout .*taesd_to_safetensors.py ENCODER DECODER OUT.safetensors (.pth or .safetensors halves" \
    --vae "$tmp/orig_encoder.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
refused autoencode_original_decoder_half 1 "orig_decoder.safetensors: a TAESD decoder in the original layout .*taesd_to_safetensors.py" \
    --vae "$tmp/orig_decoder.safetensors" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
"$PYTHON" tools/taesd_to_safetensors.py "$tmp/orig_encoder.safetensors" "$tmp/orig_decoder.safetensors" \
    "$tmp/orig_converted.safetensors" > "$tmp/conv.log" 2>&1
rc=$?
"$FC" autoencode --vae "$tmp/orig_converted.safetensors" --input "$VIDEO" --size 64 --frames 2 > "$tmp/oc.log" 2>&1
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 2 > "$tmp/od.log" 2>&1
[ $rc -eq 0 ] && tail -1 "$tmp/oc.log" | grep -q '^round trip: mean PSNR' && [ "$(tail -1 "$tmp/oc.log")" = "$(tail -1 "$tmp/od.log")" ]
expect autoencode_original_safetensors_converted $? "converter: exit $rc, $(tail -1 "$tmp/conv.log"); $(tail -1 "$tmp/oc.log") (taesd.safetensors: $(tail -1 "$tmp/od.log"))"
refused autoencode_image_more_frames 2 "frames 3: .*first.png is an image, one frame" \
    --vae "$dir/taesd.safetensors" --input "$tmp/first.png" --size 64 --frames 3
# a still FFmpeg reads (BMP) is one frame as a PNG is: refused by its name, before the autoencoder is read
ffmpeg -v error -y -i "$tmp/first.png" "$tmp/first.bmp"
refused autoencode_bmp_more_frames 2 "frames 3: .*first.bmp is an image, one frame" \
    --vae "$tmp/no_such.safetensors" --input "$tmp/first.bmp" --size 64 --frames 3
ffmpeg -v error -i "$VIDEO" -frames:v 3 -c:v ffv1 "$tmp/three.mkv"
refused autoencode_clip_shorter 1 "three.mkv: the video has 3 frames, fewer than the 5 asked for" \
    --vae "$dir/taesd.safetensors" --input "$tmp/three.mkv" --size 64 --frames 5 --out "$tmp/none.gif"
# a folder's frames are counted at its opening: fewer than asked for is said before any work
mkdir -p "$tmp/two_frames" && ffmpeg -v error -i "$VIDEO" -frames:v 2 "$tmp/two_frames/frame-%02d.png"
refused autoencode_folder_shorter 1 "two_frames: the folder has 2 frames, fewer than the 5 asked for" \
    --vae "$dir/taesd.safetensors" --input "$tmp/two_frames" --size 64 --frames 5 --out "$tmp/none.gif"
[ ! -s "$tmp/out" ]
expect autoencode_folder_shorter_before_work $? "stdout: $(head -1 "$tmp/out")"
# a PyTorch checkpoint (a pickle: torch.save's zip, a bare pickle of protocol 4) named as such, with the
# converters for an AutoencoderKL's and for TAESD's; a zip of something else is no safetensors file, as before
"$PYTHON" -c 'import pickle, sys; open(sys.argv[1], "wb").write(pickle.dumps({"state_dict": {}}, protocol=4))' \
    "$tmp/vae.ckpt"
"$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1], "w").write(sys.argv[2], "taesd.safetensors")' \
    "$tmp/vae.zip" "$dir/taesd.safetensors"
pickled="a PyTorch checkpoint (a pickle), not a safetensors file: framechain reads only .safetensors and never unpickles .*\
an AutoencoderKL's .ckpt or .pt .* converts with tools/vae_ckpt_to_safetensors.py IN.ckpt OUT.safetensors, .*taesd_to_safetensors.py"
refused autoencode_pickle_zip 1 "taesd_decoder.pth: $pickled" --vae "$dir/taesd_decoder.pth" --input "$VIDEO" --size 64 \
    --out "$tmp/none.gif"
refused autoencode_pickle_bare 1 "vae.ckpt: $pickled" --vae "$tmp/vae.ckpt" --input "$VIDEO" --size 64 --out "$tmp/none.gif"
refused autoencode_other_zip 1 "vae.zip: not a safetensors file" --vae "$tmp/vae.zip" --input "$VIDEO" --size 64
# a truncated safetensors whose header length opens as a pickle does (0x280: 0x80 0x02) is a damaged
# safetensors file, not a PyTorch checkpoint
"$PYTHON" -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<Q", 0x280) + b"{\"a\": ")' "$tmp/cut.safetensors"
"$FC" autoencode --vae "$tmp/cut.safetensors" --input "$VIDEO" --size 64 > /dev/null 2> "$tmp/cut.err"
rc=$?
[ $rc = 1 ] && grep -q "cut.safetensors" "$tmp/cut.err" && ! grep -q "PyTorch" "$tmp/cut.err"
expect autoencode_damaged_safetensors_not_pickle $? "status $rc: $(head -1 "$tmp/cut.err")"
refused autoencode_out_exists 1 "exists" --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --out "$tmp/rt"
refused autoencode_fps_without_video 2 "fps 5: it goes with --out VIDEO" --vae "$dir/taesd.safetensors" --input "$VIDEO" \
    --size 64 --fps 5
# --fps with a folder of PNGs as --out: said in a warning, as generate says it, and the frames written
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 2 --out "$tmp/fps_folder" --fps 5 \
    > "$tmp/fpsf.out" 2> "$tmp/fpsf.err"
rc=$?
[ $rc = 0 ] && [ "$(grep -c "warning: --fps 5: .*fps_folder is a folder of PNGs, which has no frame rate" "$tmp/fpsf.err")" = 1 ] &&
    [ "$(ls "$tmp/fps_folder" | grep -c '^frame-.*png$')" -ge 2 ]
expect autoencode_fps_folder_warns $? "exit $rc: $(head -2 "$tmp/fpsf.err"); $(ls "$tmp/fps_folder" 2>&1 | head -3 | tr '\n' ' ')"
refused autoencode_overwrite_without_out 2 "overwrite: it goes with --out" --vae "$dir/taesd.safetensors" --input "$VIDEO" \
    --size 64 --overwrite

# A folder of PNG frames is read as prepare reads one: f1.png .. f12.png in natural order (f10 after
# f9, not after f1), the first 10 of them give the same decoded frames, byte for byte, as a lossless
# video of the same 12 frames (RGB, at the size asked: no resampling); a frame of another size among
# the first 10 stops the folder with prepare's line, and the frames before it are fewer than asked
# for; a folder with a video in it, or with no PNG or JPEG, is refused in one line
mkdir -p "$tmp/frames"
ffmpeg -v error -i "$VIDEO" -vf crop=64:64:300:200 -frames:v 12 -start_number 1 "$tmp/frames/f%d.png"
ffmpeg -v error -framerate 12 -i "$tmp/frames/f%d.png" -start_number 1 -c:v ffv1 -pix_fmt bgr0 "$tmp/frames.mkv"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/frames" --size 64 --frames 10 --out "$tmp/rt_folder" \
    > "$tmp/folder.log" 2>&1
rc=$?
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/frames.mkv" --size 64 --frames 10 --out "$tmp/rt_video" \
    > "$tmp/video.log" 2>&1
rc2=$?
same=0
for f in "$tmp"/rt_video/frame-*.png; do cmp -s "$f" "$tmp/rt_folder/${f##*/}" && same=$((same + 1)); done
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ "$same" = 10 ] && grep -q "10 frames of 64x64 from $tmp/frames on" "$tmp/folder.log" &&
    [ "$(tail -1 "$tmp/folder.log")" = "$(tail -1 "$tmp/video.log")" ]
expect autoencode_frame_folder $? "exit $rc (the video's $rc2); $same of 10 decoded frames the same as the video's; $(tail -1 "$tmp/folder.log")"
mkdir -p "$tmp/frames_odd"
cp "$tmp"/frames/*.png "$tmp/frames_odd/"
ffmpeg -v error -y -i "$tmp/frames/f5.png" -vf scale=72:64 "$tmp/frames_odd/f5.png"
refused autoencode_frame_folder_other_size 1 \
    ": stopped at a frame of another size: $tmp/frames_odd/f5.png is 72x64, unlike the 64x64 of $tmp/frames_odd/f1.png, the first in name order; 4 frames before it, fewer than the 10 asked for" \
    --vae "$dir/taesd.safetensors" --input "$tmp/frames_odd" --size 64 --frames 10 --out "$tmp/none.gif"
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$tmp/frames_odd" --size 64 --frames 4 > "$tmp/odd4.log" 2>&1
expect autoencode_frame_folder_before_other_size $(( $? != 0 || $(grep -c 'over 4 frames' "$tmp/odd4.log") != 1 )) \
    "the 4 frames before f5.png: $(tail -1 "$tmp/odd4.log")"
mkdir -p "$tmp/frames_video" "$tmp/no_frames"
cp "$tmp/frames/f1.png" "$tmp/frames.mkv" "$tmp/frames_video/"
echo text > "$tmp/no_frames/notes.txt"
refused autoencode_folder_with_video 1 "frames_video: holds a video (.*frames.mkv): a folder of frames holds PNG or JPEG images and no video; give the video itself" \
    --vae "$dir/taesd.safetensors" --input "$tmp/frames_video" --size 64 --frames 1 --out "$tmp/none.gif"
mkdir -p "$tmp/frames_out"
cp "$tmp/frames/f1.png" "$tmp/frames_out/frame-000000.png"
refused autoencode_input_folder_as_output 1 "frames_out: is the input folder .*frames_out; give the output another name" \
    --vae "$dir/taesd.safetensors" --input "$tmp/frames_out" --size 64 --frames 1 --out "$tmp/frames_out" --overwrite
mkdir -p "$tmp/holds_input"
cp "$VIDEO" "$tmp/holds_input/input.avi"
refused autoencode_folder_holding_input 1 "holds_input: holds the input file .*input.avi; give the output another name" \
    --vae "$dir/taesd.safetensors" --input "$tmp/holds_input/input.avi" --size 64 --frames 1 --out "$tmp/holds_input" --overwrite
refused autoencode_folder_without_frames 1 "no_frames: no PNG or JPEG frames in the folder" \
    --vae "$dir/taesd.safetensors" --input "$tmp/no_frames" --size 64 --out "$tmp/none.gif"

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
# the same while the autoencoder loads, to an autoencode started with SIGINT ignored (a script's
# background job; the test hook holds the start): the signal was lost, the video written, status 0
int_while_starting "$tmp/stop.log" "$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 4 \
    --out "$tmp/stop/early.mp4"
left=$(ls -A "$tmp/stop" | wc -l)
expect autoencode_sigint_while_loading $(( rc != 130 || left != 0 || $(grep -c '^autoencode: stopped by SIGINT after 0 of 4 frames' "$tmp/stop.log") != 1 )) \
    "exit $rc, $left files left in the output's folder: $(tail -1 "$tmp/stop.log")"

# --out with --overwrite never replaces the --vae file the command reads (a name with a video
# extension: the weights became a 1.4 KB video, status 0); a video name ending in '/' (a folder or a
# file?) is refused before anything is read
cp "$dir/taesd.safetensors" "$tmp/vae.mkv"
before=$(cksum < "$tmp/vae.mkv")
"$FC" autoencode --vae "$tmp/vae.mkv" --input "$VIDEO" --size 64 --frames 2 --out "$tmp/vae.mkv" --overwrite > "$tmp/ow.log" 2> "$tmp/ow.err"
rc=$?
"$FC" autoencode --vae "$dir/taesd.safetensors" --input "$VIDEO" --size 64 --frames 2 --out "$tmp/slash.gif/" > "$tmp/sl.log" 2> "$tmp/sl.err"
rc_sl=$?
[ $rc -eq 1 ] && [ "$(cksum < "$tmp/vae.mkv")" = "$before" ] && [ "$(wc -l < "$tmp/ow.err")" = 1 ] &&
    grep -q "vae.mkv: is the autoencoder file this command reads (--vae .*vae.mkv); give the output another name" "$tmp/ow.err" &&
    [ $rc_sl -eq 1 ] && grep -q "slash.gif/: the '/' at its end names a folder, but .gif names a video file" "$tmp/sl.err" &&
    [ ! -e "$tmp/slash.gif" ]
expect autoencode_out_never_its_vae $? "exit $rc: $(head -1 "$tmp/ow.err"); the file $([ "$(cksum < "$tmp/vae.mkv")" = "$before" ] && echo kept || echo replaced); exit $rc_sl: $(head -1 "$tmp/sl.err")"
