#!/usr/bin/env bash
# prepare on the user media that is easy to get wrong without a word: resampling ties (15 -> 30 fps),
# a Matroska file cut short, a cover image among videos, transparency, variable frame rate, folders
# that give nothing (empty, too deep), a folder of BMP stills, stills whose header claims a vast frame
# (given as files and among a folder's frames), and a still given as a file. Every input is made here
# with ffmpeg or Python's standard library.
set -u
. "$(dirname "$0")/../lib.sh"
PYTHON=${PYTHON:-python3}
clips() {  # a dataset's clip count, 0 when it has no dataset.json
    local n
    n=$(sed -n 's/.*"clips": *\([0-9]*\).*/\1/p' "$1/dataset.json" 2> /dev/null | head -1)
    echo "${n:-0}"
}
# pixels DATASET X Y: the R,G,B of pixel (X, Y) of every frame of every clip, in the dataset's order
pixels() {
    "$PYTHON" - "$@" <<'PYEOF'
import glob, json, sys, zlib
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors
folder, x, y = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = json.load(open(folder + "/dataset.json"))["frame_size"]
out = []
for shard in sorted(glob.glob(folder + "/shard-*.safetensors")):
    t, meta = read_safetensors(shard)
    for k in sorted((int(n[5:]) for n in t if n.startswith("clip.")), key=int):
        raw = t["clip.%d" % k].tobytes()
        if meta["clip.%d.encoding" % k] == "zlib":
            raw = zlib.decompress(raw)
        frame = size * size * 3
        for f in range(len(raw) // frame):
            p = f * frame + (y * size + x) * 3
            out.append("%d,%d,%d" % tuple(raw[p:p + 3]))
print(" ".join(out))
PYEOF
}
# rgba_png PATH: a 64x64 RGBA PNG (Python's zlib only): the left half transparent (alpha 0) over a
# stored magenta, the right half opaque green, the bottom-right quarter green at alpha 128
rgba_png() {
    "$PYTHON" - "$1" <<'PYEOF'
import struct, sys, zlib
rows = b""
for y in range(64):
    row = b"\0"
    for x in range(64):
        row += bytes([255, 0, 255, 0]) if x < 32 else bytes([0, 255, 0, 128 if y >= 32 else 255])
    rows += row
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 6, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
open(sys.argv[1], "wb").write(png)
PYEOF
}

if ! command -v ffmpeg > /dev/null; then
    fail prepare_media_inputs "ffmpeg is missing (apt-get install ffmpeg)"
    exit 0
fi

# ---- 1. resampling ties: an output time midway between two frames takes the earlier one ----
# Each frame's grey is 4 N + 2 (N its number). AVI's clock ticks 1 / fps, so the ties are exact;
# Matroska's ticks a millisecond: 15 fps frames at 0, 67, 133, 200 ms, so a tie (frames 2 and 3 at
# 166.67 ms) breaks by the rounding unless the times go back on the frame grid.
ffmpeg -v error -f lavfi -i "color=c=black:s=16x16:r=15,format=gray,geq=lum='4*N+2'" -frames:v 30 -c:v ffv1 "$tmp/idx15.avi"
ffmpeg -v error -f lavfi -i "color=c=black:s=16x16:r=25,format=gray,geq=lum='4*N+2'" -frames:v 50 -c:v ffv1 "$tmp/idx25.avi"
for k in 15 25; do ffmpeg -v error -i "$tmp/idx$k.avi" -c:v ffv1 "$tmp/idx$k.mkv"; done
index_of() {  # the source frame numbers of a dataset's frames, space-separated
    pixels "$1" 0 0 | tr ' ' '\n' | awk -F, 'NF { printf "%s%d", (n++ ? " " : ""), ($1 - 2) / 4 }'
}
for ext in avi mkv; do
    label=$([ $ext = avi ] && echo "" || echo "${ext}_")
    "$FC" prepare --input "$tmp/idx15.$ext" --out "$tmp/r30$ext" --size 16 --clip-frames 1 --fps 30 > "$tmp/r30.log" 2>&1
    rc=$?
    got=$(index_of "$tmp/r30$ext")
    want=$(seq 0 58 | awk '{ printf "%s%d", (NR > 1 ? " " : ""), int($1 / 2) }')
    [ "$rc" = 0 ] && [ "$got" = "$want" ]
    expect prepare_fps_ties_${label}15_to_30 $? "status $rc; source frames of the 30 fps clips from .$ext: $(echo "$got" | cut -c1-80)... (want 0 0 1 1 2 2 ...)"
    "$FC" prepare --input "$tmp/idx25.$ext" --out "$tmp/r10$ext" --size 16 --clip-frames 1 --fps 10 > "$tmp/r10.log" 2>&1
    rc=$?
    got=$(index_of "$tmp/r10$ext")
    want=$(seq 0 19 | awk '{ printf "%s%d", (NR > 1 ? " " : ""), int($1 * 5 / 2) }')
    [ "$rc" = 0 ] && [ "$got" = "$want" ]
    expect prepare_fps_ties_${label}25_to_10 $? "status $rc; source frames of the 10 fps clips from .$ext: $got (want $want)"
done

# ---- 2. a Matroska file cut short: its frames kept, its line and the summary say so ----
ffmpeg -v error -f lavfi -i testsrc2=size=64x48:rate=25 -frames:v 200 -c:v mpeg4 -q:v 3 "$tmp/long.mkv"
head -c $(( $(stat -c %s "$tmp/long.mkv") * 6 / 10 )) "$tmp/long.mkv" > "$tmp/cut.mkv"
"$FC" prepare --input "$tmp/cut.mkv" --out "$tmp/cut" --size 16 --clip-frames 8 > "$tmp/cut.log" 2>&1
rc=$?
line=$(grep -m1 'cut.mkv:' "$tmp/cut.log")
[ "$rc" = 0 ] && [ "$(clips "$tmp/cut")" -ge 10 ] && echo "$line" | grep -q 'cut short' &&
    grep -q ' 1 cut short by damage' "$tmp/cut.log"
expect prepare_truncated_mkv_said $? "status $rc, $(clips "$tmp/cut") clips: $line | $(tail -1 "$tmp/cut.log" | sed -E 's/.*inputs? \(//' | cut -c1-90)"
# exactly three frames missing is cut short, though the seconds it lacks (1.2 - 0.9 at 10 fps) come out
# just under three frames' 0.3 s in double: 12 intra frames, cut where the 10th packet starts
ffmpeg -v error -f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 12 -c:v mpeg4 -g 1 -q:v 3 "$tmp/ten.mkv"
head -c "$(ffprobe -v error -show_entries packet=pos -of csv=p=0 "$tmp/ten.mkv" | sed -n 10p)" "$tmp/ten.mkv" > "$tmp/cut3.mkv"
"$FC" prepare --input "$tmp/cut3.mkv" --out "$tmp/cut3" --size 16 --clip-frames 3 > "$tmp/cut3.log" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q 'cut3.mkv: 9 frames .*of the 1.200 s its header states: the file looks cut short' "$tmp/cut3.log"
expect prepare_three_frames_short_said $? "status $rc, $(grep -m1 'cut3.mkv:' "$tmp/cut3.log")"
# an MPEG transport stream states no length: cut inside a packet (no whole number of 188-byte packets)
# at any of ten places, it is never taken silently (where the decoder does not stumble on the cut, the
# torn packet says it), and a cut on a packet's edge, which cannot be told from an end, is not claimed
ffmpeg -v error -f lavfi -i testsrc2=size=64x48:rate=25 -frames:v 20 -c:v mpeg2video "$tmp/long.ts"
packets=$(( $(stat -c %s "$tmp/long.ts") / 188 ))
silent=0 torn=0
for k in 1 2 3 4 5 6 7 8 9 10; do
    head -c $(( (packets * (40 + 5 * k) / 100) * 188 + 101 )) "$tmp/long.ts" > "$tmp/torn.ts"
    rm -rf "$tmp/ts_torn"
    "$FC" prepare --input "$tmp/torn.ts" --out "$tmp/ts_torn" --size 16 --clip-frames 4 > "$tmp/ts_torn.log" 2>&1
    grep -q 'torn.ts:.*in a torn transport-stream packet .*: the file looks cut short' "$tmp/ts_torn.log" && torn=$((torn + 1))
    grep -qE 'torn.ts:.*(cut short|decoding error)' "$tmp/ts_torn.log" || silent=$((silent + 1))
done
head -c $(( packets / 2 * 188 )) "$tmp/long.ts" > "$tmp/edge.ts"
# whole files that are no whole number of packets: zeros after the last packet, junk before the first
{ cat "$tmp/long.ts"; head -c 100 /dev/zero; } > "$tmp/padded.ts"
{ printf 'not a packet: 37 bytes of junk here.'; cat "$tmp/long.ts"; } > "$tmp/junk_first.ts"
claimed=""
for k in edge padded junk_first; do
    "$FC" prepare --input "$tmp/$k.ts" --out "$tmp/ts_$k" --size 16 --clip-frames 4 > "$tmp/ts_$k.log" 2>&1
    grep -q 'torn transport-stream' "$tmp/ts_$k.log" && claimed="$claimed $k"
done
[ $silent = 0 ] && [ $torn -ge 1 ] && [ -z "$claimed" ] && grep -q ': 20 frames -> ' "$tmp/ts_padded.log" && grep -q ': 20 frames -> ' "$tmp/ts_junk_first.log"
expect prepare_truncated_ts_said $? "10 cuts inside a packet: $torn said by the torn packet, $silent taken silently; claimed torn among a cut on a packet's edge, a padded and a junk-first whole file: ${claimed:-none}"
# a file whose name holds a tab and an escape sequence: its line names it once, escaped, and nothing
# printed holds a control character (the terminal keeps its colours)
mkdir -p "$tmp/oddnames"
echo "not a video" > "$tmp/oddnames/$(printf 'bad\tname\033[31m.mp4')"
cp "$tmp/long.ts" "$tmp/oddnames/good.ts"
"$FC" prepare --input "$tmp/oddnames" --out "$tmp/odd_ds" --size 16 --clip-frames 4 > "$tmp/odd.log" 2>&1
line=$(grep -m1 'bad' "$tmp/odd.log")
! LC_ALL=C grep -q "$(printf '[\001-\010\013-\037\177]')" "$tmp/odd.log" &&
    echo "$line" | grep -qF 'oddnames/bad\tname\x1b[31m.mp4: skipped: cannot open' && [ "$(echo "$line" | grep -o 'tname' | wc -l)" = 1 ]
expect prepare_odd_name_printable_once $? "$(echo "$line" | sed 's/.*oddnames/oddnames/' | cut -c1-100)"
# beyond ASCII: a name in another language prints as it is; the 8-bit CSI (a lone byte 0x9b) and the
# C1 CSI in UTF-8 (C2 9B), which some terminals obey like ESC [, are escaped like the control characters,
# and so is a right-to-left override (E2 80 AE), which would show the rest of the line reversed
mkdir -p "$tmp/oddnames8"
echo "not a video" > "$tmp/oddnames8/$(printf 'caf\303\251 \346\227\245\302\233[31m\233[0m\342\200\256gpm.mp4')"
cp "$tmp/long.ts" "$tmp/oddnames8/good.ts"
"$FC" prepare --input "$tmp/oddnames8" --out "$tmp/odd8_ds" --size 16 --clip-frames 4 > "$tmp/odd8.log" 2>&1
line=$(grep -a -m1 'caf' "$tmp/odd8.log")
! LC_ALL=C grep -q "$(printf '[\200-\237]')" <(LC_ALL=C sed "s/$(printf '\303\251\|\346\227\245')//g" "$tmp/odd8.log") &&
    echo "$line" | grep -qF "oddnames8/$(printf 'caf\303\251 \346\227\245')\\xc2\\x9b[31m\\x9b[0m\\xe2\\x80\\xaegpm.mp4: skipped: cannot open"
expect prepare_odd_name_8bit_escaped $? "$(echo "$line" | sed 's/.*oddnames8/oddnames8/' | cut -c1-100 | LC_ALL=C cat -v)"
"$FC" prepare --input "$tmp/long.mkv" --out "$tmp/whole" --size 16 --clip-frames 8 > "$tmp/whole.log" 2>&1
rc=$?
[ "$rc" = 0 ] && [ "$(clips "$tmp/whole")" = 25 ] && ! grep 'long.mkv:' "$tmp/whole.log" | grep -q 'cut short' &&
    grep -q ' 0 cut short by damage' "$tmp/whole.log"
expect prepare_whole_mkv_not_cut_short $? "status $rc, $(clips "$tmp/whole") clips: $(grep -m1 'long.mkv:' "$tmp/whole.log")"
# an HEVC stream cut mid-stream (its first packet no key picture): the decoder makes the pictures before
# the first key one from references the file does not hold, a flat grey, and flags nothing; they are
# left out, and the line says so (the first clip was flat grey, nothing said)
ffmpeg -v error -f lavfi -i testsrc2=s=64x48:r=10:d=10 -c:v libx265 -x265-params keyint=25:open-gop=1:log-level=error \
    -f mpegts "$tmp/hevc.ts" && "$PYTHON" -c "
import sys; b = open(sys.argv[1], 'rb').read(); o = len(b) * 70 // 100 // 188 * 188; open(sys.argv[2], 'wb').write(b[o:])" \
    "$tmp/hevc.ts" "$tmp/hevc_cut.ts"
"$FC" prepare --input "$tmp/hevc_cut.ts" --out "$tmp/hevc_ds" --size 16 --clip-frames 5 > "$tmp/hevc.log" 2>&1
rc=$?
spread=$("$PYTHON" - "$tmp/hevc_ds" <<'PYEOF'
import glob, sys, zlib
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors
t, m = read_safetensors(sorted(glob.glob(sys.argv[1] + "/shard-*.safetensors"))[0])
raw = t["clip.0"].tobytes()
a = np.frombuffer(zlib.decompress(raw) if m.get("clip.0.encoding") == "zlib" else raw, np.uint8).reshape(5, 16 * 16 * 3)
print("%.0f" % a.std(axis=1).min())  # the flattest frame of the first clip
PYEOF
)
# the same stream in MP4, whose header counts every picture: the ones left out are no cut
ffmpeg -v error -i "$tmp/hevc_cut.ts" -c copy -copyinkf "$tmp/hevc_cut.mp4"
"$FC" prepare --input "$tmp/hevc_cut.mp4" --out "$tmp/hevc_mp4" --size 16 --clip-frames 5 > "$tmp/hevc_mp4.log" 2>&1
rc_mp4=$?
[ "$rc" = 0 ] && grep -q "hevc_cut.ts: .*it begins mid-stream: its first [0-9]* pictures\?, before a key picture, left out" "$tmp/hevc.log" &&
    [ "${spread:-0}" -ge 20 ] && [ "$rc_mp4" = 0 ] && grep -q "hevc_cut.mp4: .*it begins mid-stream" "$tmp/hevc_mp4.log" &&
    ! grep -q "cut short" <(grep "hevc_cut.mp4:" "$tmp/hevc_mp4.log")
expect prepare_hevc_cut_mid_stream $? "status $rc, the first clip's flattest frame's spread ${spread:-?} (testsrc2: about 75): $(grep -m1 'hevc_cut.ts:' "$tmp/hevc.log" | cut -c1-200); MP4: status $rc_mp4, $(grep -m1 'hevc_cut.mp4:' "$tmp/hevc_mp4.log" | cut -c1-160)"
# whole files whose headers state more than their video holds: an MP4 cut with an edit list (ffmpeg -ss
# -c copy: its frame count includes the samples before the cut), and a WMV whose audio outlasts its
# video (ASF, like OGG and FLV, states the whole file's duration): neither is cut short
ffmpeg -v error -f lavfi -i testsrc2=s=64x48:r=10:d=6 -c:v mpeg4 -g 30 "$tmp/gop.mp4" &&
    ffmpeg -v error -ss 1.25 -i "$tmp/gop.mp4" -c copy "$tmp/edit_list.mp4" &&
    ffmpeg -v error -f lavfi -i testsrc2=s=64x48:r=10:d=3 -f lavfi -i sine=d=10 -c:v wmv2 -c:a wmav2 "$tmp/long_audio.wmv"
"$FC" prepare --input "$tmp/edit_list.mp4" --input "$tmp/long_audio.wmv" --out "$tmp/stated" --size 16 --clip-frames 10 \
    > "$tmp/stated.log" 2>&1
rc=$?
[ "$rc" = 0 ] && [ "$(clips "$tmp/stated")" = 7 ] && ! grep -q 'cut short' <(grep -E 'edit_list.mp4:|long_audio.wmv:' "$tmp/stated.log") &&
    grep -q ' 0 cut short by damage' "$tmp/stated.log"
expect prepare_stated_length_of_the_video_alone $? "status $rc, $(clips "$tmp/stated") clips: $(grep -E 'edit_list.mp4:|long_audio.wmv:' "$tmp/stated.log" | cut -c1-150 | tr '\n' ' ')"

# ---- 3. a cover image among videos: the videos are read, the image is not (one line) ----
mkdir -p "$tmp/videos/sub"
cp "$tmp/long.mkv" "$tmp/videos/a.mkv"
ffmpeg -v error -f lavfi -i testsrc=size=48x48:rate=25 -frames:v 40 -c:v mpeg4 "$tmp/videos/sub/b.mp4"
ffmpeg -v error -f lavfi -i testsrc=size=64x64 -frames:v 1 "$tmp/videos/cover.jpg"
"$FC" prepare --input "$tmp/videos" --out "$tmp/videos_ds" --size 16 --clip-frames 8 > "$tmp/videos.log" 2>&1
rc=$?
[ "$rc" = 0 ] && [ "$(clips "$tmp/videos_ds")" = 30 ] && [ "$(grep -c 'its 1 image .*not read' "$tmp/videos.log")" = 1 ]
expect prepare_cover_image_among_videos $? "status $rc, $(clips "$tmp/videos_ds") clips (25 + 5 expected): $(grep -v '^\[' "$tmp/videos.log" | head -2 | tr '\n' ' ' | cut -c1-200)"

# ---- 4. transparency: composited over black, the colour stored under alpha 0 never shows ----
mkdir -p "$tmp/alpha_frames"
rgba_png "$tmp/alpha.png"
for i in 1 2 3 4; do cp "$tmp/alpha.png" "$tmp/alpha_frames/f$i.png"; done
ffmpeg -v error -loop 1 -i "$tmp/alpha.png" -frames:v 8 -c:v ffv1 -pix_fmt yuva420p "$tmp/alpha.mkv"
"$FC" prepare --input "$tmp/alpha_frames" --input "$tmp/alpha.mkv" --out "$tmp/alpha_ds" --size 32 --clip-frames 4 \
    > "$tmp/alpha.log" 2>&1
rc=$?
left=$(pixels "$tmp/alpha_ds" 4 4 | tr ' ' '\n' | sort -u | tr '\n' ' ')
right=$(pixels "$tmp/alpha_ds" 24 4 | tr ' ' '\n' | sort -u | tr '\n' ' ')
half=$(pixels "$tmp/alpha_ds" 24 24 | tr ' ' '\n' | sort -u | tr '\n' ' ')
# the video goes through 4:2:0 YUV: within 6 levels; the PNG is exact (0 * 128 / 255 and 255 * 128 / 255 = 128)
close_to() {  # close_to "R,G,B ..." R G B TOLERANCE: every triple within TOLERANCE of R,G,B
    echo "$1" | tr ' ' '\n' | awk -F, -v r="$2" -v g="$3" -v b="$4" -v t="$5" \
        'function a(x) { return x < 0 ? -x : x } NF && (a($1 - r) > t || a($2 - g) > t || a($3 - b) > t) { bad = 1 } END { exit bad }'
}
[ "$rc" = 0 ] && [ "$(clips "$tmp/alpha_ds")" = 3 ] && close_to "$left" 0 0 0 6 && close_to "$right" 0 255 0 6 &&
    close_to "$half" 0 128 0 6 && [ "$(pixels "$tmp/alpha_ds" 4 4 | cut -d' ' -f1)" = "0,0,0" ]
expect prepare_alpha_over_black $? "status $rc, $(clips "$tmp/alpha_ds") clips; transparent left: $left; opaque right: $right; alpha 128: $half"
# VP9 in WebM carries its transparency beside the picture (alpha_mode 1), which FFmpeg's own decoder
# drops (the stored magenta showed): read with libvpx's
ffmpeg -v error -loop 1 -i "$tmp/alpha.png" -frames:v 8 -c:v libvpx-vp9 -pix_fmt yuva420p -lossless 1 "$tmp/alpha.webm"
"$FC" prepare --input "$tmp/alpha.webm" --out "$tmp/alpha_webm" --size 32 --clip-frames 4 > "$tmp/alpha_webm.log" 2>&1
rc=$?
left=$(pixels "$tmp/alpha_webm" 4 4 | tr ' ' '\n' | sort -u | tr '\n' ' ')
right=$(pixels "$tmp/alpha_webm" 24 4 | tr ' ' '\n' | sort -u | tr '\n' ' ')
[ "$rc" = 0 ] && [ "$(clips "$tmp/alpha_webm")" = 2 ] && close_to "$left" 0 0 0 6 && close_to "$right" 0 255 0 6
expect prepare_alpha_vp9_over_black $? "status $rc, $(clips "$tmp/alpha_webm") clips; transparent left: $left; opaque right: $right; $(tail -1 "$tmp/alpha_webm.log" | cut -c1-80)"
# transparency by a colour key (a tRNS chunk: an RGB PNG whose pixels of one colour are transparent, and
# the same for a grey PNG): those pixels over black too, the others as stored
mkdir -p "$tmp/key_frames"
"$PYTHON" - "$tmp/key_frames" <<'PYEOF'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
def png(path, colour, px_left, px_right, trns):
    rows = b"".join(b"\0" + px_left * 32 + px_right * 32 for _ in range(64))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, colour, 0, 0, 0))
                           + chunk(b"tRNS", trns) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
