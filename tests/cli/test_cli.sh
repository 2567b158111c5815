#!/usr/bin/env bash
# The command line: help, version, and one clear line with a non-zero exit for every bad input (the
# ends of the numeric ranges: the end taken, the next value refused); a FIFO named like a checkpoint, a
# shard or dataset.json is refused or skipped, never waited on; generate's default seed and frame rate;
# inspect of a checkpoint: its step, and status 1 when a CRC fails.
set -u
FC=${1:-./framechain}
fc_abs=$(cd "$(dirname "$FC")" && pwd)/$(basename "$FC")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME STATUS PATTERN CMD...: exit status STATUS, and PATTERN in the output
# (for failures: exactly one line on stderr, naming what is wrong).
expect() {
    local name=$1 want=$2 pattern=$3
    shift 3
    "$@" > "$tmp/stdout" 2> "$tmp/stderr"
    local rc=$?
    local lines
    lines=$(wc -l < "$tmp/stderr")
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL cli_$name: exit status $rc, expected $want ($(head -1 "$tmp/stderr"))"
    elif ! cat "$tmp/stdout" "$tmp/stderr" | grep -q -- "$pattern"; then
        echo "FAIL cli_$name: output lacks '$pattern'"
    elif [ "$want" -ne 0 ] && [ "$lines" -ne 1 ]; then
        echo "FAIL cli_$name: $lines lines on stderr, expected one"
    else
        echo "PASS cli_$name: status $rc, $(head -c 100 "$tmp/stderr" | head -1)"
    fi
}

printf 'frame_size = 32\nwidht = 64\n' > "$tmp/typo.conf"
printf 'role = starter\nframe_size = 30\npatch = 4\n' > "$tmp/odd.conf"
printf '# nothing yet\n\n' > "$tmp/empty.conf"
printf 'frame_size = 32\nwidth = 64\n' > "$tmp/norole.conf"
printf 'role = starter\nwidth = 64\n# later\nwidth = 96\n' > "$tmp/twice.conf"
printf 'width = sixty\n' > "$tmp/nan.conf"
printf 'plan = anchor:0 context:1\n' > "$tmp/notarget.conf"

# Every shipped config reads and plans; a ROLE.conf is that role's.
for conf in configs/*.conf configs/*/*.conf; do
    name=${conf#configs/}
    name=${name%.conf}
    expect "config_${name//\//_}" 0 "^parameters " "$FC" inspect --config "$conf"
    role=${conf##*/}
    role=${role%.conf}
    case $role in starter|extrapolate|interpolate)
        expect "config_${name//\//_}_role" 0 "^role *= $role " "$FC" inspect --config "$conf" ;;
    esac
done

expect help 0 "usage: framechain" "$FC" --help
expect version 0 "cpu (fp32" "$FC" --version
# the global options around --version are checked as before a command; nothing else may follow it
expect version_bad_device 2 "--device tpu: unknown device" "$FC" --device tpu --version
expect version_bad_threads_after 2 "--threads 0: expected a whole number" "$FC" --version --threads 0
expect version_argument_after 2 "unexpected argument 'bogus' after --version" "$FC" --version bogus
expect version_threads_after 0 "cpu (fp32" "$FC" --version --threads 1
expect version_help_after 0 "usage: framechain" "$FC" --version --help
# The commit the build was made from (the Makefile's stamp, $BUILD/commit.txt), named by --version
commit=$(cat "${BUILD:-build}/commit.txt" 2> /dev/null)
expect version_names_commit 0 "^framechain [0-9.]* (commit ${commit:-no stamp in ${BUILD:-build}})\$" "$FC" --version
# ... which the Makefile finds in git, in the commit.txt that `git archive` fills in, or calls unknown
# (make info in a folder of the Makefile and commit.txt alone: no sources, no git checkout of its own)
makefile_commit() {  # NAME COMMIT.TXT-CONTENT EXPECTED
    mkdir -p "$tmp/mk-$1/src/base"
    cp Makefile "$tmp/mk-$1/"
    printf '%s\n' "$2" > "$tmp/mk-$1/src/base/commit.txt"
    local got
    got=$(cd "$tmp/mk-$1" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u BUILD -u GIT_DIR -u GIT_WORK_TREE \
          -u GIT_INDEX_FILE NO_CUDA=1 NO_MPI=1 make -s info 2>&1 |
          grep -o 'commit [^ ]*')
    [ "$got" = "commit $3" ] && echo "PASS cli_makefile_commit_$1: $got" ||
        echo "FAIL cli_makefile_commit_$1: make info says '$got', expected 'commit $3'"
}
makefile_commit archive 0123abc 0123abc
makefile_commit placeholder '$Format:%h$' unknown
makefile_commit junk '0123abc; rm -rf /' unknown
if [ -z "$(git rev-parse --show-prefix 2> /dev/null || echo not-a-checkout)" ] &&
   git cat-file -e HEAD:src/base/commit.txt 2> /dev/null; then  # git archive fills in HEAD's commit
    makefile_commit git_archive "$(git archive HEAD src/base/commit.txt | tar -xO)" "$(git rev-parse --short HEAD)"
    # in a checkout of its own the build took git's commit (a tag naming it or not), "+changes" or not
    head=$(git rev-parse --short HEAD)
    case $commit in "$head" | "$head+changes") true ;; *) false ;; esac
    expect_status=$?
    [ $expect_status = 0 ] && echo "PASS cli_commit_from_git: $commit" ||
        echo "FAIL cli_commit_from_git: the build says '$commit', git's HEAD is $head (rebuild after a commit: make)"
fi
expect no_command 2 "no command given" "$FC"
expect unknown_command 2 "unknown command 'trian'" "$FC" trian
expect unknown_global_flag 2 "unknown option '--frobnicate'" "$FC" --frobnicate train
expect bad_threads 2 "--threads zero" "$FC" --threads zero --version
expect unknown_device 2 "--device tpu" "$FC" --device tpu inspect --config configs/tiny/starter.conf
# a seed is a whole number (1.5 was taken as 1)
expect seed_fraction 2 "--seed 1.5: expected a whole number" "$FC" generate --starter a --extrapolate b --interpolate c \
    --first-frame shapes:1 --frames 8 --out "$tmp/never.mp4" --seed 1.5
# --steps within the steps key's range (every checkpoint's config is read back against it); integer
# bounds compared as integers; a beta2 that rounds to 1 in float (a NaN bias correction) refused
expect steps_past_key_range 2 "--steps 2100000000: expected a whole number from 1 to 2000000000" timeout 20 "$FC" train \
    --config configs/tiny/starter.conf --run "$tmp/never" --steps 2100000000  # (a regression would train for ever)
expect seed_past_range 2 "9000000000000000001 is out of range" "$FC" inspect --config configs/tiny/starter.conf \
    --set seed=9000000000000000001
expect beta2_rounding_to_one 2 "0.99999999 is out of range \[0, 0.9999999\]" "$FC" inspect \
    --config configs/tiny/starter.conf --set beta2=0.99999999
expect steps_cut_warmup_said 0 "^--steps 2: warmup_steps 10 cut to 2" "$FC" --threads 1 train --config configs/tiny/starter.conf \
    --run "$tmp/cutwarm" --steps 2 --set warmup_steps=10
