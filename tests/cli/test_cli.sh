#!/usr/bin/env bash
# The command line: help, version, and one clear line with a non-zero exit for every bad input.
set -u
FC=${1:-./framechain}
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

expect help 0 "usage: framechain" "$FC" --help
expect version 0 "cpu (fp32" "$FC" --version
expect no_command 2 "no command given" "$FC"
expect unknown_command 2 "unknown command 'trian'" "$FC" trian
expect unknown_global_flag 2 "unknown option '--frobnicate'" "$FC" --frobnicate train
expect bad_threads 2 "--threads zero" "$FC" --threads zero --version
expect unknown_device 1 "--device tpu" "$FC" --device tpu inspect --config configs/tiny/starter.conf
for cmd in prepare train generate inspect; do
    expect "${cmd}_help" 0 "usage: framechain $cmd" "$FC" "$cmd" --help
done
expect train_help_lists_keys 0 "t_logit_std" "$FC" train --help
expect train_unknown_flag 2 "unknown option '--lr'" "$FC" train --lr 3
expect train_missing_value 2 "option --config needs a value" "$FC" train --config
expect train_missing_config 2 "missing --config" "$FC" train --data d --run r
expect config_unreadable 1 "nope.conf: cannot open config" "$FC" train --config "$tmp/nope.conf" --data d --run r
expect config_unknown_key 1 "typo.conf:2: unknown key 'widht'" "$FC" train --config "$tmp/typo.conf" --data d --run r
expect config_not_a_number 1 "nan.conf:1: width = sixty: not an integer" "$FC" inspect --config "$tmp/nan.conf"
expect config_bad_combination 1 "frame_size 30 is not a multiple of patch 4" "$FC" inspect --config "$tmp/odd.conf"
expect config_plan_without_target 1 "the plan has no target slot" "$FC" inspect --config "$tmp/notarget.conf"
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
expect set_unknown_key 1 "unknown key 'depht'" "$FC" inspect --config configs/tiny/starter.conf --set depht=3
expect set_out_of_range 1 "depth=0: 0 is out of range" "$FC" inspect --config configs/tiny/starter.conf --set depth=0
expect set_applies 0 "depth *= 5" "$FC" inspect --config configs/tiny/starter.conf --set depth=5
expect keep_blocks_auto 0 "keep_blocks = auto *[0-9]* of 16 blocks on --device cuda" "$FC" inspect \
    --config configs/starter.conf
expect keep_blocks_not_a_number 1 "keep_blocks=some: not an integer or auto" "$FC" inspect --config configs/starter.conf \
    --set keep_blocks=some
expect keep_blocks_over_depth 1 "keep_blocks 3 is more than depth 2" "$FC" inspect --config configs/tiny/starter.conf \
    --set recompute=1 --set keep_blocks=3
expect crop_pan_without_zoom 1 "crop_pan 0.5 needs crop_zoom > 1" "$FC" inspect --config configs/tiny/starter.conf \
    --set crop_pan=0.5
expect moved_reference_without_deltas 1 "delta_reference moved needs targets = deltas" "$FC" inspect \
    --config configs/tiny/starter.conf --set delta_reference=moved
expect anchor_snap_without_deltas 1 "anchor_snap 0.05 needs targets = deltas" "$FC" inspect \
    --config configs/tiny/starter.conf --set anchor_snap=0.05
expect steps_not_a_number 2 "--steps -4: expected a whole number" "$FC" train --config configs/tiny/starter.conf --run r --steps -4
expect generate_too_few_frames 2 "at least 7 frames" "$FC" generate --starter a --extrapolate b --interpolate c --first-frame x.png --out o.mp4 --frames 3
expect inspect_params 0 "blocks.1.attn_t.qkv.weight *(192, 64)" "$FC" inspect --config configs/tiny/starter.conf --params
expect inspect_not_a_file 1 "nope.safetensors" "$FC" inspect "$tmp/nope.safetensors"
# The build: a CUDA toolkit older than 11.8 is refused with one line that says what to do.
printf '#!/bin/sh\necho "Cuda compilation tools, release 10.2, V10.2.89"\n' > "$tmp/nvcc" && chmod +x "$tmp/nvcc"
# (a clean make: not the variables of a make that runs this test, such as the sanitizer build's NO_CUDA=1)
expect build_refuses_old_cuda 2 "needs CUDA 11.8 or newer.*NO_CUDA=1" env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make --no-print-directory -s NO_CUDA= NVCC="$tmp/nvcc" info
exit 0