for i in range(2):  # the left half the keyed colour (200, 100, 50), the right (10, 20, 30)
    png("%s/rgb%d.png" % (sys.argv[1], i), 2, bytes([200, 100, 50]), bytes([10, 20, 30]), bytes([0, 200, 0, 100, 0, 50]))
    png("%s/grey%d.png" % (sys.argv[1], i), 0, bytes([200]), bytes([60]), bytes([0, 200]))  # grey 200 keyed
PYEOF
"$FC" prepare --input "$tmp/key_frames" --out "$tmp/key_ds" --size 32 --clip-frames 4 > "$tmp/key.log" 2>&1
rc=$?
keyed=$(pixels "$tmp/key_ds" 4 4 | tr ' ' '\n' | sort -u | tr '\n' ' ')
kept=$(pixels "$tmp/key_ds" 24 4 | tr ' ' '\n' | sort -u | tr '\n' ' ')
[ "$rc" = 0 ] && [ "$keyed" = "0,0,0 " ] && [ "$kept" = "10,20,30 60,60,60 " ]
expect prepare_colour_key_over_black $? "status $rc; the keyed colour's pixels: $keyed; the others: $kept"

# ---- 6. variable frame rate without --fps: said once in the input's line ----
ffmpeg -v error -f lavfi -i testsrc=size=64x48:rate=25 -frames:v 40 \
    -vf "setpts='if(lt(N,20),N/25/TB,(0.8+(N-20)/5)/TB)'" -fps_mode passthrough -c:v ffv1 "$tmp/vfr.mkv" 2> /dev/null ||
    ffmpeg -v error -f lavfi -i testsrc=size=64x48:rate=25 -frames:v 40 \
        -vf "setpts='if(lt(N,20),N/25/TB,(0.8+(N-20)/5)/TB)'" -vsync passthrough -c:v ffv1 "$tmp/vfr.mkv"