# a config saved with a UTF-8 byte order mark (as Notepad saves it) reads as without one
printf '\xef\xbb\xbf' > "$tmp/bom.conf"
cat configs/tiny/starter.conf >> "$tmp/bom.conf"
expect config_with_bom 0 "^role *= starter" "$FC" inspect --config "$tmp/bom.conf"
# options that shape a config's plan are refused beside a checkpoint or a folder, not ignored
expect inspect_file_with_set 2 "--set goes with --config" "$FC" inspect "$tmp/bom.conf" --set width=8
# a step whose token count passes an int (37 x 7 x 4096^2) is refused, not planned from a wrapped count
expect step_too_large 1 "over the 2e9 one step may hold" "$FC" inspect --config configs/tiny/starter.conf --set frame_size=4096 \
    --set patch=1 --set width=4 --set heads=1 --set mlp_ratio=1 --set batch_size=37
# the disk a run folder needs: keep_checkpoints checkpoints and the one being written beside them
expect inspect_config_disk 0 "^disk  *a checkpoint is 2.30 MiB; the run folder holds up to 6 of them (keep_checkpoints 5 and the one being written): 13.81 MiB$" \
    "$FC" inspect --config configs/tiny/starter.conf --set keep_checkpoints=5
# a run that writes fewer (150 steps, checkpoint_every 100: steps 100 and 150) holds those
expect inspect_config_disk_short_run 0 "^disk  *a checkpoint is 2.30 MiB; the run folder holds up to 2 of them (the 2 this run writes; keep_checkpoints 5): 4.60 MiB$" \
    "$FC" inspect --config configs/tiny/starter.conf --set keep_checkpoints=5 --set steps=150

# The CUDA backend is a library the program opens when a command needs it (src/backend/registry.c):
# a run on the CPU never loads the CUDA runtime or cuBLAS (glibc's LD_DEBUG lists what is loaded),
# and --device cuda opens it and answers with what CUDA says (no GPU here, or a GPU); on a machine
# without a driver it says so without opening it, so the test hook makes it open the library anyway.
if ! "$FC" --version | grep -q "has no CUDA backend"; then
    LD_DEBUG=files "$FC" --device cpu inspect --config configs/tiny/starter.conf > "$tmp/ld.log" 2>&1
    loaded=$(grep -cE "file=[^ ]*(libcudart|libcublas|libframechain_cuda)" "$tmp/ld.log")
    export FRAMECHAIN_TEST_ASSUME_NVIDIA_DRIVER=1
    # generate opens its device before it reads its options (here none: on a GPU it then stops at them)
    "$FC" --device cuda generate > "$tmp/cuda.log" 2>&1
    cuda_rc=$?
    LD_DEBUG=files "$FC" --device cuda generate 2>&1 | grep -cE "file=[^ ]*libcublas" > "$tmp/ld_cuda.n"
    # inspect and plot never run on the device: --device cuda leaves the library closed
    LD_DEBUG=files "$FC" --device cuda inspect --config configs/tiny/starter.conf > "$tmp/ld_inspect.log" 2>&1
    inspect_rc=$?
    unset FRAMECHAIN_TEST_ASSUME_NVIDIA_DRIVER
    inspect_loaded=$(grep -cE "file=[^ ]*(libcudart|libcublas|libframechain_cuda)" "$tmp/ld_inspect.log")
    if [ "$loaded" -eq 0 ] && [ "$(cat "$tmp/ld_cuda.n")" -gt 0 ] && ! grep -q "cannot load\|has no backend_" "$tmp/cuda.log" \
        && [ "$inspect_loaded" -eq 0 ] && [ $inspect_rc -eq 0 ] \
        && { grep -q -- "^framechain: --device cuda: " "$tmp/cuda.log" || grep -q "^framechain generate: " "$tmp/cuda.log"; }; then
        echo "PASS cli_cuda_library_on_demand: --device cpu loads none of the CUDA libraries, nor does --device cuda inspect; --device cuda generate opens them (exit $cuda_rc: $(head -c 90 "$tmp/cuda.log" | head -1))"
    else
        echo "FAIL cli_cuda_library_on_demand: CUDA libraries loaded by --device cpu: $loaded; by --device cuda generate: $(cat "$tmp/ld_cuda.n"); by --device cuda inspect: $inspect_loaded (status $inspect_rc); --device cuda said: $(head -1 "$tmp/cuda.log")"
    fi
fi
# without a driver --device cuda says so (CUDA's own answer is that the driver is too old)
if ! "$FC" --version | grep -q "has no CUDA backend" && [ ! -e /proc/driver/nvidia/version ] && [ ! -e /dev/nvidiactl ] &&
    [ ! -e /dev/dxg ]; then
    expect cuda_without_driver 1 "^framechain: --device cuda: no NVIDIA driver on this machine" "$FC" --device cuda \
        generate --first-frame shapes:1
    # commands that never run on the device take --device cuda on such a machine too
    expect cuda_inspect_without_driver 0 "^role *= starter" "$FC" --device cuda inspect --config configs/tiny/starter.conf
    expect cuda_prepare_without_driver 0 "^prepare: .*: 1 clip of 8 frames" "$FC" --device cuda prepare --input shapes:1:8 \
        --out "$tmp/cuda_prepare" --size 16 --clip-frames 8
    # prepare --vae runs the autoencoder on the device, in either spelling of the option
    expect cuda_prepare_vae_without_driver 1 "^framechain: --device cuda: no NVIDIA driver" "$FC" --device cuda prepare \
        --input shapes:1:8 --out "$tmp/cuda_prepare_vae" --size 16 --clip-frames 8 --vae="$tmp/no-such-vae.safetensors"
    expect cuda_plot_without_driver 1 "^framechain: $tmp/no-such-run: no such run folder" "$FC" --device cuda plot \
        "$tmp/no-such-run" --out "$tmp/cuda_plot.png"
    # a driver where the CUDA backend cannot be used (here the test hook's driver, which the library finds
    # too old or missing): --device auto says so and runs on the CPU, not silently
    FRAMECHAIN_TEST_ASSUME_NVIDIA_DRIVER=1 "$FC" train --config configs/tiny/starter.conf --run "$tmp/auto_run" --steps 1 \
        > "$tmp/auto.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c "^framechain: warning: --device auto: this machine has an NVIDIA driver, but the CUDA backend cannot be used (.*): running on the CPU" "$tmp/auto.log")" -eq 1 ]; then
        echo "PASS cli_cuda_auto_fallback_said: $(grep -m1 'device auto' "$tmp/auto.log" | cut -c1-200)"
    else
        echo "FAIL cli_cuda_auto_fallback_said: status $rc: $(grep -m1 -E 'device auto|^framechain' "$tmp/auto.log" | cut -c1-200)"
    fi
fi
for cmd in prepare train generate inspect; do
    expect "${cmd}_help" 0 "usage: framechain $cmd" "$FC" "$cmd" --help
done
# a command's --help needs no device; a device it does not know is framechain's option, with or without a
# command (but a command's --help wins over it: help_after_unknown_device)
expect help_without_device 0 "usage: framechain inspect" "$FC" --device cuda inspect --help
# an unknown command is a bad command line, said before a device is opened (the CUDA library not loaded)
FRAMECHAIN_TEST_ASSUME_NVIDIA_DRIVER=1 LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld_bogus" "$FC" --device cuda bogus \
    > /dev/null 2> "$tmp/bogus.err"
rc=$?
loaded=$(cat "$tmp"/ld_bogus.* 2> /dev/null | grep -cE "file=[^ ]*(libcudart|libcublas|libframechain_cuda)")
if [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/bogus.err")" -eq 1 ] && grep -q "^framechain: unknown command 'bogus'" "$tmp/bogus.err" &&
    [ "$loaded" -eq 0 ]; then
    echo "PASS cli_unknown_command_before_device: status 2, $(cat "$tmp/bogus.err")"
