#!/usr/bin/env bash
# Damaged run folders: checkpoints flipped, cut short, edited behind CRCs that check (NaN, infinite
# and missing tensors, other configs, older builds' files), metrics.jsonl cut or unterminated, FIFOs in
# place of files, stale temporary files: each refused or set aside in one line naming the file, never a
# run started again from step 0. A short run (4 steps, a checkpoint every 2) is the material.
set -u
. "$(dirname "$0")/../lib.sh"
# The Python with numpy (the checks that read checkpoints need it): Debian's, else the one on PATH.
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy' 2> /dev/null && echo $p && break; done)}
PYTHON=${PYTHON:-python3}
TINY=configs/tiny/starter.conf
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }

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
for k in m_nan code_nan v_neg mabs_neg_last w_nan_last; do
    fresh "$k"
    case $k in
        m_nan) edit="T=[[a,d,s,struct.pack('<f',float('nan'))*(len(by)//4) if a=='optim.patch_embed.weight.m' else by] for a,d,s,by in T]"
            want="tensor optim.patch_embed.weight.m holds NaN values: the optimizer state is unusable; renamed to" ;;
        code_nan) edit="T=[[a,d,s,struct.pack('<256f',*[float('nan')]*256) if a=='optim.code_signed' else by] for a,d,s,by in T]"
            want="tensor optim.code_signed holds NaN values: the optimizer state is unusable; renamed to" ;;
        v_neg) edit="T=[[a,d,s,struct.pack('<f',-1.0)+by[4:] if a=='optim.patch_embed.bias.v' else by] for a,d,s,by in T]"
            want="tensor optim.patch_embed.bias.v holds negative values: the optimizer state is unusable; renamed to" ;;
        # a block maximum of the first moments, the last value of its tensor (read last: a check that
        # stopped a value short passed it), then the weights' last value
        mabs_neg_last) edit="T=[[a,d,s,by[:-4]+struct.pack('<f',-1.0) if a=='optim.t_embed.mlp.0.weight.m_absmax' else by] for a,d,s,by in T]"
            want="tensor optim.t_embed.mlp.0.weight.m_absmax holds negative values: the optimizer state is unusable; renamed to" ;;
        w_nan_last) edit="T=[[a,d,s,by[:-4]+struct.pack('<f',float('nan')) if a=='model.final.linear.bias' else by] for a,d,s,by in T]"
            want="tensor model.final.linear.bias holds NaN values: the weights are unusable; renamed to" ;;
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

# 8-bit moments in blocks of another size than this build's (a build with another ADAM8_BLOCK): their
# block maxima would be read as the wrong blocks' (a tensor within one block either way loads shape for
# shape): refused by name, not set aside
fresh blocks
stedit "$D/blocks/$ck4" crc "T=[[a,d,s,struct.pack('<i',128) if a=='optim.block_size' else by] for a,d,s,by in T]"
short "$D/blocks" > "$tmp/blocks.log" 2>&1
rc=$?
expect other_block_size_refused $(( rc != 1 || $(grep -c "$ck4: 8-bit blocks of 128; this framechain uses 256" "$tmp/blocks.log") != 1 ||
    $(ls "$D/blocks" | grep -c unusable) != 0 )) \
    "status $rc, $(grep -m1 -o "8-bit blocks.*" "$tmp/blocks.log" | cut -c1-100); $(ls "$D/blocks" | grep -c unusable) set aside"

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