"$FC" prepare --input "$tmp/vfr.mkv" --input "$tmp/long.mkv" --out "$tmp/vfr" --size 16 --clip-frames 8 > "$tmp/vfr.log" 2>&1
rc=$?
[ "$rc" = 0 ] && [ "$(grep 'vfr.mkv:' "$tmp/vfr.log" | grep -c 'variable frame rate (5 to 25 fps): --fps 25 gives evenly timed clips')" = 1 ] &&
    [ "$(grep -c 'variable frame rate' "$tmp/vfr.log")" = 1 ]
expect prepare_variable_frame_rate_said $? "status $rc: $(grep -m1 'vfr.mkv:' "$tmp/vfr.log" | sed 's/.*vfr.mkv: //')"

# ---- 7. folders that give nothing: an empty one, and one past the depth limit, each named ----
mkdir -p "$tmp/emptyd" "$tmp/deep/1/2/3/4/5/6/7/8/9"
cp "$tmp/long.mkv" "$tmp/deep/1/2/3/4/5/6/7/8/9/x.mkv"
cp "$tmp/long.mkv" "$tmp/deep/top.mkv"
"$FC" prepare --input "$tmp/emptyd" --input "$tmp/deep" --out "$tmp/deep_ds" --size 16 --clip-frames 8 > "$tmp/deep.log" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "^  $tmp/emptyd: skipped: no video or frames in it$" "$tmp/deep.log" &&
    grep -q "^  $tmp/deep/1/2/3/4/5/6/7/8: skipped: deeper than 8 folders" "$tmp/deep.log"