else
    echo "FAIL cli_unknown_command_before_device: status $rc, CUDA libraries loaded: $loaded, $(head -1 "$tmp/bogus.err")"
fi
expect unknown_device_no_command 2 "--device tpu: unknown device.*(see framechain --help)" "$FC" --device tpu
expect train_help_lists_keys 0 "t_logit_std" "$FC" train --help
expect train_unknown_flag 2 "unknown option '--lr'" "$FC" train --lr 3
expect train_missing_value 2 "option --config needs a value" "$FC" train --config
expect train_missing_config 2 "missing --config" "$FC" train --data d --run r
expect config_unreadable 1 "nope.conf: cannot open config" "$FC" train --config "$tmp/nope.conf" --data d --run r
expect config_unknown_key 1 "typo.conf:2: unknown key 'widht'" "$FC" train --config "$tmp/typo.conf" --data d --run r
expect config_not_a_number 1 "nan.conf:1: width = sixty: not an integer" "$FC" inspect --config "$tmp/nan.conf"
expect config_bad_combination 1 "frame_size 30 is not a multiple of patch 4" "$FC" inspect --config "$tmp/odd.conf"
expect config_plan_without_target 1 "the plan has no target slot" "$FC" inspect --config "$tmp/notarget.conf"
# a cosine schedule that would end inside the warmup (the rate dropped from its peak to its floor the
# step after the warmup)
expect config_schedule_end_before_warmup 1 "schedule_end 5 is before the end of warmup_steps 10" "$FC" inspect \
    --config configs/tiny/starter.conf --set warmup_steps=10 --set schedule_end=5
expect config_empty 1 "empty.conf: sets no key" "$FC" train --config "$tmp/empty.conf" --run "$tmp/r"
expect config_without_role 1 "norole.conf: has no role = starter | extrapolate | interpolate" "$FC" inspect \
    --config "$tmp/norole.conf"
expect config_key_twice 1 "twice.conf:4: width is set a second time (first on line 2)" "$FC" inspect \
    --config "$tmp/twice.conf"
expect config_is_a_folder 1 "configs: not a config file (a folder)" "$FC" train --config configs --run "$tmp/r"
expect empty_value 2 "option --out needs a value (it was given an empty one)" "$FC" generate --starter a \
    --extrapolate b --interpolate c --first-frame x.png --frames 9 --out ""
long=$(printf 'd%.0s' $(seq 4000))
expect path_too_long 2 "option --run: a value of 4000 characters" "$FC" train --config configs/tiny/starter.conf \
    --run "$long"
# a --set's key or value is a bad command line (status 2, the command named), with or without --from
# below; a typo's nearest key is named (a config file's bad line stays a runtime error, status 1)
expect set_unknown_key 2 "^framechain inspect: --set depht=3: unknown key 'depht' (did you mean 'depth'?" "$FC" inspect \
    --config configs/tiny/starter.conf --set depht=3
expect set_unknown_key_far 2 "unknown key 'bogus' (framechain train --help lists the keys)" "$FC" inspect \
    --config configs/tiny/starter.conf --set bogus=3
# the help named once: not also "(see framechain inspect --help)" after it
expect set_unknown_key_help_once 2 "lists the keys)$" "$FC" inspect --config configs/tiny/starter.conf --set bogus=3
# an empty value is refused, a path key's too (it was taken as none: `--set exclude=$UNSET` trained on every clip)
expect set_empty_path 2 "--set exclude=: has no value (exclude=none: no file)" "$FC" inspect \
    --config configs/tiny/starter.conf --set exclude=
expect set_empty_number 2 "--set lr= : has no value" "$FC" inspect --config configs/tiny/starter.conf --set "lr= "
# a number past what a double holds is out of range, not "not a number"
expect set_overflow 2 "--set lr=1e400: 1e400 is out of range \[0, 1\]" "$FC" inspect \
    --config configs/tiny/starter.conf --set lr=1e400
# keys the command line sets another way
expect set_dataset 2 "--set dataset=shards: the data is chosen by --data DIR" "$FC" train \
    --config configs/tiny/starter.conf --run "$tmp/never" --set dataset=shards
# --steps stands over --set steps, said; its cut of the warmup as with --steps alone (the --set's 6,
# under the config's warmup of 10, would have been refused before --steps was read)
expect steps_over_set_steps 0 "^--steps 2 stands over --set steps=6" "$FC" --threads 1 train \
    --config configs/tiny/starter.conf --run "$tmp/over" --steps 2 --set steps=6 --set warmup_steps=10 \
    --set checkpoint_every=100000 --set sample_every=0
[ -f "$tmp/over/ckpt-00000002.safetensors" ] && echo "PASS cli_steps_over_set_steps_trained: step 2 written" ||
    echo "FAIL cli_steps_over_set_steps_trained: $(ls "$tmp/over" 2>&1 | tr '\n' ' ')"
# --vram-budget's value is a bad command line before any file is read: not hidden behind the refusal
# of an --extend to the run's own end (status 1) that reading the run would give
expect vram_budget_before_the_run 2 "^framechain train: --vram-budget abc" "$FC" --threads 1 train \
    --config configs/tiny/starter.conf --run "$tmp/over" --extend --steps 2 --vram-budget abc
# the config is checked once --steps is in: a warmup past the file's steps (1000) but cut to --steps
# is no refusal, in a fork neither (its parent's steps, 2); a bad --set steps is a bad command line
# even where --steps stands over it, and makes no run folder
expect steps_before_the_check 0 "^--steps 2: warmup_steps 5000 cut to 2" "$FC" --threads 1 train \
    --config configs/tiny/starter.conf --run "$tmp/longwarm" --steps 2 --set warmup_steps=5000 \
    --set checkpoint_every=100000 --set sample_every=0
expect steps_before_the_check_fork 0 "^--steps 3: warmup_steps 5 cut to 3" "$FC" --threads 1 train \
    --from "$tmp/over/ckpt-00000002.safetensors" --run "$tmp/longwarm_fork" --steps 3 --set warmup_steps=5
# those lines wait until the run starts: a refusal of the data is still its one line, alone
mkdir -p "$tmp/notadataset"
"$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/nodata" --data "$tmp/notadataset" --steps 2 \
    --set steps=6 > "$tmp/nodata.out" 2> "$tmp/nodata.err"
rc=$?
[ $rc -eq 1 ] && [ ! -s "$tmp/nodata.out" ] && [ "$(wc -l < "$tmp/nodata.err")" = 1 ] &&
    echo "PASS cli_steps_lines_after_refusals: status 1, $(cat "$tmp/nodata.err")" ||
    echo "FAIL cli_steps_lines_after_refusals: status $rc, stdout: $(tr '\n' '|' < "$tmp/nodata.out") stderr: $(tr '\n' '|' < "$tmp/nodata.err")"
expect bad_set_steps_under_steps 2 "--set steps=abc: not an integer" "$FC" --threads 1 train \
    --config configs/tiny/starter.conf --run "$tmp/badsteps" --steps 2 --set steps=abc
[ ! -e "$tmp/badsteps" ] && echo "PASS cli_bad_set_steps_no_folder: no run folder" ||
    echo "FAIL cli_bad_set_steps_no_folder: $(ls -A "$tmp/badsteps" | tr '\n' ' ')"
