#!/usr/bin/env bash
# Every function src/video/video.h declares is defined for both kinds of build: by the FFmpeg build's
# files (video_read.c, video_write.c, image.c, frame_convert.c) and by the build without FFmpeg
# (video_none.c, frame_convert.c: NO_FFMPEG=1, no pkg-config, tools/gpu_bundle.sh), else a program
# that calls it does not link there. A function added to the header without its stand-in once broke
# the build without FFmpeg, and with it the GPU bundle, while every build with FFmpeg passed.
set -u
. "$(dirname "$0")/../lib.sh"
# the header's declarations: a return type, the name, '(' ... ');' (one line or several)
names=$(tr '\n' ' ' < src/video/video.h | grep -oE '[a-zA-Z_][a-zA-Z0-9_]* \**[a-z_][a-z0-9_]*\([^;{]*\);' |
    grep -oE '[a-z_][a-z0-9_]*\(' | tr -d '(' | grep -vE '^(if|for|while|sizeof|return)$' | sort -u)
count=$(echo "$names" | grep -c .)
defined() {  # defined NAME FILES...: a definition (the name, its parameters, then '{') in one of FILES
    local f=$1
    shift
    cat "$@" | tr '\n' ' ' | grep -qE "[ *]$f\([^;{]*\) *\{"
}
missing=""
for f in $names; do
    defined "$f" src/video/video_none.c src/video/frame_convert.c || missing="$missing $f (not in video_none.c);"
    defined "$f" src/video/video_read.c src/video/video_write.c src/video/image.c src/video/frame_convert.c ||
        missing="$missing $f (not in the FFmpeg build's files);"
done
[ "$count" -ge 20 ] && [ -z "$missing" ]
expect video_standins $? "$count functions of src/video/video.h, each defined for the builds with and without FFmpeg${missing:+; wrong:$missing}"
