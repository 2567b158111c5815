#!/usr/bin/env bash
# Training that survives crashes: an uninterrupted run against one killed with kill -9 again and
# again (also while checkpoints are being written), SIGTERM, corrupt and truncated checkpoints, a
# failing disk, a NaN loss, NaN weights, checkpoints that do not continue the run, recompute against
# keeping every activation, and 8-bit against fp32 AdamW.
set -u
. "$(dirname "$0")/../lib.sh"
# The Python with numpy (the checks that read checkpoints need it): Debian's, else the one on PATH.
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy' 2> /dev/null && echo $p && break; done)}
PYTHON=${PYTHON:-python3}
TINY=configs/tiny/starter.conf
STEPS=60
SETS=(--set steps=$STEPS --set checkpoint_every=4 --set keep_checkpoints=3 --set warmup_steps=5 --set lr=1e-3)
# Run framechain itself (not a shell function around it) in the background: the signals must reach it.
train() {  # train RUN [extra args...]
    local run=$1
    shift
    exec "$FC" --threads 1 train --config "$TINY" --run "$run" "${SETS[@]}" "$@"
}
bg_train() {  # bg_train LOG RUN [extra args...]: start in the background, $! is framechain's pid
    local log=$1
    shift
    (train "$@") > "$log" 2>&1 &
}
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
final() { echo "$1/ckpt-$(printf %08d $STEPS).safetensors"; }

# ---- the uninterrupted run: the reference every other run must reproduce ----
(train "$tmp/ref") > "$tmp/ref.log" 2>&1
rc=$?
lines=$(wc -l < "$tmp/ref/metrics.jsonl")
expect train_runs_to_the_end $(( rc != 0 || lines != STEPS )) "status $rc, $lines metrics lines, $(tail -1 "$tmp/ref.log")"
n_ckpt=$(ls "$tmp/ref"/ckpt-*.safetensors | wc -l)
expect keeps_newest_checkpoints $(( n_ckpt != 3 )) "$n_ckpt checkpoints kept (keep_checkpoints = 3)"
first=$(losses "$tmp/ref" | head -10 | awk '{s+=$2} END {print s/NR}')
last=$(losses "$tmp/ref" | tail -10 | awk '{s+=$2} END {print s/NR}')
expect loss_goes_down $(awk -v a="$first" -v b="$last" 'BEGIN {print !(b < 0.9 * a)}') "mean loss of steps 1-10 $first, of steps 51-60 $last"
# Each metrics line's smooth_loss, recomputed from the losses: the first step's loss, then an
# exponential average with weight 0.02 on each new step's; the steps counted 1, 2, ... without a gap.
smooth=$(sed -E 's/.*"step":([0-9]+),"loss":([^,]+),"smooth_loss":([^,]+),.*/\1 \2 \3/' "$tmp/ref/metrics.jsonl" |
    awk '{ want = NR == 1 ? $2 : 0.98 * want + 0.02 * $2; d = $3 - want; if (d < 0) d = -d
           if (d > 1e-5 * (want < 0 ? -want : want) || $1 != NR) bad++; if (d > worst) worst = d }
         END { printf "%d %d %.3g", bad, NR, worst }')
read -r off counted worst <<< "$smooth"
expect smooth_loss_is_the_average $(( ${off:-1} != 0 || ${counted:-0} != STEPS )) \
    "${off:-?} of ${counted:-?} lines off the exponential average of their losses (largest difference ${worst:-?})"