# the checkpoint names the build that wrote it, for people (inspect); --version's first line
build_name=$("$FC" --version | head -1 | sed 's/[].[*^$\\]/\\&/g')  # as a grep pattern
expect inspect_written_by 0 "^written_by *$build_name\$" "$FC" inspect "$tmp/over/ckpt-00000002.safetensors"
# a checkpoint given as a config is named as one (it was read whole, then "line longer than 4096"),
# and a file far larger than any config is refused before it is read
expect config_is_a_checkpoint 1 "ckpt-00000002.safetensors: a safetensors file (a checkpoint?), not a config" "$FC" \
    inspect --config "$tmp/over/ckpt-00000002.safetensors"
yes '# a comment' | head -c 2000000 > "$tmp/huge.conf"
expect config_too_large 1 "huge.conf: 2000000 bytes, too large for a config" "$FC" train --config "$tmp/huge.conf" \
    --run "$tmp/r"
[ -e "$tmp/never" ] && echo "FAIL cli_set_refusals_write_nothing: $tmp/never exists" ||
    echo "PASS cli_set_refusals_write_nothing: no run folder"
# too far for a typo, but the one key it begins with (or that begins with it) is named; several: none
expect set_unknown_key_prefix 2 "unknown key 'lrate' (did you mean 'lr'?" "$FC" inspect \
    --config configs/tiny/starter.conf --set lrate=1
expect set_unknown_key_prefix_of 2 "unknown key 'warmup' (did you mean 'warmup_steps'?" "$FC" inspect \
    --config configs/tiny/starter.conf --set warmup=1
expect set_unknown_key_ambiguous 2 "unknown key 'sample' (framechain train --help lists the keys)" "$FC" inspect \
    --config configs/tiny/starter.conf --set sample=1
expect set_not_a_number 2 "^framechain train: --set lr==1: not a number" "$FC" train --config configs/tiny/starter.conf \
    --run "$tmp/never" --set lr==1
expect set_without_value 2 "^framechain train: --set lr: expected KEY=VALUE" "$FC" train --config configs/tiny/starter.conf \
    --run "$tmp/never" --set lr
expect config_unknown_key_hint 1 "typo.conf:2: unknown key 'widht' (did you mean 'width'?" "$FC" inspect \
    --config "$tmp/typo.conf"
# one rank's plan of N: the 24 GB preset at a global batch of 8 on 8 GPUs, ZeRO-1's parts of the state
expect inspect_ranks 0 "optimizer         230.77 MiB" "$FC" inspect --config configs/starter.conf --set batch_size=8 \
    --ranks 8
# the host memory of the 8 ranks on one machine: rank 0's plan and 7 others, which stage only their
# part of the state (the host total is rank 0's)
"$FC" inspect --config configs/starter.conf --set batch_size=8 --ranks 8 > "$tmp/ranks8.txt" 2>&1
host0=$(sed -n 's/^  host total *\([0-9.]*\) GiB$/\1/p' "$tmp/ranks8.txt")
line=$(grep '^host memory of 8 ranks' "$tmp/ranks8.txt")
all=$(echo "$line" | sed -n 's/.*, \([0-9.]*\) GiB on 8 GPUs.*/\1/p')
other=$(echo "$line" | sed -n 's/.*each other rank holds [0-9.]* and \([0-9.]*\) GiB.*/\1/p')
if awk -v h="${host0:-0}" -v a="${all:-0}" -v o="${other:--1}" \
    'BEGIN { d = a - (h + 7 * o); exit !(h > 0 && o >= 0 && o < h && d * d < 0.05 * 0.05) }'; then
    echo "PASS cli_inspect_ranks_machine_memory: rank 0's host total $host0 GiB; $line"
else
    echo "FAIL cli_inspect_ranks_machine_memory: rank 0's host total ${host0:-?} GiB; ${line:-no line}"
fi
# collectives = mpi: GPU ranks sum their gradients through a host copy of them, n_params fp32 values a
# rank, in the host lines (it was in no plan: 3.55 GiB a rank of the preset)
"$FC" inspect --config configs/starter.conf --set batch_size=2 --ranks 2 > "$tmp/coll_auto.txt" 2>&1
"$FC" inspect --config configs/starter.conf --set batch_size=2 --ranks 2 --set collectives=mpi > "$tmp/coll_mpi.txt" 2>&1
params=$(sed -n 's/^parameters *\([0-9]*\) in.*/\1/p' "$tmp/coll_mpi.txt")
grads=$(sed -n 's/^  MPI gradients *\([0-9.]*\) GiB$/\1/p' "$tmp/coll_mpi.txt")
hosts=$(sed -n 's/^  host total *\([0-9.]*\) GiB$/\1/p' "$tmp/coll_auto.txt" "$tmp/coll_mpi.txt" | tr '\n' ' ')
if awk -v p="${params:-0}" -v g="${grads:-0}" -v h="$hosts" 'BEGIN { split(h, x, " "); want = 4 * p / 1073741824
        exit !(p > 0 && (g - want) ^ 2 < 0.01 ^ 2 && (x[2] - x[1] - want) ^ 2 < 0.02 ^ 2) }' &&
    ! grep -q 'MPI gradients' "$tmp/coll_auto.txt"; then
    echo "PASS cli_inspect_ranks_mpi_gradients_counted: $params parameters, MPI gradients $grads GiB; host totals (auto, mpi) $hosts GiB"
else
    echo "FAIL cli_inspect_ranks_mpi_gradients_counted: $params parameters, MPI gradients ${grads:-none} GiB; host totals (auto, mpi) $hosts GiB"
fi
# 64 GPUs of one window each: train builds each rank's model for its 1 window, so the plan is one rank's;
# the global batch of 64 is more than one step holds, and a refusal of it would be wrong
expect inspect_ranks_global_batch_too_large_for_one 0 "tokens per step and rank     1 x 7 slots" "$FC" inspect \
    --config configs/starter.conf --set batch_size=64 --ranks 64
expect inspect_ranks_uneven 2 "batch_size = 1 is not a multiple of it" "$FC" inspect --config configs/starter.conf \
    --ranks 2
expect set_out_of_range 2 "depth=0: 0 is out of range" "$FC" inspect --config configs/tiny/starter.conf --set depth=0
expect set_applies 0 "depth *= 5" "$FC" inspect --config configs/tiny/starter.conf --set depth=5
# A repeatable option takes up to 1024 values (a shell loop of --input FILE); one more is refused
many=(); for i in $(seq 1024); do many+=(--set depth=3); done
expect option_1024_values 0 "depth *= 3" "$FC" inspect --config configs/tiny/starter.conf "${many[@]}"
expect option_too_many_values 2 "option --set given more than 1024 times" "$FC" inspect \
    --config configs/tiny/starter.conf "${many[@]}" --set depth=3
expect keep_blocks_auto 0 "keep_blocks = auto *[0-9]* of 16 blocks on --device cuda" "$FC" inspect \
    --config configs/starter.conf
# inspect runs on no device, but plans for the one the command line names: cuda-fp32's fp32 weights and
# activations (train's plan on the CUDA emulation: 23.06 GiB at keep_blocks = 6), not bf16's 22.54
expect inspect_plans_cuda_fp32 0 "memory plan (training on --device cuda-fp32, fp32, 952730816 parameters)" \
    "$FC" --device cuda-fp32 inspect --config configs/starter.conf --set keep_blocks=6
expect inspect_plans_cuda_fp32_total 0 "^  total *23.06 GiB" "$FC" --device cuda-fp32 inspect --config configs/starter.conf \
    --set keep_blocks=6
