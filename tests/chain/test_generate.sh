#!/usr/bin/env bash
# framechain generate: the three tiny roles trained for a few steps, then chains of 181 frames (mp4,
# gif) and 1000 frames (a PNG folder), the frame count checked by decoding what was written; bad
# input gives one clear line, a non-zero exit, and no output file.
set -u
. "$(dirname "$0")/../lib.sh"
VIDEO=$SAMPLES/vtest.avi
train_roles generate 12 2

# count_frames FILE: frames decoded by ffprobe
count_frames() { ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$1" 2> /dev/null; }

if ! command -v ffmpeg > /dev/null || [ ! -f "$VIDEO" ]; then
    fail generate_inputs "ffmpeg or $VIDEO missing (apt-get install ffmpeg opencv-doc)"
    exit 1
fi
ffmpeg -v error -i "$VIDEO" -frames:v 1 "$tmp/first.png"
ffmpeg -v error -f lavfi -i color=c=red:s=16x16 -frames:v 1 "$tmp/small.png"
ffmpeg -v error -i "$VIDEO" -frames:v 1 -q:v 3 "$tmp/first.jpg"
head -c 3000 /dev/urandom > "$tmp/garbage.png"

# 181 frames from a PNG into .mp4, and from the video itself into .gif
for out in "181.mp4 $tmp/first.png" "181.gif $VIDEO"; do
    set -- $out
    if "$FC" generate "${RUNS[@]}" --first-frame "$2" --frames 181 --steps 2 --out "$tmp/$1" --quiet > "$tmp/gen.log" 2>&1; then
        n=$(count_frames "$tmp/$1")
        if [ "$n" = 181 ]; then pass "generate_$1" "181 frames decoded from the file"; else fail "generate_$1" "decoded $n frames"; fi
    else
        fail "generate_$1" "$(tail -1 "$tmp/gen.log")"
    fi
done
# Models that learnt their context frames noised up to noise_aug_max = 0 (the extrapolate and the
# interpolate), at the default level 0.1: said in one line naming both; at --noise-aug 0, nothing.
for role in extrapolate interpolate; do
    "$FC" --threads 2 train --config configs/tiny/$role.conf --run "$tmp/aug0_$role" --steps 1 --set noise_aug_max=0 \
        > /dev/null 2>&1
done
aug0=(--starter "$tmp/starter" --extrapolate "$tmp/aug0_extrapolate" --interpolate "$tmp/aug0_interpolate")
"$FC" generate "${aug0[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/aug0a" > /dev/null 2> "$tmp/aug0a.err"
rc1=$?
"$FC" generate "${aug0[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --noise-aug 0 --out "$tmp/aug0b" \
    > /dev/null 2> "$tmp/aug0b.err"
rc2=$?
[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$(grep -c warning "$tmp/aug0a.err")" = 1 ] && [ "$(grep -c warning "$tmp/aug0b.err")" = 0 ] &&
    grep -q "^framechain: warning: noise augmentation 0.1: the extrapolate and interpolate models learnt context frames noised up to noise_aug_max = 0, so they see noisier ones than any they were trained on (--noise-aug 0 keeps to what they all saw)$" "$tmp/aug0a.err"
expect generate_noise_aug_above_trained_said $? "status $rc1, $rc2: $(grep warning "$tmp/aug0a.err" | cut -c1-200); at --noise-aug 0: $(grep -c warning "$tmp/aug0b.err") warnings"

# A first frame of black and grey pixels in a checkerboard: the frames made clip at black, where the
# colour guard cannot bring a channel's mean and contrast into its band: said in one warning counting
# the frames (none without the colour guard, whose band is then not promised).
"${PYTHON:-python3}" - "$tmp/checker.png" <<'PY'
import struct, sys, zlib
rows = b"".join(b"\0" + bytes(v for x in range(32) for v in ((0, 0, 0) if (x + y) % 2 == 0 else (153, 153, 153)))
                for y in range(32))
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 32, 32, 8, 2, 0, 0, 0)) +
                              chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
PY
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/checker.png" --frames 12 --steps 2 --noise-aug 0 --colour-guard 0.05 \
    --colour-ramp 0 --out "$tmp/checker_a" > /dev/null 2> "$tmp/checker_a.err"
rc1=$?
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/checker.png" --frames 12 --steps 2 --noise-aug 0 --out "$tmp/checker_b" \
    > /dev/null 2> "$tmp/checker_b.err"
rc2=$?
[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$(grep -c warning "$tmp/checker_b.err")" = 0 ] &&
    grep -Eq "^framechain: warning: the drift guards could not hold every one of the 11 frames made \(.*\); the colour guard left ([1-9]|1[01]) outside its band" "$tmp/checker_a.err"
expect generate_guard_band_missed_said $? "status $rc1, $rc2: $(grep warning "$tmp/checker_a.err" | cut -c1-240); without the colour guard $(grep -c warning "$tmp/checker_b.err") warnings"

# The video says what made it (its comment tag, as ffprobe shows it): the build, the models and their
# steps, the first frame and every setting of the frames, as the header lines say them; a path's
# escape byte as '?'
for ext in mkv mp4 avi; do
    "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 2 --seed 7 --temperature 0.5 \
        --noise-aug 0.2 --out "$tmp/made.$ext" > "$tmp/made.log" 2>&1
    size=$(sed -n 's/^generate: 9 frames of \([0-9]*x[0-9]*\) on cpu.*/\1/p' "$tmp/made.log")
    want="$("$FC" --version | head -1) generate: starter $tmp/starter (step 12), extrapolate $tmp/extrapolate (step 12), \
interpolate $tmp/interpolate (step 12); first frame $tmp/first.png (given 1); 9 frames of $size on cpu; 2 Euler steps; \
noise augmentation 0.2; guidance 1; temperature 0.5; drift guards: sharpness at most 1.05x frame 0's, colour off; seed 7"
    got=$(ffprobe -v error -show_entries format_tags=comment -of default=nw=1:nk=1 "$tmp/made.$ext")
    [ "$got" = "$want" ]
    expect "generate_comment_$ext" $? "the comment tag is '$got', expected '$want'"
done
cp "$tmp/first.png" "$tmp/esc$(printf '\033')[31m.png"
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/esc$(printf '\033')[31m.png" --frames 8 --steps 2 --out "$tmp/esc.mkv" \
    --quiet > /dev/null 2>&1
got=$(ffprobe -v error -show_entries format_tags=comment -of default=nw=1:nk=1 "$tmp/esc.mkv")
case $got in *"first frame $tmp/esc?[31m.png (given 1)"*) true ;; *) false ;; esac
expect generate_comment_printable $? "the comment tag is '$got'"
if ls -a "$tmp" | grep -q partial; then fail generate_no_partial_files "$(ls -a "$tmp" | grep partial)"; else pass generate_no_partial_files "no temporary file left"; fi

# a TIFF first frame (read by FFmpeg: its decoder, told to stop at damage, had refused the ResolutionUnit
# tag of FFmpeg's own TIFFs) gives the chain of the same frame as a PNG, byte for byte
ffmpeg -v error -i "$tmp/first.png" "$tmp/first.tiff"
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 2 --out "$tmp/from_png" --quiet > /dev/null 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.tiff" --frames 9 --steps 2 --out "$tmp/from_tiff" --quiet \
    > "$tmp/tiff.log" 2>&1
diff -r "$tmp/from_png" "$tmp/from_tiff" > /dev/null && [ "$(ls "$tmp/from_tiff" | wc -l)" = 9 ]
expect generate_tiff_first_frame $? "$(tail -1 "$tmp/tiff.log"); $(diff -rq "$tmp/from_png" "$tmp/from_tiff" 2>&1 | wc -l) frames differ"
head -c 3000 "$tmp/first.tiff" > "$tmp/cut.tiff"  # a cut TIFF is still refused, not read as a concealed picture
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/cut.tiff" --frames 9 --steps 2 --out "$tmp/from_cut" --quiet > "$tmp/cut.log" 2>&1
rc=$?
[ $rc = 1 ] && [ ! -e "$tmp/from_cut" ] && [ "$(wc -l < "$tmp/cut.log")" = 1 ] && grep -q "cut.tiff" "$tmp/cut.log"
expect generate_cut_tiff_refused $? "status $rc: $(cat "$tmp/cut.log")"

