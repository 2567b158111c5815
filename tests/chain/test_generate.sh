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
if ls -a "$tmp" | grep -q partial; then fail generate_no_partial_files "$(ls -a "$tmp" | grep partial)"; else pass generate_no_partial_files "no temporary file left"; fi

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
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 20 --steps 2 --out "$tmp/b" --quiet > /dev/null 2>&1
"$FC" generate "${RUNS[@]}" --first-frame "$tmp/first.png" --frames 20 --steps 2 --seed 2 --out "$tmp/c" --quiet > /dev/null 2>&1
if diff -r "$tmp/a" "$tmp/b" > /dev/null && ! diff -r "$tmp/a" "$tmp/c" > /dev/null; then
    pass generate_deterministic "same seed: identical PNGs; seed 2: different"
else
    fail generate_deterministic "same seed differs, or another seed gives the same frames"
fi

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

# --given 7: the video's first 7 frames are the output's, whatever the seed; the frames after them
# are made (another seed, other frames); frame 0 as from one given frame
for k in 1 7:1 7:2; do
    "$FC" generate "${RUNS[@]}" --first-frame "$VIDEO" --given ${k%:*} --seed ${k#*:} --frames 16 --steps 2 \
        --out "$tmp/given$k" --quiet > /dev/null 2>&1
done
same_given=1
for f in 0 1 2 3 4 5 6; do cmp -s "$tmp/given7:1/frame-00000$f.png" "$tmp/given7:2/frame-00000$f.png" || same_given=0; done
if [ $same_given = 1 ] && cmp -s "$tmp/given1/frame-000000.png" "$tmp/given7:1/frame-000000.png" &&
    ! cmp -s "$tmp/given7:1/frame-000009.png" "$tmp/given7:2/frame-000009.png" &&
    ! cmp -s "$tmp/given1/frame-000003.png" "$tmp/given7:1/frame-000003.png"; then
    pass generate_given "--given 7: frames 0-6 the same for seeds 1 and 2, frame 9 not; frame 3 not the starter's"
else
    fail generate_given "the given frames changed with the seed, or the made ones did not"
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
expect_refusal missing_image "cannot open" "${RUNS[@]}" --first-frame "$tmp/none.png" --out "$tmp/bad.mp4"
expect_refusal given_image "an image is one frame; 7 given frames need a video" "${RUNS[@]}" --first-frame "$tmp/first.png" --given 7 --out "$tmp/bad.mp4"
expect_refusal given_count "3 given frames: the chain starts from 1" "${RUNS[@]}" --first-frame "$VIDEO" --given 3 --out "$tmp/bad.mp4"
mkdir "$tmp/empty_run"
expect_refusal empty_run "holds no checkpoint" --starter "$tmp/empty_run" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
rmdir "$tmp/empty_run"
# a corrupt newest checkpoint is skipped with a warning; with no other, the run is refused
ck=$(ls "$tmp/interpolate"/ckpt-*.safetensors | tail -1)
cp "$ck" "$tmp/saved.ckpt"
printf 'X' | dd of="$ck" bs=1 seek=20000 conv=notrunc 2> /dev/null
expect_refusal corrupt_checkpoint "none of its 1 checkpoints" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/bad.mp4"
cp "$tmp/saved.ckpt" "$ck"
rm -f "$tmp/saved.ckpt"
# a folder that exists already is not overwritten
expect_refusal existing_folder "already exists" "${RUNS[@]}" --first-frame "$tmp/first.png" --out "$tmp/frames"
[ "$(ls "$tmp/frames" | wc -l)" = 1000 ] || fail generate_existing_folder_kept "the existing folder changed"