# without recompute every block keeps its activations: not "0 of 16 blocks"
expect keep_blocks_auto_without_recompute 0 "keep_blocks = auto *recompute = 0: every block keeps its activations, on any device" \
    "$FC" inspect --config configs/starter.conf --set recompute=0
# the host memory a GPU run holds beside the card's (the checkpoint's staging buffer and the previews' weights, windows and figure)
expect preset_host_memory 0 "host total *12.50 GiB" "$FC" inspect --config configs/starter.conf
# the presets in latent space (configs/latent/: 512x512 frames as 64x64x4 latents in 2x2 patches): the
# pixel presets' tokens, planned within 24 GiB on cuda, and a plan over it said so
for role in starter extrapolate interpolate; do
    expect "latent_preset_$role" 0 "fits the budget" "$FC" inspect --config "configs/latent/$role.conf"
done
expect latent_preset_tokens 0 "1 x 7 slots x 1024 tokens = 7168" "$FC" inspect --config configs/latent/starter.conf
expect latent_preset_over_budget 0 "EXCEEDS the budget" "$FC" inspect --config configs/latent/extrapolate.conf \
    --set batch_size=4 --set keep_blocks=0
expect keep_blocks_not_a_number 2 "keep_blocks=some: not an integer or auto" "$FC" inspect --config configs/starter.conf \
    --set keep_blocks=some
expect keep_blocks_over_depth 1 "keep_blocks 3 is more than depth 2" "$FC" inspect --config configs/tiny/starter.conf \
    --set recompute=1 --set keep_blocks=3
expect crop_pan_without_zoom 1 "crop_pan 0.5 needs crop_zoom > 1" "$FC" inspect --config configs/tiny/starter.conf \
    --set crop_pan=0.5
expect moved_reference_without_deltas 1 "delta_reference moved needs targets = deltas" "$FC" inspect \
    --config configs/tiny/starter.conf --set delta_reference=moved
expect anchor_snap_without_deltas 1 "anchor_snap 0.05 needs targets = deltas" "$FC" inspect \
    --config configs/tiny/starter.conf --set anchor_snap=0.05
# configs/small ship reference_fill, which nearest leaves unused: setting nearest over them is a
# documented ablation (docs/quality.md), not an error
expect nearest_over_the_shipped_fill 0 "^delta_reference *= nearest" "$FC" \
    inspect --config configs/small/extrapolate.conf --set delta_reference=nearest
expect steps_not_a_number 2 "--steps -4: expected a whole number" "$FC" train --config configs/tiny/starter.conf --run r --steps -4
expect generate_too_few_frames 2 "--frames 3: expected a whole number from 7 to 1000000" "$FC" generate --starter a --extrapolate b --interpolate c --first-frame x.png --out o.mp4 --frames 3
# The ranges' ends: the first value past each is refused with status 2, the end itself gets past the
# command line (to the missing run folder's status 1, or to the answer)
expect threads_zero 2 "--threads 0: expected a whole number from 1 to 1024" "$FC" --threads 0 --version
expect threads_most 0 "^framechain " "$FC" --threads 1024 --version
expect threads_past_most 2 "--threads 1025: expected a whole number from 1 to 1024" "$FC" --threads 1025 --version
# whole numbers: a leading blank refused as a trailing one is
expect whole_leading_blank 2 "--ranks  2: expected a whole number" "$FC" inspect --config configs/tiny/starter.conf \
    --ranks " 2"
expect whole_trailing_blank 2 "--ranks 2 : expected a whole number" "$FC" inspect --config configs/tiny/starter.conf \
    --ranks "2 "
expect threads_leading_blank 2 "--threads  2: expected a whole number" "$FC" --threads " 2" --version
# the global options parse as a command's do: --opt=VALUE, a repeat refused; after the command, where they go
expect global_threads_equals 0 "^framechain " "$FC" --threads=2 --version
expect global_device_equals 0 "^role *= starter" "$FC" --device=cpu inspect --config configs/tiny/starter.conf
expect global_threads_twice 2 "^framechain: option --threads given twice" "$FC" --threads 2 --threads 3 --version
expect global_device_twice 2 "^framechain: option --device given twice" "$FC" --device cpu --device cuda-fp32 \
    inspect --config configs/tiny/starter.conf
expect global_after_command 2 "^framechain inspect: --threads is framechain's option: give it before the command" \
    "$FC" inspect --config configs/tiny/starter.conf --threads 2
expect global_device_after_command 2 "^framechain inspect: --device is framechain's option: give it before the command" \
    "$FC" inspect --config configs/tiny/starter.conf --device=cpu
# a value from the next argument that is an option is a forgotten value, not a name (--out --quiet made a
# folder "--quiet"); --opt=VALUE passes such a value; a negative number is a value, and reaches its range check
expect value_is_option 2 "option --out needs a value (the next argument, --quiet, is an option; write --out=--quiet" \
    "$FC" generate --starter a --extrapolate b --interpolate c --first-frame x.png --frames 8 --out --quiet
expect value_is_options_end 2 "option --out needs a value (the next argument, --, ends the options; write --out=--" \
    "$FC" prepare --input x.png --out -- -x --size 32 --clip-frames 1
expect value_is_short_option 2 "option --config needs a value (the next argument, -h, is an option" "$FC" inspect \
    --config -h
expect value_is_help 2 "option --config needs a value (the next argument, --help, is an option" "$FC" train \
    --config --help --run "$tmp/never"
expect value_option_by_equals 1 "^framechain: -x: cannot open config" "$FC" inspect --config=-x
expect value_negative_number 2 "--ranks -3: expected a whole number from 1" "$FC" inspect \
    --config configs/tiny/starter.conf --ranks -3
expect global_value_is_option 2 "^framechain: option --threads needs a value (the next argument, --version, is an option" \
    "$FC" --threads --version
expect global_device_value_is_option 2 "option --device needs a value (the next argument, --threads, is an option" \
    "$FC" --device --threads 2 inspect --config configs/tiny/starter.conf
expect plot_value_is_option 2 "^framechain plot: option --out needs a value (the next argument, --verbose, is an option" \
    "$FC" plot --out --verbose "$tmp/none"
# help asked for is given wherever it stands, also after a bad option; --help CMD and help [CMD] give CMD's
expect help_after_bad_option 0 "usage: framechain generate" "$FC" generate --bogus --help
expect help_after_bad_value 0 "usage: framechain inspect" "$FC" inspect --ranks x --help
expect help_before_command 0 "usage: framechain train" "$FC" --help train
expect help_command 0 "usage: framechain \[--threads N\]" "$FC" help
expect help_command_of 0 "usage: framechain plot" "$FC" help plot
expect help_command_unknown 2 "^framechain: unknown command 'bogus'" "$FC" help bogus
# help of help is framechain's usage; a command's --help wins over a bad global value as over its own
expect help_of_help 0 "usage: framechain \[--threads N\]" "$FC" help --help
expect help_twice 0 "usage: framechain \[--threads N\]" "$FC" --help --help
expect help_after_bad_threads 0 "usage: framechain train" "$FC" --threads 0 train --help
expect help_after_unknown_device 0 "usage: framechain train" "$FC" --device gpu train --help
expect bad_threads_without_help 2 "--threads 0: expected a whole number from 1 to 1024" "$FC" --threads 0 train --help2
GEN=(generate --starter "$tmp/none" --extrapolate "$tmp/none" --interpolate "$tmp/none" --first-frame x.png
     --out "$tmp/gen.mp4")