# The memory plan printed before the first step holds what the run measured at its end: on the CPU
# the whole resident set (the program, the checkpoint's staging buffer, the threads' scratch). In the
# sanitizer build ASan's shadow memory and redzones come on top of every allocation: there only the
# plan's floor is checked.
ratio=$(sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p' "$tmp/ref.log")
most=1.05
if ldd "$FC" 2> /dev/null | grep -q libasan; then most=100; fi
expect memory_plan_holds_the_peak $(awk -v r="${ratio:-0}" -v m=$most 'BEGIN {print !(r >= 0.9 && r <= m)}') \
    "$(grep '^peak' "$tmp/ref.log" || echo 'no peak line'); plan: $(grep -E '^  (ckpt staging|program|total) ' "$tmp/ref.log" | tr -s ' ' | tr '\n' ';')"
# Attention's scratch is each thread's (L, L) scores and their gradients: with 1024 tokens a frame
# (frame_size 32, patch 1) 8 MiB a thread, which the plan counts for the threads the run has
ratio2=$("$FC" --threads 2 train --config "$TINY" --run "$tmp/long_attn" --steps 1 --set warmup_steps=0 --set frame_size=32 \
    --set patch=1 --set batch_size=1 2>&1 | sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p')
expect memory_plan_holds_attention_scratch $(awk -v r="${ratio2:-0}" -v m=$most 'BEGIN {print !(r >= 0.9 && r <= m)}') \
    "1024 tokens a frame on 2 threads: the measure ${ratio2:-?}x the plan"
# The data loader's batches and its threads' clips (long clips of footage: two of 790 frames at 64x64
# are 19 MiB), and the previews' sampler windows and figure: in the plan (each run was 1.06-1.37x it)
"$FC" --threads 1 prepare --input "$SAMPLES/vtest.avi" --out "$tmp/long64" --size 64 --clip-frames 790 > /dev/null 2>&1
ratio3=$("$FC" --threads 1 train --config "$TINY" --run "$tmp/long_clips" --data "$tmp/long64" --steps 2 --set warmup_steps=0 \
    --set frame_size=64 --set batch_size=1 2>&1 | sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p')
ratio4=$("$FC" --threads 1 train --config "$TINY" --run "$tmp/with_previews" --steps 4 --set warmup_steps=0 --set sample_every=2 \
    2>&1 | sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p')
expect memory_plan_holds_loader_and_previews $(awk -v r="${ratio3:-0}" -v p="${ratio4:-0}" -v m=$most \
    'BEGIN {print !(r >= 0.9 && r <= m && p >= 0.9 && p <= m)}') \
    "clips of 790 frames: the measure ${ratio3:-?}x the plan; previews every 2 steps: ${ratio4:-?}x"
rm -rf "$tmp/long64" "$tmp/long_clips" "$tmp/with_previews"
# A plan the machine could never hold is refused before anything is allocated, the run folder it made
# removed, and the parents made for it (--run a/b/run in a new a/); one over what is available now is
# a warning and the run goes on.
FRAMECHAIN_TEST_MEM_TOTAL_MIB=30 "$FC" --threads 1 train --config "$TINY" --run "$tmp/too_big/b/run" --steps 2 \
    > "$tmp/too_big.log" 2>&1
rc=$?
FRAMECHAIN_TEST_MEM_AVAILABLE_MIB=10 "$FC" --threads 1 train --config "$TINY" --run "$tmp/tight" --steps 2 \
    > "$tmp/tight.log" 2>&1
rc2=$?
expect memory_plan_over_the_machine $(( rc != 1 || rc2 != 0 )) \
    "30 MiB machine: status $rc, $(grep -c . "$tmp/too_big.log") lines, folder left: $([ -e "$tmp/too_big" ] && echo yes || echo no)"
grep -q "exceed this machine's 0.03 GiB" "$tmp/too_big.log" && [ ! -e "$tmp/too_big" ] &&
    grep -q "warning: .*more than the 0.01 GiB this machine has available now" "$tmp/tight.log" &&
    grep -q "^done: $tmp/tight at step 2" "$tmp/tight.log"
expect memory_plan_over_the_machine_lines $? \
    "$(grep framechain: "$tmp/too_big.log" | head -1); $(grep warning "$tmp/tight.log" | head -1)"
# The disk the checkpoints need, said before the first step: a file system with room for not even one
# checkpoint (2.30 MiB here) is refused, the run folder it made removed; room for fewer than keep_checkpoints
# and the one being written beside them (9.21 MiB) is a warning; a resumed run's checkpoints already hold
# most of that room, so the same free space is enough for it.
grep -q "^disk: a checkpoint is 2.30 MiB; the run folder holds up to 4 of them (keep_checkpoints 3 and the one being written): 9.21 MiB; .* free there$" "$tmp/ref.log"
expect disk_plan_said $? "$(grep '^disk:' "$tmp/ref.log" || echo 'no disk line')"
FRAMECHAIN_TEST_DISK_FREE_MIB=2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/no_room" --steps 2 > "$tmp/no_room.log" 2> "$tmp/no_room.err"
rc=$?
FRAMECHAIN_TEST_DISK_FREE_MIB=3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/little_room" --steps 2 \
    --set keep_checkpoints=3 > "$tmp/little_room.log" 2>&1
rc2=$?
cp -r "$tmp/ref" "$tmp/room_held"
FRAMECHAIN_TEST_DISK_FREE_MIB=3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/room_held" "${SETS[@]}" --extend \
    --steps $((STEPS + 2)) > "$tmp/room_held.log" 2>&1
rc3=$?
expect disk_plan_refuses_and_warns $(( rc != 1 || $(wc -l < "$tmp/no_room.err") != 1 || rc2 != 0 || rc3 != 0 ||
    $(grep -c "no_room: 2.00 MiB free on its file system, less than one checkpoint (2.30 MiB)" "$tmp/no_room.err") != 1 ||
    $(grep -c "^step" "$tmp/no_room.log") != 0 ||
    $(grep -c "warning: .*little_room: 3.00 MiB free on its file system, less than the 9.21 MiB more" "$tmp/little_room.log") != 1 ||
    $(grep -c "warning" "$tmp/room_held.log") != 0 )) \
    "2 MiB free: status $rc, $(head -c 120 "$tmp/no_room.err"), folder left: $([ -e "$tmp/no_room" ] && echo yes || echo no); 3 MiB: status $rc2, $(grep -c warning "$tmp/little_room.log") warning; 3 MiB beside 3 checkpoints: status $rc3, $(grep -c warning "$tmp/room_held.log") warnings"
[ ! -e "$tmp/no_room" ]
expect disk_plan_refusal_leaves_nothing $? "$(ls -a "$tmp/no_room" 2>&1 | tr '\n' ' ')"

"$FC" inspect "$(final "$tmp/ref")" > "$tmp/inspect.log" 2>&1
rc=$?
bad=$(grep -c "CRC BAD" "$tmp/inspect.log")
ok=$(grep -c "CRC ok" "$tmp/inspect.log")
expect inspect_checkpoint $(( rc != 0 || bad != 0 || ok < 100 )) "status $rc, $ok tensors with a good CRC, $bad bad, $(grep -m1 '^step' "$tmp/inspect.log")"
# The run folder itself: its checkpoints' steps, where its metrics end, then its newest checkpoint as above
"$FC" inspect "$tmp/ref" > "$tmp/inspect_run.log" 2>&1
rc=$?
kept=$(ls "$tmp/ref"/ckpt-*.safetensors | wc -l)
head -1 "$tmp/inspect_run.log" | grep -q "^run $tmp/ref: $kept checkpoints, steps $STEPS " &&
    grep -q "^metrics.jsonl   $STEPS lines, the last at step $STEPS, smooth_loss [0-9.]" "$tmp/inspect_run.log" &&
    grep -q "^the newest: $(final "$tmp/ref")$" "$tmp/inspect_run.log" &&
    diff <(sed '1,/^the newest/d' "$tmp/inspect_run.log" | sed 1d) "$tmp/inspect.log" > /dev/null
expect inspect_run_folder $(( rc != 0 || $? != 0 )) "status $rc: $(head -3 "$tmp/inspect_run.log" | tr '\n' ';')"
# metrics.jsonl with lines that are no step's record (junk put in, a last line torn by a power cut, which
# names a later step): counted and the first named, left out of where the metrics end; the run inspected
cp -r "$tmp/ref" "$tmp/torn_metrics"
{ head -3 "$tmp/ref/metrics.jsonl"; echo 'not a record'; tail -n +4 "$tmp/ref/metrics.jsonl"
  printf '{"step":%d,"loss":0.5,"smoo' $((STEPS + 40)); } > "$tmp/torn_metrics/metrics.jsonl"
"$FC" inspect "$tmp/torn_metrics" > "$tmp/torn_metrics.log" 2>&1
rc=$?
grep -q "^metrics.jsonl   $((STEPS + 2)) lines, the last at step $STEPS, smooth_loss [0-9.]" "$tmp/torn_metrics.log" &&
    grep -q "^metrics.jsonl   2 of its $((STEPS + 2)) lines cannot be read, left out .*: the first is line 4: " \
        "$tmp/torn_metrics.log" && grep -q "^the newest: $tmp/torn_metrics/ckpt-" "$tmp/torn_metrics.log"
expect inspect_run_says_unread_metrics_lines $(( rc != 0 || $? != 0 )) \
    "status $rc: $(grep '^metrics.jsonl' "$tmp/torn_metrics.log" | tr '\n' ';')"
mkdir "$tmp/no_ckpt" && head -2 "$tmp/ref/metrics.jsonl" > "$tmp/no_ckpt/metrics.jsonl"
"$FC" inspect "$tmp/no_ckpt" > "$tmp/no_ckpt.log" 2>&1
rc=$?
expect inspect_run_without_checkpoint $(( rc != 1 || $(grep -c . "$tmp/no_ckpt.log") != 1 ||
    $(grep -c "no_ckpt: a run folder with no checkpoint, its metrics.jsonl up to step 2: a rerun of train starts it again from step 0 only where that is within 2 checkpoint_every steps, else refuses" "$tmp/no_ckpt.log") != 1 )) \
    "status $rc: $(head -1 "$tmp/no_ckpt.log")"
: > "$tmp/no_ckpt/metrics.jsonl"
"$FC" inspect "$tmp/no_ckpt" > "$tmp/no_ckpt.log" 2>&1
rc=$?
expect inspect_run_without_checkpoint_yet $(( rc != 1 || $(grep -c "no_ckpt: a run folder with no checkpoint yet" "$tmp/no_ckpt.log") != 1 )) \
    "status $rc: $(head -1 "$tmp/no_ckpt.log")"
# inspect CKPT applies a resume's checks: a checkpoint named for another step than its metadata's is
# set aside by a resume, and inspect of the file alone says so (it said every CRC checks, status 0)
mkdir "$tmp/misnamed" && cp "$(final "$tmp/ref")" "$tmp/misnamed/ckpt-00099999.safetensors"
"$FC" inspect "$tmp/misnamed/ckpt-00099999.safetensors" > "$tmp/misnamed.log" 2>&1
rc=$?
expect inspect_checkpoint_named_for_another_step $(( rc != 1 ||
    $(grep -c "^UNUSABLE: .*ckpt-00099999.safetensors: its metadata says step $STEPS; a resume sets it aside" "$tmp/misnamed.log") != 1 )) \
    "status $rc: $(grep -m1 UNUSABLE "$tmp/misnamed.log" | cut -c1-160)"
# a tensor whose name is longer than 250 bytes: its CRC is still looked up and checked (a wrong one: 1)
"$PYTHON" - "$tmp/longname.safetensors" <<'PY'
import json, struct, sys
name = "w" * 300
head = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                   "__metadata__": {"crc32." + name: "deadbeef"}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(head)) + head + b"\0" * 4)
PY
"$FC" inspect "$tmp/longname.safetensors" > "$tmp/longname.log" 2>&1
rc=$?
expect inspect_long_tensor_name_crc_checked $(( rc != 1 || $(grep -c "CRC BAD" "$tmp/longname.log") != 1 )) \
    "status $rc: $(tail -1 "$tmp/longname.log")"
"$PYTHON" tools/safetensors_io.py "$(final "$tmp/ref")" > "$tmp/py.log" 2>&1
rc=$?
expect python_reads_checkpoint $(( rc != 0 || $(grep -c '^optim\.' "$tmp/py.log") == 0 )) \
    "status $rc, $(grep -c . "$tmp/py.log") lines from tools/safetensors_io.py, $(grep -c '^optim\.' "$tmp/py.log") optim.* tensors"

# ---- a short run: its last step checkpointed off the checkpoint_every grid, and the EMA's warm-up ----
# 3 steps with checkpoint_every = 2: checkpoints at steps 2 and 3. Between them the EMA takes step 3's
# weights with decay min(ema_decay, (1 + 3) / (10 + 3)) (config.c's ema_decay): fitted over every
# tensor from the two checkpoints, ema3 - w3 = decay (ema2 - w3).
(train "$tmp/three_steps" --steps 3 --set checkpoint_every=2) > "$tmp/three_steps.log" 2>&1
rc=$?
decay=$("$PYTHON" - "$tmp/three_steps/ckpt-00000002.safetensors" "$tmp/three_steps/ckpt-00000003.safetensors" <<'PY' 2>&1 | tail -1
import sys
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors
a, _ = read_safetensors(sys.argv[1])
b, _ = read_safetensors(sys.argv[2])
num = den = 0.0
for k in (k for k in b if k.startswith("model.")):
    w3, e2, e3 = (np.asarray(t, np.float64) for t in (b[k], a["ema." + k[6:]], b["ema." + k[6:]]))
    num += ((e3 - w3) * (e2 - w3)).sum()
    den += ((e2 - w3) ** 2).sum()
print("%.6f" % (num / den))
PY
)
expect short_run_checkpoints_last_step $(( rc != 0 || $(ls "$tmp/three_steps" | grep -c '^ckpt-0000000[23].safetensors$') != 2 )) \
    "status $rc, checkpoints: $(ls "$tmp/three_steps" | grep ckpt | tr '\n' ' ')"
expect ema_warms_up $(awk -v d="$decay" 'BEGIN { print !(d + 0 > 0 && (d - 4 / 13 < 1e-4 && 4 / 13 - d < 1e-4)) }') \
    "the EMA's decay at step 3 fitted from checkpoints 2 and 3: $decay (want 4/13 = 0.307692)"

# ---- checkpoints written in the background: what the loop waited for, and the synchronous writer ----
# Every checkpoint has its line with the time the loop was blocked; a submit's time is on the next
# step's metrics line, so exactly the steps after a checkpoint (5, 9, ..., 57) have a blocked time.
blocked_re='\(blocked [0-9.]+ ms: copy [0-9.]+ \+ wait [0-9.]+; written in [0-9.]+ s'
n_ckpt_lines=$(grep -c "^checkpoint $tmp/ref/ckpt-[0-9]*\.safetensors" "$tmp/ref.log")
n_blocked=$(grep -cE "^checkpoint $tmp/ref/ckpt-[0-9]{8}\.safetensors $blocked_re in the background\)$" "$tmp/ref.log")
blocked_steps=$(sed -nE 's/.*"step":([0-9]+),.*"ckpt_blocked_ms":([0-9.]+)}$/\1 \2/p' "$tmp/ref/metrics.jsonl" |
    awk '$2 > 0 {printf "%s ", $1}')
want_steps=$(seq 5 4 $((STEPS - 3)) | tr '\n' ' ')
expect checkpoint_blocked_time_logged $(( n_ckpt_lines != STEPS / 4 || n_blocked != n_ckpt_lines )) \
    "$n_blocked of $n_ckpt_lines checkpoint lines (of $((STEPS / 4)) checkpoints) with a blocked time: $(grep -m1 "^checkpoint $tmp/ref/" "$tmp/ref.log" | grep -o '(blocked.*')"
expect checkpoint_blocked_time_in_metrics $([ "$blocked_steps" = "$want_steps" ]; echo $?) \
    "metrics lines with ckpt_blocked_ms > 0 at steps: ${blocked_steps:-none} (expected $want_steps)"

(train "$tmp/sync" --sync-checkpoints) > "$tmp/sync.log" 2>&1
rc=$?
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/sync")"
same=$?
n_sync=$(grep -cE "^checkpoint $tmp/sync/ckpt-[0-9]{8}\.safetensors $blocked_re synchronously\)$" "$tmp/sync.log")
expect sync_checkpoints_identical $(( rc != 0 || same != 0 || n_sync != STEPS / 4 )) \
    "status $rc, $n_sync of $((STEPS / 4)) checkpoints written synchronously, final checkpoint equal to the background writer's: $((1 - same))"

# Slow writes (300 ms each): the background writer waits for a write before it reuses its staging
# buffer for the next checkpoint (one every step), so its files hold the same tensors as those the
# synchronous writer makes (one every 2 steps); and the synchronous writer's write is inside the
# step's blocked time (step 3's line holds the checkpoint of step 2: at least the 300 ms).
(export FRAMECHAIN_TEST_WRITE_DELAY_MS=300; train "$tmp/slow_bg" --steps 4 --set checkpoint_every=1) > "$tmp/slow_bg.log" 2>&1
rc1=$?
(export FRAMECHAIN_TEST_WRITE_DELAY_MS=300; train "$tmp/slow_sync" --steps 4 --set checkpoint_every=2 --sync-checkpoints) \
    > "$tmp/slow_sync.log" 2>&1
rc2=$?
same=0
for s in 2 4; do
    f=$(printf ckpt-%08d.safetensors $s)
    [ -f "$tmp/slow_bg/$f" ] && [ "$(ckpt_tensors "$tmp/slow_bg/$f")" = "$(ckpt_tensors "$tmp/slow_sync/$f")" ] && same=$((same + 1))
done
blocked3=$(sed -nE 's/^\{"step":3,.*"ckpt_blocked_ms":([0-9.]+)}$/\1/p' "$tmp/slow_sync/metrics.jsonl")
expect slow_writes_same_tensors $(( rc1 != 0 || rc2 != 0 || same != 2 )) \
    "status $rc1, $rc2: $same of 2 checkpoints (steps 2, 4) with the same tensors, written in the background every step and synchronously every 2"
expect sync_write_is_blocked_time $(awk -v b="${blocked3:-0}" 'BEGIN { print !(b >= 300) }') \
    "synchronous writes of 300 ms: step 3's ckpt_blocked_ms ${blocked3:-none}"

# ---- kill -9 again and again, rerunning until the run finishes ----
# The kills follow the run's progress, not the clock: kill k (0..19) comes once the restarted process
# has made a step of its own and reached step 2 + 2k; every third one instead once it has begun
# writing a checkpoint (each write is held 50 ms half-written). The kill points end at step 40: from
# there the run has 20 steps and 5 checkpoint writes of 50 ms or more to go, so all 20 kills land on a
# fast machine as on a slow one; then the run goes on to its end. A kill has landed when the process
# died of SIGKILL (status 137).
KILLS=20
kills=0 during_write=0 starts=0 why=""
export FRAMECHAIN_TEST_WRITE_DELAY_MS=50
while :; do
    starts=$((starts + 1))
    bg_train "$tmp/kill.log" "$tmp/kill"
    pid=$!
    if [ $kills -lt $KILLS ]; then
        if [ $((kills % 3)) -eq 2 ]; then
            wait_until 60 $pid writing_checkpoint "$tmp/kill" $pid
        else
            wait_until 60 $pid trained_past "$tmp/kill" "$tmp/kill.log" $((2 + 2 * kills))
        fi
        [ -n "$waited" ] && why="; start $starts: $waited; $(tail -1 "$tmp/kill.log")"
        kill9_reap $pid
        rc=$?
    else
        wait $pid
        rc=$?
    fi
    [ $rc -eq 137 ] && [ $kills -lt $KILLS ] && [ -z "$why" ] || break
    kills=$((kills + 1))
    writing_checkpoint "$tmp/kill" $pid && during_write=$((during_write + 1))
done
unset FRAMECHAIN_TEST_WRITE_DELAY_MS
# the last start went on from a checkpoint: a run that ignored its checkpoints would match the reference too
resumed=$(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$tmp/kill.log")
expect kill9_runs_finish $(( rc != 0 || kills < KILLS || ${resumed:-0} == 0 )) \
    "$kills kills with kill -9 ($during_write while a checkpoint was being written), $starts starts, status $rc, the last resumed from step ${resumed:-none}$why"
expect kill9_some_during_checkpoint_write $(( during_write < 2 )) "$during_write kills landed while a checkpoint was half-written"
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/kill")"
expect kill9_final_checkpoint_identical $? "the final checkpoint (weights, EMA, optimizer state) equals the uninterrupted run's, byte for byte"
cmp -s <(losses "$tmp/ref") <(losses "$tmp/kill")
expect kill9_same_losses $? "the per-step losses of all $STEPS steps equal the uninterrupted run's"
left=$(ls "$tmp/kill" | grep -c '\.tmp-')
expect no_temporary_files_left $(( left != 0 )) "$left temporary files in the run folder"

# ---- SIGTERM: a checkpoint, a clean exit, and the run goes on ----
# Checkpoint writes of 200 ms keep the run going for 3 s even on a fast GPU (each waits for the last).
FRAMECHAIN_TEST_WRITE_DELAY_MS=200 bg_train "$tmp/term.log" "$tmp/term"
pid=$!
# The signal once the run has made step 6: its handler is in place by then (a SIGTERM before it would
# just end the process).
wait_until 60 $pid trained_past "$tmp/term" "$tmp/term.log" 6
term_waited=$waited
kill -TERM $pid
wait $pid
rc=$?
stopped=$(grep -o 'stopped by SIGTERM at step [0-9]*' "$tmp/term.log")
step=${stopped##* }
have=$( [ -n "$step" ] && [ -f "$tmp/term/ckpt-$(printf %08d "$step").safetensors" ] && echo 1 || echo 0)
expect sigterm_writes_checkpoint $(( rc != 143 || have != 1 || ${#term_waited} != 0 )) \
    "status $rc, '$stopped', checkpoint of that step: $have${term_waited:+; $term_waited}"
(train "$tmp/term") > "$tmp/term2.log" 2>&1
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/term")"
expect sigterm_resume_identical $? "$(grep -m1 resuming "$tmp/term2.log"), final checkpoint equal to the uninterrupted run's"

# ---- a stop signal in the set-up (before the loop can checkpoint: the set-up held by a test hook):
# train ends at once, taking back the run folder it made and the parent made for it (a large model's
# set-up takes minutes on a GPU; a Ctrl-C then left a folder holding only its lock). SIGHUP and SIGTERM
# (a background job of a script ignores SIGINT) ----
for sig in TERM HUP; do
    FRAMECHAIN_TEST_SETUP_DELAY_MS=20000 "$FC" --threads 1 train --config "$TINY" --run "$tmp/setup_$sig/b/run" \
        --steps 2 > "$tmp/setup_$sig.log" 2>&1 &
    pid=$!
    wait_until 60 $pid grep -q "^test hook: the set-up held" "$tmp/setup_$sig.log"
    setup_waited=$waited
    exec 3>&2 2> /dev/null  # bash's notice of a job ended by SIGHUP goes nowhere (kill9_reap's reason)
    kill -$sig $pid
    wait $pid
    rc=$?
    exec 2>&3 3>&-
    expect "stop_signal_in_setup_leaves_nothing_$sig" $(( rc != 128 + $(kill -l $sig) || ${#setup_waited} != 0 ||
        $([ -e "$tmp/setup_$sig" ] && echo 1 || echo 0) )) \
        "status $rc; left: $(find "$tmp/setup_$sig" 2> /dev/null | tr '\n' ' ')${setup_waited:+; $setup_waited}"
done

# ---- SIGTERM while a checkpoint is being written in the background (slow writes) ----
# The loop goes on while the write runs; the stop waits for it, then writes the stop step's.
export FRAMECHAIN_TEST_WRITE_DELAY_MS=1500
bg_train "$tmp/bgterm.log" "$tmp/bgterm"
pid=$!
writing=""
wait_until 60 $pid writing_checkpoint "$tmp/bgterm" $pid || writing=""
kill -TERM $pid
wait $pid
rc=$?
unset FRAMECHAIN_TEST_WRITE_DELAY_MS
stopped=$(grep -o 'stopped by SIGTERM at step [0-9]*' "$tmp/bgterm.log")
step=${stopped##* }
stop_ckpt="$tmp/bgterm/ckpt-$(printf %08d "${step:-0}").safetensors"
"$FC" inspect "$stop_ckpt" > "$tmp/bgterm.inspect" 2>&1
good=$(( $? == 0 && $(grep -c "CRC BAD" "$tmp/bgterm.inspect") == 0 ))
was_written=$( [ -n "$writing" ] && [ -f "$tmp/bgterm/${writing%.tmp-*}" ] && echo 1 || echo 0)
left=$(ls "$tmp/bgterm" | grep -c '\.tmp-')
expect sigterm_during_background_write $(( rc != 143 || good != 1 || was_written != 1 || left != 0 )) \
    "status $rc, '$stopped' while ${writing:-nothing${waited:+ ($waited)}} was being written: that one completed: $was_written, the stop step's checks: $good, temporary files left: $left"
(train "$tmp/bgterm") > "$tmp/bgterm2.log" 2>&1
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/bgterm")"
expect sigterm_during_background_write_resume_identical $? \
    "$(grep -m1 resuming "$tmp/bgterm2.log"), final checkpoint equal to the uninterrupted run's"

# ---- a flipped byte (in the middle, then the file's last: its last tensor, read last), then a ----
# ---- truncation, in the newest checkpoint: set aside, the one before resumed ----
for damage in flip flip_last truncate; do
    cp -r "$tmp/ref" "$tmp/$damage"
    f=$(final "$tmp/$damage")
    size=$(stat -c %s "$f")
    if [ $damage = flip ]; then
        flip_byte "$f" $((size / 2))
    elif [ $damage = flip_last ]; then
        flip_byte "$f" $((size - 1))
    else
        truncate -s $((size / 2)) "$f"
    fi
    (train "$tmp/$damage") > "$tmp/$damage.log" 2>&1
    rc=$?
    cmp -s "$(final "$tmp/ref")" "$f"
    same=$?
    # the damaged file is set aside under another name, never deleted, never listed again
    grep -q "renamed to $f.unusable" "$tmp/$damage.log" && [ -f "$f.unusable" ] &&
        grep -q "resuming .* from step $((STEPS - 4))" "$tmp/$damage.log"
    seen=$?
    expect "corrupt_checkpoint_${damage}_detected" $(( rc != 0 || same != 0 || seen != 0 )) \
        "$(grep -m1 -o 'ckpt-[0-9]*.safetensors: .*' "$tmp/$damage.log" | cut -c1-140); rebuilt from step $((STEPS - 4)) identically"
done

# ---- a newest checkpoint that cannot be opened (no read permission) is not damage: the resume stops
# in one line naming it, nothing renamed, no step trained again; inspect says so ----
# (root reads any file: the two runs are another user's, where the test runs as root)
as_user() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
noread=$(mktemp -d)  # its own folder: the other user must reach it
chmod 777 "$noread"
cp -r "$tmp/ref" "$noread/run" && chmod -R a+rwX "$noread/run"
f=$(final "$noread/run")
chmod 000 "$f"
before=$(ls "$noread/run" | tr '\n' ' ')
as_user "$FC" --threads 1 train --config "$TINY" --run "$noread/run" "${SETS[@]}" > "$noread/out" 2> "$noread/err"
rc=$?
as_user "$FC" inspect "$noread/run" > "$noread/inspect" 2>&1
rc2=$?
after=$(ls "$noread/run" | tr '\n' ' ')
[ $rc = 1 ] && [ $rc2 = 1 ] && [ "$(wc -l < "$noread/err")" = 1 ] && grep -q "$f: cannot open: Permission denied; not set aside" "$noread/err" &&
    [ "$before" = "$after" ] && ! grep -q resuming "$noread/out" && grep -q "^UNREADABLE: .*a rerun of train stops at it" "$noread/inspect"
expect unreadable_checkpoint_not_set_aside $? "status $rc ($(cut -c1-130 "$noread/err")); inspect status $rc2; the folder as it was: $([ "$before" = "$after" ] && echo yes || echo "no: $after")"
chmod 644 "$f"
rm -rf "$noread"

# ---- inspect RUN with a link to nothing named like a checkpoint (a disk not mounted) under a damaged
# newer one: each named once (the link's ENOENT made inspect list the folder again, 100 times, each
# time naming the damaged one again) ----
cp -r "$tmp/ref" "$tmp/dangling"
head -c 1000 "$(final "$tmp/ref")" > "$tmp/dangling/ckpt-00000099.safetensors"
ln -s nowhere "$tmp/dangling/ckpt-00000098.safetensors"
"$FC" inspect "$tmp/dangling" > "$tmp/dangling.log" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^UNUSABLE: .*ckpt-00000099' "$tmp/dangling.log")" = 1 ] &&
    [ "$(grep -c '^UNUSABLE: .*ckpt-00000098.safetensors: cannot open: No such file' "$tmp/dangling.log")" = 1 ] &&
    grep -q "^a rerun of train resumes from: .*ckpt-$(printf %08d $STEPS)" "$tmp/dangling.log"
expect inspect_dangling_link_named_once $? "status $rc; UNUSABLE lines: $(grep -c '^UNUSABLE' "$tmp/dangling.log"); $(grep -m1 '^a rerun' "$tmp/dangling.log" | cut -c1-120)"

# ---- a metrics.jsonl line too long to hold in memory (1 GiB of NUL bytes after the run's lines, read
# under ulimit -v): glibc's getline then returns -1 with ENOMEM, which was taken for the file's end:
# inspect showed the file as whole (status 0), and a resume's cut-back rewrote it without the rest.
# Now both stop with one line, the file as it was ----
if (ulimit -v 4000000; "$FC" --version) 2>&1 | grep -q AddressSanitizer; then
    echo "SKIP metrics_line_past_memory: the sanitizers' shadow memory does not run under ulimit -v"
else
    cp -r "$tmp/ref" "$tmp/hugeline"
    truncate -s 1G "$tmp/hugeline/metrics.jsonl"
    (ulimit -v 700000; exec "$FC" --threads 1 inspect "$tmp/hugeline") > "$tmp/hugeline.out" 2> "$tmp/hugeline.err"
    rc=$?
    (ulimit -v 700000; exec "$FC" --threads 1 train --config "$TINY" --run "$tmp/hugeline" "${SETS[@]}" --extend --steps $((STEPS + 4))) \
        > /dev/null 2> "$tmp/hugeline2.err"
    rc2=$?
    [ $rc = 1 ] && [ $rc2 = 1 ] && grep -q "metrics.jsonl: cannot read: Cannot allocate memory" "$tmp/hugeline.err" &&
        grep -q "metrics.jsonl: cannot read: Cannot allocate memory" "$tmp/hugeline2.err" &&
        [ "$(stat -c %s "$tmp/hugeline/metrics.jsonl")" = 1073741824 ]
    expect metrics_line_past_memory $? "inspect status $rc ($(tail -1 "$tmp/hugeline.err" | cut -c1-100)); train status $rc2; the file's size after: $(stat -c %s "$tmp/hugeline/metrics.jsonl")"
    rm -rf "$tmp/hugeline"
fi

# ---- files named like newer checkpoints that are not: never counted as the ones pruning keeps ----
# (three 1000-byte ckpt-0000009{7,8,9}; the run resumes from step 52 and writes 56 and 60, keeping 3)
cp -r "$tmp/ref" "$tmp/junk"
rm "$tmp/junk/ckpt-00000056.safetensors" "$(final "$tmp/junk")"
for s in 97 98 99; do head -c 1000 /dev/urandom > "$tmp/junk/ckpt-000000$s.safetensors"; done
(train "$tmp/junk") > "$tmp/junk.log" 2>&1
rc=$?
kept=$(cd "$tmp/junk" && ls ckpt-*.safetensors | tr '\n' ' ')
aside=$(ls "$tmp/junk" | grep -c '\.unusable$')
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/junk")"
same=$?
expect prune_keeps_good_checkpoints $(( rc != 0 || same != 0 || aside != 3 )) \
    "status $rc; kept: ${kept:-none}; set aside as .unusable: $aside of 3; the final checkpoint equals the uninterrupted run's"
[ "$kept" = "ckpt-00000052.safetensors ckpt-00000056.safetensors ckpt-00000060.safetensors " ]
expect prune_keeps_newest_three $? "kept: $kept"

# ---- a disk that fails half-way through a checkpoint ----
cp -r "$tmp/ref" "$tmp/full"
rm "$(final "$tmp/full")"
prev="$tmp/full/ckpt-$(printf %08d $((STEPS - 4))).safetensors"
cp "$prev" "$tmp/prev.copy"
(FRAMECHAIN_TEST_FAIL_WRITE_AFTER=100000 train "$tmp/full") > "$tmp/full.log" 2>&1
rc=$?
msg=$(grep -m1 "checkpoint at step" "$tmp/full.log")
cmp -s "$prev" "$tmp/prev.copy"
intact=$?
left=$(ls "$tmp/full" | grep -c '\.tmp-')
expect failed_write_keeps_previous $(( rc == 0 || intact != 0 || left != 0 || $(echo "$msg" | grep -c 'No space left') != 1 )) \
    "status $rc, '$msg', previous checkpoint intact: $((1 - intact)), temporary files left: $left"

# A background write that fails stops the run at the next step, not at the end.
(FRAMECHAIN_TEST_FAIL_WRITE_AFTER=100000 train "$tmp/full2") > "$tmp/full2.log" 2>&1
rc=$?
msg=$(grep -m1 "checkpoint at step" "$tmp/full2.log")
lines=$(wc -l < "$tmp/full2/metrics.jsonl")
n_files=$(ls "$tmp/full2" | grep -c '^ckpt-')
expect failed_background_write_stops_run $(( rc == 0 || lines > 8 || n_files != 0 || $(echo "$msg" | grep -c 'checkpoint at step 4 failed: .*No space left.*(the earlier checkpoints are untouched)') != 1 )) \
    "status $rc, '$msg', stopped after step $lines, checkpoint or temporary files left: $n_files"

# ---- a metrics line that cannot be written stops the run ----
# (a file-size limit of 4 KiB, with SIGXFSZ ignored, stands in for a full disk: the 17th line or so
# fails with EFBIG; the output goes through a pipe, which the limit does not cover)
(trap '' XFSZ; ulimit -f 4; train "$tmp/mfull" --set checkpoint_every=1000) 2>&1 | cat > "$tmp/mfull.log"
rc=${PIPESTATUS[0]}
msg=$(grep -m1 -o "metrics.jsonl: cannot write the line of step [0-9]*: .*" "$tmp/mfull.log")
stopped=$(echo "$msg" | sed -n 's/.*of step \([0-9]*\).*/\1/p')
expect metrics_write_failure_stops $(( rc == 0 || ${#msg} == 0 || ${stopped:-99} > 30 )) \
    "status $rc, '${msg:0:120}'"

# ---- a NaN loss stops the run; the last good checkpoint stays ----
# (a NaN pixel in the data of step 23, through the fault-injection hook)
(FRAMECHAIN_TEST_NAN_AT_STEP=23 train "$tmp/nan") > "$tmp/nan.log" 2>&1
rc=$?
msg=$(grep -m1 -o "the loss is .*" "$tmp/nan.log")
ls "$tmp/nan" > "$tmp/nan.ls"
"$FC" inspect "$tmp/nan/ckpt-00000020.safetensors" > /dev/null 2>&1
good=$?
expect nan_loss_stops $(( rc == 0 || ${#msg} == 0 || good != 0 )) "status $rc, '$msg', ckpt-00000020 checks: $((1 - good))"

# ---- checkpoints that do not continue this run are refused ----
cp -r "$tmp/ref" "$tmp/other"
before=$(ls -l --time-style=+%s.%N "$tmp/other" | md5sum)
(train "$tmp/other" --set width=96 --set steps=80) > "$tmp/other.log" 2>&1
rc=$?
after=$(ls -l --time-style=+%s.%N "$tmp/other" | md5sum)
# width shapes the network, which a fork keeps: the line says how to go on (the config file changed
# since the run started?), not to fork
expect refuses_other_config $(( rc == 0 || $(grep -c "written with width = 64, but this run has width = 96; .*give --set width=64 to go on" "$tmp/other.log") != 1 ||
    $(grep -c -- "--from" "$tmp/other.log") != 0 )) \
    "status $rc, $(tail -1 "$tmp/other.log" | cut -c1-120)"
expect refusal_changes_nothing $([ "$before" = "$after" ]; echo $?) "the run folder is unchanged"
cp -r "$tmp/ref" "$tmp/noopt"
"$PYTHON" - "$(final "$tmp/noopt")" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
tensors, meta = read_safetensors(sys.argv[1])
write_safetensors(sys.argv[1], {k: v for k, v in tensors.items() if not k.startswith("optim.")}, meta)
PY
(train "$tmp/noopt") > "$tmp/noopt.log" 2>&1
rc=$?
expect refuses_checkpoint_without_optimizer_state $(( rc == 0 || $(grep -c "has no optimizer state" "$tmp/noopt.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/noopt.log" | cut -c1-120)"

# ---- NaN weights behind CRCs that check: resume goes back one checkpoint, generate refuses them ----
cp -r "$tmp/ref" "$tmp/nanw"
"$PYTHON" - "$(final "$tmp/nanw")" <<'PY'
import sys, zlib
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors, write_safetensors
tensors, meta = read_safetensors(sys.argv[1])
for name in ("model.patch_embed.weight", "ema.patch_embed.weight"):
    t = tensors[name].copy()
    t.flat[3] = np.nan
    tensors[name] = t
    meta["crc32." + name] = "%08x" % zlib.crc32(t.tobytes())
write_safetensors(sys.argv[1], tensors, meta)
PY
mkdir "$tmp/nanonly" && cp "$(final "$tmp/nanw")" "$tmp/nanonly/"
(train "$tmp/nanw") > "$tmp/nanw.log" 2>&1
rc=$?
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/nanw")"
same=$?
expect nan_weights_skipped_on_resume $(( rc != 0 || same != 0 || $(grep -c "tensor model.patch_embed.weight holds NaN values: the weights are unusable; renamed to" "$tmp/nanw.log") != 1 || $(grep -c "resuming .* from step $((STEPS - 4))" "$tmp/nanw.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/nanw.log"), set aside: $(ls "$tmp/nanw" | grep -c unusable); final checkpoint equal to the uninterrupted run's: $((1 - same))"
"$FC" generate --starter "$tmp/nanonly" --extrapolate "$tmp/nanonly" --interpolate "$tmp/nanonly" \
    --first-frame shapes:1 --frames 9 --out "$tmp/nan.gif" > "$tmp/nangen.log" 2>&1
rc=$?
expect nan_weights_not_generated $(( rc == 0 || $(grep -c "patch_embed.weight holds NaN values" "$tmp/nangen.log") != 1 )) \
    "status $rc, $(grep -m1 -o '[a-z]*.patch_embed.weight holds.*' "$tmp/nangen.log" | cut -c1-80), output written: $([ -e "$tmp/nan.gif" ] && echo yes || echo no)"

# ---- other checkpoints whose CRCs check: NaN in the EMA alone is set aside as NaN in the weights is; a
# tensor of the right type and the wrong size, and a newer format version, are refused in one line, the
# file left as it is ----
for k in emanan short newer; do cp -r "$tmp/ref" "$tmp/$k"; done
"$PYTHON" - "$(final "$tmp/emanan")" "$(final "$tmp/short")" "$(final "$tmp/newer")" <<'PY'
import sys, zlib
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors, write_safetensors
def edit(path, change):
    tensors, meta = read_safetensors(path)
    change(tensors, meta)
    if "crc32.__metadata__" in meta:  # the metadata's CRC (README, "Checkpoints") made to check again
        meta["crc32.__metadata__"] = "%08x" % zlib.crc32(b"".join(
            k.encode() + b"\0" + v.encode() + b"\0" for k, v in sorted(meta.items()) if not k.startswith("crc32.")))
    write_safetensors(path, tensors, meta)
def put(tensors, meta, name, t):
    tensors[name] = t
    meta["crc32." + name] = "%08x" % zlib.crc32(t.tobytes())
def ema_nan(tensors, meta):
    t = tensors["ema.patch_embed.weight"].copy()
    t.flat[3] = np.nan
    put(tensors, meta, "ema.patch_embed.weight", t)
def short(tensors, meta):  # one value fewer, stored as it says (shape and CRC agree)
    put(tensors, meta, "model.patch_embed.weight", tensors["model.patch_embed.weight"].reshape(-1)[:-1].copy())
def newer(tensors, meta):
    meta["format_version"] = str(int(meta["format_version"]) + 1)
edit(sys.argv[1], ema_nan)
edit(sys.argv[2], short)
edit(sys.argv[3], newer)
PY
(train "$tmp/emanan") > "$tmp/emanan.log" 2>&1
rc=$?
expect ema_nan_skipped_on_resume $(( rc != 0 || $(grep -c "tensor ema.patch_embed.weight holds NaN values: the weights are unusable; renamed to" "$tmp/emanan.log") != 1 || $(grep -c "resuming .* from step $((STEPS - 4))" "$tmp/emanan.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/emanan.log"), set aside: $(ls "$tmp/emanan" | grep -c unusable)"
for k in short newer; do
    cp "$(final "$tmp/$k")" "$tmp/$k.before"
    (train "$tmp/$k") > "$tmp/$k.log" 2>&1
    rc=$?
    case $k in
        short) want="tensor model.patch_embed.weight is F32 of [0-9]* bytes, expected F32 of [0-9]*" ;;
        newer) want="checkpoint format version [0-9]*; this framechain reads version [0-9]*" ;;
    esac
    cmp -s "$(final "$tmp/$k")" "$tmp/$k.before"
    kept=$?
    expect "checkpoint_${k}_refused" $(( rc == 0 || kept != 0 || $(grep -c "$want" "$tmp/$k.log") != 1 )) \
        "status $rc, '$(grep -m1 -o "$want" "$tmp/$k.log")', the file unchanged: $((1 - kept))"
done

# a checkpoint under another step's name (a copy, a rename by hand) is set aside, not resumed from as that step
cp -r "$tmp/ref" "$tmp/renamed"
cp "$(final "$tmp/renamed")" "$tmp/renamed/ckpt-$(printf %08d $((STEPS + 4))).safetensors"
(train "$tmp/renamed") > "$tmp/renamed.log" 2>&1
rc=$?
expect checkpoint_other_name_set_aside $(( rc != 0 || $(grep -c "ckpt-$(printf %08d $((STEPS + 4))).safetensors: its metadata says step $STEPS; renamed to" "$tmp/renamed.log") != 1 || $(grep -c "resuming .* from step $STEPS " "$tmp/renamed.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'its metadata says step [0-9]*' "$tmp/renamed.log"), $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/renamed.log")"

# ---- damaged checkpoints of a short run (4 steps, a checkpoint every 2): ckpt-2 and ckpt-4 ----
short() {  # short RUN [extra args...]
    "$FC" --threads 1 train --config "$TINY" --run "$1" --set steps=4 --set checkpoint_every=2 --set warmup_steps=1 "${@:2}"
}
# stedit FILE MODE PYTHON: rewrite a checkpoint; PYTHON edits `meta` (a dict) and `T` ([name, dtype, shape,
# bytes] each). Every tensor's crc32.NAME is recomputed; the metadata's CRC (crc32.__metadata__) too with
# MODE crc, left as it was with MODE stale (a flipped bit), dropped with MODE old (an earlier build's file).
stedit() {
    "$PYTHON" - "$@" <<'PY'
import sys, struct, json, zlib
p, mode, code = sys.argv[1:4]
b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
meta = h.pop('__metadata__', {})
T = [[k, v['dtype'], v['shape'], data[v['data_offsets'][0]:v['data_offsets'][1]]] for k, v in h.items()]
exec(code)
out, off, blob = {'__metadata__': meta}, 0, b''
for name, dt, shape, by in T:
    out[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(by)]}; off += len(by); blob += by
    meta['crc32.' + name] = '%08x' % zlib.crc32(by)
if mode == 'old':
    meta.pop('crc32.__metadata__', None)
elif mode == 'crc':
    meta['crc32.__metadata__'] = '%08x' % zlib.crc32(b''.join(
        k.encode() + b'\0' + v.encode() + b'\0' for k, v in sorted(meta.items()) if not k.startswith('crc32.')))
s = json.dumps(out, separators=(',', ':')).encode(); s += b' ' * ((8 - len(s) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(s)) + s + blob)
PY
}
D=$tmp/dmg
short "$D/ref" > "$tmp/dmg_ref.log" 2>&1 || { fail damaged_setup "$(tail -1 "$tmp/dmg_ref.log")"; exit 1; }
ck2=ckpt-00000002.safetensors ck4=ckpt-00000004.safetensors
fresh() { rm -rf "$D/$1"; cp -r "$D/ref" "$D/$1"; }  # fresh NAME: a copy of the finished short run

# A run whose checkpoints are all damaged: every rerun stops with the same line, never starts it again
# from step 0 (its metrics.jsonl and files as they were); a run killed before its first checkpoint still does.
fresh all
rm "$D/all/$ck4"
flip_byte "$D/all/$ck2" 60000
before=$(md5sum < "$D/all/metrics.jsonl")
"$FC" inspect "$D/all" > "$tmp/all_inspect1.log" 2>&1
rc_inspect1=$?
short "$D/all" > "$tmp/all1.log" 2>&1
rc1=$?
short "$D/all" > "$tmp/all2.log" 2>&1
rc2=$?
"$FC" inspect "$D/all" > "$tmp/all_inspect2.log" 2>&1
rc_inspect2=$?
left=$(cd "$D/all" && ls | tr '\n' ' ')
want="all: no checkpoint here can be resumed from, but the run was trained before (1 damaged checkpoint set aside"
expect all_damaged_never_restarts $(( rc1 != 1 || rc2 != 1 || $(grep -c "$want" "$tmp/all1.log") != 1 ||
    $(grep -c "$want" "$tmp/all2.log") != 1 || $(grep -c '^resuming\|^step ' "$tmp/all2.log") != 0 )) \
    "status $rc1 then $rc2; $(grep -m1 -o 'all: no checkpoint.*' "$tmp/all2.log" | cut -c1-150); left: $left"
[ "$before" = "$(md5sum < "$D/all/metrics.jsonl")" ] && [ "$left" = "$ck2.unusable metrics.jsonl " ]
expect all_damaged_keeps_metrics $? "metrics.jsonl unchanged, no checkpoint written: $left"
# inspect says it as train does: a run that is no fork would start again from step 0
expect all_damaged_inspected $(( rc_inspect1 != 1 || rc_inspect2 != 1 ||
    $(grep -c "^its one checkpoint cannot be resumed from: a rerun of train sets it aside and refuses to start the run again from step 0$" "$tmp/all_inspect1.log") != 1 ||
    $(grep -c "all: a run folder with no checkpoint to resume from: 1 damaged one set aside as ckpt-\*.unusable (a rerun of train refuses to start the run again from step 0)$" "$tmp/all_inspect2.log") != 1 )) \
    "status $rc_inspect1 and $rc_inspect2: $(tail -1 "$tmp/all_inspect1.log" | cut -c1-200); $(tail -1 "$tmp/all_inspect2.log" | cut -c1-200)"
mkdir "$D/early" && head -2 "$D/ref/metrics.jsonl" > "$D/early/metrics.jsonl"
short "$D/early" > "$tmp/early.log" 2>&1
expect killed_before_first_checkpoint_restarts $? "$(tail -1 "$tmp/early.log")"
# Only whole lines that are a step's record say how far the run went: a last line torn by a power cut
# ({"step":12 of a longer step) and a line that is no record ({"step":9x}) name no step. Beside the
# first two steps' lines the run starts again from step 0; beside a damaged run's the refusal names
# its last logged step, 4, not the torn line's.
mkdir "$D/torn" && { head -2 "$D/ref/metrics.jsonl"; echo '{"step":9x}'; printf '{"step":12'; } > "$D/torn/metrics.jsonl"
short "$D/torn" > "$tmp/torn.log" 2>&1
rc=$?
expect torn_metrics_line_restarts $(( rc != 0 || $(grep -c 'trained before' "$tmp/torn.log") != 0 )) \
    "status $rc: $(tail -1 "$tmp/torn.log" | cut -c1-150)"
fresh torn_all
rm "$D/torn_all/$ck4"
flip_byte "$D/torn_all/$ck2" 60000
{ echo '{"step":900x}'; printf '{"step":1234'; } >> "$D/torn_all/metrics.jsonl"
short "$D/torn_all" > "$tmp/torn_all.log" 2>&1
rc=$?
expect torn_metrics_line_not_the_last_step $(( rc != 1 ||
    $(grep -c 'trained before (1 damaged checkpoint set aside as ckpt-\*.unusable, metrics.jsonl up to step 4)' \
        "$tmp/torn_all.log") != 1 )) "status $rc: $(grep -m1 -o 'trained before ([^)]*)' "$tmp/torn_all.log")"
# The cut-back of metrics.jsonl on a resume (from step 2 here) keeps exactly the whole lines that are a
# step's record at or below it, a line of any length read whole: step 1's line with a 6000-byte key kept,
# junk ({"step":1x}), a 4100-byte line that is no record (its bytes from 4095 on read {"step":2,...})
# and a torn last line left out, said in one line; inspect then finds no unreadable line.
fresh cut
rm "$D/cut/$ck4"
note=$(head -c 6000 /dev/zero | tr '\0' A)
{ head -1 "$D/ref/metrics.jsonl" | sed "s/}\$/,\"note\":\"$note\"}/"; echo '{"step":1x}'
  printf '{"x":"%s{"step":2,"loss":9}\n' "${note:0:4089}"; sed -n 2,4p "$D/ref/metrics.jsonl"; printf '{"step":12'
} > "$D/cut/metrics.jsonl"
short "$D/cut" > "$tmp/cut.log" 2>&1
rc=$?
"$FC" inspect "$D/cut" > "$tmp/cut_inspect.log" 2>&1
cmp -s <(losses "$D/ref") <(losses "$D/cut")
same=$?
expect metrics_cut_back_keeps_whole_records $(( rc != 0 || same != 0 || $(wc -l < "$D/cut/metrics.jsonl") != 4 ||
    $(head -1 "$D/cut/metrics.jsonl" | wc -c) < 6000 ||
    $(grep -c "cut/metrics.jsonl: 3 lines that are no step's record (.*) left out of its cut-back to step 2: the first, line 2: " "$tmp/cut.log") != 1 ||
    $(grep -c '^metrics.jsonl   4 lines, the last at step 4, smooth_loss' "$tmp/cut_inspect.log") != 1 ||
    $(grep -c 'cannot be read' "$tmp/cut_inspect.log") != 0 )) \
    "status $rc, losses equal: $((same == 0)), $(wc -l < "$D/cut/metrics.jsonl") lines: $(cut -c1-30 "$D/cut/metrics.jsonl" | tr '\n' ' '); $(grep -m1 -o 'metrics.jsonl: .*' "$tmp/cut.log" | cut -c1-160)"
# A last line that reads but lacks its newline is a step's record, for train as for inspect (its object
# is whole: only the newline was cut off): the cut-back keeps it (the resume's lines after it on lines
# of their own), and a damaged run's refusal names its step as inspect does.
fresh nl
rm "$D/nl/$ck4"
head -2 "$D/ref/metrics.jsonl" | head -c -1 > "$D/nl/metrics.jsonl"
"$FC" inspect "$D/nl" > "$tmp/nl_inspect.log" 2>&1
short "$D/nl" > "$tmp/nl.log" 2>&1
rc=$?
cmp -s <(losses "$D/ref") <(losses "$D/nl")
expect metrics_last_line_without_newline_kept $(( rc != 0 || $? != 0 ||
    $(grep -c '^metrics.jsonl   2 lines, the last at step 2, smooth_loss' "$tmp/nl_inspect.log") != 1 )) \
    "status $rc; $(grep -m1 '^metrics.jsonl' "$tmp/nl_inspect.log"); steps kept: $(sed -E 's/^.\"step\":([0-9]+).*/\1/' "$D/nl/metrics.jsonl" | tr '\n' ' ')"
fresh nl_all
rm "$D/nl_all/$ck4"
flip_byte "$D/nl_all/$ck2" 60000
printf '{"step":9,"loss":0.5,"smooth_loss":0.25}' >> "$D/nl_all/metrics.jsonl"
"$FC" inspect "$D/nl_all" > "$tmp/nl_all_inspect.log" 2>&1
short "$D/nl_all" > "$tmp/nl_all.log" 2>&1
rc=$?
expect metrics_last_line_without_newline_one_rule $(( rc != 1 ||
    $(grep -c '^metrics.jsonl   5 lines, the last at step 9, smooth_loss 0.25$' "$tmp/nl_all_inspect.log") != 1 ||
    $(grep -c 'trained before (1 damaged checkpoint set aside as ckpt-\*.unusable, metrics.jsonl up to step 9)' \
        "$tmp/nl_all.log") != 1 )) \
    "status $rc; inspect: $(grep -m1 '^metrics.jsonl' "$tmp/nl_all_inspect.log"); train: $(grep -m1 -o 'trained before ([^)]*)' "$tmp/nl_all.log")"

# Optimizer state that is not finite, or a negative second moment, behind CRCs that check: set aside as
# NaN weights are, the checkpoint before resumed, the run ends on the uninterrupted run's bytes.
# edit_then_resume K EDIT: $D/K's ckpt-4 edited (its CRCs made to check again), the short run rerun on
# it: its status in rc, and in same whether it ended on the uninterrupted run's final checkpoint
edit_then_resume() {
    stedit "$D/$1/$ck4" crc "$2"
    short "$D/$1" > "$tmp/$1.log" 2>&1
    rc=$?
    cmp -s "$D/ref/$ck4" "$D/$1/$ck4"
    same=$?
}
for k in m_nan code_nan v_neg; do
    fresh "$k"
    case $k in
        m_nan) edit="T=[[a,d,s,struct.pack('<f',float('nan'))*(len(by)//4) if a=='optim.patch_embed.weight.m' else by] for a,d,s,by in T]"
            want="tensor optim.patch_embed.weight.m holds NaN values: the optimizer state is unusable; renamed to" ;;
        code_nan) edit="T=[[a,d,s,struct.pack('<256f',*[float('nan')]*256) if a=='optim.code_signed' else by] for a,d,s,by in T]"
            want="tensor optim.code_signed holds NaN values: the optimizer state is unusable; renamed to" ;;
        v_neg) edit="T=[[a,d,s,struct.pack('<f',-1.0)+by[4:] if a=='optim.patch_embed.bias.v' else by] for a,d,s,by in T]"
            want="tensor optim.patch_embed.bias.v holds negative values: the optimizer state is unusable; renamed to" ;;
    esac
    edit_then_resume "$k" "$edit"
    expect "optimizer_state_${k}_set_aside" $(( rc != 0 || same != 0 || $(grep -c "$want" "$tmp/$k.log") != 1 ||
        $(grep -c "^resuming .* from step 2 " "$tmp/$k.log") != 1 )) \
        "status $rc, $(grep -m1 -o 'tensor optim.*unusable' "$tmp/$k.log"), $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/$k.log"), final checkpoint the uninterrupted run's: $((1 - same))"
done

# A tensor in another shape of the same size (transposed), or one the network does not have: refused
# in one line by train, skipped by generate, never loaded.
fresh shape; fresh extra
stedit "$D/shape/$ck4" crc "T=[[a,d,[s[1],s[0]] if a.endswith('patch_embed.weight') and not a.startswith('optim') else s,by] for a,d,s,by in T]"
stedit "$D/extra/$ck4" crc "T.append(['model.extra','F32',[1],b'\0'*4])"
short "$D/shape" --steps 6 --extend > "$tmp/shape.log" 2>&1
rc1=$?
short "$D/extra" --steps 6 --extend > "$tmp/extra.log" 2>&1
rc2=$?
expect checkpoint_shape_refused $(( rc1 != 1 || rc2 != 1 ||
    $(grep -c "$ck4: tensor model.patch_embed.weight has shape (48, 64), this network's is (64, 48)" "$tmp/shape.log") != 1 ||
    $(grep -c "$ck4: holds a tensor model.extra, which this network does not have" "$tmp/extra.log") != 1 )) \
    "status $rc1, $rc2: $(grep -m1 -o 'tensor model.patch_embed.weight has shape.*' "$tmp/shape.log"); $(grep -m1 -o 'holds a tensor.*' "$tmp/extra.log")"
mkdir "$D/shape_only" && cp "$D/shape/$ck4" "$D/shape_only/"
"$FC" generate --starter "$D/shape_only" --extrapolate "$D/shape_only" --interpolate "$D/shape_only" \
    --first-frame shapes:1 --frames 9 --out "$tmp/shape.gif" > "$tmp/shapegen.log" 2>&1
rc=$?
expect checkpoint_shape_not_generated $(( rc == 0 || $(grep -c "skipping .*$ck4: tensor model.patch_embed.weight has shape (48, 64)" "$tmp/shapegen.log") < 1 )) \
    "status $rc, $(grep -m1 -o 'skipping.*' "$tmp/shapegen.log" | cut -c1-150)"

# A config copy that claims a huge network (an earlier build's checkpoint, no metadata CRC): generate
# checks it against the tensors before allocating anything, skips the file and uses the one before.
fresh huge
stedit "$D/huge/$ck4" old "meta['config']=meta['config'].replace('width         = 64','width         = 16384').replace('depth         = 2','depth         = 48')"
"$FC" generate --starter "$D/huge" --extrapolate "$D/huge" --interpolate "$D/huge" \
    --first-frame shapes:1 --frames 9 --out "$tmp/huge.gif" > "$tmp/huge.log" 2>&1
rc=$?
expect lying_config_checked_before_allocation $(( $(grep -c "skipping .*$ck4: tensor model.patch_embed.weight is F32 of 12288 bytes, expected F32 of 3145728$" "$tmp/huge.log") < 1 ||
    $(grep -c "out of host memory" "$tmp/huge.log") != 0 || $(grep -c "$ck2" "$tmp/huge.log") != 0 )) \
    "status $rc, $(grep -m1 -o 'skipping.*' "$tmp/huge.log" | cut -c1-160); $(grep -m1 'out of host memory' "$tmp/huge.log")"

# Setting a damaged checkpoint aside never renames over one set aside before: the first keeps its bytes.
fresh twice
for seek in 60000 70000; do
    flip_byte "$D/twice/$ck4" $seek
    [ $seek = 60000 ] && first=$(md5sum < "$D/twice/$ck4")
    short "$D/twice" > "$tmp/twice_$seek.log" 2>&1
done
[ "$first" = "$(md5sum < "$D/twice/$ck4.unusable" 2> /dev/null)" ] && [ -f "$D/twice/$ck4.unusable.1" ] &&
    grep -q "renamed to $D/twice/$ck4.unusable.1$" "$tmp/twice_70000.log"
expect set_aside_never_overwrites $? "set aside: $(cd "$D/twice" && ls | grep unusable | tr '\n' ' ')"

# Metadata values read strictly (the metadata's CRC made to check): a bad one makes the file unusable,
# named with its key, and the checkpoint before is resumed.
# The seed and the data cursor are the config's seed and the step, or the file is not believed.
seed_range="is not a whole number of 0 to 9000000000000000000 (the range of the config key seed)"
for k in smooth_nan smooth_word smooth_negative step_junk step_overflow version_text seed_negative seed_absurd \
    seed_other cursor_negative cursor_past; do
    fresh "$k"
    case $k in
        smooth_nan) edit="meta['smooth_loss']='nan'" want="smooth_loss \"nan\" is not a finite number" ;;
        smooth_word) edit="meta['smooth_loss']='hello'" want="smooth_loss \"hello\" is not a finite number" ;;
        smooth_negative) edit="meta['smooth_loss']='-0x1p-4'" want="smooth_loss \"-0x1p-4\" is negative (a mean of squares never is)" ;;
        step_junk) edit="meta['step']='4garbage'" want="step \"4garbage\" is not a whole number of steps (0 to 2147483647)" ;;
        step_overflow) edit="meta['step']='4294967300'" want="step \"4294967300\" is not a whole number of steps (0 to 2147483647)" ;;
        version_text) edit="meta['format_version']='1.9-beta'" want="format_version \"1.9-beta\" is not a whole number" ;;
        seed_negative) edit="meta['seed']='-1'" want="seed \"-1\" $seed_range" ;;
        seed_absurd) edit="meta['seed']='9223372036854775808'" want="seed \"9223372036854775808\" $seed_range" ;;
        seed_other) edit="meta['seed']='7'" want="seed 7 is not its config's (seed = 1)" ;;
        cursor_negative) edit="meta['data_cursor']='-4'" want="data_cursor \"-4\" is not its step 4" ;;
        cursor_past) edit="meta['data_cursor']='99999999'" want="data_cursor \"99999999\" is not its step 4" ;;
    esac
    edit_then_resume "$k" "$edit"
    expect "metadata_${k}_unusable" $(( rc != 0 || same != 0 || $(grep -c "$ck4: its metadata's $want; renamed to" "$tmp/$k.log") != 1 ||
        $(grep -c "^resuming .* from step 2 " "$tmp/$k.log") != 1 )) \
        "status $rc, $(grep -m1 -o "its metadata's.*; renamed" "$tmp/$k.log"), $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/$k.log")"
done
# generate (and so eval and score) skips such a file for the one before (the folder, a starter's, then
# refused as an extrapolate model), and inspect fails it, naming the key
for k in seed cursor; do
    fresh "gen_$k"
    case $k in
        seed) edit="meta['seed']='-1'" want="seed \"-1\" $seed_range" ;;
        cursor) edit="meta['data_cursor']='-4'" want="data_cursor \"-4\" is not its step 4" ;;
    esac
    stedit "$D/gen_$k/$ck4" crc "$edit"
    "$FC" generate --starter "$D/gen_$k" --extrapolate "$D/gen_$k" --interpolate "$D/gen_$k" --first-frame shapes:1 \
        --frames 9 --out "$tmp/gen_$k.gif" > "$tmp/gen_$k.log" 2>&1
    rc=$?
    "$FC" inspect "$D/gen_$k/$ck4" > "$tmp/gen_$k.inspect" 2>&1
    rc2=$?
    expect "metadata_${k}_not_generated_nor_inspected" $(( rc == 0 || rc2 != 1 ||
        $(grep -c "skipping $D/gen_$k/$ck4: its metadata's $want$" "$tmp/gen_$k.log") < 1 ||
        $(grep -c "skipping $D/gen_$k/$ck2" "$tmp/gen_$k.log") != 0 ||
        $(grep -c "$ck4: its metadata's $want" "$tmp/gen_$k.inspect") != 1 )) \
        "generate: status $rc, $(grep -m1 -o 'skipping.*' "$tmp/gen_$k.log" | cut -c1-150); inspect: status $rc2, $(grep -m1 -o "its metadata's.*" "$tmp/gen_$k.inspect")"
done

# One flipped bit in the config copy: the metadata's CRC fails, the file is set aside as damaged and the
# checkpoint before resumed; in an earlier build's file (no metadata CRC) a config copy that contradicts
# its own tensors is damage too; and such a file loads as before when it is whole.
fresh flip; fresh oldflip; fresh old
stedit "$D/flip/$ck4" stale "meta['config']=meta['config'].replace('width         = 64','width         = 44')"
stedit "$D/oldflip/$ck4" old "meta['config']=meta['config'].replace('depth         = 2','depth         = 3')"
stedit "$D/old/$ck2" old ""
rm "$D/old/$ck4"
for k in flip oldflip old; do short "$D/$k" > "$tmp/$k.log" 2>&1; echo $? > "$tmp/$k.rc"; done
ok=0
for k in flip oldflip old; do
    cmp -s "$D/ref/$ck4" "$D/$k/$ck4" && [ "$(cat "$tmp/$k.rc")" = 0 ] && grep -q "^resuming .* from step 2 " "$tmp/$k.log" || ok=1
done
grep -q "$ck4: its metadata (step, config, ...) fails its CRC32 check; renamed to" "$tmp/flip.log" &&
    grep -q "$ck4: its config copy describes another network than its tensors (tensor model.blocks.2.*), while they are this run's network's: its metadata is damaged; renamed to" "$tmp/oldflip.log" || ok=1
expect metadata_crc_flip_set_aside $ok \
    "$(grep -m1 -o 'its metadata (step.*check' "$tmp/flip.log"); $(grep -m1 -o 'its config copy.*damaged' "$tmp/oldflip.log" | cut -c1-120); a checkpoint without the metadata CRC: $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/old.log")"

# An earlier build's file (no metadata CRC) whose config holds a value this build's range no longer
# takes (beta2 went to 0.99999999 before): refused, naming the key, and not set aside as damaged.
fresh oldrule
stedit "$D/oldrule/$ck4" old "import re; meta['config']=re.sub(r'(?m)^beta2( *)= *[^ ]+', r'beta2\1= 0.99999995', meta['config'])"
short "$D/oldrule" --set beta2=0.9999999 > "$tmp/oldrule.log" 2>&1
rc=$?
expect old_rule_refused_not_set_aside $(( rc != 1 || $(grep -c "$ck4: its config breaks a rule of this framechain's.*beta2" "$tmp/oldrule.log") != 1 ||
    $(ls "$D/oldrule" | grep -c unusable) != 0 )) \
    "status $rc, $(grep -m1 -o "its config breaks.*" "$tmp/oldrule.log" | cut -c1-150); $(ls "$D/oldrule" | grep -c unusable) file(s) set aside"

# A checkpoint of a later revision (what its config and tensors mean: README, "Upgrading"): refused
# by name, not set aside; inspect shows the revision of each file
fresh laterrev
stedit "$D/laterrev/$ck4" crc "meta['revision']='2'"
short "$D/laterrev" > "$tmp/laterrev.log" 2>&1
rc=$?
"$FC" inspect "$D/ref/$ck4" > "$tmp/rev.inspect" 2>&1
expect later_revision_refused $(( rc != 1 || $(grep -c "$ck4: written by a later framechain (revision 2; this one knows up to 1)" "$tmp/laterrev.log") != 1 ||
    $(ls "$D/laterrev" | grep -c unusable) != 0 || $(grep -c '^revision  *1$' "$tmp/rev.inspect") != 1 )) \
    "status $rc, $(grep -m1 -o "written by a later.*" "$tmp/laterrev.log" | cut -c1-100); inspect: $(grep -m1 '^revision' "$tmp/rev.inspect")"

# inspect of an earlier build's checkpoint names the keys its config does not set (added since) and
# the defaults a resume or generation takes for them
fresh predates
stedit "$D/predates/$ck4" old "import re; meta['config']=re.sub(r'(?m)^(cond_drop|anchor_snap) .*\n', '', meta['config'])"
"$FC" inspect "$D/predates/$ck4" > "$tmp/predates.log" 2>&1
"$FC" inspect "$D/ref/$ck4" > "$tmp/predates_ref.log" 2>&1
expect inspect_names_keys_a_file_predates $(( $(grep -c "^keys its config does not set (2; an earlier framechain wrote it)" "$tmp/predates.log") != 1 ||
    $(grep -c '^  anchor_snap = 0$' "$tmp/predates.log") != 1 || $(grep -c '^  cond_drop = 0$' "$tmp/predates.log") != 1 ||
    $(grep -c "^keys its config does not set" "$tmp/predates_ref.log") != 0 )) "$(grep -A2 '^keys its config' "$tmp/predates.log" | tr '\n' ' ')"

# A checkpoint of a build before the data record: the resume says it cannot check the data
fresh nodata
stedit "$D/nodata/$ck4" crc "meta.pop('data', None)"
short "$D/nodata" > "$tmp/nodata.log" 2>&1
rc=$?
expect resume_without_data_record_said $(( rc != 0 || $(grep -c "nodata: its checkpoints do not record the data they were trained on (an earlier framechain wrote them): resuming on the built-in moving shapes unchecked" "$tmp/nodata.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'its checkpoints do not record.*' "$tmp/nodata.log" | cut -c1-120)"

# A dataset folder given as the run folder: refused before anything is written into it
mkdir -p "$tmp/runisdata"
echo '{}' > "$tmp/runisdata/dataset.json"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/runisdata" --set steps=2 --set warmup_steps=1 > "$tmp/runisdata.log" 2>&1
rc=$?
expect run_folder_is_a_dataset $(( rc != 1 || $(grep -c "runisdata: holds dataset.json: a dataset folder, not a run folder" "$tmp/runisdata.log") != 1 ||
    $(ls -A "$tmp/runisdata" | wc -l) != 1 )) "status $rc, $(tail -1 "$tmp/runisdata.log" | cut -c1-120); $(ls -A "$tmp/runisdata" | tr '\n' ' ')"

# inspect says what a resume would: not finite values and missing tensors behind CRCs that check; and of
# a run whose newest checkpoint is cut short, the one a rerun sets aside and the one it resumes from.
fresh inf; fresh missing; fresh cut
stedit "$D/inf/$ck4" crc "T=[[a,d,s,struct.pack('<f',float('inf'))+by[4:] if a=='ema.final.linear.bias' else by] for a,d,s,by in T]"
stedit "$D/missing/$ck4" crc "T=[t for t in T if t[0]!='model.final.linear.bias']"
truncate -s -1 "$D/cut/$ck4"
"$FC" inspect "$D/inf/$ck4" > "$tmp/inf.log" 2>&1
rc1=$?
"$FC" inspect "$D/missing" > "$tmp/missing.log" 2>&1
rc2=$?
"$FC" inspect "$D/cut" > "$tmp/cut.log" 2>&1
rc3=$?
expect inspect_says_what_resume_would $(( rc1 != 1 || rc2 != 1 || rc3 != 1 ||
    $(grep -c "^UNUSABLE: .*$ck4: tensor ema.final.linear.bias holds infinite values" "$tmp/inf.log") != 1 ||
    $(grep -c "^NOT RESUMABLE: .*$ck4: tensor model.final.linear.bias is missing" "$tmp/missing.log") != 1 ||
    $(grep -c "^UNUSABLE: .*$ck4: .*; a rerun of train sets it aside$" "$tmp/cut.log") != 1 ||
    $(grep -c "^a rerun of train resumes from: $D/cut/$ck2$" "$tmp/cut.log") != 1 ||
    $(grep -c "^step  *2$" "$tmp/cut.log") != 1 )) \
    "status $rc1, $rc2, $rc3: $(grep -m1 -o 'UNUSABLE.*holds infinite values' "$tmp/inf.log"); $(grep -m1 -o 'NOT RESUMABLE.*' "$tmp/missing.log" | cut -c1-100); $(grep -m1 -o 'a rerun of train resumes from.*' "$tmp/cut.log")"

# A FIFO in place of metrics.jsonl or of an eval TSV: refused in one line, never waited on.
fresh fifo
rm "$D/fifo/metrics.jsonl" "$D/fifo/$ck4"
mkfifo "$D/fifo/metrics.jsonl" "$tmp/fifo.tsv"
bad=""
for cmd in train inspect plot plot_eval; do
    case $cmd in
        train) timeout -k 2 10 "$FC" --threads 1 train --config "$TINY" --run "$D/fifo" --set steps=4 --set checkpoint_every=2 \
            --set warmup_steps=1 > "$tmp/fifo_$cmd.log" 2>&1 ;;
        inspect) timeout -k 2 10 "$FC" inspect "$D/fifo" > "$tmp/fifo_$cmd.log" 2>&1 ;;
        plot) timeout -k 2 10 "$FC" plot "$D/fifo" --out "$tmp/fifo.png" > "$tmp/fifo_$cmd.log" 2>&1 ;;
        plot_eval) timeout -k 2 10 "$FC" plot --eval "$tmp/fifo.tsv" --out "$tmp/fifo.png" > "$tmp/fifo_$cmd.log" 2>&1 ;;
    esac
    rc=$?
    [ $rc = 1 ] && grep -q "\(metrics.jsonl\|fifo.tsv\): not a regular file (a FIFO)" "$tmp/fifo_$cmd.log" || bad="$bad $cmd: status $rc, $(tail -1 "$tmp/fifo_$cmd.log" | cut -c1-80);"
done
expect fifo_metrics_refused $(( ${#bad} != 0 )) "${bad:-train, inspect, plot RUN and plot --eval refuse a FIFO in one line}"

# A metrics.jsonl that cannot be rewritten (a 4 KiB file-size limit standing in for a full disk): one
# line, and no metrics.jsonl.tmp left behind.
cp -r "$tmp/ref" "$tmp/mtmp"
rm "$(final "$tmp/mtmp")"
(trap '' XFSZ; ulimit -f 4; train "$tmp/mtmp") > "$tmp/mtmp.log" 2>&1
rc=$?
expect metrics_rewrite_failure_leaves_no_temp $(( rc == 0 || $(grep -c "metrics.jsonl: cannot rewrite: .*free space and run the same command" "$tmp/mtmp.log") != 1 ||
    $(ls "$tmp/mtmp" | grep -c 'metrics.jsonl.tmp') != 0 )) \
    "status $rc, $(grep -m1 -o 'metrics.jsonl: cannot rewrite.*' "$tmp/mtmp.log" | cut -c1-100); left: $(ls "$tmp/mtmp" | grep tmp)"

# A preview's temporary file of a process that is gone is removed at the next start; one of a process
# that still runs is not.
fresh samples
rm "$D/samples/$ck4"
mkdir "$D/samples/samples"
sh -c 'exit 0' &
dead=$!
wait $dead
touch "$D/samples/samples/step-00000002.png.tmp-$dead" "$D/samples/samples/step-00000002.png.tmp-$$"
short "$D/samples" > "$tmp/samples.log" 2>&1
rc=$?
[ $rc = 0 ] && [ ! -e "$D/samples/samples/step-00000002.png.tmp-$dead" ] && [ -e "$D/samples/samples/step-00000002.png.tmp-$$" ] &&
    grep -q "^removed $D/samples/samples/step-00000002.png.tmp-$dead, a preview write that was cut off$" "$tmp/samples.log"
expect stale_preview_temp_removed $? "status $rc, left in samples/: $(ls "$D/samples/samples" | tr '\n' ' ')"

# ---- recompute changes the memory a step takes, not its arithmetic ----
same_tensors() {  # same_tensors A B: every tensor of two checkpoints byte for byte (their configs differ)
    "$PYTHON" - "$1" "$2" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors
a, _ = read_safetensors(sys.argv[1])
b, _ = read_safetensors(sys.argv[2])
sys.exit(0 if a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)
PY
}
(train "$tmp/rc" --set recompute=1) > "$tmp/rc.log" 2>&1
rc=$?
cmp -s <(losses "$tmp/ref") <(losses "$tmp/rc")
same_losses=$?
same_tensors "$(final "$tmp/ref")" "$(final "$tmp/rc")"
same=$?
expect recompute_same_run $(( rc != 0 || same_losses != 0 || same != 0 )) \
    "status $rc; recompute = 1 gives the per-step losses and the final weights, EMA and optimizer state of recompute = 0"
cp -r "$tmp/ref" "$tmp/rcres"
rm "$(final "$tmp/rcres")"
(train "$tmp/rcres" --set recompute=2 --set keep_blocks=1) > "$tmp/rcres.log" 2>&1
rc=$?
same_tensors "$(final "$tmp/ref")" "$(final "$tmp/rcres")"
same=$?
expect resume_across_recompute $(( rc != 0 || same != 0 || $(grep -c "resuming .* from step $((STEPS - 4))" "$tmp/rcres.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'resuming.*' "$tmp/rcres.log"), recompute 2, last block kept, on a recompute 0 run: the same tensors"

# ---- one trainer per run folder ----
# (the second started once the first has written a checkpoint, of another steps: the lock is said, not
# the config of a checkpoint that is the other run's; which one was said hung on the machine's speed)
bg_train "$tmp/lock1.log" "$tmp/lock" --set steps=100000
pid=$!
wait_until 60 $pid have "$tmp/lock/ckpt-*.safetensors"  # training: it holds the lock
(train "$tmp/lock") > "$tmp/lock.log" 2>&1
rc=$?
kill9_reap $pid
expect one_trainer_per_run $(( rc == 0 || ${#waited} != 0 || $(grep -c "another framechain train is using" "$tmp/lock.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain' "$tmp/lock.log" | cut -c1-140)${waited:+; the first trainer: $waited}"

# two trains started at once on a folder that does not exist yet: one trains, the other is refused by
# the lock and leaves the winner's folder and lock alone (the refused one removed them at its exit, as
# if it had made the folder, in about half the tries: the winner then died). 8 tries.
bad_tries=""
for try in 1 2 3 4 5 6 7 8; do
    bg_train "$tmp/race$try.a.log" "$tmp/race$try" --steps 3
    pa=$!
    bg_train "$tmp/race$try.b.log" "$tmp/race$try" --steps 3
    pb=$!
    wait $pa; ra=$?
    wait $pb; rb=$?
    ok=$(( (ra == 0 && rb == 1) || (ra == 1 && rb == 0) ))
    [ $ok = 1 ] && [ -f "$tmp/race$try/ckpt-00000003.safetensors" ] &&
        [ "$(cat "$tmp/race$try.a.log" "$tmp/race$try.b.log" | grep -c 'another framechain train is using')" = 1 ] ||
        bad_tries="$bad_tries $try (status $ra/$rb: $(cat "$tmp/race$try.a.log" "$tmp/race$try.b.log" | grep -m1 '^framechain' | cut -c1-120))"
done
expect two_trainers_race_new_folder $([ -z "$bad_tries" ]; echo $?) "${bad_tries:-8 of 8 tries: one trained to step 3, the other refused by the lock}"

# a run folder renamed while its train runs, and another run's folder put at its name: the train stops
# at its next checkpoint, naming where its folder went (its checkpoints and their pruning had gone into
# the other run's folder, deleting that run's checkpoints, and it exited 0)
QUICK=(--set depth=1 --set frame_size=16 --set mlp_ratio=1 --set warmup_steps=2)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mv_other" "${QUICK[@]}" --set steps=3 --set checkpoint_every=1 \
    --set keep_checkpoints=3 > /dev/null 2>&1
other=$(cat "$tmp/mv_other"/ckpt-*.safetensors | md5sum)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mv" "${QUICK[@]}" --set steps=3000 --set checkpoint_every=100 \
    --set keep_checkpoints=1 > "$tmp/mv.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/mv" "$tmp/mv.log" 1
mv "$tmp/mv" "$tmp/mv_moved" && mv "$tmp/mv_other" "$tmp/mv"  # another run's folder takes the name
wait $pid
rc=$?
expect renamed_run_folder_stops_the_train $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/mv: the run folder was moved or replaced while this train ran: stopping; its checkpoints are in the folder it was moved to, $tmp/mv_moved " "$tmp/mv.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/mv.log" | cut -c1-200)${waited:+ ($waited)}"
[ "$(cat "$tmp/mv"/ckpt-*.safetensors | md5sum)" = "$other" ] && [ "$(ls -A "$tmp/mv" | tr '\n' ' ')" = ".lock ckpt-00000001.safetensors ckpt-00000002.safetensors ckpt-00000003.safetensors metrics.jsonl " ]
expect renamed_run_folder_leaves_the_new_one_alone $? "the folder now at its name holds: $(ls -A "$tmp/mv" | tr '\n' ' ')"
# the same before a preview, which would go into RUN/samples
mkdir "$tmp/other_pv"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mv_pv" "${QUICK[@]}" --set steps=3000 --set checkpoint_every=1000 \
    --set sample_every=50 > "$tmp/mv_pv.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/mv_pv" "$tmp/mv_pv.log" 1
mv "$tmp/mv_pv" "$tmp/mv_pv_moved" && mv "$tmp/other_pv" "$tmp/mv_pv"
wait $pid
rc=$?
expect renamed_run_folder_stops_before_preview $(( rc != 1 || ${#waited} != 0 || $(ls -A "$tmp/mv_pv" | wc -l) != 0 ||
    $(grep -c "^framechain: $tmp/mv_pv: the run folder was moved or replaced while this train ran" "$tmp/mv_pv.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/mv_pv.log" | cut -c1-120); the folder now at its name holds: $(ls -A "$tmp/mv_pv" | tr '\n' ' ')"

# the run's lock file removed while it trains (a cleanup script): it stops at its next checkpoint saying
# so, the folder not called moved; the same command goes on from the checkpoints
"$FC" --threads 1 train --config "$TINY" --run "$tmp/rmlock" "${QUICK[@]}" --set steps=3000 --set checkpoint_every=100 \
    > "$tmp/rmlock.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/rmlock" "$tmp/rmlock.log" 1
rm "$tmp/rmlock/.lock"
wait $pid
rc=$?
expect removed_lock_file_said $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/rmlock/.lock: the run's lock file was removed while this train ran: stopping" "$tmp/rmlock.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/rmlock.log" | cut -c1-160)${waited:+ ($waited)}"

# ---- folders that are not the run's to make or share ----
# a dataset a prepare is writing (its lock, its shards), or one whose prepare was cut off (shards, no
# dataset.json): refused as a whole dataset is, the folder left as it was
mkdir -p "$tmp/preparing" "$tmp/cut_prep"
: > "$tmp/preparing/.prepare.lock"
: > "$tmp/preparing/shard-00000.safetensors"
: > "$tmp/cut_prep/shard-00000.safetensors"
ok=0
for d in preparing cut_prep; do
    "$FC" --threads 1 train --config "$TINY" --run "$tmp/$d" "${QUICK[@]}" --set steps=2 > "$tmp/$d.log" 2>&1
    rc=$?
    held=$([ $d = preparing ] && echo .prepare.lock || echo "shard files")
    { [ $rc = 1 ] && [ "$(grep -c "^framechain: $tmp/$d: holds $held: a dataset a prepare is writing (or one whose prepare was cut off), not a run folder (give --run a folder of its own)$" "$tmp/$d.log")" = 1 ] &&
      [ "$(ls -A "$tmp/$d" | tr '\n' ' ')" = "$( [ $d = preparing ] && echo '.prepare.lock ')shard-00000.safetensors " ]; } ||
        { ok=1; echo "  $d: status $rc: $(grep -m1 '^framechain: ' "$tmp/$d.log" | cut -c1-160); holds $(ls -A "$tmp/$d" | tr '\n' ' ')"; }
done
expect train_refuses_dataset_being_prepared $ok "$(grep -m1 '^framechain: ' "$tmp/preparing.log" | cut -c1-160)"
# --extend of a run another train is using: the lock is said (not what the checkpoints, which that
# train writes and prunes meanwhile, held at the moment they were listed)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/busy" "${QUICK[@]}" --set steps=100000 --set checkpoint_every=100000 \
    > "$tmp/busy1.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/busy" "$tmp/busy1.log" 1
"$FC" --threads 1 train --config "$TINY" --run "$tmp/busy" "${QUICK[@]}" --extend --steps 200000 > "$tmp/busy2.log" 2>&1
rc=$?
kill9_reap $pid
expect extend_busy_run_says_lock $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/busy: another framechain train is using this run folder$" "$tmp/busy2.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/busy2.log" | cut -c1-160)${waited:+ ($waited)}"
# a name the file system cannot take, deep in a long path: the line keeps its reason whole, and the
# parents made for it go (a refused start leaves nothing on disk)
deep="$tmp/deep"
for i in $(seq 16); do deep="$deep/$(printf 'd%.0s' $(seq 200))"; done
deep="$deep/$(printf 'r%.0s' $(seq 300))"
"$FC" --threads 1 train --config "$TINY" --run "$deep" "${QUICK[@]}" --set steps=2 > "$tmp/deep.log" 2>&1
rc=$?
expect train_long_path_says_why $(( rc != 1 || $(grep -c "^framechain: $deep: cannot create folder: File name too long$" "$tmp/deep.log") != 1 )) \
    "status $rc (a path of ${#deep} bytes): ...$(grep -m1 '^framechain: ' "$tmp/deep.log" | tail -c 80)"
[ ! -e "$tmp/deep" ]
expect train_long_name_leaves_no_folder $? "left: $(find "$tmp/deep" 2> /dev/null | wc -l) folders"

# ---- 8-bit AdamW tracks fp32 AdamW on the tiny config ----
for opt in adamw adamw8bit; do
    "$FC" --threads 2 train --config "$TINY" --run "$tmp/$opt" --set optimizer=$opt --set steps=200 --set warmup_steps=10 \
        --set lr=1e-3 --set checkpoint_every=50 --set keep_checkpoints=10 > "$tmp/$opt.log" 2>&1
done
"$PYTHON" tools/compare_runs.py "$tmp/adamw" "$tmp/adamw8bit" --window 20 --params-step 50 > "$tmp/cmp.log" 2>&1
rc=$?
cat "$tmp/cmp.log" | sed 's/^/  /'
expect adamw8bit_tracks_fp32 $rc "$(grep -E '^(curve|params):' "$tmp/cmp.log" | tr '\n' ' ')"
exit 0
