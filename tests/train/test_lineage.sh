#!/usr/bin/env bash
# Runs continued on purpose with a change: train --extend past a run's end, train --from a checkpoint
# into a new run (a fork), the lineage both leave in every later checkpoint, kill -9 in the middle of
# either, and the refusals around them.
set -u
. "$(dirname "$0")/../lib.sh"
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy' 2> /dev/null && echo $p && break; done)}
PYTHON=${PYTHON:-python3}
TINY=configs/tiny/starter.conf
SETS=(--set checkpoint_every=4 --set keep_checkpoints=3 --set warmup_steps=5 --set lr=1e-3)
# Run framechain itself (not a shell function around it) in the background: the signals must reach it.
. "$(dirname "$0")/train_lib.sh"  # train RUN ..., bg_train LOG RUN ...
fork() {  # fork PARENT RUN [extra args...]
    local parent=$1 run=$2
    shift 2
    exec "$FC" --threads 1 train --from "$parent" --run "$run" "$@"
}
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
lrs() { sed -E 's/.*"step":([0-9]+),.*"lr":([^,]+),"grad_norm.*/\1 \2/' "$1/metrics.jsonl"; }
ckpt() { echo "$1/ckpt-$(printf %08d "$2").safetensors"; }
same_tensors() {  # same_tensors A B: every tensor of two checkpoints byte for byte (their metadata may differ)
    "$PYTHON" - "$1" "$2" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors
a, _ = read_safetensors(sys.argv[1])
b, _ = read_safetensors(sys.argv[2])
sys.exit(0 if a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)
PY
}
# kill9_at LOG RUN STEP CMD...: start CMD in the background, kill -9 it once it has trained past STEP
# and RUN holds a checkpoint (with KILL_CKPT=NNNNNNNN, that step's; checkpoint writes of 200 ms, each
# waiting for the last, keep a short run going past the kill)
past_with_checkpoint() { trained_past "$@" && have "$1/ckpt-${KILL_CKPT:-*}.safetensors"; }
kill9_at() {
    local log=$1 run=$2 step=$3
    shift 3
    (export FRAMECHAIN_TEST_WRITE_DELAY_MS=200; "$@") > "$log" 2>&1 &
    local pid=$!
    wait_until 60 $pid past_with_checkpoint "$run" "$log" "$step"
    kill9_reap $pid
    killed=$?
}

# ---- the reference: 24 steps, uninterrupted ----
(train "$tmp/ref" --steps 24) > "$tmp/ref.log" 2>&1 || fail lineage_reference "$(tail -1 "$tmp/ref.log")"

