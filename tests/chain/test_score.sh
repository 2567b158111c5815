#!/usr/bin/env bash
# framechain score and train --set exclude: a dataset from vtest.avi (49 clips of 16 frames at 32x32)
# with injected bad clips (4 of pure noise, a frozen frame, a real clip's frames shuffled in time),
# the tiny starter trained on it briefly; score twice gives the same TSV (also at another batch); the
# noise clips rank first, the ranking printed with how many bad clips land in the top 10%; --top
# writes that many clips; --reference adds the reducible loss and sorts by it; a damaged clip is noted,
# not fatal; a dataset of another frame size or too short for the plan, and an existing --out, refused
# in one line. Then exclude lists: a run that trains with one records the list's CRC in its data
# identity; a resume with another list is refused, with the same list moved is accepted; a fork with
# another list is accepted and its lineage names it; the list is read once, at the start; a dataset
# folder whose name holds a newline gets a list train takes; bad lists are refused in one line. (That the
# loader never draws an excluded clip is checked window by window in tests/dataset/test_loader.c.)
set -u
. "$(dirname "$0")/../lib.sh"
VIDEO=$SAMPLES/vtest.avi
TINY=configs/tiny/starter.conf
if [ ! -f "$VIDEO" ]; then
    fail score_inputs "$VIDEO missing (apt-get install opencv-doc)"
    exit 1
fi
fc() { "$FC" --threads 1 "$@"; }
# one_line_refusal NAME PATTERN CMD...: CMD exits non-zero with one line on stderr matching PATTERN
one_line_refusal() {
    local name=$1 pattern=$2 rc
    shift 2
    "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    refusal_rc=$rc
    if [ $rc -ne 0 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "$pattern" "$tmp/err"; then
        pass "$name" "exit $rc: $(cat "$tmp/err")"
    else
        fail "$name" "exit $rc: $(cat "$tmp/err")"
    fi
}

# ---- the bad clips: folders of PNG frames made with the standard library (zlib, struct) ----
if ! fc prepare --input "$VIDEO" --out "$tmp/real" --size 32 --clip-frames 16 > "$tmp/prep.log" 2>&1; then
    fail score_prepare "$(tail -1 "$tmp/prep.log")"
    exit 1
fi
python3 - "$tmp/real" "$tmp/bad" <<'PY'
# noise-K: uniform random pixels; frozen: clip 5's first frame 16 times; shuffled: clip 5's frames in a
# shuffled order; white: all-white frames. 16 frames of 32x32 RGB each, as PNG files.
import json, os, random, struct, sys, zlib
src, out = sys.argv[1], sys.argv[2]
n, F = 32, 16
rng = random.Random(7)

def png(path, rgb):
    raw = b"".join(b"\0" + rgb[y * n * 3:(y + 1) * n * 3] for y in range(n))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", n, n, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

def folder(name, frames):
    os.makedirs(os.path.join(out, name))
    for i, fr in enumerate(frames):
        png(os.path.join(out, name, "f%03d.png" % i), fr)

with open(os.path.join(src, "shard-00000.safetensors"), "rb") as f:  # clip 5, read directly
    size = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(size))
    start, end = head["clip.5"]["data_offsets"]
    f.seek(8 + size + start)
    data = f.read(end - start)
real = zlib.decompress(data) if head["__metadata__"]["clip.5.encoding"] == "zlib" else data
frames = [real[i * n * n * 3:(i + 1) * n * n * 3] for i in range(F)]
for k in range(4):
    folder("noise-%d" % k, [bytes(rng.randrange(256) for _ in range(n * n * 3)) for _ in range(F)])
folder("frozen", [frames[0]] * F)
order = list(range(F))
rng.shuffle(order)
folder("shuffled", [frames[i] for i in order])
folder("white", [b"\xff" * (n * n * 3)] * F)
folder("strobe", [(b"\xff" if i % 2 else b"\0") * (n * n * 3) for i in range(F)])  # black and white in turn
folder("ramp", [bytes([10 * i]) * (n * n * 3) for i in range(F)])  # every pixel 10 brighter a frame
PY
BAD=(--input "$tmp/bad/noise-0" --input "$tmp/bad/noise-1" --input "$tmp/bad/noise-2" --input "$tmp/bad/noise-3"
     --input "$tmp/bad/frozen" --input "$tmp/bad/shuffled")
if ! fc prepare --input "$VIDEO" "${BAD[@]}" --out "$tmp/mixed" --size 32 --clip-frames 16 > "$tmp/prep.log" 2>&1; then
    fail score_prepare_mixed "$(tail -1 "$tmp/prep.log")"
    exit 1
fi