# shapes:N as the first frame is the 8-bit frame generate writes as frame 0: the chain from that PNG
# is the same chain, byte for byte
"$FC" generate "${RUNS[@]}" --first-frame shapes:1 --frames 9 --steps 2 --out "$tmp/sh1" --quiet > /dev/null 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/sh1/frame-000000.png" --frames 9 --steps 2 --out "$tmp/sh1png" --quiet \
    > /dev/null 2>&1
diff -r "$tmp/sh1" "$tmp/sh1png" > /dev/null && [ "$(ls "$tmp/sh1" | wc -l)" = 9 ]
expect generate_shapes_first_frame_as_written $? "shapes:1 and its frame 0 as a PNG: $(diff -rq "$tmp/sh1" "$tmp/sh1png" 2>&1 | wc -l) frames differ"
# a checkpoint named for a newer step than its metadata holds (a copy under another name) is passed
# over for the newest true one, as train passes it over; a checkpoint file given as the run is named
cp -r "$tmp/starter" "$tmp/renamed"
cp "$tmp/starter/ckpt-00000012.safetensors" "$tmp/renamed/ckpt-00000020.safetensors"
"$FC" generate --starter "$tmp/renamed" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" \
    --first-frame shapes:1 --frames 9 --steps 2 --out "$tmp/renamed_out" > "$tmp/renamed.log" 2>&1
rc=$?
expect generate_skips_misnamed_checkpoint $(( rc != 0 || $(grep -c "skipping .*ckpt-00000020.safetensors: its metadata says step 12" "$tmp/renamed.log") != 1 ||
    $(grep -c "(starter step 12," "$tmp/renamed.log") != 1 )) "status $rc: $(grep -m2 'skipping\|starter step' "$tmp/renamed.log" | cut -c1-120 | tr '\n' ' ')"