expect prepare_empty_and_deep_folders_said $? "status $rc: $(grep -v '^\[' "$tmp/deep.log" | grep -v '^prepare:' | tr '\n' ' ' | cut -c1-220)"
"$FC" prepare --input "$tmp/emptyd" --out "$tmp/none_ds" --size 16 --clip-frames 8 > "$tmp/none.log" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "none of the inputs holds a file to read: $tmp/emptyd" "$tmp/none.log"
expect prepare_no_input_names_them $? "status $rc: $(tail -1 "$tmp/none.log")"

# ---- 8. a folder of BMP stills: one line, frames in a folder must be PNG or JPEG ----
mkdir -p "$tmp/bmps"
for i in 1 2 3 4 5; do ffmpeg -v error -f lavfi -i testsrc=size=32x32 -frames:v 1 "$tmp/bmps/f$i.bmp"; done
"$FC" prepare --input "$tmp/bmps" --out "$tmp/bmps_ds" --size 16 --clip-frames 4 > "$tmp/bmps.log" 2>&1
rc=$?
[ "$rc" != 0 ] && [ "$(grep -c 'must be PNG or JPEG' "$tmp/bmps.log")" = 1 ] && ! grep -q 'fewer than one clip' "$tmp/bmps.log"
expect prepare_bmp_folder_one_line $? "status $rc, $(wc -l < "$tmp/bmps.log") lines: $(head -2 "$tmp/bmps.log" | tr '\n' ' ' | cut -c1-200)"