expect generate_six_frames 2 "--frames 6: expected a whole number from 7 to 1000000" "$FC" "${GEN[@]}" --frames 6
expect generate_seven_frames 1 "no such run folder" "$FC" "${GEN[@]}" --frames 7
expect generate_noise_aug_most 1 "no such run folder" "$FC" "${GEN[@]}" --frames 7 --noise-aug 0.95
expect generate_noise_aug_past_most 2 "--noise-aug 0.96: expected a number from 0 to 0.95" "$FC" "${GEN[@]}" \
    --frames 7 --noise-aug 0.96
expect generate_colour_ramp_zero 1 "no such run folder" "$FC" "${GEN[@]}" --frames 7 --colour-ramp 0
EVAL=(eval --starter "$tmp/none" --extrapolate "$tmp/none" --interpolate "$tmp/none" --data "$tmp/none")
expect eval_six_frames 2 "--frames 6: expected a whole number from 7 to 1000000" "$FC" "${EVAL[@]}" --frames 6
expect generate_fps_hex 2 "--fps 0x10: expected a number" "$FC" "${GEN[@]}" --frames 8 --fps 0x10
expect eval_long_six 2 "--long 6: at least 7 frames, or 0" "$FC" "${EVAL[@]}" --long 6
expect eval_long_seven 1 "no such" "$FC" "${EVAL[@]}" --long 7
expect eval_noise_aug_most 1 "no such" "$FC" "${EVAL[@]}" --noise-aug 0,0.95
expect eval_noise_aug_past_most 2 "0.96" "$FC" "${EVAL[@]}" --noise-aug 0,0.96
# score's --top is a fraction strictly inside (0, 1), and comes with --exclude-out; an existing
# --exclude-out is kept without --overwrite
SCORE=(score --run "$tmp/none" --data "$tmp/none" --out "$tmp/score.tsv")
expect score_top_one 2 "--top 1: a fraction between 0 and 1, both excluded" "$FC" "${SCORE[@]}" --top 1 \
    --exclude-out "$tmp/ex.txt"
expect score_top_alone 2 "--top and --exclude-out go together" "$FC" "${SCORE[@]}" --top 0.1
echo "shard-00000.safetensors 0" > "$tmp/kept_ex.txt"
expect score_exclude_out_exists 1 "--exclude-out $tmp/kept_ex.txt: the file exists" "$FC" "${SCORE[@]}" --top 0.1 \
    --exclude-out "$tmp/kept_ex.txt"
# the parser: an option once, a flag without a value, and a value of exactly the longest length taken
expect option_given_twice 2 "option --config given twice" "$FC" inspect --config configs/tiny/starter.conf \
    --config configs/tiny/starter.conf
expect flag_with_value 2 "option --params takes no value" "$FC" inspect --config configs/tiny/starter.conf --params=yes
longest=$(printf 'd%.0s' $(seq 3800))
expect value_of_longest_length 1 "nope.conf: cannot open config" "$FC" train --config "$tmp/nope.conf" --run "$longest"
expect train_extend_and_from 2 "give either --extend or --from, not both" "$FC" train --config configs/tiny/starter.conf \
    --run "$tmp/r" --extend --steps 4 --from "$tmp/r/ckpt-00000002.safetensors"
expect train_extend_without_steps 2 "--extend needs --steps N" "$FC" train --config configs/tiny/starter.conf \
    --run "$tmp/r" --extend
expect inspect_params 0 "blocks.1.attn_t.qkv.weight *(192, 64)" "$FC" inspect --config configs/tiny/starter.conf --params
expect inspect_not_a_file 1 "nope.safetensors" "$FC" inspect "$tmp/nope.safetensors"
# A downloaded file's strings print as text: a tensor name and metadata values (the config copy line by
# line, its line breaks kept) holding ESC [ 31 m, an OSC title, the C1 CSI (U+009B) and a right-to-left
# override (U+202E) reach stdout with each control a '?', never as the bytes a terminal obeys. The
# header is ASCII (JSON \u escapes), its length 8 bytes little-endian before it; one F32 tensor, its 4 bytes 0.
hdr='{"__metadata__":{"format":"x\u001b[31my\u009b2J","data":"d\u001b]0;title\u0007","parent":"p\u202egpm",'
hdr+='"lineage":"one\u001b[31m\ntwo\u009b31m","config":"role = starter\n\u001b[2Jwidth = 8\n"},'
hdr+='"w\u001b[31mred\u009b2J":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
{ printf "\\x$(printf %02x $((${#hdr} & 255)))\\x$(printf %02x $((${#hdr} >> 8)))\\0\\0\\0\\0\\0\\0"
  printf '%s\0\0\0\0' "$hdr"; } > "$tmp/escapes.safetensors"
"$FC" inspect "$tmp/escapes.safetensors" > "$tmp/escapes.txt" 2>&1
rc=$?
! LC_ALL=C grep -q "$(printf '[\001-\010\013-\037\177-\377]')" "$tmp/escapes.txt" &&
    grep -qxF 'format          x?[31my?2J' "$tmp/escapes.txt" &&
    grep -qxF 'data            d?]0;title?' "$tmp/escapes.txt" && grep -qxF 'parent          p?gpm' "$tmp/escapes.txt" &&
    grep -A2 -xF 'lineage:' "$tmp/escapes.txt" | tail -2 | tr '\n' '|' | grep -qxF '  one?[31m|  two?31m|' &&
    grep -A2 -xF 'config:' "$tmp/escapes.txt" | tail -2 | tr '\n' '|' | grep -qxF 'role = starter|?[2Jwidth = 8|' &&
    grep -q '^  w?\[31mred?2J  *F32  (1)  *no CRC$' "$tmp/escapes.txt"
shown=$?
[ $rc = 0 ] && [ $shown = 0 ] &&
    echo "PASS cli_inspect_escapes_printable: status $rc, $(grep -c . "$tmp/escapes.txt") lines, no control byte" ||
    echo "FAIL cli_inspect_escapes_printable: status $rc: $(LC_ALL=C cat -v "$tmp/escapes.txt" | tr '\n' '|' | cut -c1-200)"
# The build: a CUDA toolkit older than 11.8 is refused with one line that says what to do.
printf '#!/bin/sh\necho "Cuda compilation tools, release 10.2, V10.2.89"\n' > "$tmp/nvcc" && chmod +x "$tmp/nvcc"
# (a clean make: not the variables of a make that runs this test, such as the sanitizer build's NO_CUDA=1)
expect build_refuses_old_cuda 2 "needs CUDA 11.8 or newer.*NO_CUDA=1" env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make --no-print-directory -s NO_CUDA= NVCC="$tmp/nvcc" info

# ---- a FIFO named like a checkpoint or a dataset file: skipped or refused at once, never opened
# blocking (which would hang until a writer came); each run under `timeout -k 2 10` (a KILL after the
# TERM: a trainer that hangs may swallow the TERM) so that a hang fails the test instead of hanging
# the suite. The three tiny roles first, 3 steps each.
for role in starter extrapolate interpolate; do
    "$FC" --threads 1 train --config configs/tiny/$role.conf --run "$tmp/$role" --steps 3 --set warmup_steps=1 \
        > "$tmp/$role.log" 2>&1 || echo "FAIL cli_fifo_setup: $role: $(tail -1 "$tmp/$role.log")"
done
# a forgotten value before an option: refused, nothing made under the name of the option
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && exec "$fc_abs" --threads 1 generate --starter "$tmp/starter" --extrapolate "$tmp/extrapolate" \
    --interpolate "$tmp/interpolate" --first-frame shapes:1 --frames 7 --steps 1 --out --quiet) > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -eq 2 ] && [ -z "$(ls -A "$tmp/cwd")" ] && grep -q "option --out needs a value" "$tmp/err"; then
    echo "PASS cli_value_is_option_writes_nothing: status 2, $(cut -c1-100 "$tmp/err")"
