#!/usr/bin/env bash
# prepare on real footage (Debian's opencv-doc sample videos) and on broken, short, odd and
# grayscale inputs; a prepare killed half-way; training on the prepared clips, resumed twice.
set -u
. "$(dirname "$0")/../lib.sh"
DATA=$SAMPLES
clips() { sed -n 's/.*"clips": *\([0-9]*\).*/\1/p' "$1/dataset.json" | head -1; }

if [ ! -f "$DATA/vtest.avi" ] || [ ! -f "$DATA/Megamind.avi" ] || ! command -v ffmpeg > /dev/null; then
    fail prepare_inputs "the sample videos or ffmpeg are missing (apt-get install opencv-doc ffmpeg)"
    exit 0
fi

# ---- real footage: 795 + 270 frames at 16 frames a clip -> 49 + 16 clips ----
"$FC" prepare --input "$DATA/vtest.avi" --input "$DATA/Megamind.avi" --out "$tmp/real" --size 32 --clip-frames 16 \
    > "$tmp/real.log" 2>&1
rc=$?
n=$(clips "$tmp/real")
m=$(grep -c . "$tmp/real/manifest.tsv")
expect prepare_real_footage $(( rc != 0 || n != 65 )) "status $rc, $n clips (49 from vtest.avi, 16 from Megamind.avi), manifest $m lines; $(tail -1 "$tmp/real.log" | cut -c1-150)"
fps_v=$(awk -F'\t' '$3 ~ /vtest.avi$/ {print $6}' "$tmp/real/manifest.tsv" | sort -u | tr '\n' ' ')
fps_m=$(awk -F'\t' '$3 ~ /Megamind.avi$/ {print $6}' "$tmp/real/manifest.tsv" | sort -u | tr '\n' ' ')
last_v=$(awk -F'\t' '$3 ~ /vtest.avi$/ {print $4}' "$tmp/real/manifest.tsv" | sort -n | tail -1)
expect manifest_names_sources $(( $(echo "$fps_v" | grep -c '^10 $') != 1 || $(echo "$fps_m" | grep -c '^23.97') != 1 || last_v != 768 )) \
    "manifest.tsv: vtest.avi clips at fps $fps_v(last first frame $last_v), Megamind.avi at fps $fps_m"

"$FC" prepare --input "$DATA/vtest.avi" --out "$tmp/fps" --size 32 --clip-frames 16 --fps 5 --overlap 8 > "$tmp/fps.log" 2>&1
rc=$?
n=$(clips "$tmp/fps")
# 795 frames at 10 fps resampled to 5 fps: 398 frames; clips of 16 every 8 frames: 48
expect prepare_fps_and_overlap $(( rc != 0 || n < 47 || n > 49 )) "status $rc, $n clips at 5 fps with 8 frames of overlap (expected about 48)"

# ---- bad inputs next to good ones: each reported in one line and skipped ----
mkdir -p "$tmp/in/frames"
cp "$DATA/Megamind.avi" "$tmp/in/good.avi"
cp "$DATA/Megamind_bugy.avi" "$tmp/in/bugy.avi"
head -c $(( $(stat -c %s "$DATA/Megamind.avi") / 2 )) "$DATA/Megamind.avi" > "$tmp/in/truncated.avi"
cp "$DATA/Megamind.avi" "$tmp/in/overwritten.avi"
head -c 65536 /dev/urandom | dd of="$tmp/in/overwritten.avi" bs=1 seek=200000 conv=notrunc status=none
echo "not a video" > "$tmp/in/notes.mp4"
: > "$tmp/in/empty.avi"
ffmpeg -v error -f lavfi -i testsrc=size=96x72:rate=25 -frames:v 10 -c:v mpeg4 "$tmp/in/short.mp4"
ffmpeg -v error -f lavfi -i testsrc=size=97x61:rate=25 -frames:v 40 -pix_fmt gray -c:v ffv1 "$tmp/in/gray_odd.mkv"
ffmpeg -v error -f lavfi -i testsrc=size=80x60:rate=25 -frames:v 40 -pix_fmt yuva420p -c:v ffv1 "$tmp/in/alpha.mkv"
ffmpeg -v error -i "$DATA/Megamind.avi" -frames:v 20 "$tmp/in/frames/f%03d.png"
"$FC" prepare --input "$tmp/in" --out "$tmp/mixed" --size 32 --clip-frames 16 > "$tmp/mixed.log" 2>&1
rc=$?
cat "$tmp/mixed.log" | sed 's/^/  /'
for f in bugy truncated overwritten notes empty short gray_odd alpha frames good; do
    grep -q "$f" "$tmp/mixed.log" || fail "prepare_reports_$f" "no line names $f"
done
skipped=$(grep -c "skipped" "$tmp/mixed.log")
ok=$(grep -E "(good|gray_odd|alpha|frames)[^ ]*: [0-9]+ frames -> [0-9]+ clips" "$tmp/mixed.log" | wc -l)
expect prepare_bad_inputs_skipped $(( rc != 0 || skipped < 3 || ok != 4 )) "status $rc; $skipped inputs skipped with a reason; good, grayscale/odd-sized, alpha and a PNG folder converted ($ok of 4)"
grep -q "notes.mp4: skipped" "$tmp/mixed.log" && grep -q "empty.avi: skipped" "$tmp/mixed.log" && grep -q "short.mp4: skipped: 10 frames" "$tmp/mixed.log"
expect prepare_skip_reasons $? "$(grep -m1 notes.mp4 "$tmp/mixed.log" | cut -c1-100)"

