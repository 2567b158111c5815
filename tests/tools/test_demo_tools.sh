#!/usr/bin/env bash
# tools/demo.sh (make demo) when its footage changes under runs it trained: a demo on the built-in
# moving shapes (no opencv-doc), then opencv-doc installed, as the demo's own line advises, then removed
# again. train refuses a checkpoint of the shapes on a dataset and the other way round, so each change
# moves the earlier runs aside and trains afresh; a rerun on the same footage goes on from its runs.
# So does another DEMO_STEPS; runs on the shapes beside a dataset an earlier demo prepared go on; a
# DEMO_STEPS that is no count is said before anything is made; a DEMO_OUT named like an option works.
# The models train one step; generate is left out (a wrapper writes its --out), the rest is framechain.
set -u
. "$(dirname "$0")/../lib.sh"
case $FC in /*) ;; *) FC=$PWD/$FC ;; esac
cat > "$tmp/fc" << EOF
#!/usr/bin/env bash
if [ "\$1" = generate ]; then
    while [ \$# -gt 0 ]; do [ "\$1" = --out ] && { echo made > "\$2"; exit 0; }; shift; done
    exit 1
fi
exec "$FC" "\$@"
EOF
chmod +x "$tmp/fc"

# Run from another folder with no DEMO_OUT, a copy of the script in a repository of its own (its
# configs/small) trains on its configs and writes the repository's out/; the folder it ran from gets
# nothing.
mkdir -p "$tmp/repo/tools" "$tmp/repo/configs" "$tmp/elsewhere"
cp tools/demo.sh tools/checks.sh "$tmp/repo/tools/" && cp -r configs/small "$tmp/repo/configs/"
(cd "$tmp/elsewhere" && env FC="$tmp/fc" DEMO_STEPS=1 DEMO_DATA_DIR="$tmp/no-opencv-doc" "$tmp/repo/tools/demo.sh") \
    > "$tmp/elsewhere.log" 2>&1
status=$?
cwd_holds=$(ls -A "$tmp/elsewhere" | tr '\n' ' ')
[ $status -eq 0 ] && [ -z "$cwd_holds" ] && [ "$(cat "$tmp/repo/out/demo.gif" 2> /dev/null)" = made ] &&
    ls "$tmp/repo/out/demo/interpolate"/ckpt-*.safetensors > /dev/null 2>&1
expect demo_out_of_the_repository $? "status $status; the folder it ran from holds: ${cwd_holds:-nothing}; $(tail -1 "$tmp/elsewhere.log")"

# A generate that fails (here a stand-in's) leaves the demo's videos of the run before as they were:
# the script had removed them first
echo old > "$tmp/repo/out/demo.mp4"
sed 's/echo made > "\$2"; exit 0/exit 1/' "$tmp/fc" > "$tmp/fc_fails" && chmod +x "$tmp/fc_fails"
(cd "$tmp/elsewhere" && env FC="$tmp/fc_fails" DEMO_STEPS=1 DEMO_DATA_DIR="$tmp/no-opencv-doc" "$tmp/repo/tools/demo.sh") \
    > "$tmp/fails.log" 2>&1
status=$?
[ $status -ne 0 ] && [ "$(cat "$tmp/repo/out/demo.mp4" 2> /dev/null)" = old ] && [ "$(cat "$tmp/repo/out/demo.gif" 2> /dev/null)" = made ]
expect demo_failed_generate_keeps_videos $? "status $status; demo.mp4: $(cat "$tmp/repo/out/demo.mp4" 2>&1), demo.gif: $(cat "$tmp/repo/out/demo.gif" 2>&1)"

if [ ! -f "$SAMPLES/vtest.avi" ] || [ ! -f "$SAMPLES/Megamind.avi" ]; then
    echo "SKIP demo_footage_change: no opencv-doc sample videos in $SAMPLES"
    exit 0
fi
mkdir "$tmp/opencv-doc"
ln -s "$SAMPLES/vtest.avi" "$SAMPLES/Megamind.avi" "$tmp/opencv-doc/"
out="$tmp/out dir"
demo() {  # demo NAME DATA_DIR: one run of the demo (DEMO_STEPS=$STEPS, default 1), its output in $tmp/NAME.log, its status in status
    env FC="$tmp/fc" DEMO_STEPS="${STEPS:-1}" DEMO_OUT="$out" DEMO_DATA_DIR="$2" tools/demo.sh > "$tmp/$1.log" 2>&1
    status=$?
}
trained() { ls "$1"/ckpt-*.safetensors > /dev/null 2>&1; }

demo shapes "$tmp/no-opencv-doc"
[ $status -eq 0 ] && trained "$out/demo/interpolate" && [ ! -e "$out/demo/data" ] &&
    grep -q "opencv-doc sample videos are not installed" "$tmp/shapes.log"
expect demo_on_shapes $? "status $status: $(tail -1 "$tmp/shapes.log")"

demo videos "$tmp/opencv-doc"
moved="trained on the built-in moving shapes, and the opencv-doc sample videos are there now: moved it to"
[ $status -eq 0 ] && trained "$out/demo.previous-1/starter" && [ -f "$out/demo/data/dataset.json" ] &&
    trained "$out/demo/interpolate" && [ "$(cat "$out/demo.mp4")" = made ] &&
    grep -qF "$moved $out/demo.previous-1" "$tmp/videos.log"
expect demo_footage_installed_moves_runs_aside $? \
    "status $status: $(grep -m1 -E '^(demo|framechain):' "$tmp/videos.log")"

demo again "$tmp/opencv-doc"
[ $status -eq 0 ] && [ ! -e "$out/demo.previous-2" ] && ! grep -q "moved it" "$tmp/again.log"
expect demo_same_footage_goes_on $? "status $status: $(grep -m1 -E '^(demo|framechain):' "$tmp/again.log")"

demo removed "$tmp/no-opencv-doc"
[ $status -eq 0 ] && [ -f "$out/demo.previous-2/data/dataset.json" ] && trained "$out/demo/interpolate" &&
    grep -qF "trained on the opencv-doc sample videos, which are not in $tmp/no-opencv-doc now" "$tmp/removed.log"
expect demo_footage_removed_moves_runs_aside $? \
    "status $status: $(grep -m1 -E '^(demo|framechain):' "$tmp/removed.log")"

# Another DEMO_STEPS on the same footage: train would refuse the runs' checkpoints (written for
# another count of steps), so they are moved aside and the demo trains afresh
STEPS=2 demo steps "$tmp/no-opencv-doc"
[ $status -eq 0 ] && [ -f "$out/demo.previous-3/steps" ] && trained "$out/demo/interpolate" &&
    grep -qF "was trained for DEMO_STEPS=1, and this demo asks for 2: moved it to $out/demo.previous-3" "$tmp/steps.log"
expect demo_steps_changed_moves_runs_aside $? "status $status: $(grep -m1 -E '^(demo|framechain):' "$tmp/steps.log")"

# Runs trained on the shapes beside a dataset of the videos prepared by an earlier demo whose training
# never started: a rerun on the shapes goes on from them (the footage they were trained on is recorded,
# not guessed from the dataset's presence)
shapes_out="$tmp/shapes beside data"
mkdir -p "$shapes_out/demo/data" && echo '{}' > "$shapes_out/demo/data/dataset.json"
for run in first again; do
    env FC="$tmp/fc" DEMO_STEPS=1 DEMO_OUT="$shapes_out" DEMO_DATA_DIR="$tmp/no-opencv-doc" tools/demo.sh > "$tmp/beside_$run.log" 2>&1
    echo $? > "$tmp/beside_$run.rc"
done
[ "$(cat "$tmp/beside_first.rc" "$tmp/beside_again.rc" | tr '\n' ' ')" = "0 0 " ] && ! have "$shapes_out/demo.previous-*" &&
    ! grep -q "moved it" "$tmp/beside_again.log" && trained "$shapes_out/demo/interpolate"
expect demo_shapes_beside_a_dataset_go_on $? "status $(cat "$tmp/beside_first.rc") then $(cat "$tmp/beside_again.rc"): $(grep -m1 -E '^(demo|framechain):' "$tmp/beside_again.log")"

# DEMO_STEPS that is no count is said at once, before anything is made; a DEMO_OUT named like an option
# is a folder like any other
env FC="$tmp/fc" DEMO_STEPS=abc DEMO_OUT="$tmp/abc" DEMO_DATA_DIR="$tmp/opencv-doc" tools/demo.sh > "$tmp/abc.log" 2>&1
status=$?
[ $status -eq 2 ] && [ "$(wc -l < "$tmp/abc.log")" -eq 1 ] && grep -q "^demo: DEMO_STEPS=abc: a whole number from 1 up is needed$" "$tmp/abc.log" &&
    [ ! -e "$tmp/abc" ]
expect demo_bad_steps_said_first $? "status $status: $(head -1 "$tmp/abc.log"); $(ls -d "$tmp/abc" 2>&1)"
mkdir -p "$tmp/dash"
(cd "$tmp/dash" && env FC="$tmp/fc" DEMO_STEPS=1 DEMO_OUT=-o DEMO_DATA_DIR="$tmp/no-opencv-doc" "$OLDPWD/tools/demo.sh") > "$tmp/dash.log" 2>&1
status=$?
[ $status -eq 0 ] && [ "$(cat "$tmp/dash/-o/demo.gif" 2> /dev/null)" = made ] && trained "$tmp/dash/-o/demo/interpolate"
expect demo_out_named_like_an_option $? "status $status: $(grep -m1 -vE '^(==|$)' "$tmp/dash.log" | cut -c1-160)"