# ---- a brief run on it (40 steps of 8 windows: the noise clips' loss is then about 1.3, the real
# clips' below 0.5; at 20 steps of 4 the gap was 1.32 against 1.01) ----
run=$tmp/run
if ! fc train --config $TINY --run "$run" --data "$tmp/mixed" --steps 40 --set batch_size=8 --set lr=2e-3 \
    --set warmup_steps=5 --set checkpoint_every=20 --set keep_checkpoints=2 > "$tmp/train.log" 2>&1; then
    fail score_train "$(tail -1 "$tmp/train.log")"
    exit 1
fi

# ---- score: repeatable, at any batch size ----
fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s1.tsv" > "$tmp/score.log" 2>&1
rc1=$?
fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s2.tsv" --batch 5 > /dev/null 2>&1
rc2=$?
rows=$(($(wc -l < "$tmp/s1.tsv") - 1))
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ $rows = 55 ] && cmp -s "$tmp/s1.tsv" "$tmp/s2.tsv" && ! have "$tmp/s1.tsv.tmp*"; then
    pass score_repeatable "55 clips; the TSV of a second score (batch 5, not 16) is the same byte for byte"
else
    fail score_repeatable "exit $rc1, $rc2; $rows rows; $(tail -1 "$tmp/score.log")"
fi

# a --batch past the dataset's clips is the clips' batch: not memory and passes for padding windows
peak_kib() {  # peak_kib CMD...: the command's peak resident memory in KiB (its status must be 0)
    python3 -c 'import resource, subprocess, sys
r = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r == 0 else -1)' "$@"
}
kib55=$(peak_kib "$FC" --threads 1 score --run "$run" --data "$tmp/mixed" --out "$tmp/b55.tsv" --batch 55)
kib256=$(peak_kib "$FC" --threads 1 score --run "$run" --data "$tmp/mixed" --out "$tmp/b256.tsv" --batch 256)
[ "$kib55" -gt 0 ] && [ "$kib256" -gt 0 ] && [ $((kib256 * 2)) -lt $((kib55 * 3)) ] && cmp -s "$tmp/b55.tsv" "$tmp/b256.tsv"
expect score_batch_past_clips $? "--batch 256 of 55 clips: peak $((kib256 / 1024)) MiB, --batch 55: $((kib55 / 1024)) MiB; the same TSV"

# ---- the ranking: the noted clips (frozen, unordered) first, then the loss ----
echo "  the ranking (loss, motion, order, note, source), top 10 of 55:"
sed -n '2,11p' "$tmp/s1.tsv" | awk -F'\t' '{ printf "    %2d  %s  %s  %s  %-9s  %s %s\n", NR, $6, $7, $8, $9, $4, $5 }' |
    sed "s|$tmp/||"
top10=$(( (rows + 9) / 10 ))
bad_in_top=$(sed -n "2,$((top10 + 1))p" "$tmp/s1.tsv" | grep -c '/bad/')
noise_first=$(sed -n '2,5p' "$tmp/s1.tsv" | grep -c '/bad/noise-')
echo "  bad clips in the top 10% ($top10 clips): $bad_in_top of 6 (noise: $noise_first of 4 in ranks 1-4;" \
     "frozen at rank $(grep -n '/bad/frozen' "$tmp/s1.tsv" | cut -d: -f1 | awk '{print $1 - 1}')," \
     "shuffled at rank $(grep -n '/bad/shuffled' "$tmp/s1.tsv" | cut -d: -f1 | awk '{print $1 - 1}'))"
sorted=$( (awk -F'\t' 'NR > 1 && $9 != ""' "$tmp/s1.tsv" | cut -f6 | sort -g -r -c &&
          awk -F'\t' 'NR > 1 && $9 == ""' "$tmp/s1.tsv" | cut -f6 | sort -g -r -c) 2>&1 && echo yes)
expect score_noise_ranks_first $(( noise_first != 4 )) \
    "the 4 noise clips rank 1 to 4 of 55 (losses sorted descending among the noted and the rest: ${sorted:-no})"
notes=$(awk -F'\t' 'NR > 1 && $9 != "" { sub(".*/", "", $4); printf "%s=%s ", $4, $9 }' "$tmp/s1.tsv")
[ $bad_in_top = 6 ] && [ "$(echo "$notes" | tr ' ' '\n' | grep -c .)" = 6 ] && [[ $notes == *frozen=frozen* ]] &&
    [[ $notes == *shuffled=unordered* ]]
expect score_bad_clips_top10 $? "$bad_in_top of the 6 injected clips in the top 10%; noted: $notes(no vtest.avi clip)"

# ---- --top writes the top fraction as an exclude list ----
fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s3.tsv" --top 0.1 --exclude-out "$tmp/top.txt" > /dev/null 2>&1
rc=$?
lines=$(grep -vc '^#' "$tmp/top.txt" 2> /dev/null)
want=$(sed -n "2,7p" "$tmp/s1.tsv" | awk -F'\t' '{ print $1 " " $2 }')
expect score_top_list $(( rc != 0 || lines != 6 )) "--top 0.1 of 55 clips: $lines lines (ceil(5.5) = 6)"
expect score_top_list_content $([ "$(grep -v '^#' "$tmp/top.txt")" = "$want" ]; echo $?) \
    "the list names the first 6 rows of the TSV, as 'shard k'"