# ---- more steps without --extend: refused, nothing touched ----
cp -r "$tmp/ref" "$tmp/more"
before=$(ls -l --time-style=+%s.%N "$tmp/more" | md5sum)
(train "$tmp/more" --steps 32) > "$tmp/more.log" 2>&1
rc=$?
after=$(ls -l --time-style=+%s.%N "$tmp/more" | md5sum)
expect more_steps_need_extend $(( rc == 0 || $(grep -c "written with steps = 24, but this run has steps = 32; to train a run past its end on purpose: train --extend --steps N" "$tmp/more.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/more.log" | cut -c1-160)"
expect refused_extension_changes_nothing $([ "$before" = "$after" ]; echo $?) "the run folder is unchanged"
# the refusal is all it prints: before the memory plan, the warmup's and the previews' lines
expect refusal_is_one_line $([ "$(wc -l < "$tmp/more.log")" = 1 ]; echo $?) \
    "$(wc -l < "$tmp/more.log") lines: $(head -2 "$tmp/more.log" | cut -c1-80 | tr '\n' '|')"
(train "$tmp/more" --extend --steps 20) > "$tmp/less.log" 2>&1
rc=$?
expect extend_only_goes_further $(( rc == 0 || $(grep -c "already runs to 24 steps" "$tmp/less.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/less.log" | cut -c1-120)"
# a run whose warmup its --steps cut (30 to 8) keeps that warmup when extended: nothing says it is cut
# again (the line said "warmup_steps 30 cut to 12, the whole run" where the run kept 8)
(train "$tmp/cut" --steps 8 --set warmup_steps=30) > "$tmp/cut.log" 2>&1
(train "$tmp/cut" --steps 12 --set warmup_steps=30 --extend) > "$tmp/cut_ext.log" 2>&1
rc=$?
expect extend_says_no_warmup_cut $(( rc != 0 || $(grep -c 'warmup_steps 30 cut to 8' "$tmp/cut.log") != 1 ||
    $(grep -c 'cut to' "$tmp/cut_ext.log") != 0 )) "status $rc: $(grep -h 'cut to' "$tmp/cut.log" "$tmp/cut_ext.log" | tr '\n' '|')"
(train "$tmp/none" --extend --steps 20) > "$tmp/none.log" 2>&1
rc=$?
expect extend_needs_a_checkpoint $(( rc == 0 || $(grep -c "holds no whole checkpoint to extend" "$tmp/none.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/none.log" | cut -c1-120)"

# ---- --extend of a run whose newest file is misnamed (its metadata says step 24, its name 99): the
# resume sets it aside and goes on from step 20, and the extension says step 20 ----
cp -r "$tmp/ref" "$tmp/misnamed"
mv "$(ckpt "$tmp/misnamed" 24)" "$(ckpt "$tmp/misnamed" 99)"
(train "$tmp/misnamed" --extend --steps 28) > "$tmp/misnamed.log" 2>&1
rc=$?
expect extend_names_the_step_it_resumes $(( rc != 0 || $(grep -c "extended from 24 to 28 steps at step 20:" "$tmp/misnamed.log") != 1 ||
    $(grep -c "^resuming .* from step 20 " "$tmp/misnamed.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'extended from [0-9]* to [0-9]* steps at step [0-9]*' "$tmp/misnamed.log"), $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/misnamed.log" | sed 's/.* from/from/')"

# the same without --extend, where the misnamed file is an extension's (steps = 28) and the run's end
# is 24: the resume sets it aside and finds the run at its end; nothing refused on the misnamed file
cp -r "$tmp/ref" "$tmp/misnamed2"
(train "$tmp/misnamed2" --extend --steps 28) > /dev/null 2>&1
mv "$(ckpt "$tmp/misnamed2" 28)" "$(ckpt "$tmp/misnamed2" 99)"
(train "$tmp/misnamed2" --steps 24) > "$tmp/misnamed2.log" 2>&1
rc=$?
expect misnamed_extension_not_refused $(( rc != 0 || $(grep -c "is at step 24 of 24: nothing to do" "$tmp/misnamed2.log") != 1 )) \
    "status $rc, $(grep -v '^ ' "$tmp/misnamed2.log" | tail -1 | cut -c1-120)"

# ---- --extend of a run killed half-way: the steps up to the old end are the original's ----
kill9_at "$tmp/ext.log" "$tmp/ext" 10 train "$tmp/ext" --steps 24
(train "$tmp/ext" --extend --steps 32) > "$tmp/ext2.log" 2>&1
rc=$?
cmp -s <(losses "$tmp/ref") <(losses "$tmp/ext" | head -24)
same_losses=$?
# after the old end the rate stays lr * lr_min_ratio (1e-3 * 0.1, the default ratio)
flat=$(lrs "$tmp/ext" | awk '$1 > 24 && $2 + 0 == 1e-4' | wc -l)
expect extend_keeps_the_old_steps $(( rc != 0 || killed != 137 || same_losses != 0 || flat != 8 )) \
    "status $rc (the kill: $killed), the losses of steps 1-24 equal the uninterrupted 24-step run's: $((1 - same_losses)); steps 25-32 at lr 1e-4: $flat of 8"
"$FC" inspect "$(ckpt "$tmp/ext" 32)" > "$tmp/ext.inspect" 2>&1
expect extension_in_lineage $(( $(grep -c "^  extended from 24 to 32 steps at step [0-9]*: the cosine decay still ends at step 24" "$tmp/ext.inspect") != 1 )) \
    "$(grep -m1 '^  extended' "$tmp/ext.inspect" | cut -c1-120)"

# ---- kill -9 during an extension, the same command again: the same run ----
cp -r "$tmp/ref" "$tmp/ext9"
kill9_at "$tmp/ext9.log" "$tmp/ext9" 27 train "$tmp/ext9" --extend --steps 32
(train "$tmp/ext9" --extend --steps 32) > "$tmp/ext9b.log" 2>&1
rc=$?
same_tensors "$(ckpt "$tmp/ext" 32)" "$(ckpt "$tmp/ext9" 32)"
same=$?
cmp -s <(losses "$tmp/ext") <(losses "$tmp/ext9")
same_losses=$?
expect extend_resumes_after_kill9 $(( rc != 0 || killed != 137 || same != 0 || same_losses != 0 )) \
    "status $rc (the kill: $killed), $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/ext9b.log"); the weights, EMA, optimizer state and the 32 losses of the other extension"
# the same command once more, on the finished extension: nothing to do, not a refusal
(train "$tmp/ext9" --extend --steps 32) > "$tmp/ext9c.log" 2>&1
rc=$?
expect extend_again_to_the_same_end $(( rc != 0 || $(grep -c "is at step 32 of 32: nothing to do" "$tmp/ext9c.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/ext9c.log" | cut -c1-120)"

# ---- --extend of a run whose --steps cut its warmup short (the config's warmup_steps past its end):
# the extension keeps the run's schedule (that warmup, its decay's end), and the same command with the
# run's own end is not an extension at all (no schedule_end enters its checkpoints) ----
exec_short() { exec "$FC" --threads 1 train --config "$TINY" --run "$1" --set checkpoint_every=4 --set lr=1e-3 "${@:2}"; }
(exec_short "$tmp/cutwarm" --steps 8) > "$tmp/cutwarm.log" 2>&1
(exec_short "$tmp/cutwarm" --steps 8 --extend) > "$tmp/cutwarm_same.log" 2>&1
rc_same=$?
(exec_short "$tmp/cutwarm" --steps 8) > "$tmp/cutwarm_plain.log" 2>&1
rc_plain=$?
(exec_short "$tmp/cutwarm" --steps 12 --extend) > "$tmp/cutwarm_ext.log" 2>&1
rc=$?
"$FC" inspect "$(ckpt "$tmp/cutwarm" 12)" > "$tmp/cutwarm.inspect" 2>&1
expect extend_run_with_cut_warmup $(( rc != 0 || rc_same != 0 || rc_plain != 0 || $(grep -c "^  extended from 8 to 12 steps at step 8" "$tmp/cutwarm.inspect") != 1 )) \
    "status $rc (the same end with --extend: $rc_same, then without: $rc_plain): $(tail -1 "$tmp/cutwarm_ext.log" | cut -c1-120)"

# ---- a fork: the parent's state, a changed config, its parent named ----
parent=$(ckpt "$tmp/ref" 24)
(fork "$parent" "$tmp/fork" --steps 32 --set lr=5e-4) > "$tmp/fork.log" 2>&1
rc=$?
"$FC" inspect "$(ckpt "$tmp/fork" 24)" > "$tmp/fork.inspect" 2>&1
named=$(grep -c "^parent *$parent (step 24, crc32 $(gzip -c < "$parent" | tail -c8 | od -An -tx4 -N4 | tr -d ' '))$" "$tmp/fork.inspect")
changed=$(grep -c "^  forked from .*; changed: steps 24 -> 32, lr 0.001 -> 0.0005$" "$tmp/fork.inspect")
first=$(sed -n '1s/^{"step":\([0-9]*\),.*/\1/p' "$tmp/fork/metrics.jsonl")
expect fork_names_its_parent $(( rc != 0 || named != 1 || changed != 1 || first != 25 )) \
    "status $rc; its first checkpoint (step 24) names the parent with the file's CRC32: $named, the keys changed: $changed; its first step: ${first:-none}"
same_tensors "$parent" "$(ckpt "$tmp/fork" 24)"
expect fork_starts_from_parent_state $? "the fork's first checkpoint holds the parent's weights, EMA and optimizer state"
# its schedule is its own: lr 5e-4 on the cosine from the warmup's end (step 5) to step 32, at step 25
lr25=$(lrs "$tmp/fork" | awk '$1 == 25 {print $2}')
want=$(awk 'BEGIN {printf "%.6g", 5e-4 * (0.1 + 0.9 * 0.5 * (1 + cos(3.141592653589793 * 20 / 27)))}')
expect fork_uses_its_config $(awk -v a="$lr25" -v b="$want" 'BEGIN {print !(a > 0 && (a - b) ^ 2 < (1e-5 * b) ^ 2)}') \
    "step 25 at lr ${lr25:-none}, expected $want (lr = 5e-4, the cosine to step 32; the parent's run ended at 1e-4)"

# ---- kill -9 in a fork, the same command again: it resumes itself, not the parent ----
# (killed once it has a checkpoint of its own past the parent's step 24: the rerun must take that one)
KILL_CKPT=00000028 kill9_at "$tmp/fork9.log" "$tmp/fork9" 29 fork "$parent" "$tmp/fork9" --steps 32 --set lr=5e-4
newest=$(ls "$tmp/fork9" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.safetensors$/\1/p' | sort -n | tail -1)
(fork "$parent" "$tmp/fork9" --steps 32 --set lr=5e-4) > "$tmp/fork9b.log" 2>&1
rc=$?
cmp -s "$(ckpt "$tmp/fork" 32)" "$(ckpt "$tmp/fork9" 32)"
same=$?
expect fork_resumes_after_kill9 $(( rc != 0 || killed != 137 || same != 0 || ${newest:-0} < 28 || $(grep -c "^resuming $tmp/fork9 from step ${newest:-none} " "$tmp/fork9b.log") != 1 || $(grep -c "^forking" "$tmp/fork9b.log") != 0 )) \
    "status $rc (the kill: $killed), newest checkpoint at the kill: step ${newest:-none}; the rerun: $(grep -m1 -o '^resuming.*from step [0-9]*\|^forking.*' "$tmp/fork9b.log"); the final checkpoint equals the uninterrupted fork's, byte for byte"

# ---- the same fork, its parent's path spelt another way (./, another working folder): it resumes ----
cp -r "$tmp/fork" "$tmp/fork_spelt"
rm -f "$(ckpt "$tmp/fork_spelt" 32)"
(fork "$tmp/./ref/../ref/ckpt-00000024.safetensors" "$tmp/fork_spelt" --steps 32 --set lr=5e-4) > "$tmp/fork_spelt.log" 2>&1
rc=$?
cmp -s "$(ckpt "$tmp/fork" 32)" "$(ckpt "$tmp/fork_spelt" 32)"
same=$?
expect fork_resumes_with_parent_spelt_another_way $(( rc != 0 || same != 0 || $(grep -c "^resuming $tmp/fork_spelt from step 28 " "$tmp/fork_spelt.log") != 1 )) \
    "status $rc: $(grep -m1 '^resuming\|framechain:' "$tmp/fork_spelt.log" | cut -c1-250); the final checkpoint equals the uninterrupted fork's, byte for byte: $([ $same -eq 0 ] && echo yes || echo no)"

# ---- a fork whose parent's file is gone (a parent that trains on prunes it): the same command resumes it ----
cp -r "$tmp/ref" "$tmp/ref_gone"
(fork "$(ckpt "$tmp/ref_gone" 24)" "$tmp/orphan" --steps 32 --set lr=5e-4) > "$tmp/orphan.log" 2>&1
rm -f "$(ckpt "$tmp/orphan" 32)" "$(ckpt "$tmp/ref_gone" 24)"
(fork "$(ckpt "$tmp/ref_gone" 24)" "$tmp/orphan" --steps 32 --set lr=5e-4) > "$tmp/orphan2.log" 2>&1
rc=$?
same_tensors "$(ckpt "$tmp/fork" 32)" "$(ckpt "$tmp/orphan" 32)"
same=$?
expect fork_resumes_without_parent $(( rc != 0 || same != 0 || $(grep -c "^resuming $tmp/orphan from step 28 " "$tmp/orphan2.log") != 1 )) \
    "status $rc; $(grep -m1 -o '^resuming.*from step [0-9]*\|framechain:.*' "$tmp/orphan2.log" | cut -c1-150); step 32's tensors those of the uninterrupted fork: $([ $same = 0 ] && echo yes || echo no)"
# ---- a fork whose parent's file was replaced by another checkpoint (the parent's folder trained
# again, another seed): the same command resumes the fork as it was made, not as the new file's config
# says (which was refused as "seed = 1, but this run has seed = 2", a key the user never set) ----
cp -r "$tmp/ref" "$tmp/ref_swap"
(fork "$(ckpt "$tmp/ref_swap" 24)" "$tmp/swapped" --steps 32 --set lr=5e-4) > "$tmp/swapped.log" 2>&1
rm -f "$(ckpt "$tmp/swapped" 32)"
rm -rf "$tmp/ref_swap" && (train "$tmp/ref_swap" --steps 24 --set seed=2) > "$tmp/ref_swap.log" 2>&1
(fork "$(ckpt "$tmp/ref_swap" 24)" "$tmp/swapped" --steps 32 --set lr=5e-4) > "$tmp/swapped2.log" 2>&1
rc=$?
same_tensors "$(ckpt "$tmp/fork" 32)" "$(ckpt "$tmp/swapped" 32)"
same=$?
expect fork_resumes_over_replaced_parent $(( rc != 0 || same != 0 || $(grep -c "^resuming $tmp/swapped from step 28 " "$tmp/swapped2.log") != 1 ||
    $(grep -c "ref_swap/ckpt-00000024.safetensors is (step 24, crc32 [0-9a-f]*) now, not the checkpoint the fork was made from (step 24, crc32 [0-9a-f]*); the fork resumes from its own checkpoints" "$tmp/swapped2.log") != 1 )) \
    "status $rc; $(grep -m1 -o 'is (step.*made from ([^)]*)\|framechain:.*' "$tmp/swapped2.log" | cut -c1-160); step 32's tensors those of the uninterrupted fork: $([ $same = 0 ] && echo yes || echo no)"
# a parent in a folder whose name is not ASCII (recorded with '?' for those bytes): the fork resumes by
# its own command, with the parent's file there and without it
cp -r "$tmp/ref" "$tmp/ref Vidéos 日本"
uparent=$(ckpt "$tmp/ref Vidéos 日本" 24)
(fork "$uparent" "$tmp/ufork" --steps 32 --set lr=5e-4) > "$tmp/ufork.log" 2>&1
rm -f "$(ckpt "$tmp/ufork" 32)"
(fork "$uparent" "$tmp/ufork" --steps 32 --set lr=5e-4) > "$tmp/ufork2.log" 2>&1
rc=$?
rm -f "$(ckpt "$tmp/ufork" 32)" "$uparent"
(fork "$uparent" "$tmp/ufork" --steps 32 --set lr=5e-4) > "$tmp/ufork3.log" 2>&1
rc3=$?
expect fork_resumes_from_non_ascii_parent $(( rc != 0 || rc3 != 0 || $(grep -c "^resuming $tmp/ufork from step 28 " "$tmp/ufork2.log") != 1 ||
    $(grep -c "^resuming $tmp/ufork from step 28 " "$tmp/ufork3.log") != 1 )) \
    "status $rc and $rc3: $(grep -h -m1 -o '^resuming.*from step [0-9]*\|framechain:.*' "$tmp/ufork2.log" "$tmp/ufork3.log" | cut -c1-150 | tr '\n' ' ')"
# with neither the parent nor a checkpoint of the fork: the parent's file named
(fork "$(ckpt "$tmp/ref_gone" 24)" "$tmp/orphan_new" --steps 32) > "$tmp/orphan3.log" 2>&1
rc=$?
expect fork_without_parent_refused $(( rc == 0 || $(grep -c "^framechain: --from .*ref_gone/ckpt-00000024.safetensors: not a whole checkpoint" "$tmp/orphan3.log") != 1 )) \
    "status $rc: $(tail -1 "$tmp/orphan3.log" | cut -c1-150)"

# ---- a fork whose own checkpoints are all damaged: never started again from its parent without a word;
# the line names the fork's own files and the parent it would start from, also where that parent is gone ----
cp -r "$tmp/ref" "$tmp/ref_dmg"
(fork "$(ckpt "$tmp/ref_dmg" 24)" "$tmp/fdmg" --steps 32) > "$tmp/fdmg0.log" 2>&1
for s in 24 28 32; do flip_byte "$(ckpt "$tmp/fdmg" $s)" 60000; done
cp -r "$tmp/fdmg" "$tmp/fdmg_gone"
cp -r "$tmp/fdmg" "$tmp/fdmg_torn"
for s in 24 28 32; do truncate -s 100 "$(ckpt "$tmp/fdmg_torn" $s)"; done
cp -r "$tmp/fdmg" "$tmp/fdmg_lin"  # without their parent key: the lineage's "forked from" line names it
for s in 24 28 32; do
    "$PYTHON" - "$(ckpt "$tmp/fdmg_lin" $s)" <<'PY'
import sys, struct, json
p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h['__metadata__'].pop('parent')
s = json.dumps(h, separators=(',', ':')).encode(); s += b' ' * ((8 - len(s) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(s)) + s + b[8 + n:])
PY
done
# inspect says where a rerun would start it again as train does: from the parent its checkpoints name
# (still in the folder, or set aside), from step 0 or a fork's parent where no metadata reads
"$FC" inspect "$tmp/fdmg" > "$tmp/fdmg_inspect0.log" 2>&1
rc0=$?
"$FC" inspect "$tmp/fdmg_torn" > "$tmp/fdmg_torn.log" 2>&1
rc_torn=$?
"$FC" inspect "$tmp/fdmg_lin" > "$tmp/fdmg_lin.log" 2>&1
rc_lin=$?
(fork "$(ckpt "$tmp/ref_dmg" 24)" "$tmp/fdmg" --steps 32) > "$tmp/fdmg1.log" 2>&1
rc1=$?
(fork "$(ckpt "$tmp/ref_dmg" 24)" "$tmp/fdmg" --steps 32) > "$tmp/fdmg2.log" 2>&1
rc2=$?
want="fdmg: no checkpoint here can be resumed from, but the run was trained before (3 damaged checkpoints set aside as ckpt-\*.unusable, metrics.jsonl up to step 32): starting it again from its parent $(ckpt "$tmp/ref_dmg" 24) (step 24) would lose it"
expect fork_all_damaged_never_restarts $(( rc1 != 1 || rc2 != 1 || $(grep -c "$want" "$tmp/fdmg1.log") != 1 ||
    $(grep -c "$want" "$tmp/fdmg2.log") != 1 || $(wc -l < "$tmp/fdmg2.log") != 1 || $(grep -c "step 0" "$tmp/fdmg1.log") != 0 ||
    $(ls "$tmp/fdmg" | grep -c 'unusable$') != 3 )) \
    "status $rc1 then $rc2 ($(wc -l < "$tmp/fdmg2.log") lines): $(grep -m1 -o 'fdmg: no checkpoint.*' "$tmp/fdmg1.log" | cut -c1-250)"
"$FC" inspect "$tmp/fdmg" > "$tmp/fdmg_inspect1.log" 2>&1
rc1=$?
again="again from its parent $(ckpt "$tmp/ref_dmg" 24) (step 24) (given --from; without it, from step 0)"
expect fork_all_damaged_inspected $(( rc0 != 1 || rc1 != 1 || rc_torn != 1 || rc_lin != 1 ||
    $(grep -c "^none of its 3 checkpoints can be resumed from: a rerun of train sets them aside and refuses to start the run $again$" "$tmp/fdmg_inspect0.log") != 1 ||
    $(grep -c "^none of its 3 checkpoints can be resumed from: a rerun of train sets them aside and refuses to start the run $again$" "$tmp/fdmg_lin.log") != 1 ||
    $(grep -c "fdmg: a run folder with no checkpoint to resume from: 3 damaged ones set aside as ckpt-\*.unusable (a rerun of train refuses to start the run $again)$" "$tmp/fdmg_inspect1.log") != 1 ||
    $(grep -c "refuses to start the run again from step 0 (or, were it a fork, its parent: no checkpoint's metadata here reads to say)$" "$tmp/fdmg_torn.log") != 1 ||
    $(cat "$tmp/fdmg_inspect0.log" "$tmp/fdmg_inspect1.log" | grep "step 0" | grep -vc "given --from; without it, from step 0") != 0 )) \
    "status $rc0, $rc1, $rc_torn, $rc_lin: $(tail -1 "$tmp/fdmg_inspect0.log" | cut -c1-200); $(tail -1 "$tmp/fdmg_lin.log" | cut -c1-200); $(tail -1 "$tmp/fdmg_inspect1.log" | cut -c1-250); $(tail -1 "$tmp/fdmg_torn.log" | cut -c1-200)"
rm "$(ckpt "$tmp/ref_dmg" 24)"
(fork "$(ckpt "$tmp/ref_dmg" 24)" "$tmp/fdmg" --steps 32) > "$tmp/fdmg3.log" 2>&1
rc1=$?
(fork "$(ckpt "$tmp/ref_dmg" 24)" "$tmp/fdmg_gone" --steps 32) > "$tmp/fdmg4.log" 2>&1
rc2=$?
want="none of this fork's checkpoints can be resumed from"
expect fork_all_damaged_without_parent $(( rc1 != 1 || rc2 != 1 ||
    $(grep -c "fdmg: $want (3 set aside as damaged before, ckpt-\*.unusable), and its parent cannot be read (--from .*ref_dmg/ckpt-00000024.safetensors: not a whole checkpoint" "$tmp/fdmg3.log") != 1 ||
    $(grep -c "fdmg_gone: $want (3 damaged checkpoints, the newest $(ckpt "$tmp/fdmg_gone" 32): tensor .* fails its CRC32 check), and its parent cannot be read" "$tmp/fdmg4.log") != 1 ||
    $(cat "$tmp/fdmg3.log" "$tmp/fdmg4.log" | wc -l) != 2 || $(ls "$tmp/fdmg_gone" | grep -c 'safetensors$') != 3 )) \
    "status $rc1 and $rc2: $(head -1 "$tmp/fdmg3.log" | cut -c1-160); $(head -1 "$tmp/fdmg4.log" | cut -c1-200)"

# A --from that cannot be read, into a folder whose damaged checkpoints name another parent: not this
# parent's fork, said so (putting the --from file back would not make it one)
cp -r "$tmp/fdmg_gone" "$tmp/fdmg_other"
(fork "$tmp/no_such_parent.safetensors" "$tmp/fdmg_other" --steps 32) > "$tmp/fdmg5.log" 2>&1
rc=$?
expect fork_damaged_of_another_parent $(( rc != 1 || $(wc -l < "$tmp/fdmg5.log") != 1 ||
    $(grep -c "fdmg_other: holds a run that is not a fork of .*no_such_parent.safetensors (its damaged checkpoints name .*ref_dmg/ckpt-00000024.safetensors (step 24)): --from starts a new run" "$tmp/fdmg5.log") != 1 )) \
    "status $rc: $(head -1 "$tmp/fdmg5.log" | cut -c1-250)"

# ---- what a fork refuses ----
(fork "$parent" "$tmp/wide" --steps 32 --set width=96) > "$tmp/wide.log" 2>&1
rc=$?
expect fork_keeps_the_network $(( rc == 0 || $(grep -c "it has width = 64, this config width = 96; a fork keeps the network" "$tmp/wide.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/wide.log" | cut -c1-120), run folder made: $([ -e "$tmp/wide" ] && echo yes || echo no)"
[ -e "$tmp/wide" ] && fail fork_refusal_writes_nothing "$tmp/wide exists" || pass fork_refusal_writes_nothing "no run folder"
cp -r "$tmp/ref" "$tmp/taken"
(fork "$parent" "$tmp/taken" --steps 32) > "$tmp/taken.log" 2>&1
rc=$?
expect fork_into_another_run_refused $(( rc == 0 || $(grep -c "is not a fork of" "$tmp/taken.log") != 1 ||
    $(wc -l < "$tmp/taken.log") != 1 )) "status $rc, $(wc -l < "$tmp/taken.log") lines: $(head -1 "$tmp/taken.log" | cut -c1-120)"
# a folder whose run was killed before its first checkpoint (its 6 lines, none past 2 checkpoint_every)
# may take a fork: its metrics.jsonl then holds the fork's steps alone, from 25
(train "$tmp/killed" --steps 6) > /dev/null 2>&1
rm -f "$tmp"/killed/ckpt-*
(fork "$parent" "$tmp/killed" --steps 28) > "$tmp/killed.log" 2>&1
rc=$?
first=$(sed -n '1s/^{"step":\([0-9]*\),.*/\1/p' "$tmp/killed/metrics.jsonl")
expect fork_metrics_its_own_steps $(( rc != 0 || ${first:-0} != 25 || $(wc -l < "$tmp/killed/metrics.jsonl") != 4 )) \
    "status $rc, $(wc -l < "$tmp/killed/metrics.jsonl") lines in metrics.jsonl, the first: $(head -1 "$tmp/killed/metrics.jsonl" | cut -c1-40)"
# one whose run went past that (its checkpoints removed, 20 lines: all at or below the parent's step 24)
# is refused as a plain start from step 0 would be, nothing changed
(train "$tmp/gone" --steps 20) > /dev/null 2>&1
rm -f "$tmp"/gone/ckpt-*
before=$(ls -l --time-style=+%s.%N "$tmp/gone" | md5sum; md5sum < "$tmp/gone/metrics.jsonl")
(fork "$parent" "$tmp/gone" --steps 28) > "$tmp/gone.log" 2>&1
rc=$?
after=$(ls -l --time-style=+%s.%N "$tmp/gone" | md5sum; md5sum < "$tmp/gone/metrics.jsonl")
[ "$before" = "$after" ]
changed=$?
expect fork_into_trained_folder_refused $(( rc != 1 || $(wc -l < "$tmp/gone.log") != 1 || changed != 0 ||
    $(grep -c "gone: no checkpoint here can be resumed from, but the run was trained before (metrics.jsonl up to step 20): starting it again from its parent .*ref/ckpt-00000024.safetensors (step 24) would lose it" "$tmp/gone.log") != 1 )) \
    "status $rc, folder unchanged: $([ $changed = 0 ] && echo yes || echo no): $(head -1 "$tmp/gone.log" | cut -c1-220)"
(fork "$parent" "$tmp/short" --steps 20) > "$tmp/short.log" 2>&1
rc=$?
expect fork_needs_more_steps $(( rc == 0 || $(grep -c "the parent is at step 24, and this run ends at steps = 20" "$tmp/short.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/short.log" | cut -c1-120)"
# a fork that would end where its parent is makes no step either
(fork "$parent" "$tmp/even" --steps 24) > "$tmp/even.log" 2>&1
rc=$?
expect fork_needs_a_step_past_the_parent $(( rc == 0 || $(grep -c "the parent is at step 24, and this run ends at steps = 24" "$tmp/even.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/even.log" | cut -c1-120)"

# ---- the data a run trains on is recorded: another dataset is refused on resume, a moved one is not,
# and a fork onto other data says so ----
"$FC" prepare --input shapes:1:40 --out "$tmp/d1" --size 32 --clip-frames 10 > /dev/null 2>&1
"$FC" prepare --input shapes:2:40 --out "$tmp/d2" --size 32 --clip-frames 10 > /dev/null 2>&1
(train "$tmp/dr" --data "$tmp/d1" --steps 8) > "$tmp/dr.log" 2>&1
before=$(ls -l --time-style=+%s.%N "$tmp/dr" | md5sum)
(train "$tmp/dr" --data "$tmp/d2" --steps 8) > "$tmp/dr2.log" 2>&1
rc=$?
after=$(ls -l --time-style=+%s.%N "$tmp/dr" | md5sum)
expect resume_on_other_data_refused $(( rc == 0 || $(grep -c "written on the data of crc32 [0-9a-f]* of $tmp/d1/dataset.json, but this run has crc32 [0-9a-f]* of $tmp/d2/dataset.json" "$tmp/dr2.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'written on the data.*' "$tmp/dr2.log" | cut -c1-120)"
# the refusal is all it prints (before the memory plan), the folder untouched; so too where the newest
# checkpoint is damaged (the resume would set it aside: the refusal comes before that)
cp -r "$tmp/dr" "$tmp/drtorn"
flip_byte "$(ckpt "$tmp/drtorn" 8)" 60000
torn_before=$(ls -l --time-style=+%s.%N "$tmp/drtorn" | md5sum)
(train "$tmp/drtorn" --data "$tmp/d2" --steps 8) > "$tmp/drtorn.log" 2>&1
rc2=$?
torn_after=$(ls -l --time-style=+%s.%N "$tmp/drtorn" | md5sum)
expect other_data_refusal_is_one_line $(( rc == 0 || rc2 == 0 || $(wc -l < "$tmp/dr2.log") != 1 || $(wc -l < "$tmp/drtorn.log") != 1 ||
    $(grep -c "written on the data of" "$tmp/drtorn.log") != 1 )) \
    "$(wc -l < "$tmp/dr2.log") and $(wc -l < "$tmp/drtorn.log") lines (the newest checkpoint damaged): $(head -2 "$tmp/drtorn.log" | cut -c1-80 | tr '\n' '|')"
expect other_data_refusal_changes_nothing $([ "$before" = "$after" ] && [ "$torn_before" = "$torn_after" ]; echo $?) \
    "the run folders unchanged: $(ls "$tmp/drtorn" | tr '\n' ' ')"
mv "$tmp/d1" "$tmp/d1moved"
(train "$tmp/dr" --data "$tmp/d1moved" --steps 8) > "$tmp/dr3.log" 2>&1
rc=$?
expect resume_on_moved_data $(( rc != 0 || $(grep -c "nothing to do" "$tmp/dr3.log") != 1 )) \
    "status $rc: the same dataset.json in another folder continues the run; $(tail -1 "$tmp/dr3.log" | cut -c1-80)"
(fork "$(ckpt "$tmp/dr" 8)" "$tmp/drfork" --data "$tmp/d2" --steps 12) > "$tmp/drfork.log" 2>&1
rc=$?
"$FC" inspect "$(ckpt "$tmp/drfork" 12)" > "$tmp/drfork.inspect" 2>&1
expect fork_onto_other_data $(( rc != 0 || $(grep -c "^  forked from .*changed: steps 8 -> 12, data crc32 [0-9a-f]* of $tmp/d1/dataset.json -> crc32 [0-9a-f]* of $tmp/d2/dataset.json$" "$tmp/drfork.inspect") != 1 || $(grep -c "^data *crc32 [0-9a-f]* of $tmp/d2/dataset.json" "$tmp/drfork.inspect") != 1 )) \
    "status $rc, $(grep -m1 '^  forked' "$tmp/drfork.inspect" | cut -c1-150)"

# ---- a NaN loss names the fork that goes on from the last good checkpoint, and it does ----
(FRAMECHAIN_TEST_NAN_AT_STEP=10 train "$tmp/nan" --steps 24) > "$tmp/nan.log" 2>&1
rc=$?
cmd=$(grep -o "framechain train --from [^ ]* --run NEW_RUN --set lr=[0-9.e-]*" "$tmp/nan.log")
set -- $cmd
(exec "$FC" --threads 1 "${@:2:3}" --run "$tmp/nanfork" "${@:7}") > "$tmp/nanfork.log" 2>&1
rc2=$?
expect nan_names_fork_command $(( rc == 0 || ${#cmd} == 0 || rc2 != 0 || $(grep -c "^done: .* at step 24" "$tmp/nanfork.log") != 1 )) \
    "status $rc: '${cmd:-no command named}'; that command (with a new run folder): status $rc2, $(tail -1 "$tmp/nanfork.log" | cut -c1-80)"
# the checkpoint of the step just before holds the weights whose forward gave the NaN (lowering the
# rate cannot change it): the one before it is named, or none
(FRAMECHAIN_TEST_NAN_AT_STEP=9 train "$tmp/nan9" --steps 24) > "$tmp/nan9.log" 2>&1
rc=$?
(FRAMECHAIN_TEST_NAN_AT_STEP=5 train "$tmp/nan5" --steps 24) > "$tmp/nan5.log" 2>&1
rc2=$?
expect nan_names_checkpoint_before_the_step_before $(( rc == 0 || rc2 == 0 ||
    $(grep -c "the last good checkpoint, $tmp/nan9/ckpt-00000004.safetensors, is kept (the newer one holds" "$tmp/nan9.log") != 1 ||
    $(grep -c "the only checkpoint holds the weights of the step just before" "$tmp/nan5.log") != 1 )) \
    "status $rc and $rc2: $(grep -m1 -o 'the loss is.*' "$tmp/nan9.log" | cut -c1-140); $(grep -m1 -o 'the loss is.*' "$tmp/nan5.log" | cut -c1-140)"
(FRAMECHAIN_TEST_NAN_AT_STEP=2 train "$tmp/nan0" --steps 24) > "$tmp/nan0.log" 2>&1
rc=$?
expect nan_without_checkpoint_says_so $(( rc == 0 || $(grep -c "no checkpoint was written before it" "$tmp/nan0.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'the loss is.*' "$tmp/nan0.log" | cut -c1-120)"
# a run on a dataset, in a folder whose name a shell must quote: the command as printed, pasted into a
# shell, goes on on the same data
(FRAMECHAIN_TEST_NAN_AT_STEP=10 train "$tmp/it's nan" --data "$tmp/d2" --steps 24) > "$tmp/nand.log" 2>&1
rc=$?
cmd=$(grep -o "framechain train --from .*" "$tmp/nand.log")
pasted=${cmd#framechain }
pasted=${pasted/NEW_RUN/\"\$tmp/nan fork\"}
(eval "exec \"\$FC\" --threads 1 $pasted --steps 16" < /dev/null) > "$tmp/nand_fork.log" 2>&1
rc2=$?
expect nan_fork_command_keeps_the_data $(( rc == 0 || rc2 != 0 ||
    $(grep -c "^forking $tmp/nan fork from $tmp/it's nan/ckpt-00000008.safetensors .*; changed: steps 24 -> 16, lr 0.001 -> 0.0005$" "$tmp/nand_fork.log") != 1 )) \
    "status $rc: '${cmd:-no command named}'; pasted into a shell: status $rc2, $(grep -m1 '^forking\|framechain:' "$tmp/nand_fork.log" | cut -c1-250)"
exit 0
