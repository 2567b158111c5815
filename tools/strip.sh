#!/usr/bin/env bash
# A strip of frames for the eye: every 20th frame the chain makes from the first frame of a video,
# above the video's own frames at the same times (black where the video has ended), 4x enlarged.
# Usage: tools/strip.sh RUN_DIR VIDEO OUT.png [FRAMES]   (RUN_DIR holds starter/, extrapolate/, interpolate/)
#   VIDEO: a video file, or shapes:K, the built-in moving-shapes clip K (its truth drawn by
#   build/draw_shapes, made where missing); SIZE: the models' frame size (default 32); EVERY: every how many frames
#   (default 20); GEN_ARGS: more generate options (e.g. "--guidance 2"; 10 Euler steps unless they say
#   --steps; without --temperature the models' own sample_temperature); FC and BUILD: the framechain
#   and the build folder (default the repository's, wherever this runs from); needs ffmpeg
set -eu
usage="usage: tools/strip.sh RUN_DIR VIDEO OUT.png [FRAMES]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "strip: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -ge 3 ] && [ $# -le 4 ] || { echo "strip: wants 3 to 4 arguments, not $#; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its framechain and build/, wherever this runs from
FC=${FC:-$root/framechain}
BUILD=${BUILD:-$root/build}
runs=$1 video=$2 out=$3 frames=${4:-181}
size=${SIZE:-32}  # the models' frame size
every=${EVERY:-20}
# what is wrong with the arguments is said now, not after the minutes the chain takes
. "$root/tools/checks.sh"
positive_whole strip "FRAMES=$frames" "EVERY=$every" "SIZE=$size"
case $out in
    *.png | *.PNG) ;;
    *) echo "strip: $out: the strip is a PNG image, its name ends in .png; $usage" >&2; exit 2 ;;
esac
dir=$(dirname -- "$out")
[ -d "$dir" ] && [ -w "$dir" ] || { echo "strip: $out: the folder $dir does not exist or cannot be written" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
steps=(--steps 10)  # as make eval's tables, unless GEN_ARGS says --steps
case " ${GEN_ARGS:-} " in *" --steps "*) steps=() ;; esac
# shellcheck disable=SC2086
"$FC" generate --starter "$runs/starter" --extrapolate "$runs/extrapolate" --interpolate "$runs/interpolate" \
    --first-frame "$video" --frames "$frames" "${steps[@]}" --out "$tmp/made" --quiet ${GEN_ARGS:-} > /dev/null
mkdir -p "$tmp/real"
first=1  # the number of the video's first frame as ffmpeg writes it
case $video in
shapes:*)
    [ -x "$BUILD/draw_shapes" ] || make -s -C "$root" BUILD="$BUILD" "$BUILD/draw_shapes"
    "$BUILD/draw_shapes" "${video#shapes:}" "$frames" "$size" "$tmp/real"
    first=0 ;;
*)  ffmpeg -v error -i "$video" -vf "scale=$size:$size:force_original_aspect_ratio=increase:flags=area,crop=$size:$size" \
        -frames:v "$frames" "$tmp/real/frame-%06d.png" ;;
esac
n=$(( (frames + every - 1) / every ))
pick="select='not(mod(n\,$every))',scale=$((4 * size)):$((4 * size)):flags=neighbor"
ffmpeg -v error -y -start_number 0 -i "$tmp/made/frame-%06d.png" -vf "$pick,tile=${n}x1" -frames:v 1 "$tmp/made.png"
ffmpeg -v error -y -start_number "$first" -i "$tmp/real/frame-%06d.png" -vf "$pick,tile=${n}x1" -frames:v 1 "$tmp/real.png"
ffmpeg -v error -y -i "$tmp/made.png" -i "$tmp/real.png" -filter_complex vstack "$out"
echo "strip: $out (top: the chain, every ${every}th of $frames frames; bottom: the video)"