# --out /dev/stdout on a pipe: a link to /proc/self/fd/1, there but with no name to resolve to (told as
# a link to something that does not exist); refused before any clip is scored
fc score --run "$run" --data "$tmp/mixed" --out /dev/stdout 2> "$tmp/err" | cat > /dev/null
rc=${PIPESTATUS[0]}
expect score_out_stdout_pipe $(( rc != 1 || $(wc -l < "$tmp/err") != 1 ||
    $(grep -c -- "^framechain: --out /dev/stdout: is a symbolic link to /proc/self/fd/1 (a pipe); a file is written only under its own name: give a file name$" "$tmp/err") != 1 )) \
    "status $rc: $(head -1 "$tmp/err")"
# into a folder its user may write into but not read (mode 0300): the folder's fsync cannot open it,
# which failed score after its TSV was in place, the exclude list never written (and a rerun was
# refused: the TSV exists). Both written, status 0. (As nobody when the suite runs as root.)
mkdir -m 777 "$tmp/drop" && chmod 711 "$tmp" && chmod -R a+rX "$run" "$tmp/mixed"
if ! ${as_user[@]+"${as_user[@]}"} "$FC" --threads 1 score --run "$run" --data "$tmp/mixed" --out "$tmp/drop/probe.tsv" \
    > "$tmp/drop.log" 2>&1; then
    echo "SKIP score_into_unreadable_folder: cannot score as another user than root: $(tail -1 "$tmp/drop.log")"
else
    rm "$tmp/drop/probe.tsv" && chmod 733 "$tmp/drop" &&
        ${as_user[@]+"${as_user[@]}"} mkdir -m 300 "$tmp/drop/wo"
    ${as_user[@]+"${as_user[@]}"} "$FC" --threads 1 score --run "$run" --data "$tmp/mixed" --out "$tmp/drop/wo/s.tsv" \
        --top 0.1 --exclude-out "$tmp/drop/wo/top.txt" > "$tmp/drop.log" 2>&1
    rc=$?
    chmod 700 "$tmp/drop/wo"
    [ $rc = 0 ] && cmp -s "$tmp/drop/wo/top.txt" "$tmp/top.txt" && [ -s "$tmp/drop/wo/s.tsv" ]
    expect score_into_unreadable_folder $? "status $rc: $(tail -1 "$tmp/drop.log" | cut -c1-160); left: $(ls "$tmp/drop/wo" | tr '\n' ' ')"
fi
# SIGINT to a score started with SIGINT ignored (a script's background job), while it loads (a test
# hook holds its start): it was ignored, the scores written, status 0. Status 130, nothing written
int_while_starting "$tmp/int.out" "$FC" --threads 1 score --run "$run" --data "$tmp/mixed" --out "$tmp/int.tsv"
expect score_sigint_in_background $(( rc != 130 || $(ls -a "$tmp" | grep -c 'int.tsv') != 0 ||
    $(grep -c '^framechain: stopped by SIGINT after 0 of the [0-9]* clips: nothing written$' "$tmp/int.out") != 1 )) \
    "status $rc: $(tail -1 "$tmp/int.out"); left: $(ls -a "$tmp" | grep int.tsv | tr '\n' ' ')"
# the TSV and its list go together: a disk that fills while either is written (a test hook, by file
# name) leaves both as they were (a rerun at --levels 2 would change the scores), one line naming the
# user's file, no temporary file left
for full in top.txt s3.tsv; do
    sum_before=$(cat "$tmp/s3.tsv" "$tmp/top.txt" | cksum)
    one_line_refusal score_full_disk_keeps_both_$full "$tmp/$full: write failed: No space left on device" \
        env FRAMECHAIN_TEST_FAIL_WRITE_OF=$full "$FC" --threads 1 score --run "$run" --data "$tmp/mixed" \
        --out "$tmp/s3.tsv" --top 0.1 --exclude-out "$tmp/top.txt" --levels 2 --overwrite
    [ "$(cat "$tmp/s3.tsv" "$tmp/top.txt" | cksum)" = "$sum_before" ] && ! ls "$tmp" | grep -q '\.tmp-'
    expect score_full_disk_keeps_both_${full}_files $? "both files as before, no temporary file: $(ls "$tmp" | grep '\.tmp-')"
done
# a score stopped between its two renames (the TSV in place, the list's temporary name left): the
# rerun without --overwrite is refused at the TSV, and the stale temporary name of the list goes
true & dead=$!
wait $dead
: > "$tmp/top.txt.tmp-$dead"
one_line_refusal score_cut_between_renames "--out .*s3.tsv: the file exists" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s3.tsv" --top 0.1 --exclude-out "$tmp/top.txt"
expect score_cut_between_renames_temp_removed $([ ! -e "$tmp/top.txt.tmp-$dead" ]; echo $?) \
    "the list's temporary file of a score that no longer runs: $(ls "$tmp" | grep -c "tmp-$dead") left"