else
    echo "FAIL cli_value_is_option_writes_nothing: status $rc, made: $(ls -A "$tmp/cwd" | head -3 | tr '\n' ' ')$(head -1 "$tmp/err")"
fi
# a fork's --set: the same usage errors as without --from
ck3=$tmp/starter/ckpt-00000003.safetensors
expect fork_set_without_value 2 "^framechain train: --set lr: expected KEY=VALUE" "$FC" --threads 1 train --from "$ck3" \
    --run "$tmp/fork" --set lr
expect fork_set_empty_key 2 "^framechain train: --set =1: expected KEY=VALUE" "$FC" --threads 1 train --from "$ck3" \
    --run "$tmp/fork" --set =1
expect fork_set_unknown_key 2 "^framechain train: --set warmup_step=1: unknown key 'warmup_step' (did you mean 'warmup_steps'?" \
    "$FC" --threads 1 train --from "$ck3" --run "$tmp/fork" --set warmup_step=1
expect fork_set_not_a_number 2 "^framechain train: --set lr=fast: not a number" "$FC" --threads 1 train --from "$ck3" \
    --run "$tmp/fork" --set lr=fast
[ -e "$tmp/fork" ] && echo "FAIL cli_fork_set_writes_nothing: $tmp/fork was made" ||
    echo "PASS cli_fork_set_writes_nothing: no fork folder made by the refused --set"
# made again before each command: train may rename it aside as not a checkpoint
fifo() { [ -p "$tmp/starter/ckpt-00000099.safetensors" ] || mkfifo "$tmp/starter/ckpt-00000099.safetensors"; }
fifo
expect fifo_checkpoint_train 0 "ckpt-00000099.safetensors: not a regular file (a FIFO)" \
    timeout -k 2 10 "$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/starter" --steps 3 --set warmup_steps=1
fifo
expect fifo_checkpoint_generate 0 "ckpt-00000099.safetensors: not a regular file (a FIFO)" \
    timeout -k 2 10 "$FC" --threads 1 generate --starter "$tmp/starter" --extrapolate "$tmp/extrapolate" \
    --interpolate "$tmp/interpolate" --first-frame shapes:1 --frames 7 --steps 1 --out "$tmp/fifo_frames" --quiet
fifo
expect fifo_checkpoint_inspect 1 "ckpt-00000099.safetensors: not a regular file (a FIFO)" \
    timeout -k 2 10 "$FC" inspect "$tmp/starter/ckpt-00000099.safetensors"
# A stop signal always ends train, even one that finds a FIFO among its checkpoints: a run of 100000
# steps, stopped by a SIGTERM once its first checkpoint is written, started again beside the FIFO and
# sent a SIGTERM 0.3 s later (start-up or the first steps), ends within 10 s, status 143.
term_run() {  # term_run LOG: the long run in the background, its pid in $pid
    "$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/term" --steps 100000 \
        --set warmup_steps=1 --set checkpoint_every=2 > "$1" 2>&1 &
    pid=$!
}
term_wait() {  # term_wait NAME: SIGTERM to $pid, then its end within 10 s with status 143
    kill -TERM $pid
    for i in $(seq 100); do kill -0 $pid 2> /dev/null && sleep 0.1; done
    if kill -0 $pid 2> /dev/null; then
        { kill -9 $pid; wait $pid; } 2> /dev/null  # the shell's "Killed" notice too
        echo "FAIL cli_$1: still running 10 s after SIGTERM: $(tail -1 "$tmp/term.log")"
        return
    fi
    wait $pid
    local rc=$?
    if [ $rc -eq 143 ]; then echo "PASS cli_$1: status $rc, $(tail -1 "$tmp/term.log" | cut -c1-100)"
    else echo "FAIL cli_$1: status $rc, expected 143: $(tail -1 "$tmp/term.log")"; fi
}
term_run "$tmp/term.log"
for i in $(seq 300); do [ -f "$tmp/term/ckpt-00000002.safetensors" ] && break; sleep 0.1; done
term_wait fifo_sigterm_setup
mkfifo "$tmp/term/ckpt-00000099.safetensors"
term_run "$tmp/term.log"
sleep 0.3
term_wait fifo_sigterm_ends_train
# a dataset whose dataset.json, or one of whose shards, is a FIFO: refused in one line
"$FC" prepare --input shapes:1:40 --out "$tmp/ds" --size 32 --clip-frames 16 > "$tmp/ds.log" 2>&1 ||
    echo "FAIL cli_fifo_dataset_setup: $(tail -1 "$tmp/ds.log")"
# Only checkpoints record a revision: a fresh shard and a file framechain did not write show none, not
# "0 (written before revisions were recorded)", which says the file is an old checkpoint
"$FC" inspect "$tmp/ds/shard-00000.safetensors" > "$tmp/shard_meta.txt" 2>&1
rc=$?
[ $rc = 0 ] && grep -qx 'format  *framechain-shard' "$tmp/shard_meta.txt" && ! grep -q '^revision' "$tmp/shard_meta.txt" &&
    ! grep -q '^revision' "$tmp/escapes.txt" &&
    echo "PASS cli_inspect_revision_only_of_checkpoints: status $rc, $(head -3 "$tmp/shard_meta.txt" | tr '\n' '|')" ||
    echo "FAIL cli_inspect_revision_only_of_checkpoints: status $rc, $(grep -h '^revision' "$tmp/shard_meta.txt" "$tmp/escapes.txt" | head -1)"
mkdir "$tmp/ds_json" && cp "$tmp/ds"/shard-* "$tmp/ds_json/" && mkfifo "$tmp/ds_json/dataset.json"
cp -r "$tmp/ds" "$tmp/ds_shard" && rm "$tmp/ds_shard/shard-00000.safetensors" && mkfifo "$tmp/ds_shard/shard-00000.safetensors"
# a path that starts with '-' goes after --, which ends the options
cp -r "$tmp/ds" "$tmp/-ds"
expect inspect_dash_path_after_options_end 0 "^dataset -ds: 2 clips" sh -c 'cd "$0" && exec "$@"' "$tmp" "$fc_abs" inspect -- -ds
expect dash_path_without_options_end 2 "unknown option '-ds'" sh -c 'cd "$0" && exec "$@"' "$tmp" "$fc_abs" inspect -ds
expect fifo_dataset_json_train 1 "dataset.json: not a regular file (a FIFO)" \
    timeout -k 2 10 "$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/r_json" --data "$tmp/ds_json"
expect fifo_shard_train 1 "shard-00000.safetensors: not a regular file (a FIFO)" \
    timeout -k 2 10 "$FC" --threads 1 train --config configs/tiny/starter.conf --run "$tmp/r_shard" --data "$tmp/ds_shard"
expect fifo_shard_inspect 1 "shard-00000.safetensors: not a regular file (a FIFO)" timeout -k 2 10 "$FC" inspect "$tmp/ds_shard"
# a FIFO as the first frame, and as a video to prepare: refused, not read from
rm -f "$tmp/starter/ckpt-00000099.safetensors"
mkfifo "$tmp/fifo_first.png" "$tmp/fifo_clip.avi"
expect fifo_first_frame 1 "fifo_first.png: cannot open: not a regular file" timeout -k 2 10 "$FC" --threads 1 generate \
    --starter "$tmp/starter" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate" \
    --first-frame "$tmp/fifo_first.png" --frames 7 --steps 1 --out "$tmp/fifo_ff" --quiet