# ---- 10. the lines themselves: an MP4 cut inside its index, and a file name with a newline ----
ffmpeg -v error -f lavfi -i testsrc=size=48x48:rate=25 -frames:v 50 -c:v mpeg4 "$tmp/moov_last.mp4"
head -c $(( $(stat -c %s "$tmp/moov_last.mp4") - 100 )) "$tmp/moov_last.mp4" > "$tmp/no_moov.mp4"  # its moov, last, cut
cp "$tmp/long.mkv" "$tmp/new
line.mkv"
"$FC" prepare --input "$tmp/no_moov.mp4" --input "$tmp/new
line.mkv" --out "$tmp/lines" --size 16 --clip-frames 8 > "$tmp/lines.log" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "no_moov.mp4: skipped: cannot open: the file ends before its header or index (an MP4's moov) is whole: cut short" "$tmp/lines.log" &&
    grep -qF "[2/2] $tmp/new\nline.mkv: 200 frames -> 25 clips" "$tmp/lines.log"
expect prepare_lines_say_cut_and_stay_one $? "status $rc: $(grep -v '^prepare' "$tmp/lines.log" | tr '\n' '|' | cut -c1-250)"

# ---- 11. a still whose header claims a vast frame (a decompression bomb): one line naming it and
# its size, over the limit the frame folders keep, before FFmpeg allocates the frame it claims ----
# bomb_png PATH W H: a PNG header claiming W x H pixels over a few bytes of data
bomb_png() {
    "$PYTHON" - "$@" <<'PYEOF'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
ihdr = struct.pack(">IIBBBBB", int(sys.argv[2]), int(sys.argv[3]), 8, 2, 0, 0, 0)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
open(sys.argv[1], "wb").write(png)
PYEOF
}
bomb_png "$tmp/bomb.png" 100000 100000
bomb_png "$tmp/claims.png" 15000 15000  # within what FFmpeg takes: it allocated 675 MB for it
ffmpeg -v error -f lavfi -i testsrc=size=64x64 -frames:v 1 "$tmp/photo.jpg"
"$PYTHON" - "$tmp/photo.jpg" "$tmp/bomb.jpg" <<'PYEOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
i = 2
while b[i + 1] not in (0xC0, 0xC1, 0xC2):  # to the frame header: its height and width set to 60000
    i += 2 + (b[i + 2] << 8 | b[i + 3])
b[i + 5:i + 9] = (60000).to_bytes(2, "big") * 2
open(sys.argv[2], "wb").write(b)
PYEOF
# the peak memory of the prepare, in KiB, on the last line
"$PYTHON" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$FC" prepare --input "$tmp/bomb.png" --input "$tmp/claims.png" \
    --input "$tmp/bomb.jpg" --input "$tmp/long.mkv" --out "$tmp/bombs" --size 16 --clip-frames 8 > "$tmp/bombs.log" 2>&1
rc=$?
peak=$(tail -1 "$tmp/bombs.log")
[ "$rc" = 0 ] && [ "$(clips "$tmp/bombs")" = 25 ] && [ "$peak" -lt 200000 ] &&
    grep -q "bomb.png: skipped: a PNG of 100000x100000 pixels, too large to read (at most 100000000 pixels)$" "$tmp/bombs.log" &&
    grep -q "claims.png: skipped: an image of 15000x15000 pixels, too large to read (at most 100000000 pixels)$" "$tmp/bombs.log" &&
    grep -q "bomb.jpg: skipped: an image of 60000x60000 pixels, too large to read (at most 100000000 pixels)$" "$tmp/bombs.log"
expect prepare_still_bomb_named $? "status $rc, $(clips "$tmp/bombs") clips, peak memory $peak KiB: $(grep -E '^\[[123]/' "$tmp/bombs.log" | sed 's/^.*\///' | tr '\n' '|' | cut -c1-300)"

# and among a folder's frames (the fourth of six): the folder stops there with the same words, the
# three frames before it cut into clips, nothing allocated for the claimed size
for k in bomb claims; do
    mkdir -p "$tmp/frames_$k"
    ffmpeg -v error -f lavfi -i testsrc=size=32x32:rate=25 -frames:v 6 -start_number 1 "$tmp/frames_$k/f%d.png"
    cp "$tmp/$k.png" "$tmp/frames_$k/f4.png"
done
"$PYTHON" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$FC" prepare --input "$tmp/frames_bomb" --input "$tmp/frames_claims" \
    --out "$tmp/bomb_frames" --size 16 --clip-frames 1 > "$tmp/bomb_frames.log" 2>&1
rc=$?
peak=$(tail -1 "$tmp/bomb_frames.log")
[ "$rc" = 0 ] && [ "$(clips "$tmp/bomb_frames")" = 6 ] && [ "$peak" -lt 200000 ] &&
    grep -q "frames_bomb: 3 frames -> 3 clips (.*); stopped at a bad frame: $tmp/frames_bomb/f4.png: a PNG of 100000x100000 pixels, too large to read (at most 100000000 pixels)$" "$tmp/bomb_frames.log" &&
    grep -q "frames_claims: 3 frames -> 3 clips (.*); stopped at a bad frame: $tmp/frames_claims/f4.png: an image of 15000x15000 pixels, too large to read (at most 100000000 pixels)$" "$tmp/bomb_frames.log"
expect prepare_frame_folder_bomb_stops $? "status $rc, $(clips "$tmp/bomb_frames") clips, peak memory $peak KiB: $(grep -E '^\[[12]/' "$tmp/bomb_frames.log" | sed 's/^.*frames_//' | tr '\n' '|' | cut -c1-300)"

# ---- 12. a still given as a file is one frame: too few for a clip, its line says why; a clip of one
# frame it gives, with --fps too ----
"$FC" prepare --input "$tmp/photo.jpg" --input "$tmp/alpha.png" --out "$tmp/stills" --size 16 --clip-frames 8 \
    > "$tmp/stills.log" 2>&1
rc=$?
"$FC" prepare --input "$tmp/photo.jpg" --out "$tmp/still1" --size 16 --clip-frames 1 > "$tmp/still1.log" 2>&1
rc1=$?
"$FC" prepare --input "$tmp/photo.jpg" --out "$tmp/still1fps" --size 16 --clip-frames 1 --fps 5 > "$tmp/still1fps.log" 2>&1
rc2=$?
[ "$rc" = 1 ] && grep -q "photo.jpg: skipped: an image is one frame, fewer than one clip of 8 (a clip's frames as images: give their folder)$" "$tmp/stills.log" &&
    grep -q "alpha.png: skipped: an image is one frame, fewer than one clip of 8" "$tmp/stills.log" &&
    [ "$rc1" = 0 ] && [ "$(clips "$tmp/still1")" = 1 ] && [ "$rc2" = 0 ] && [ "$(clips "$tmp/still1fps")" = 1 ]
expect prepare_single_still_said $? "status $rc: $(grep -m1 'photo.jpg' "$tmp/stills.log" | sed 's/.*photo.jpg: //'); at --clip-frames 1: status $rc1, $(clips "$tmp/still1") clip; with --fps 5: status $rc2, $(clips "$tmp/still1fps") clip: $(grep -m1 'photo.jpg' "$tmp/still1fps.log" | sed 's/.*photo.jpg: //')"

# ---- 13. a folder of frames whose numbers skip (f5 and f6 missing): read as one clip, said ----
mkdir -p "$tmp/gaps"
ffmpeg -v error -f lavfi -i "color=c=gray:s=16x16" -frames:v 1 "$tmp/gray16.png"
for i in $(seq 1 20); do [ $i = 5 ] || [ $i = 6 ] || [ $i = 13 ] || cp "$tmp/gray16.png" "$tmp/gaps/f$i.png"; done
"$FC" prepare --input "$tmp/gaps" --out "$tmp/gaps_data" --size 16 --clip-frames 8 > "$tmp/gaps.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "gaps: 17 frames -> 2 clips (.*); its frames' numbers skip 2 times (f4.png then f7.png): the frames missing there are not in its clips, which join the frames on either side$" "$tmp/gaps.log"
expect prepare_frame_numbers_skip_said $? "status $rc: $(grep -m1 'gaps:' "$tmp/gaps.log" | cut -c1-250)"

exit 0