# a fraction out of (0, 1) is refused by one message whichever side it falls on
one_line_refusal score_top_past_one "--top 1.5: a fraction between 0 and 1, both excluded" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s4.tsv" --top 1.5 --exclude-out "$tmp/top4.txt"
one_line_refusal score_top_one "--top 1: a fraction between 0 and 1, both excluded" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s4.tsv" --top 1 --exclude-out "$tmp/top4.txt"

# ---- --reference: the reducible loss, sorted by it ----
cp -r "$run" "$tmp/ref" && rm -f "$tmp/ref"/ckpt-00000040.safetensors  # the same run at step 20
fc score --run "$run" --reference "$tmp/ref" --data "$tmp/mixed" --out "$tmp/r.tsv" > /dev/null 2>&1
rc=$?
check=$(awk -F'\t' 'NR == 1 { ok = ($6 == "loss" && $7 == "ref_loss" && $8 == "score") } NR > 1 {
        if ($8 - ($6 - $7) > 2e-5 || ($6 - $7) - $8 > 2e-5) ok = 0
        noted = $11 != ""
        if (NR > 2 && (noted > pnoted || (noted == pnoted && $8 > prev))) ok = 0
        prev = $8; pnoted = noted } END { print ok ? "ok" : "bad" }' "$tmp/r.tsv" 2> /dev/null)
expect score_reference $(( rc != 0 )) "exit $rc; header loss, ref_loss, score; score = loss - ref_loss, sorted by it (noted clips first): $check"
[ "$check" = ok ] || fail score_reference_columns "$(head -3 "$tmp/r.tsv")"
# a reference that cannot be subtracted is refused before any scoring, in one line naming --reference:
# one missing, one of another plan (its loss is of other windows: not the reducible loss)
one_line_refusal score_reference_missing "--reference .*nosuchrun: no such run folder" \
    fc score --run "$run" --reference "$tmp/nosuchrun" --data "$tmp/mixed" --out "$tmp/r2.tsv"
fc train --config configs/tiny/interpolate.conf --run "$tmp/interp" --data "$tmp/mixed" --steps 2 > /dev/null 2>&1
one_line_refusal score_reference_other_plan "--reference .*interp: plan = anchor:-8 .*, but .* has plan = anchor:0 " \
    fc score --run "$run" --reference "$tmp/interp" --data "$tmp/mixed" --out "$tmp/r2.tsv"
[ ! -e "$tmp/r2.tsv" ] || fail score_reference_refusal_wrote "$tmp/r2.tsv was written"

# ---- each clip's source and first frame come from its shard, not from manifest.tsv (a listing nothing
# checks against the shards): with the manifest a FIFO that no one writes, score neither waits on it
# nor changes a row's origin ----
cp -r "$tmp/mixed" "$tmp/fifo" && rm "$tmp/fifo/manifest.tsv" && mkfifo "$tmp/fifo/manifest.tsv"
timeout 120 "$FC" --threads 1 score --run "$run" --data "$tmp/fifo" --out "$tmp/f.tsv" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(cut -f3-5 "$tmp/f.tsv" | sort)" = "$(cut -f3-5 "$tmp/s1.tsv" | sort)" ]
expect score_origins_from_shards $? "exit $rc ($(tail -1 "$tmp/out")); dataset_clip, source, first_frame as the shards hold them"