timeout -k 2 10 "$FC" prepare --input "$tmp/fifo_clip.avi" --out "$tmp/fifo_ds" --size 32 --clip-frames 8 > "$tmp/fp.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "fifo_clip.avi: skipped: .*not a regular file" "$tmp/fp.log"; then
    echo "PASS cli_fifo_prepare_input: status 1, $(grep -m1 -o 'fifo_clip.avi: skipped.*' "$tmp/fp.log" | cut -c1-90)"
else
    echo "FAIL cli_fifo_prepare_input: status $rc (124: it waited on the FIFO), $(tail -1 "$tmp/fp.log")"
fi

# ---- generate's defaults, from the three roles: without --seed the frames of --seed 1 (not those of
# --seed 2); without --fps a video of 12 frames a second (and --fps 25 one of 25)
GEN_RUNS=(generate --starter "$tmp/starter" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate"
          --first-frame shapes:1 --frames 7 --steps 1 --quiet)
for seed in default 1 2; do
    args=(); [ $seed = default ] || args=(--seed $seed)
    "$FC" --threads 1 "${GEN_RUNS[@]}" "${args[@]}" --out "$tmp/seed_$seed" > /dev/null 2>&1
done
if [ "$(ls "$tmp/seed_default" 2> /dev/null | wc -l)" = 7 ] && diff -r "$tmp/seed_default" "$tmp/seed_1" > /dev/null &&
    ! diff -r "$tmp/seed_default" "$tmp/seed_2" > /dev/null; then
    echo "PASS cli_generate_default_seed: 7 PNGs without --seed, the same as --seed 1's and not --seed 2's"
else
    echo "FAIL cli_generate_default_seed: $(ls "$tmp/seed_default" 2> /dev/null | wc -l) PNGs without --seed; they differ from --seed 1's, or match --seed 2's"
fi
if command -v ffprobe > /dev/null; then
    "$FC" --threads 1 "${GEN_RUNS[@]}" --out "$tmp/fps_default.mp4" > /dev/null 2>&1
    "$FC" --threads 1 "${GEN_RUNS[@]}" --fps 25 --out "$tmp/fps_25.mp4" > /dev/null 2>&1
    rate() { ffprobe -v error -select_streams v:0 -show_entries stream=r_frame_rate -of csv=p=0 "$1" 2> /dev/null; }
    rates="$(rate "$tmp/fps_default.mp4") $(rate "$tmp/fps_25.mp4")"
    if [ "$rates" = "12/1 25/1" ]; then
        echo "PASS cli_generate_fps: the video's frame rate $rates (ffprobe) without --fps and with --fps 25"
    else
        echo "FAIL cli_generate_fps: frame rates '$rates' (ffprobe), expected 12/1 without --fps and 25/1 with --fps 25"
    fi
fi

# ---- inspect of a checkpoint: its step, the exit status its CRCs give, and no --config beside it ----
ck=$tmp/starter/ckpt-00000003.safetensors
expect inspect_checkpoint_step 0 "^step  *3$" "$FC" inspect "$ck"
expect inspect_checkpoint_with_config 2 "give either a checkpoint or --config, not both" "$FC" inspect "$ck" \
    --config configs/tiny/starter.conf
# one byte of the last tensor's data flipped (the file's last byte): its CRC fails, status 1
cp "$ck" "$tmp/damaged.safetensors"
last=$(( $(stat -c %s "$ck") - 1 ))
byte=$(od -An -tu1 -j "$last" -N1 "$ck" | tr -d ' ')
printf "\\$(printf %03o $(( byte ^ 255 )))" | dd of="$tmp/damaged.safetensors" bs=1 seek="$last" conv=notrunc 2> /dev/null
"$FC" inspect "$tmp/damaged.safetensors" > "$tmp/damaged.log" 2>&1
rc=$?
bad=$(grep -c "CRC BAD" "$tmp/damaged.log")
if [ $rc -eq 1 ] && [ "$bad" -eq 1 ] && grep -q "SOME CRCs FAIL" "$tmp/damaged.log"; then
    echo "PASS cli_inspect_damaged_checkpoint: status 1, $bad tensor with a bad CRC"
else
    echo "FAIL cli_inspect_damaged_checkpoint: status $rc, $bad tensors with a bad CRC (expected status 1, 1)"
fi
# a folder that is neither a run folder nor a dataset (one that holds run folders, say) is named as such
mkdir -p "$tmp/runs/starter"
expect inspect_neither_run_nor_dataset 1 "runs: neither a run folder .* nor a dataset" "$FC" inspect "$tmp/runs"

verdict() { if [ "$1" = 1 ]; then echo "PASS cli_$2: $3"; else echo "FAIL cli_$2: $3"; fi; }
# inspect of a large safetensors file (a checkpoint of the 24 GB preset is 8.9 GiB) reads it a tensor at a
# time: its peak memory grows by far less than the file (160 MB in 16 tensors here; it read the file
# whole), and every tensor's CRC is still checked: a byte flipped in the last one is CRC BAD, status 1
PYTHON=${PYTHON:-python3}
"$PYTHON" - "$tmp/big.safetensors" "$tmp/small.safetensors" << 'PY'
import json, struct, sys, zlib
def write(path, tensors):
    header, meta, offset = {}, {}, 0
    for name, data in tensors:
        header[name] = {"dtype": "F32", "shape": [len(data) // 4], "data_offsets": [offset, offset + len(data)]}
        meta["crc32." + name] = "%08x" % zlib.crc32(data)
        offset += len(data)
    header["__metadata__"] = meta
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, data in tensors:
            f.write(data)
write(sys.argv[1], [("t%02d" % i, bytes([i + 1]) * (10 << 20)) for i in range(16)])
write(sys.argv[2], [("t00", bytes(4))])
PY
peak_kib() {  # FILE: inspect FILE, its output in $tmp/peak.log, its status in $tmp/peak.rc; prints its peak in KiB
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0" "$PYTHON" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[3:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
open(sys.argv[2], "w").write(str(r.returncode))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$tmp/peak.log" "$tmp/peak.rc" "$FC" --threads 1 inspect "$1"
}
small=$(peak_kib "$tmp/small.safetensors")
big=$(peak_kib "$tmp/big.safetensors")
[ "$(cat "$tmp/peak.rc")" = 0 ] && grep -q "^16 tensors, 167772160 bytes of data: every CRC checks$" "$tmp/peak.log" &&
    [ $((big - small)) -lt 81920 ] && pass=1 || pass=0
verdict $pass inspect_large_file_a_tensor_at_a_time "peak $((big / 1024)) MiB against $((small / 1024)) for a file of one tensor; $(tail -1 "$tmp/peak.log")"
printf '\x00' | dd of="$tmp/big.safetensors" bs=1 seek=$(( $(stat -c %s "$tmp/big.safetensors") - 1 )) conv=notrunc 2> /dev/null
"$FC" inspect "$tmp/big.safetensors" > "$tmp/bad.log" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(grep -c ' CRC BAD$' "$tmp/bad.log")" = 1 ] && grep -q '^  t15 .* CRC BAD$' "$tmp/bad.log" && pass=1 || pass=0
verdict $pass inspect_large_file_crc_bad "status $rc: $(grep -c ' CRC BAD$' "$tmp/bad.log") bad: $(tail -1 "$tmp/bad.log")"
rm -f "$tmp/big.safetensors"
exit 0