# SIGINT or SIGTERM while frames are being written (once the partial video holds 16 KB, or the partial
# folder 20 PNGs): status 128 + the signal, the partial output removed, nothing at --out
mkdir "$tmp/stop"
for case in "int.mp4 INT 130" "frames TERM 143"; do
    set -- $case
    (exec "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 1000 --steps 2 --out "$tmp/stop/$1" \
        --quiet) > "$tmp/stop.log" 2>&1 &
    pid=$!
    partial_written() {
        [ -n "$(find "$tmp/stop" -maxdepth 1 -type f -name "*partial*" -size +16k 2> /dev/null)" ] ||
            [ "$(find "$tmp/stop" -mindepth 2 -name '*.png' 2> /dev/null | wc -l)" -ge 20 ]
    }
    wait_until 60 $pid partial_written
    kill -$2 $pid 2> /dev/null
    wait $pid
    rc=$?
    left=$(ls -a "$tmp/stop" | grep -vc '^\.\.\?$')
    if [ $rc -eq $3 ] && [ "$left" = 0 ] && grep -q "stopped by SIG$2 at frame .*, nothing written$" "$tmp/stop.log"; then
        pass "generate_sig$2_removes_partial" "status $rc, nothing left in the output folder: $(tail -1 "$tmp/stop.log")"
    else
        fail "generate_sig$2_removes_partial" "status $rc, $left entries left ($(ls -a "$tmp/stop" | tr '\n' ' '))${waited:+, $waited}: $(tail -1 "$tmp/stop.log")"
    fi
done

# the same under --overwrite of a video made before: that video is kept, byte for byte, and the line says so
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/stop/old.mp4" --quiet > /dev/null 2>&1
cp "$tmp/stop/old.mp4" "$tmp/old_copy.mp4"
(exec "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 1000 --steps 2 --out "$tmp/stop/old.mp4" \
    --overwrite --quiet) > "$tmp/stop.log" 2>&1 &
pid=$!
wait_until 60 $pid partial_written
kill -INT $pid 2> /dev/null
wait $pid
rc=$?
[ $rc = 130 ] && cmp -s "$tmp/stop/old.mp4" "$tmp/old_copy.mp4" && [ "$(ls -a "$tmp/stop" | grep -vc '^\.\.\?$')" = 1 ] &&
    grep -q "stopped by SIGINT at frame .*: the partial output is removed, $tmp/stop/old.mp4 kept as it was$" "$tmp/stop.log"
expect generate_sigint_overwrite_keeps_old $? "status $rc, $(ls -a "$tmp/stop" | tr '\n' ' '): $(tail -1 "$tmp/stop.log")"

# SIGINT while the models load, to a generate started with SIGINT ignored (what a script's background
# job gets; the test hook holds the start): it was lost, the video written, status 0. Status 130,
# nothing written, the old video kept
int_while_starting "$tmp/stop.log" "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 \
    --out "$tmp/stop/old.mp4" --overwrite --quiet
[ $rc = 130 ] && cmp -s "$tmp/stop/old.mp4" "$tmp/old_copy.mp4" && [ "$(ls -a "$tmp/stop" | grep -vc '^\.\.\?$')" = 1 ] &&
    grep -q "^framechain: stopped by SIGINT before the first frame: nothing written, $tmp/stop/old.mp4 kept as it was$" "$tmp/stop.log"
expect generate_sigint_while_loading $? "status $rc, $(ls -a "$tmp/stop" | tr '\n' ' '): $(tail -1 "$tmp/stop.log")"
# SIGINT once the video is in place, before its line (held there by a test hook): the signal's default
# action ended generate with the video written and no word of it, status 130 (a script took it for a
# failure, and its rerun was refused: "already exists"). The video is whole: its line, status 0
(exec env FRAMECHAIN_TEST_FINISHED_DELAY_MS=5000 "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" \
    --frames 9 --steps 1 --out "$tmp/stop/late.mp4" --quiet) > "$tmp/late.log" 2>&1 &
pid=$!
wait_until 60 $pid grep -q '^test hook: the output in place held' "$tmp/late.log"
kill -INT $pid 2> /dev/null
wait $pid
rc=$?
[ $rc = 0 ] && [ -s "$tmp/stop/late.mp4" ] && grep -q "^generate: wrote $tmp/stop/late.mp4 (9 frames" "$tmp/late.log"
expect generate_sigint_after_rename_says_wrote $? "status $rc, $(ls "$tmp/stop" | tr '\n' ' '): $(tail -1 "$tmp/late.log")"

# 1000 frames into a folder of PNGs from a JPEG; the first PNG is the input frame, the others are made
if "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.jpg" --frames 1000 --steps 1 --out "$tmp/frames" > "$tmp/gen.log" 2>&1; then
    n=$(ls "$tmp/frames" | grep -c '^frame-[0-9]*\.png$')
    last=$(ls "$tmp/frames" | tail -1)
    w=$(ffprobe -v error -show_entries stream=width,height -of csv=p=0 "$tmp/frames/$last")
    if [ "$n" = 1000 ] && [ "$last" = frame-000999.png ] && [ "$w" = "32,32" ]; then
        pass generate_1000_png "1000 PNGs of 32x32, frame-000000 to frame-000999; $(grep -o 'wrote.*' "$tmp/gen.log")"
    else
        fail generate_1000_png "$n PNGs, last $last, size $w"
    fi
    if grep -q 'ETA' "$tmp/gen.log"; then pass generate_progress "the progress line shows frames done / total and ETA"; else fail generate_progress "no progress line"; fi
else
    fail generate_1000_png "$(tail -1 "$tmp/gen.log")"
fi

# the same seed gives the same video; another seed another
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 20 --steps 2 --out "$tmp/a" --quiet > /dev/null 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 20 --steps 2 --out "$tmp/b" --quiet --fps 24 \
    > /dev/null 2> "$tmp/b.err"
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 20 --steps 2 --seed 2 --out "$tmp/c" --quiet > /dev/null 2>&1
if diff -r "$tmp/a" "$tmp/b" > /dev/null && ! diff -r "$tmp/a" "$tmp/c" > /dev/null; then
    pass generate_deterministic "same seed: identical PNGs; seed 2: different"
else
    fail generate_deterministic "same seed differs, or another seed gives the same frames"
fi
# --fps for a folder of PNGs, which has no frame rate: said in a warning, not dropped without a word
[ "$(grep -c "warning: --fps 24: .*/b is a folder of PNGs, which has no frame rate" "$tmp/b.err")" = 1 ]
expect generate_fps_for_folder_said $? "$(head -1 "$tmp/b.err")"

# without --steps each model samples with its own sample_steps: a starter trained as the one above
# (the same weights) but with sample_steps = 3 makes, without --steps, the frames the first makes
# with --steps 3, and not those of its 20
"$FC" --threads 2 train --config configs/tiny/starter.conf --run "$tmp/starter3" --steps 12 --set warmup_steps=2 \
    --set checkpoint_every=12 --set sample_steps=3 > "$tmp/starter3.log" 2>&1
S3=(--starter "$tmp/starter3" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate")
"$FC" generate "${S3[@]}" --first-frame "$tmp/first.png" --frames 7 --out "$tmp/own" > "$tmp/own.log" 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 3 --out "$tmp/three" --quiet > /dev/null 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --out "$tmp/twenty" --quiet > /dev/null 2>&1
if grep -q 'Euler steps 3 / 20 / 20' "$tmp/own.log" && diff -r "$tmp/own" "$tmp/three" > /dev/null &&
    [ -n "$(ls "$tmp/own" 2> /dev/null)" ] && ! diff -r "$tmp/own" "$tmp/twenty" > /dev/null; then
    pass generate_model_steps "sample_steps = 3 in the starter's config: the frames of --steps 3, not of 20; $(grep -o 'Euler steps [0-9 /]*' "$tmp/own.log")"
else
    fail generate_model_steps "$(grep -o 'Euler steps [^,]*\|[0-9]* Euler steps' "$tmp/own.log" | head -1); $(tail -1 "$tmp/starter3.log")"
fi
# sample_steps changes no training arithmetic: a finished run takes a new value when rerun
if "$FC" --threads 2 train --config configs/tiny/starter.conf --run "$tmp/starter" --steps 12 --set warmup_steps=2 \
    --set checkpoint_every=12 --set sample_steps=3 > "$tmp/again.log" 2>&1 && grep -q 'nothing to do' "$tmp/again.log"; then
    pass train_sample_steps_may_change "$(tail -1 "$tmp/again.log")"
else
    fail train_sample_steps_may_change "$(tail -1 "$tmp/again.log")"
fi

# without --temperature each model samples with its own sample_temperature: a starter trained as the
# one above but with sample_temperature = 0.5 makes, without --temperature, the frames the first makes
# with --temperature 0.5 (the same steps), and not those of its 1
"$FC" --threads 2 train --config configs/tiny/starter.conf --run "$tmp/starter_t05" --steps 12 --set warmup_steps=2 \
    --set checkpoint_every=12 --set sample_temperature=0.5 > "$tmp/starter_t05.log" 2>&1
T05=(--starter "$tmp/starter_t05" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate")
"$FC" generate "${T05[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 2 --out "$tmp/own_t" > "$tmp/own_t.log" 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 2 --temperature 0.5 --out "$tmp/half" \
    --quiet > /dev/null 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 2 --out "$tmp/one" --quiet > /dev/null 2>&1
if grep -q 'temperature 0.5 / 1 / 1 (starter / extrapolate / interpolate)' "$tmp/own_t.log" &&
    diff -r "$tmp/own_t" "$tmp/half" > /dev/null && [ -n "$(ls "$tmp/own_t" 2> /dev/null)" ] &&
    ! diff -r "$tmp/own_t" "$tmp/one" > /dev/null; then
    pass generate_model_temperature "sample_temperature = 0.5 in the starter's config: the frames of --temperature 0.5, not of 1; $(grep -o 'temperature [0-9. /]*' "$tmp/own_t.log")"
else
    fail generate_model_temperature "$(grep -o 'temperature .*' "$tmp/own_t.log" | head -1); $(tail -1 "$tmp/starter_t05.log")"
fi
# --temperature overrides it
"$FC" generate "${T05[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 2 --temperature 1 --out "$tmp/own_t1" \
    > "$tmp/own_t1.log" 2>&1
if grep -q ', temperature 1$' "$tmp/own_t1.log" && diff -r "$tmp/own_t1" "$tmp/one" > /dev/null; then
    pass generate_temperature_overrides "--temperature 1 over a model's sample_temperature 0.5: the frames of temperature 1"
else
    fail generate_temperature_overrides "$(grep -o 'temperature .*' "$tmp/own_t1.log" | head -1)"
fi
# sample_temperature changes no training arithmetic either: a finished run takes a new value when rerun
if "$FC" --threads 2 train --config configs/tiny/starter.conf --run "$tmp/starter" --steps 12 --set warmup_steps=2 \
    --set checkpoint_every=12 --set sample_temperature=0.85 > "$tmp/again_t.log" 2>&1 &&
    grep -q 'nothing to do' "$tmp/again_t.log"; then
    pass train_sample_temperature_may_change "$(tail -1 "$tmp/again_t.log")"
else
    fail train_sample_temperature_may_change "$(tail -1 "$tmp/again_t.log")"
fi

# --given 7: the video's first 7 frames are the output's, whatever the seed; the frames after them
# are made (another seed, other frames); frame 0 as from one given frame
for k in 1 7:1 7:2; do
    "$FC" generate "${RUNS[@]}" --first-frame "$VIDEO" --given ${k%:*} --seed ${k#*:} --frames 16 --steps 2 \
        --out "$tmp/given$k" --quiet > "$tmp/given$k.log" 2>&1
done
# the guards' line names the frame they hold to: the windows' anchor, frame 6 from 7 given
grep -q "^generate: drift guards: sharpness at most 1.05x frame 0's" "$tmp/given1.log" &&
    grep -q "^generate: drift guards: sharpness at most 1.05x frame 6's" "$tmp/given7:1.log"
expect generate_given_guard_anchor $? "$(grep -h 'drift guards' "$tmp/given1.log" "$tmp/given7:1.log" | tr '\n' ' ')"
same_given=1
for f in 0 1 2 3 4 5 6; do cmp -s "$tmp/given7:1/frame-00000$f.png" "$tmp/given7:2/frame-00000$f.png" || same_given=0; done
if [ $same_given = 1 ] && cmp -s "$tmp/given1/frame-000000.png" "$tmp/given7:1/frame-000000.png" &&
    ! cmp -s "$tmp/given7:1/frame-000009.png" "$tmp/given7:2/frame-000009.png" &&
    ! cmp -s "$tmp/given1/frame-000003.png" "$tmp/given7:1/frame-000003.png"; then
    pass generate_given "--given 7: frames 0-6 the same for seeds 1 and 2, frame 9 not; frame 3 not the starter's"
else
    fail generate_given "the given frames changed with the seed, or the made ones did not"
fi
# --given 7 from a folder of frames: the 16 frames written from the video, as g1.png .. g16.png, give
# the same chain byte for byte, so the folder's first 7 are read in natural order (g10.png after
# g9.png: in byte order g10-g12 would come before g2)
mkdir -p "$tmp/given_folder"
for f in $(seq 0 15); do cp "$tmp/given7:1/frame-$(printf %06d "$f").png" "$tmp/given_folder/g$((f + 1)).png"; done
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/given_folder" --given 7 --seed 1 --frames 16 --steps 2 \
    --out "$tmp/given_from_folder" --quiet > "$tmp/given_folder.log" 2>&1
rc=$?
diff -r "$tmp/given7:1" "$tmp/given_from_folder" > /dev/null && [ "$(ls "$tmp/given_from_folder" | wc -l)" = 16 ]
expect generate_given_from_frame_folder $? "exit $rc; $(diff -rq "$tmp/given7:1" "$tmp/given_from_folder" 2>&1 | wc -l) of 16 frames differ from the chain given the video's frames $(tail -1 "$tmp/given_folder.log")"

# a generation is a pure function of the models, the first frame and the seed: the same video file
# twice, byte for byte, in each container written (Matroska's IDs were random)
same_files=""
for ext in mkv mp4 avi; do
    for k in 1 2; do
        "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/twice$k.$ext" \
            --quiet > /dev/null 2>&1
    done
    cmp -s "$tmp/twice1.$ext" "$tmp/twice2.$ext" && [ -s "$tmp/twice1.$ext" ] && same_files="$same_files $ext"
done
[ "$same_files" = " mkv mp4 avi" ]
expect generate_video_files_reproducible $? "the same bytes twice:${same_files:- none} (of mkv mp4 avi)"

# shapes:K: the given frames are the built-in clip's, as tools/strip.sh draws its truth (build/draw_shapes)
"$FC" generate "${RUNS[@]}" --first-frame shapes:5 --given 7 --frames 9 --steps 2 --out "$tmp/shapes5" --quiet \
    > /dev/null 2>&1
mkdir -p "$tmp/drawn5"
"${BUILD:-build}/draw_shapes" 5 7 32 "$tmp/drawn5"
same_drawn=0
for f in 0 1 2 3 4 5 6; do cmp -s "$tmp/shapes5/frame-00000$f.png" "$tmp/drawn5/frame-00000$f.png" && same_drawn=$((same_drawn + 1)); done
if [ $same_drawn = 7 ] && ! cmp -s "$tmp/drawn5/frame-000000.png" "$tmp/drawn5/frame-000006.png"; then
    pass draw_shapes_is_the_clip "build/draw_shapes 5: frames 0-6 the same PNGs as generate --first-frame shapes:5 --given 7 writes"
else
    fail draw_shapes_is_the_clip "$same_drawn of the 7 given frames the same PNGs as build/draw_shapes's (or its frames do not move)"
fi
# draw_shapes --events: the bounces and meetings of frames 7-46 are those of 7-26 and 27-46 added; some
# clips bounce, none bounces in every frame; a range out of order is refused
DS="${BUILD:-build}/draw_shapes"
"$DS" --events 1 12 7 46 32 > "$tmp/ev_all.txt" 2>&1
"$DS" --events 1 12 7 26 32 > "$tmp/ev_a.txt" 2>&1
"$DS" --events 1 12 27 46 32 > "$tmp/ev_b.txt" 2>&1
"$DS" --events 1 12 46 7 32 > /dev/null 2>&1
rc=$?
summed=$(paste "$tmp/ev_a.txt" "$tmp/ev_b.txt" | awk '{print $1, "bounces", $3 + $8, "meetings", $5 + $10}')
bounced=$(awk '$3 > 0 && $3 < 40' "$tmp/ev_all.txt" | wc -l)
if [ "$summed" = "$(cat "$tmp/ev_all.txt")" ] && [ "$(wc -l < "$tmp/ev_all.txt")" = 12 ] && [ "$bounced" -ge 6 ] && [ $rc = 2 ]; then
    pass draw_shapes_events "clips 1-12, frames 7-46: $(awk '{b += $3; m += $5} END {print b " bounces, " m " frames with shapes meeting"}' "$tmp/ev_all.txt"), the two halves' sums; $bounced clips bounce; FROM > TO refused"
else
    fail draw_shapes_events "$(head -2 "$tmp/ev_all.txt" | tr '\n' ';') halves: $(echo "$summed" | head -2 | tr '\n' ';') bouncing clips $bounced; FROM > TO: status $rc"
fi

# expect_refusal NAME PATTERN ARGS...: non-zero exit, one line on stderr (after any warnings) with PATTERN,
# no output
expect_refusal() {
    local name=$1 pattern=$2
    shift 2
    "$FC" generate "$@" --frames 30 --steps 1 --quiet > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    if [ $rc -eq 0 ]; then fail "generate_refuses_$name" "exit status 0"
    elif ! grep -q -- "$pattern" "$tmp/err"; then fail "generate_refuses_$name" "stderr lacks '$pattern': $(cat "$tmp/err")"
    elif [ "$(grep -vc '^framechain: warning' "$tmp/err")" -ne 1 ]; then fail "generate_refuses_$name" "$(wc -l < "$tmp/err") lines on stderr"
    elif ls -a "$tmp" | grep -q 'bad\|partial'; then fail "generate_refuses_$name" "an output file was left"
    else pass "generate_refuses_$name" "status $rc: $(grep -v '^framechain: warning' "$tmp/err")"
    fi
}
expect_refusal missing_run "no such run folder" --starter "$tmp/nope" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
expect_refusal wrong_role "trained a starter model" --starter "$tmp/starter" --extrapolate "$tmp/starter" --interpolate "$tmp/interpolate" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
expect_refusal small_image "smaller than the 32x32" "${RUNS[@]}" --first-frame "$tmp/small.png" --out "$tmp/bad.mp4"
expect_refusal unreadable_image "not a PNG or JPEG" "${RUNS[@]}" --first-frame "$tmp/garbage.png" --out "$tmp/bad.mp4"
# a folder that takes no new file though it looks writable (/proc, even for root): said before the work
expect_refusal folder_takes_no_file "/proc/framechain.mp4: .* the folder /proc" "${RUNS[@]}" --first-frame "$tmp/first.png" \
    --out /proc/framechain.mp4
ln -s "$tmp/nowhere" "$tmp/dangling.mp4"
expect_refusal dangling_link "a symbolic link to nothing" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/dangling.mp4"
rm -f "$tmp/dangling.mp4"
expect_refusal gif_too_fast "at most 50 frames a second" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/bad.GIF" --fps 60
expect_refusal missing_image "cannot open" "${RUNS[@]}" --first-frame "$tmp/none.png" --out "$tmp/bad.mp4"
expect_refusal given_image "an image is one frame; 7 given frames need a video" "${RUNS[@]}" --first-frame "$tmp/first.png" --given 7 --out "$tmp/bad.mp4"
expect_refusal given_count "--given 3: the chain starts from 1" "${RUNS[@]}" --first-frame "$VIDEO" --given 3 --out "$tmp/bad.mp4"
# as many frames as it is given: nothing to generate, a bad command line (before any model is read)
"$FC" generate "${RUNS[@]}" --first-frame "$VIDEO" --given 7 --frames 7 --out "$tmp/bad.mp4" > "$tmp/out" 2> "$tmp/err"
rc=$?
expect generate_refuses_frames_not_past_given $(( rc != 2 || $(grep -c -- "--frames 7: not more than --given 7" "$tmp/err") != 1 ||
    $(ls -a "$tmp" | grep -c 'bad\|partial') != 0 )) "status $rc: $(head -1 "$tmp/err")"
mkdir "$tmp/empty_run"
expect_refusal empty_run "holds no checkpoint" --starter "$tmp/empty_run" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
rmdir "$tmp/empty_run"
# a corrupt newest checkpoint is skipped with a warning; with no other, the run is refused (its
# header's first byte damaged: the JSON does not parse, whatever the header's length)
ck=$(ls "$tmp/interpolate"/ckpt-*.safetensors | tail -1)
cp "$ck" "$tmp/saved.ckpt"
flip_byte "$ck" 8
expect_refusal corrupt_checkpoint "interpolate: its one checkpoint cannot be used (see above)" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
cp "$tmp/saved.ckpt" "$ck"
rm -f "$tmp/saved.ckpt"
# generation reads the header and the EMA tensors only: the newest starter checkpoint with its last
# byte (8-bit optimizer state, which comes after every F32 tensor) damaged makes the same frames;
# with a byte of its first EMA tensor damaged (the second tensor of the data: model.patch_embed.weight,
# then ema.patch_embed.weight) it is refused by that tensor's CRC
ck=$(ls "$tmp/starter"/ckpt-*.safetensors | tail -1)
cp "$ck" "$tmp/saved.ckpt"
size=$(stat -c %s "$ck")
flip_byte "$ck" $((size - 1))
if "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 2 --out "$tmp/optim_damaged" \
    > "$tmp/optim_damaged.log" 2>&1 && diff -r "$tmp/optim_damaged" "$tmp/one" > /dev/null; then
    pass generate_reads_ema_only "the optimizer state's last byte damaged: the same frames (train would refuse the file)"
else
    fail generate_reads_ema_only "$(tail -1 "$tmp/optim_damaged.log")"
fi
cp "$tmp/saved.ckpt" "$ck"
data_start=$(( $(od -An -tu8 -N8 "$ck" | tr -d ' ') + 8 ))
first=$("$FC" inspect "$ck" | sed -nE '/^tensors:/,$ s/^ +model\.patch_embed\.weight +F32 +\(([0-9]+), ([0-9]+)\).*/\1 \2/p')
ema_byte=$(( data_start + 4 * ${first% *} * ${first#* } + 5 ))
flip_byte "$ck" $ema_byte
expect_refusal damaged_ema "tensor ema.patch_embed.weight fails its CRC32 check" "${RUNS[@]}" --first-frame "$tmp/first.png" \
    --out "$tmp/bad.mp4"
cp "$tmp/saved.ckpt" "$ck"
rm -f "$tmp/saved.ckpt"
# a folder that exists already is not overwritten
expect_refusal existing_folder "already exists" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/frames"
[ "$(ls "$tmp/frames" | wc -l)" = 1000 ] || fail generate_existing_folder_kept "the existing folder changed"

# ---- the output: refused before sampling when it cannot be written, never the input, a full disk an error ----

# An existing video is kept, and the --first-frame file is never the output, under its own name or
# another (a hard link), --overwrite or not.
cp "$tmp/first.png" "$tmp/keep.mp4"
cp "$VIDEO" "$tmp/input.avi"
ln "$tmp/input.avi" "$tmp/link.avi"
expect_refusal existing_video "already exists" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/keep.mp4"
cmp -s "$tmp/keep.mp4" "$tmp/first.png" || fail generate_existing_video_kept "the existing file was replaced"
expect_refusal input_as_output "is the input file" "${RUNS[@]}" --first-frame "$tmp/input.avi" --out "$tmp/input.avi"
expect_refusal input_as_output_overwrite "is the input file" "${RUNS[@]}" --first-frame "$tmp/input.avi" --out "$tmp/input.avi" --overwrite
expect_refusal checkpoint_as_run "ckpt-00000012.safetensors: a file, not a run folder" --starter "$tmp/starter/ckpt-00000012.safetensors" \
    --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
expect_refusal input_by_another_name "is the input file" "${RUNS[@]}" --first-frame "$tmp/input.avi" --out "$tmp/link.avi" --overwrite
cmp -s "$tmp/input.avi" "$VIDEO" || fail generate_input_kept "the --first-frame file changed"
# a folder of frames given as the first frames is never the output either
mkdir -p "$tmp/folder_in"
cp "$tmp/first.png" "$tmp/folder_in/frame-000000.png"
expect_refusal input_folder_as_output "is the input folder" "${RUNS[@]}" --first-frame "$tmp/folder_in" \
    --out "$tmp/folder_in" --overwrite
[ -f "$tmp/folder_in/frame-000000.png" ] || fail generate_input_folder_kept "the --first-frame folder changed"
ln -s "$tmp/a/frame-000000.png" "$tmp/first_link.png"  # a link into the folder --overwrite would replace
expect_refusal overwrite_folder_of_linked_input "holds the input file" "${RUNS[@]}" --first-frame "$tmp/first_link.png" \
    --out "$tmp/a" --overwrite
rm -f "$tmp/first_link.png"
mkdir "$tmp/mixed" && touch "$tmp/mixed/notes.txt"
expect_refusal overwrite_other_folder "holds notes.txt" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/mixed" --overwrite
rm -rf "$tmp/mixed" "$tmp/link.avi"

# --overwrite replaces a file by a video, and a folder of frames (a, 20 frames) by a new one
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 12 --steps 1 --out "$tmp/keep.mp4" --overwrite --quiet > /dev/null 2> "$tmp/err"
rc1=$?
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 12 --steps 1 --out "$tmp/a" --overwrite --quiet > /dev/null 2>> "$tmp/err"
rc2=$?
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$(count_frames "$tmp/keep.mp4")" = 12 ] && [ "$(ls "$tmp/a" | wc -l)" = 12 ] &&
    ! ls -a "$tmp" | grep -q 'partial\|replaced' && "$FC" generate --help | grep -q -- '--overwrite'; then
    pass generate_overwrite "--overwrite: a file replaced by a 12-frame video, a folder of 20 PNGs by one of 12; in --help"
else
    fail generate_overwrite "status $rc1, $rc2: $(head -1 "$tmp/err")"
fi

# Nor a folder of frames that holds the --first-frame file: one of its own frames given as the first.
cp "$tmp/a/frame-000000.png" "$tmp/a_first.png"
expect_refusal overwrite_folder_holding_input "holds the input file" "${RUNS[@]}" \
    --first-frame "$tmp/a/frame-000000.png" --out "$tmp/a" --overwrite
if ! cmp -s "$tmp/a/frame-000000.png" "$tmp/a_first.png" || [ "$(ls "$tmp/a" | wc -l)" != 12 ]; then
    fail generate_folder_holding_input_kept "the folder holding the --first-frame file changed: $(ls "$tmp/a" | wc -l) files"
fi
rm -f "$tmp/a_first.png"

# An --out that is a symbolic link to a folder of frames: --overwrite renames the new folder onto the
# name it is given, so through a link it would replace the link and empty the folder it points to.
# Refused in one line naming the link and its folder, before any model loads; both kept as they were.
# A video --out that is a symbolic link to a file: --overwrite would rename the video onto the link
ln -s "$tmp/first.png" "$tmp/vlink.mp4"
expect_refusal overwrite_video_through_link "vlink.mp4: is a symbolic link to the file .*/first.png; --overwrite" \
    "${RUNS[@]}" --first-frame shapes:1 --out "$tmp/vlink.mp4" --overwrite
expect_refusal video_link_without_overwrite "vlink.mp4: is a symbolic link to the file .*/first.png; --overwrite" \
    "${RUNS[@]}" --first-frame shapes:1 --out "$tmp/vlink.mp4"
[ -L "$tmp/vlink.mp4" ]
expect overwrite_video_through_link_kept $? "the link is still there"
ln -s "$tmp/a" "$tmp/alink"
expect_refusal overwrite_folder_through_link "alink: is a symbolic link to the folder .*/a; --overwrite" "${RUNS[@]}" \
    --first-frame "$tmp/first.png" --out "$tmp/alink/" --overwrite
expect generate_folder_through_link_kept $(( $([ -L "$tmp/alink" ] && echo 0 || echo 1) || $(ls "$tmp/a" | wc -l) != 12 ||
    $(grep -c 'starter step' "$tmp/out") != 0 )) "the link, and the 12 frames it points to, kept; no model loaded"
rm -rf "$tmp/alink"

# Output names of 250 bytes (legal: NAME_MAX is 255) where the temporary "NAME.partial-PID" would be
# too long: a video and a folder, new and --overwrite, written through shorter temporary names in the
# same folder, none left; a killed generate's temporary of such a name is removed by the next one.
long=$(printf 'n%.0s' $(seq 246))
mkdir "$tmp/long"
rcs=""
for out in "$long.mp4" "${long}nnnn" "$long.mp4" "${long}nnnn"; do
    "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/long/$out" --overwrite \
        --quiet > "$tmp/long.log" 2>&1
    rcs="$rcs$? "
done
n=$(count_frames "$tmp/long/$long.mp4")
expect generate_250_byte_names $(( $([ "$rcs" = "0 0 0 0 " ] && echo 0 || echo 1) || ${n:-0} != 9 ||
    $(ls "$tmp/long/${long}nnnn" 2> /dev/null | wc -l) != 9 || $(ls -a "$tmp/long" | grep -vc '^\.\.\?$') != 2 )) \
    "status $rcs; $(tail -1 "$tmp/long.log" | cut -c1-40); left: $(ls -a "$tmp/long" | cut -c1-10 | tr '\n' ' ')"
(exec "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 1000 --steps 2 --out "$tmp/long/${long}kill" \
    --quiet) > /dev/null 2>&1 &
pid=$!
killed_partial() { [ "$(find "$tmp/long" -mindepth 2 -name '*.png' -path '*partial*' 2> /dev/null | wc -l)" -ge 5 ]; }
wait_until 60 $pid killed_partial
kill9_reap $pid
left=$(ls -a "$tmp/long" | grep -c "partial-$pid")
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/long/${long}kill" \
    --quiet > "$tmp/long.log" 2>&1
rc=$?
expect generate_250_byte_name_leftover_removed $(( rc != 0 || left != 1 || $(ls -a "$tmp/long" | grep -c partial) != 0 ||
    $(grep -c "removed .*partial-$pid, left by a generate of .* that was cut off" "$tmp/long.log") != 1 )) \
    "status $rc; the killed generate left $left temporary folder(s), removed by the next: $(grep -c removed "$tmp/long.log") line"
rm -rf "$tmp/long"

# The output is checked before the first window: 30000 frames (minutes of sampling) fail at once,
# with one line naming the path given, not a temporary one, and no header line.
expect_early() {  # expect_early NAME PATTERN OUT [ARGS...]
    timeout 30 "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 30000 --steps 1 --out "$3" \
        "${@:4}" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    if [ $rc = 124 ]; then fail "generate_checks_first_$1" "still sampling after 30 s"
    elif [ $rc = 0 ]; then fail "generate_checks_first_$1" "exit status 0"
    elif [ "$(wc -l < "$tmp/err")" != 1 ] || ! grep -qF -- "$2" "$tmp/err" || ! grep -qF -- "$3:" "$tmp/err" ||
        grep -q partial "$tmp/err"; then fail "generate_checks_first_$1" "$(cat "$tmp/err")"
    elif grep -q '30000 frames of' "$tmp/out"; then fail "generate_checks_first_$1" "the header came first: $(head -1 "$tmp/out")"
    else pass "generate_checks_first_$1" "status $rc at once: $(cat "$tmp/err")"
    fi
}
expect_early missing_folder "the folder $tmp/nope does not exist" "$tmp/nope/x.mp4"
expect_early file_as_folder "$tmp/first.png is not a folder" "$tmp/first.png/x.mp4"
expect_early existing_folder "already exists" "$tmp/frames"
# A folder that --overwrite could not rename the new frames onto, found out only once they were all made:
# one named by '.' or '..' (the name given back, to use instead), or a mount point; the frames kept
expect_early dot_folder "names the folder by '.', under which it cannot be replaced" "$tmp/frames/." --overwrite
grep -qF "give its own name, $(cd "$tmp/frames" && pwd -P)" "$tmp/err"
expect generate_dot_folder_names_it $? "$(cat "$tmp/err")"
expect_early dotdot_folder "names the folder by '..'" "$tmp/frames/.." --overwrite
[ "$(ls "$tmp/frames" | wc -l)" = 1000 ] || fail generate_dot_folder_kept "the folder changed"
mkdir -p "$tmp/mnt/frames"
unshare -rm sh -c 'mount -t tmpfs -o size=1m none "$0" || exit 99
    timeout 30 "$@" > /dev/null 2> "$0.err"; echo $? > "$0.rc"' "$tmp/mnt/frames" \
    "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 30000 --steps 1 --overwrite \
    --out "$tmp/mnt/frames" 2> /dev/null
if [ ! -f "$tmp/mnt/frames.rc" ]; then
    echo "SKIP generate_checks_first_mount_point: cannot mount a tmpfs in a private namespace (unshare -rm)"
else
    rc=$(cat "$tmp/mnt/frames.rc")
    expect generate_checks_first_mount_point $(( rc == 0 || rc == 124 ||
        $(grep -c "frames: is a mount point, which cannot be renamed" "$tmp/mnt/frames.err") != 1 )) \
        "status $rc: $(cat "$tmp/mnt/frames.err")"
fi
rm -rf "$tmp/mnt"
# A folder of frames its owner cannot write (chmod a-w): once the new frames had its name, the old ones could
# not be removed and were left beside it under the temporary name. Refused before sampling, the folder as it
# was and nothing beside it. (As a user: root writes anyway; as nobody when the suite runs as root.)
mkdir -m 777 "$tmp/ro" && chmod 711 "$tmp"
as_user_runs=0  # whether that user can run the program at all (its path may be closed to nobody)
if ! ${as_user[@]+"${as_user[@]}"} "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 1 \
    --out "$tmp/ro/frames" > "$tmp/ro.log" 2>&1; then
    echo "SKIP generate_refuses_unwritable_folder: cannot generate as another user than root: $(tail -1 "$tmp/ro.log")"
else
    as_user_runs=1
    chmod a-w "$tmp/ro/frames"
    ${as_user[@]+"${as_user[@]}"} "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 \
        --out "$tmp/ro/frames" --overwrite > "$tmp/out" 2> "$tmp/err"
    rc=$?
    expect generate_refuses_unwritable_folder $(( rc == 0 ||
        $(grep -c "frames: cannot remove its frames to replace them: Permission denied" "$tmp/err") != 1 ||
        $(grep -c "9 frames of" "$tmp/out") != 0 || $(ls -A "$tmp/ro" | wc -l) != 1 ||
        $(ls "$tmp/ro/frames" | wc -l) != 7 )) \
        "status $rc: $(head -1 "$tmp/err"); left: $(ls -A "$tmp/ro" | tr '\n' ' ')"
    chmod u+w "$tmp/ro/frames"
fi
# A video its owner may not read (chmod 000, or 200), replaced with --overwrite: the new one keeps that
# mode, given at the rename; copied before the writer closed, closing an MP4 (which reads it back) and
# the fsync (which opens it) failed after all the sampling. (As a user: root reads anyway.)
if [ $as_user_runs = 1 ]; then
    for mode in 000 200; do
        for ext in mp4 mkv; do
            v="$tmp/ro/v$mode.$ext"
            ${as_user[@]+"${as_user[@]}"} "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 7 --steps 1 \
                --out "$v" > /dev/null 2>&1
            chmod $mode "$v"
            ${as_user[@]+"${as_user[@]}"} "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 \
                --out "$v" --overwrite > "$tmp/out" 2> "$tmp/err"
            rc=$?
            got=$(stat -c %a "$v")
            chmod 600 "$v"
            n=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$v")
            expect "generate_overwrite_keeps_mode_${mode}_$ext" $(( rc != 0 || n != 9 || 8#$got != 8#$mode )) \
                "status $rc, mode $got, $n frames: $(head -1 "$tmp/err")"
        done
    done
    [ "$(ls -A "$tmp/ro" | grep -vc '^v[02]00\.mp4$\|^v[02]00\.mkv$\|^frames$')" = 0 ]
    expect generate_overwrite_keeps_mode_nothing_beside $? "left: $(ls -A "$tmp/ro" | tr '\n' ' ')"
    # a umask that takes the owner's own access (477: a video it cannot read back, a folder of frames it
    # cannot write into) failed after all the sampling: refused before it, nothing written
    mkdir -m 777 "$tmp/ro/um"
    bad=""
    for o in um.mp4 um.gif um_frames; do
        (umask 477; exec ${as_user[@]+"${as_user[@]}"} "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" \
            --frames 9 --steps 1 --out "$tmp/ro/um/$o") > "$tmp/out" 2> "$tmp/err"
        rc=$?
        [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && ! grep -q "frames of" "$tmp/out" &&
            grep -q "um/$o: the umask 0477 takes from its owner the access generate needs" "$tmp/err" || bad+="$o: status $rc, $(head -c 160 "$tmp/err"); "
    done
    [ -z "$bad" ] && [ "$(ls -A "$tmp/ro/um" | wc -l)" = 0 ]
    expect generate_refuses_umask_without_owner_access $? "${bad:-refused before sampling, one line each}; left: $(ls -A "$tmp/ro/um" | tr '\n' ' ')"
fi
chmod -R u+w "$tmp/ro" 2> /dev/null
rm -rf "$tmp/ro"
# Another user's video or folder of frames in a folder with the sticky bit (as /tmp has): only its owner may
# replace it, so the new output failed to take its name once it was all made. Refused before sampling.
# (Needs root, to make root's files and generate as nobody beside them.)
if [ ${#as_user[@]} = 0 ] || [ $as_user_runs = 0 ]; then
    echo "SKIP generate_refuses_others_in_sticky_folder: the suite does not run as root, or nobody cannot run $FC"
else
    mkdir -m 1777 "$tmp/sticky" "$tmp/sticky/frames"
    cp "$tmp/first.png" "$tmp/sticky/clip.mp4"
    for out in clip.mp4 frames; do
        "${as_user[@]}" "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 40 --steps 1 \
            --out "$tmp/sticky/$out" --overwrite > "$tmp/out" 2> "$tmp/err"
        rc=$?
        expect "generate_refuses_others_in_sticky_folder_$out" $(( rc == 0 ||
            $(grep -c "$out: belongs to another user (uid 0), in a folder with the sticky bit" "$tmp/err") != 1 ||
            $(grep -c "40 frames of" "$tmp/out") != 0 || $(ls -A "$tmp/sticky" | wc -l) != 2 )) \
            "status $rc: $(head -1 "$tmp/err"); left: $(ls -A "$tmp/sticky" | tr '\n' ' ')"
    done
    cmp -s "$tmp/first.png" "$tmp/sticky/clip.mp4"
    expect generate_others_in_sticky_folder_kept $? "root's file unchanged"
    rm -rf "$tmp/sticky"
fi
chmod 700 "$tmp"
# a video extension that is not written (it would be a folder of PNGs named x.webm): refused, nothing made
expect_early video_extension_not_written ".webm is not a format written here; give .mp4" "$tmp/x.webm"
[ ! -e "$tmp/x.webm" ] || fail generate_video_extension_nothing_made "$tmp/x.webm was made"
expect_early video_extension_h264 ".h264 is not a format written here" "$tmp/x.h264"
expect_early video_extension_mxf ".mxf is not a format written here" "$tmp/x.mxf"
# an image's name (the frames would become a folder named me.png): refused, nothing made
expect_early image_name_as_output ".png names one image; the output is a video" "$tmp/me.png"
expect_early image_name_as_output_tiff ".TIFF names one image" "$tmp/me.TIFF"
[ ! -e "$tmp/me.png" ] && [ ! -e "$tmp/me.TIFF" ] || fail generate_image_name_nothing_made "$(ls -d "$tmp"/me.*)"

# A full disk: generate onto a 200 KB tmpfs, mounted in a private mount namespace (no root needed
# where user namespaces are allowed, nothing to unmount). 400 frames of PNGs or of MPEG-4 do not
# fit: the command fails with one line naming the path given and the error, and leaves nothing.
on_full_disk() {  # on_full_disk NAME OUT
    rm -f "$tmp/full.rc"
    mkdir -p "$tmp/full"
    unshare -rm sh -c 'mount -t tmpfs -o size=200k none "$0" || exit 99
        "$@" > /dev/null 2> "$0.err"; echo $? > "$0.rc"; ls -A "$0" > "$0.left"
        find "$0" -type f -empty | wc -l > "$0.empty"' "$tmp/full" \
        "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 400 --steps 1 --quiet --out "$tmp/full/$2" 2> /dev/null
    if [ ! -f "$tmp/full.rc" ]; then echo "SKIP generate_full_disk_$1: cannot mount a tmpfs in a private namespace (unshare -rm)"; return; fi
    local rc
    rc=$(cat "$tmp/full.rc")
    if [ "$rc" = 0 ]; then fail "generate_full_disk_$1" "exit status 0 on a full disk, $(cat "$tmp/full.empty") empty files left"
    elif [ "$(wc -l < "$tmp/full.err")" != 1 ] || ! grep -qF "$tmp/full/$2: " "$tmp/full.err" ||
        ! grep -q 'No space left on device' "$tmp/full.err" || grep -q partial "$tmp/full.err"; then
        fail "generate_full_disk_$1" "status $rc: $(cat "$tmp/full.err")"
    elif [ -s "$tmp/full.left" ]; then fail "generate_full_disk_$1" "left on the disk: $(tr '\n' ' ' < "$tmp/full.left")"
    else pass "generate_full_disk_$1" "status $rc, nothing left: $(cat "$tmp/full.err")"
    fi
}
on_full_disk png frames
on_full_disk mp4 full.mp4

# ---- frames written as they are made ----

# The header's memory plan: a few of 2400 frames held; and the peak resident memory of 2400 frames
# is within 8 MB of that of 200 (keeping every frame would add 2200 x 12 KB = 27 MB).
# In the sanitizer build freed memory would wait in ASan's quarantine (256 MB) and count as resident:
# it is switched off for this measurement (the variable means nothing to other builds).
peak_kb() {  # peak_kb FRAMES: generate's peak resident memory in KB (GNU time), its stdout in $tmp/mem.log
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
        /usr/bin/time -f '%M' -o "$tmp/kb" "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" \
        --frames "$1" --steps 1 --quiet --out "$tmp/mem$1.mkv" > "$tmp/mem.log" 2>&1 && tail -1 "$tmp/kb"
}
if [ -x /usr/bin/time ]; then kb200=$(peak_kb 200); kb2400=$(peak_kb 2400); else kb200=0 kb2400=0; fi
held=$(sed -n 's/.*memory: at most \([0-9]*\) of the 2400 frames held.*/\1/p' "$tmp/mem.log")
if [ -n "$held" ] && [ "$held" -le 40 ] && [ -n "$kb200" ] && [ -n "$kb2400" ] && [ $((kb2400 - kb200)) -lt 8192 ]; then
    pass generate_memory_bounded "$held of 2400 frames held; peak RSS $kb200 KB at 200 frames, $kb2400 KB at 2400"
else
    fail generate_memory_bounded "held '${held}'; peak RSS '$kb200' KB at 200 frames, '$kb2400' KB at 2400: $(grep memory "$tmp/mem.log")"
fi
rm -f "$tmp"/mem*.mkv
# the header counts what an MP4 or an AVI keeps a frame in its index until it closes (Matroska, whose
# index holds only keyframes, none: the line above); each stopped by SIGINT once it has said it
index_line() {  # index_line EXT: the memory line of a generate of 100000 frames into a video of EXT
    (exec "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 100000 --steps 1 \
        --out "$tmp/idx.$1" --quiet) > "$tmp/idx.log" 2>&1 &
    local pid=$!
    wait_until 60 $pid grep -q "memory:" "$tmp/idx.log"
    kill -INT $pid 2> /dev/null
    wait $pid
    grep "memory:" "$tmp/idx.log"
}
idx_mp4=$(index_line mp4 | grep -c ", 8.0 MB for the video's index (about 80 bytes a frame, held until it closes)$")
idx_avi=$(index_line avi | grep -c ", 2.4 MB for the video's index (about 24 bytes a frame, held until it closes)$")
(( idx_mp4 == 1 && idx_avi == 1 && $(grep -c "video's index" "$tmp/mem.log") == 0 ))
expect generate_memory_counts_video_index $? "100000 frames: MP4 $idx_mp4, AVI $idx_avi index lines; MKV $(grep -c "video's index" "$tmp/mem.log")"

# Streaming changes no frame: the PNGs are those of the chain holding every frame to the end, as
# generate did before (FRAMECHAIN_TEST_HOLD_ALL_FRAMES=1)
FRAMECHAIN_TEST_HOLD_ALL_FRAMES=1 "$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 100 --steps 1 --out "$tmp/held" --quiet > "$tmp/held.log" 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 100 --steps 1 --out "$tmp/streamed" --quiet > "$tmp/streamed.log" 2>&1
all=$(sed -n 's/.*memory: at most \([0-9]*\) of.*/\1/p' "$tmp/held.log")
few=$(sed -n 's/.*memory: at most \([0-9]*\) of.*/\1/p' "$tmp/streamed.log")
if [ "$(ls "$tmp/streamed" 2> /dev/null | wc -l)" = 100 ] && diff -r "$tmp/held" "$tmp/streamed" > /dev/null &&
    [ "${all:-0}" -ge 100 ] && [ "${few:-999}" -lt 40 ]; then
    pass generate_streamed_same_frames "100 PNGs identical holding $few frames and holding all $all"
else
    fail generate_streamed_same_frames "held '$all' / '$few' frames; $(diff -rq "$tmp/held" "$tmp/streamed" 2>&1 | head -1)"
fi

# ---- what a generate that was cut off left: removed by the next one of the same --out ----
# (the temporary names of a process that no longer runs: a PID beyond the system's pid_max)
dead=$(( $(cat /proc/sys/kernel/pid_max) + 1 ))
mkdir -p "$tmp/cut/frames.partial-$dead" "$tmp/cut/other.partial-$dead"
: > "$tmp/cut/frames.partial-$dead/frame-000000.png"
: > "$tmp/cut/.partial-$dead-clip.mp4"
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/cut/frames" --quiet > "$tmp/cut.log" 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/cut/clip.mp4" --quiet >> "$tmp/cut.log" 2>&1
left=$(ls -a "$tmp/cut" | grep -c partial)
named=$(grep -c "removed .* left by a generate of .* that was cut off" "$tmp/cut.log")
if [ "$left" = 1 ] && [ -d "$tmp/cut/other.partial-$dead" ] && [ "$named" = 2 ] && [ -d "$tmp/cut/frames" ] && [ -f "$tmp/cut/clip.mp4" ]; then
    pass generate_removes_leftovers "the two leftovers of --out frames and clip.mp4 removed and named; another output's kept"
else
    fail generate_removes_leftovers "$left .partial names left, $named named: $(ls -a "$tmp/cut" | tr '\n' ' ')"
fi
# An output moved aside by an --overwrite cut off before the new one took its place (where the file
# system cannot swap two folders in one step) is put back, not removed; then it is an output like any
mkdir -p "$tmp/cut2/frames.replaced-$dead" "$tmp/cut2/frames.partial-$dead"
cp "$tmp/first.png" "$tmp/cut2/frames.replaced-$dead/frame-000000.png"
: > "$tmp/cut2/frames.partial-$dead/frame-000000.png"
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/cut2/frames" --quiet \
    > "$tmp/cut2.log" 2>&1
rc=$?
expect generate_restores_moved_output $(( rc == 0 || $(grep -c "restored $tmp/cut2/frames from " "$tmp/cut2.log") != 1 ||
    $(grep -c "already exists" "$tmp/cut2.log") != 1 || $(ls -a "$tmp/cut2" | grep -c 'partial\|replaced') != 0 )) \
    "status $rc: $(tr '\n' ' ' < "$tmp/cut2.log" | cut -c1-200); left: $(ls -a "$tmp/cut2" | tr '\n' ' ')"
cmp -s "$tmp/first.png" "$tmp/cut2/frames/frame-000000.png"
expect generate_restored_output_whole $? "the old output's frame back in place, byte for byte"
# The temporary name of a process that still runs (this script's shell) is that process's own: kept.
mkdir -p "$tmp/live"
: > "$tmp/live/.partial-$$-clip.mp4"
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 9 --steps 1 --out "$tmp/live/clip.mp4" --quiet \
    > "$tmp/live.log" 2>&1
rc=$?
if [ $rc = 0 ] && [ -e "$tmp/live/.partial-$$-clip.mp4" ] && [ -f "$tmp/live/clip.mp4" ] && ! grep -q removed "$tmp/live.log"; then
    pass generate_keeps_running_partial "the temporary name of running process $$ kept beside the new clip.mp4"
else
    fail generate_keeps_running_partial "status $rc, left: $(ls -a "$tmp/live" | tr '\n' ' '); $(head -1 "$tmp/live.log")"
fi

# ---- a first frame that cannot be one: one line, no output ----
"$FC" generate "${RUNS[@]}" --first-frame shapes:-1 --frames 9 --out "$tmp/neg" > "$tmp/neg.log" 2>&1
rc=$?
expect generate_refuses_negative_shapes $(( rc != 2 || $(grep -c "shapes:-1: expected shapes:NUMBER, a clip number from 0 to 4294967295" "$tmp/neg.log") != 1 )) \
    "status $rc (2: a mistyped option), $(tail -1 "$tmp/neg.log" | cut -c1-100), output: $([ -e "$tmp/neg" ] && echo yes || echo none)"
# ... said before any model is read: with runs that do not exist, the first frame is still what is named
"$FC" generate --starter "$tmp/none1" --extrapolate "$tmp/none2" --interpolate "$tmp/none3" --first-frame shapes:abc \
    --frames 9 --out "$tmp/neg" > "$tmp/neg.log" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/neg.log")" = 1 ] && grep -q -- "--first-frame shapes:abc: expected shapes:NUMBER" "$tmp/neg.log"
expect generate_shapes_spec_before_models $? "status $rc: $(head -1 "$tmp/neg.log")"
# a PNG header claiming 100000 x 100000 pixels
python3 - "$tmp/huge.png" <<'PY'
import struct, sys, zlib
ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
PY
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/huge.png" --frames 9 --out "$tmp/huge" > "$tmp/huge.log" 2>&1
rc=$?
expect generate_huge_png_named $(( rc == 0 || $(grep -c "huge.png: a PNG of 100000x100000 pixels, too large to read" "$tmp/huge.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/huge.log" | cut -c1-120)"

# ---- a starter whose weights blew up (a few steps at lr 1 with no clipping: its forward is NaN): the
# first window says which model made NaN, exit 1, no video (the clamp to [-1, 1] made them black frames)
"$FC" --threads 2 train --config configs/tiny/starter.conf --run "$tmp/blown" --steps 5 --set lr=1 --set lr_min_ratio=1 \
    --set warmup_steps=0 --set grad_clip=0 > "$tmp/blown.log" 2>&1
"$FC" generate --starter "$tmp/blown" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" \
    --first-frame shapes:0 --frames 11 --steps 2 --out "$tmp/blown.gif" --quiet > "$tmp/blown_gen.log" 2>&1
rc=$?
said=$(grep -c "window 1 of [0-9]*: the starter model (step 5) made [0-9]* NaN or infinite values" "$tmp/blown_gen.log")
expect generate_nan_model_refused $(( rc != 1 || said != 1 || $(ls "$tmp" | grep -c '^blown\.gif') != 0 )) \
    "status $rc, $(tail -1 "$tmp/blown_gen.log" | cut -c1-140)"

# ---- temporary names beside --out left by a generate a power cut or kill -9 stopped (its probe of the
# folder, or its video half-written) are removed by the next generate of that --out, and said ----
true & dead=$!
wait $dead
: > "$tmp/stale.tmp-$dead"
: > "$tmp/stale.gif.tmp-$dead"
"$FC" generate "${RUNS[@]}" --first-frame shapes:0 --frames 7 --steps 1 --out "$tmp/stale" --quiet > "$tmp/stale.log" 2>&1
rc1=$?
"$FC" generate "${RUNS[@]}" --first-frame shapes:0 --frames 7 --steps 1 --out "$tmp/stale.gif" --quiet >> "$tmp/stale.log" 2>&1
rc2=$?
left=$(ls "$tmp" | grep -c "^stale.*\.tmp-$dead\$")
expect generate_removes_stale_temps $(( rc1 != 0 || rc2 != 0 || left != 0 || $(grep -c "^removed .*stale.*tmp-$dead, left by a write" "$tmp/stale.log") != 2 )) \
    "status $rc1 and $rc2, $left of the 2 stale temporary files left"

# ---- an --out whose name holds an escape byte and a newline: the "wrote" line prints them escaped, one
# line (it sent the escape to the terminal, and the newline split the line)
odd="$tmp/e$(printf '\033')[31m"$'\n'"red.gif"
"$FC" generate "${RUNS[@]}" --first-frame shapes:0 --frames 7 --steps 1 --out "$odd" --quiet > "$tmp/odd.log" 2>&1
rc=$?
expect generate_wrote_line_escaped $(( rc != 0 || $(grep -c 'wrote ' "$tmp/odd.log") != 1 ||
    $(grep -cF 'e\x1b[31m\nred.gif (7 frames' "$tmp/odd.log") != 1 || $(grep -c $'\033' "$tmp/odd.log") != 0 )) \
    "status $rc: $(grep 'wrote' "$tmp/odd.log" | cat -v | cut -c1-140)"