"$FC" prepare --input "$tmp/in/notes.mp4" --input "$tmp/in/empty.avi" --input "$tmp/in/short.mp4" --out "$tmp/none" \
    --size 32 --clip-frames 16 > "$tmp/none.log" 2>&1
rc=$?
expect prepare_nothing_usable_fails $(( rc == 0 || $(ls "$tmp/none" 2>/dev/null | grep -c dataset.json) != 0 )) "status $rc, $(tail -1 "$tmp/none.log" | cut -c1-120)"
"$FC" prepare --input "$tmp/in/good.avi" --out "$tmp/real" --size 32 --clip-frames 16 > "$tmp/again.log" 2>&1
rc=$?
expect prepare_keeps_existing_dataset $(( rc == 0 )) "status $rc, $(tail -1 "$tmp/again.log" | cut -c1-120)"

# ---- killed half-way: nothing that looks like a dataset ----
# The kill once the first whole shard is on disk. Shard writes held 300 ms half-written leave six more
# shards, 1.8 s at least, before dataset.json could be written, however fast the machine.
FRAMECHAIN_TEST_WRITE_DELAY_MS=300 "$FC" prepare --input "$DATA/vtest.avi" --input "$DATA/Megamind.avi" \
    --out "$tmp/killed" --size 64 --clip-frames 8 --shard-mb 1 > /dev/null 2>&1 &
pid=$!
wait_until 60 $pid have "$tmp/killed/shard-*.safetensors"
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
rc_kill=$?
shards=$(ls "$tmp/killed" 2>/dev/null | grep -c '^shard-.*\.safetensors$')
"$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/run_killed" --data "$tmp/killed" > "$tmp/killed.log" 2>&1
rc=$?
expect prepare_killed_leaves_no_dataset $(( rc == 0 || rc_kill != 137 || shards == 0 || $(ls "$tmp/killed" | grep -c '^dataset.json$') != 0 )) \
    "killed with status $rc_kill${waited:+ ($waited)}: $shards whole shards on disk, no dataset.json; train says: $(tail -1 "$tmp/killed.log" | cut -c1-100)"
"$FC" prepare --input "$DATA/vtest.avi" --input "$DATA/Megamind.avi" --out "$tmp/killed" --size 64 --clip-frames 8 \
    --shard-mb 1 > "$tmp/rerun.log" 2>&1
rc=$?
expect prepare_rerun_after_kill $(( rc != 0 )) "status $rc, $(clips "$tmp/killed") clips"

# ---- training on the prepared clips; killed twice and resumed: the same run ----
SETS=(--set steps=24 --set warmup_steps=4 --set checkpoint_every=2 --set lr=1e-3)
"$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/a" --data "$tmp/real" "${SETS[@]}" > "$tmp/a.log" 2>&1
rc=$?
waits=$(grep -c '"data_wait_ms"' "$tmp/a/metrics.jsonl")
expect train_on_prepared_clips $(( rc != 0 || waits != 24 )) "status $rc, $(tail -1 "$tmp/a.log"), data wait logged for $waits steps"
# The kills follow progress: at steps 6 and 12 of 24, each past where that start resumed; checkpoint
# writes held 50 ms half-written leave 6 of them, 300 ms at least, after the second.
killed=0 why=""
for k in 1 2; do
    FRAMECHAIN_TEST_WRITE_DELAY_MS=50 "$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/b" \
        --data "$tmp/real" "${SETS[@]}" > "$tmp/b$k.log" 2>&1 &
    pid=$!
    wait_until 60 $pid trained_past "$tmp/b" "$tmp/b$k.log" $((6 * k)) || why="$why; kill $k: $waited"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    [ $? -eq 137 ] && killed=$((killed + 1))
done
"$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/b" --data "$tmp/real" "${SETS[@]}" > "$tmp/b.log" 2>&1
cmp -s "$tmp/a/ckpt-00000024.safetensors" "$tmp/b/ckpt-00000024.safetensors"
expect train_data_resume_identical $(( $? != 0 || killed != 2 )) \
    "killed twice ($killed kills landed$why), resumed ($(grep -m1 -o 'from step [0-9]*' "$tmp/b.log")): final checkpoint equal to the uninterrupted run's"
"$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/a" "${SETS[@]}" --set steps=30 > "$tmp/c.log" 2>&1
rc=$?
expect train_refuses_other_data $(( rc == 0 || $(grep -c "dataset = shards, but this run has dataset = shapes" "$tmp/c.log") != 1 )) "status $rc, $(tail -1 "$tmp/c.log" | cut -c1-110)"
"$FC" --threads 1 train --config configs/tiny/starter.conf --set frame_size=64 --run "$tmp/d" --data "$tmp/real" > "$tmp/d.log" 2>&1
rc=$?
expect train_refuses_other_frame_size $(( rc == 0 || $(grep -c "frames are 32x32" "$tmp/d.log") != 1 )) "status $rc, $(tail -1 "$tmp/d.log" | cut -c1-110)"
exit 0