# ---- pruning: what it keeps and when ----
# a copy of ckpt-2 under step 3's name between the real ones (keep_checkpoints 3): pruning counted it as
# whole and deleted the real ckpt-2, the fallback a resume would need; now it is set aside, as a
# resume sets aside a file whose metadata names another step
short "$tmp/pr_named" --set keep_checkpoints=3 > /dev/null 2>&1
cp "$tmp/pr_named/ckpt-00000002.safetensors" "$tmp/pr_named/ckpt-00000003.safetensors"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/pr_named" --extend --steps 6 > "$tmp/pr_named.log" 2>&1
rc=$?
kept=$(ls "$tmp/pr_named" | grep -E '^ckpt-[0-9]+\.safetensors$' | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$kept" = "ckpt-00000002.safetensors ckpt-00000004.safetensors ckpt-00000006.safetensors " ] &&
    [ -f "$tmp/pr_named/ckpt-00000003.safetensors.unusable" ] &&
    grep -q "ckpt-00000003.safetensors: its metadata says step 2" "$tmp/pr_named.log"
expect prune_sets_aside_other_step $? "status $rc; kept: $kept; $(grep -m1 'metadata says' "$tmp/pr_named.log")"
# a folder holding more whole checkpoints than keep_checkpoints (each kill -9 between a checkpoint's
# rename and the prune after it left one more: the folder grew by one a kill, without end) is pruned
# when the run resumes, before its first step: here a run of 6 kept, resumed with keep_checkpoints 2
# and stopped at its first step by a NaN loss, before any checkpoint of its own
short "$tmp/pr_extra" --set steps=6 --set checkpoint_every=1 --set keep_checkpoints=6 > /dev/null 2>&1
(FRAMECHAIN_TEST_NAN_AT_STEP=7 exec "$FC" --threads 1 train --config "$TINY" --run "$tmp/pr_extra" --extend --steps 8 \
    --set keep_checkpoints=2) > "$tmp/pr_extra.log" 2>&1
rc=$?
kept=$(ls "$tmp/pr_extra" | grep -E '^ckpt-[0-9]+\.safetensors$' | tr '\n' ' ')
[ $rc -ne 0 ] && grep -q "resuming .* from step 6" "$tmp/pr_extra.log" &&
    [ "$kept" = "ckpt-00000005.safetensors ckpt-00000006.safetensors " ]
expect prune_extra_at_resume $? "status $rc; kept: $kept; $(tail -1 "$tmp/pr_extra.log" | cut -c1-120)"
# a folder under an old checkpoint's name cannot be deleted: it is set aside once, as a resume sets aside
# a newer one (it was warned of at every checkpoint, the run's whole life long)
short "$tmp/pr_dir" --set checkpoint_every=1 --set keep_checkpoints=2 > /dev/null 2>&1
mkdir "$tmp/pr_dir/ckpt-00000001.safetensors"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/pr_dir" --extend --steps 8 --set checkpoint_every=1 \
    --set keep_checkpoints=2 > "$tmp/pr_dir.log" 2>&1
rc=$?
kept=$(ls "$tmp/pr_dir" | grep -E '^ckpt-[0-9]+\.safetensors' | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$kept" = "ckpt-00000001.safetensors.unusable ckpt-00000007.safetensors ckpt-00000008.safetensors " ] &&
    [ -d "$tmp/pr_dir/ckpt-00000001.safetensors.unusable" ] && [ "$(grep -c warning "$tmp/pr_dir.log")" = 1 ] &&
    grep -q "ckpt-00000001.safetensors: a folder under an old checkpoint's name, not a checkpoint; renamed to .*unusable$" \
        "$tmp/pr_dir.log"
expect prune_sets_aside_folder_once $? "status $rc; left: $kept; $(grep -c warning "$tmp/pr_dir.log") warnings: $(grep -m1 warning "$tmp/pr_dir.log" | cut -c1-160)"

# ---- another user's damaged newest checkpoint in a folder with the sticky bit (as /tmp has): this user
# may not rename it aside, and the run would write its step's checkpoint over it. The run stops before
# its first step, in one line naming it (it warned, trained the steps to it again and failed writing
# that checkpoint, at every rerun). And --extend onto a run whose one checkpoint this user cannot read
# names that file (it said "no whole checkpoint to extend"). As nobody when the suite runs as root. ----
if [ "$(id -u)" != 0 ]; then
    echo "SKIP damaged_not_renamable_stops: acting as another user needs root"
else
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    other=$(mktemp -d)  # its own folder: the other user must reach it, the binary and the config
    chmod 711 "$other"
    cp "$FC" "$other/fc" && cp "$TINY" "$other/tiny.conf" && chmod 755 "$other/fc" && chmod 644 "$other/tiny.conf"
    cp -r "$D/ref" "$other/run"
    size=$(stat -c %s "$other/run/$ck4")
    printf JUNKJUNK | dd of="$other/run/$ck4" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
    chmod 1777 "$other/run" && chown 65534 "$other/run/metrics.jsonl" "$other/run/.lock"
    before=$(cd "$other/run" && ls -A | tr '\n' ' ' && md5sum metrics.jsonl $ck2 $ck4 | cut -c1-32 | tr '\n' ' ')
    if ! as_nobody "$other/fc" --version > /dev/null 2>&1; then
        echo "SKIP damaged_not_renamable_stops: the other user cannot run a copy of $FC"
    else
        as_nobody "$other/fc" --threads 1 train --config "$other/tiny.conf" --run "$other/run" --set steps=4 \
            --set checkpoint_every=2 --set warmup_steps=1 > "$other/out" 2> "$other/err"
        rc=$?
        after=$(cd "$other/run" && ls -A | tr '\n' ' ' && md5sum metrics.jsonl $ck2 $ck4 | cut -c1-32 | tr '\n' ' ')
        expect damaged_not_renamable_stops $(( rc != 1 || $(wc -l < "$other/err") != 1 ||
            $(grep -c "$ck4: .*cannot rename it aside: Operation not permitted, and the run would fail writing" "$other/err") != 1 ||
            $(grep -c resuming "$other/out") != 0 )) \
            "status $rc: $(head -c 300 "$other/err"); $(grep -c resuming "$other/out") resuming lines; the folder as it was: $([ "$before" = "$after" ] && echo yes || echo "no: $after")"
        [ "$before" = "$after" ]
        expect damaged_not_renamable_folder_kept $? "before: $before; after: $after"
        # --extend onto an only checkpoint that cannot be read: that file named, not damage
        mkdir -m 777 "$other/ext" && cp "$D/ref/$ck2" "$D/ref/metrics.jsonl" "$other/ext/" && chmod 666 "$other/ext/metrics.jsonl"
        chmod 000 "$other/ext/$ck2"
        as_nobody "$other/fc" --threads 1 train --config "$other/tiny.conf" --run "$other/ext" --set steps=4 \
            --set checkpoint_every=2 --set warmup_steps=1 --extend --steps 6 > "$other/ext.out" 2> "$other/ext.err"
        rc=$?
        expect extend_unreadable_checkpoint_named $(( rc != 1 || $(wc -l < "$other/ext.err") != 1 ||
            $(grep -c "$ck2: cannot open: Permission denied; not set aside" "$other/ext.err") != 1 )) \
            "status $rc: $(head -c 300 "$other/ext.err")"
    fi
    rm -rf "$other"
fi