# ---- a source longer than a fixed field: a folder of frames 2200 characters deep; its row holds the
# path whole and its first_frame column after it (a 2100-character cap once cut both off) ----
deep=$tmp/deep
for i in $(seq 11); do deep=$deep/$(printf 'd%.0s' $(seq 200)); done
mkdir -p "$deep" && cp "$tmp/bad/noise-0"/*.png "$deep/"
fc prepare --input "$deep" --out "$tmp/deepdata" --size 32 --clip-frames 16 > /dev/null 2>&1 &&
    fc score --run "$run" --data "$tmp/deepdata" --out "$tmp/deep.tsv" > "$tmp/out" 2>&1
rc=$?
row=$(sed -n 2p "$tmp/deep.tsv" 2> /dev/null)
[ $rc -eq 0 ] && [ "$(echo "$row" | awk -F'\t' '{ print NF }')" = 9 ] && [ "$(echo "$row" | cut -f4)" = "$deep" ] &&
    [ "$(echo "$row" | cut -f5)" = 0 ]
expect score_long_source_whole $? "exit $rc; a source of ${#deep} characters: $(echo "$row" | awk -F'\t' '{ printf "%d columns, source %d characters, first_frame %s", NF, length($4), $5 }')"

# ---- --overwrite keeps the replaced file's permissions; without it, a file that appears at --out while
# score runs is not replaced (the write held 2 s by a test hook): status 1, the file as it came ----
cp "$tmp/s1.tsv" "$tmp/mode.tsv" && chmod 600 "$tmp/mode.tsv"
fc score --run "$run" --data "$tmp/mixed" --out "$tmp/mode.tsv" --overwrite > /dev/null 2>&1 &&
    [ "$(stat -c %a "$tmp/mode.tsv")" = 600 ] && cmp -s "$tmp/mode.tsv" "$tmp/s1.tsv"
expect score_overwrite_keeps_mode $? "mode after --overwrite: $(stat -c %a "$tmp/mode.tsv") (600 before); the same table"
appears_meanwhile "$tmp/race" s.tsv env FRAMECHAIN_TEST_WRITE_DELAY_MS=2000 "$FC" --threads 1 score --run "$run" \
    --data "$tmp/mixed" --out "$tmp/race/s.tsv"
expect score_never_over_a_file_that_appeared $? "$appeared"

# ---- a damaged clip: noted, not scored, not fatal ----
cp -r "$tmp/mixed" "$tmp/damaged"
damage_clip "$tmp/damaged/shard-00000.safetensors" 10
fc score --run "$run" --data "$tmp/damaged" --out "$tmp/d.tsv" > "$tmp/out" 2> "$tmp/err"
rc=$?
last=$(tail -1 "$tmp/d.tsv" | cut -f3,6,9)
expect score_damaged_clip $(( rc != 0 )) "exit $rc; the last row: '$last'; $(head -1 "$tmp/out")"
[ "$last" = "$(printf '10\t\tdamaged')" ] || fail score_damaged_row "$(tail -1 "$tmp/d.tsv")"

# ---- --top that would take every clip: an exclude list train refuses, never written ----
one_line_refusal score_top_every_clip "--top 0.99: the top 55 of the 55 clips of .* nothing to train on" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/all.tsv" --top 0.99 --exclude-out "$tmp/all-ex.txt"
[ ! -e "$tmp/all.tsv" ] && [ ! -e "$tmp/all-ex.txt" ]
expect score_top_every_clip_writes_nothing $? "refused before scoring: neither output written"
# 2 clips, one damaged: the top half of the 1 scored clip is every clip train could draw
fc prepare --input "$tmp/bad/white" --out "$tmp/two" --size 32 --clip-frames 8 > /dev/null 2>&1
damage_clip "$tmp/two/shard-00000.safetensors" 1
one_line_refusal score_top_every_scored_clip "the top 1 of the 1 scored clips .* every clip not damaged (1 damaged)" \
    fc score --run "$run" --data "$tmp/two" --out "$tmp/two.tsv" --top 0.5 --exclude-out "$tmp/two-ex.txt"
[ "$(wc -l < "$tmp/two.tsv" 2> /dev/null)" = 3 ] && [ ! -e "$tmp/two-ex.txt" ]
expect score_top_every_scored_clip_files $? "the TSV written ($(wc -l < "$tmp/two.tsv" 2> /dev/null) lines), the exclude list not"

# a clip of black and white frames in turn has no change 4 frames apart: order inf, noted unordered
fc prepare --input "$tmp/bad/strobe" --out "$tmp/strobe" --size 32 --clip-frames 16 > /dev/null 2>&1
fc score --run "$run" --data "$tmp/strobe" --out "$tmp/strobe.tsv" > /dev/null 2>&1
row=$(sed -n 2p "$tmp/strobe.tsv" 2> /dev/null | cut -f7-)
expect score_strobe_unordered $([ "$row" = "$(printf '255.0000\tinf\tunordered')" ]; echo $?) "motion, order, note: '$row'"
# a steady change, 10 a frame: motion 10 (the mean change between neighbours), order 10 / 40 (their
# change over the mean change 4 frames apart), no note
fc prepare --input "$tmp/bad/ramp" --out "$tmp/ramp" --size 32 --clip-frames 16 > /dev/null 2>&1
fc score --run "$run" --data "$tmp/ramp" --out "$tmp/ramp.tsv" > /dev/null 2>&1
row=$(sed -n 2p "$tmp/ramp.tsv" 2> /dev/null | cut -f7-)
expect score_ramp_motion_and_order $([ "$row" = "$(printf '10.0000\t0.2500\t')" ]; echo $?) "motion, order, note: '$row'"

# ---- refusals: another frame size, a plan one frame longer than the clips, an existing --out ----
fc prepare --input "$tmp/bad/white" --out "$tmp/small" --size 16 --clip-frames 16 > /dev/null 2>&1
fc prepare --input "$tmp/bad/white" --out "$tmp/short" --size 32 --clip-frames 6 > /dev/null 2>&1
one_line_refusal score_other_size "frames are 16x16 RGB, but .* makes 32x32 frames of 3 channels (prepare the footage with --size 32)" \
    fc score --run "$run" --data "$tmp/small" --out "$tmp/x.tsv"
one_line_refusal score_plan_too_long "spans 7 frames, more than its clips have" \
    fc score --run "$run" --data "$tmp/short" --out "$tmp/x.tsv"
one_line_refusal score_out_exists "the file exists (give --overwrite" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s1.tsv"
expect score_out_exists_status_1 $(( refusal_rc != 1 )) "status $refusal_rc: 1 for a file, as generate's --out (2: a bad command line)"
fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s1.tsv" --overwrite > /dev/null 2>&1
expect score_overwrite $? "--overwrite replaces it"
# --overwrite never replaces what score reads: the run's checkpoint and metrics (--run, --reference),
# the dataset's files (its folder under another spelling too), as --out or as --exclude-out; each
# refused in one line before any scoring, every input as it was
ckpt=$(ls "$run"/ckpt-*.safetensors | tail -1)
sums_before=$(cat "$ckpt" "$run/metrics.jsonl" "$tmp/mixed"/* "$tmp/ref"/* | cksum)
one_line_refusal score_out_is_checkpoint "--out .*ckpt-.*: is a file of the run --run" \
    fc score --run "$run" --data "$tmp/mixed" --out "$ckpt" --overwrite
one_line_refusal score_out_is_reference_metrics "--out .*metrics.jsonl: is a file of the run --reference" \
    fc score --run "$run" --reference "$tmp/ref" --data "$tmp/mixed" --out "$tmp/ref/metrics.jsonl" --overwrite
one_line_refusal score_out_is_dataset_file "--out .*dataset.json: is a file of the dataset" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/mixed/../mixed/dataset.json" --overwrite
one_line_refusal score_exclude_out_is_shard "--exclude-out .*shard-00000.safetensors: is a file of the dataset" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s1.tsv" --top 0.5 \
    --exclude-out "$tmp/mixed/shard-00000.safetensors" --overwrite
[ "$(cat "$ckpt" "$run/metrics.jsonl" "$tmp/mixed"/* "$tmp/ref"/* | cksum)" = "$sums_before" ]
expect score_inputs_kept $? "the run's checkpoint and metrics, the reference's and the dataset's files as they were"
# legal names of 250 and 251 bytes, where the temporary "NAME.tmp-PID" would pass NAME_MAX (255): both
# outputs written (through shorter temporary names), nothing else left
long=$(printf 'n%.0s' $(seq 246)).tsv
mkdir "$tmp/long"
fc score --run "$run" --data "$tmp/mixed" --out "$tmp/long/$long" --top 0.5 --exclude-out "$tmp/long/x$long" \
    > /dev/null 2> "$tmp/err"
rc=$?
expect score_250_byte_names $(( rc != 0 || $(ls -a "$tmp/long" | grep -vc '^\.\.\?$') != 2 || $(wc -l < "$tmp/long/$long") < 2 )) \
    "status $rc: $(head -1 "$tmp/err" | cut -c1-60); $(ls "$tmp/long" | wc -l) files: the TSV and the exclude list"
rm -rf "$tmp/long"
# outputs that cannot be: refused before any scoring (the output file never written)
one_line_refusal score_out_same_as_exclude_out "name one file" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/same.tsv" --top 0.5 --exclude-out "$tmp/../$(basename "$tmp")/same.tsv"
one_line_refusal score_exclude_out_no_folder "the folder .*nodir does not exist" \
    fc score --run "$run" --data "$tmp/mixed" --out "$tmp/s5.tsv" --top 0.5 --exclude-out "$tmp/nodir/x.txt"
# in a working folder deeper than PATH_MAX (4096), where realpath fails: the same file still (its folder
# compared by inode), refused before scoring; it was taken for two files, scored, and the exclude list
# left under the name given to both
deep="$tmp/deep_workdir"
mkdir "$deep" && ln -s "$run" "$deep/run" && ln -s "$tmp/mixed" "$deep/mixed"
part=$(printf 'd%.0s' $(seq 200))
(
    cd "$deep" || exit 1
    for i in $(seq 22); do mkdir "$part" && cd "$part" || exit 1; done
    ln -s "$deep/run" run && ln -s "$deep/mixed" mixed
    "$FC" --threads 1 score --run run --data mixed --out same.tsv --top 0.5 --exclude-out ./same.tsv > /dev/null 2> "$deep/err"
    echo $? > "$deep/rc"
    [ ! -e same.tsv ] && echo none > "$deep/left"
    echo "${#PWD}" > "$deep/len"
)
[ -e "$deep/left" ]
expect score_same_file_in_deep_folder $(( $? != 0 || $(cat "$deep/rc") != 2 || $(cat "$deep/len") <= 4096 ||
    $(grep -c "^framechain score: --out and --exclude-out name one file: same.tsv" "$deep/err") != 1 )) \
    "status $(cat "$deep/rc") in a folder of $(cat "$deep/len") bytes: $(head -1 "$deep/err"); same.tsv left: $([ -e "$deep/left" ] && echo no || echo yes)"
rm -rf "$deep"
[ ! -e "$tmp/s5.tsv" ] && [ ! -e "$tmp/same.tsv" ]
expect score_refusals_write_nothing $? "neither --out was written"
one_line_refusal score_out_is_a_folder "is a folder" fc score --run "$run" --data "$tmp/mixed" --out "$tmp/bad" --overwrite
[ ! -e "$tmp/x.tsv" ] || fail score_refusal_wrote "$tmp/x.tsv was written"

# ---- exclude: the list's CRC in the data identity; resume and fork ----
meta() {  # meta CHECKPOINT KEY: one metadata value
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    print(json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"].get(sys.argv[2], ""))
PY
}
ex=$tmp/ex
EXSETS=(--set warmup_steps=2 --set checkpoint_every=2 --set lr=1e-3)
fc train --config $TINY --run "$ex" --data "$tmp/mixed" --steps 4 "${EXSETS[@]}" --set exclude="$tmp/top.txt" \
    > "$tmp/ex.log" 2>&1
rc=$?
crc=$(python3 -c "import zlib, sys; print('%08x' % zlib.crc32(open(sys.argv[1], 'rb').read()))" "$tmp/top.txt")
data=$(meta "$ex/ckpt-00000004.safetensors" data)
expect exclude_train $(( rc != 0 )) "exit $rc; $(grep '^exclude:' "$tmp/ex.log")"
expect exclude_identity $([[ "$data" == *"; excluding crc32 $crc of $tmp/top.txt" ]]; echo $?) "data = $data"

grep -v '^#' "$tmp/top.txt" | head -3 > "$tmp/other.txt"
one_line_refusal exclude_resume_other_list "written on the data of .*excluding crc32 $crc.* but this run has" \
    fc train --config $TINY --run "$ex" --data "$tmp/mixed" --steps 4 "${EXSETS[@]}" --set exclude="$tmp/other.txt"
# the run's list gone (moved, deleted): said as what it is, not as other data than the run's
one_line_refusal exclude_resume_list_missing "exclude = $tmp/gone.txt: cannot open the exclude list: No such file" \
    fc train --config $TINY --run "$ex" --data "$tmp/mixed" --steps 4 "${EXSETS[@]}" --set exclude="$tmp/gone.txt"
cp "$tmp/top.txt" "$tmp/moved.txt"
fc train --config $TINY --run "$ex" --data "$tmp/mixed" --steps 4 "${EXSETS[@]}" --set exclude="$tmp/moved.txt" \
    > "$tmp/out" 2>&1
rc=$?
expect exclude_resume_same_list $(( rc != 0 )) "the same list at another path resumes: $(grep -m1 '^resuming' "$tmp/out")"
fc train --from "$ex/ckpt-00000004.safetensors" --run "$tmp/fork" --data "$tmp/mixed" --steps 6 \
    --set exclude="$tmp/other.txt" > "$tmp/out" 2>&1
rc=$?
lineage=$(meta "$tmp/fork/ckpt-00000006.safetensors" lineage)
expect exclude_fork_other_list $(( rc != 0 )) "exit $rc; lineage: $lineage"
[[ "$lineage" == *"exclude $tmp/top.txt -> $tmp/other.txt"* ]] || fail exclude_fork_names_list "$lineage"
# the data line says what changed, the list: not the dataset's identity twice, "X -> X"
other_crc=$(python3 -c "import zlib,sys; print('%08x' % zlib.crc32(open(sys.argv[1],'rb').read()))" "$tmp/other.txt")
[[ "$lineage" == *"data the same, its exclude list crc32 $crc -> crc32 $other_crc"* ]] && [[ "$lineage" != *"data crc32"* ]]
expect exclude_fork_data_line $? "lineage: $lineage"

# the list is read once for the loader, when train starts: a list
# replaced while the set-up is held is not read again by the data loader, which once stopped at it
cp "$tmp/top.txt" "$tmp/held.txt"
(exec env FRAMECHAIN_TEST_SETUP_DELAY_MS=3000 "$FC" --threads 1 train --config $TINY --run "$tmp/held" \
    --data "$tmp/mixed" --steps 2 --set exclude="$tmp/held.txt") > "$tmp/held.log" 2>&1 &
pid=$!
wait_until 60 $pid grep -q '^test hook: the set-up held' "$tmp/held.log"
echo "shard-00000.safetensors 55" > "$tmp/held.txt"
wait $pid
rc=$?
expect exclude_list_read_once $(( rc != 0 || $(grep -c '^exclude: .* never drawn' "$tmp/held.log") != 1 )) \
    "status $rc; $(grep -m1 -e '^exclude:' "$tmp/held.log"); $(grep -m1 '^framechain:' "$tmp/held.log" | cut -c1-160)"

# ---- bad lists: one line, non-zero exit ----
echo "shard-00000.safetensors 55" > "$tmp/nosuch.txt"
awk -F'\t' 'NR > 1 { print $1 " " $2 }' "$tmp/mixed/manifest.tsv" > "$tmp/all.txt"
one_line_refusal exclude_no_such_clip "nosuch.txt:1: shard-00000.safetensors 55: .* has no such clip" \
    fc train --config $TINY --run "$tmp/bad1" --data "$tmp/mixed" --steps 2 --set exclude="$tmp/nosuch.txt"
one_line_refusal exclude_every_clip "excludes every one of the 55 clips" \
    fc train --config $TINY --run "$tmp/bad2" --data "$tmp/mixed" --steps 2 --set exclude="$tmp/all.txt"
# a list score wrote for another dataset (two clips of the moving shapes): its clip exists in this one
# too (shard-00000.safetensors 0 or 1), but is not the one scored; its header names its dataset
fc prepare --input shapes:3:16 --out "$tmp/shapes2" --size 32 --clip-frames 8 > /dev/null 2>&1
fc score --run "$run" --data "$tmp/shapes2" --out "$tmp/shapes2.tsv" --top 0.5 --exclude-out "$tmp/shapes2-ex.txt" > /dev/null 2>&1
one_line_refusal exclude_list_of_another_dataset "shapes2-ex.txt:1: made for another dataset (its dataset.json's CRC-32 [0-9a-f]*; .*mixed's is [0-9a-f]*)" \
    fc train --config $TINY --run "$tmp/bad5" --data "$tmp/mixed" --steps 2 --set exclude="$tmp/shapes2-ex.txt"
# a dataset folder whose name holds a newline and a byte that is not UTF-8: score's summary line, the
# list's header comment and train's data line name it escaped as prepare does, each still one line,
# and train takes the list (its header was two lines, the second refused as a malformed line)
odd="$tmp/odd dir"$'\n'"line2 "$'\xff'
odd_shown="$tmp/odd dir\\nline2 \\xff"
fc prepare --input shapes:3:16 --out "$odd" --size 32 --clip-frames 8 > /dev/null 2>&1
fc score --run "$run" --data "$odd" --out "$tmp/odd.tsv" --top 0.5 --exclude-out "$tmp/odd-ex.txt" > "$tmp/out" 2>&1
rc=$?
expect score_summary_odd_folder_name $(( rc != 0 || $(grep -c '^scored ' "$tmp/out") != 1 ||
    $(grep -cF "scored 2 clips of $odd_shown (0 damaged" "$tmp/out") != 1 )) "status $rc: $(head -1 "$tmp/out" | cut -c1-160)"
expect exclude_header_odd_folder_name $(( $(grep -c '^#' "$tmp/odd-ex.txt") != 1 ||
    $(head -1 "$tmp/odd-ex.txt" | grep -cF "of the 2 clips of $odd_shown (dataset.json crc32 ") != 1 )) \
    "$(head -1 "$tmp/odd-ex.txt" | cut -c1-160)"
fc train --config $TINY --run "$tmp/oddrun" --data "$odd" --steps 2 --set exclude="$tmp/odd-ex.txt" > "$tmp/out" 2>&1
rc=$?
expect exclude_list_of_odd_folder_name $(( rc != 0 || $(grep -c '^exclude: .*1 of 2 clips never drawn' "$tmp/out") != 1 ||
    $(grep -cF "data: $odd_shown, 2 clips of 8 frames" "$tmp/out") != 1 )) \
    "status $rc: $(grep -m1 -e '^exclude:' -e '^framechain:' "$tmp/out" | cut -c1-160)"
one_line_refusal exclude_missing_file "missing.txt: cannot open the exclude list" \
    fc train --config $TINY --run "$tmp/bad3" --data "$tmp/mixed" --steps 2 --set exclude="$tmp/missing.txt"
one_line_refusal exclude_without_data "an exclude list needs --data" \
    fc train --config $TINY --run "$tmp/bad4" --steps 2 --set exclude="$tmp/top.txt"
rc_cli=$refusal_rc
# the same key in the config file: the file's mistake (status 1, the file named), not the command line's
# (status 2 and "see --help", as it was)
(cat $TINY; echo "exclude = $tmp/top.txt") > "$tmp/excl.conf"
one_line_refusal exclude_in_config_without_data "^framechain: $tmp/excl.conf: exclude = $tmp/top.txt: an exclude list needs --data (it names clips of a dataset)$" \
    fc train --config "$tmp/excl.conf" --run "$tmp/bad4" --steps 2
expect exclude_without_data_status $(( rc_cli != 2 || refusal_rc != 1 )) "--set: status $rc_cli (2 wanted); in the file: status $refusal_rc (1 wanted)"
