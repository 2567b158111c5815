"""Checks a training preview (RUN/samples/step-XXXXXXXX.png) pixel by pixel.

usage: preview_check.py PNG N Z KINDS WINDOWS [DATASET_DIR WINDOWS_TSV LO OFFSETS]

N: the frame size, Z: the enlargement (each frame pixel a Z x Z block), KINDS: the slots' kinds in time
order (a: anchor, c: context, t: target, e.g. "attttt"), WINDOWS: how many windows the image shows.
The frames are found from the first window's first frame, whose grey border is the first grey pixel
of the image, and the layout of report/preview.c (cells of Z N + 4 pixels, 6 apart; the real row 4
under the made one; windows 12 apart). Checked: every frame's border is the colour of its kind
(given: grey, made: orange, real: dark grey); a given frame is the same in both rows; made frames
are not copies of the real ones. With a dataset: every real frame is, pixel for pixel, the frame of
the clip windows.tsv names at its slot's offset (OFFSETS: the slots' offsets in time order, LO: the
plan's earliest). Prints one line; exits 1 on the first failure."""
import json, os, struct, sys, zlib

from pngread import load_png

GIVEN, MADE, REAL = (150, 150, 150), (235, 120, 20), (60, 60, 60)


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def colour(rows, x, y):
    return tuple(rows[y][3 * x:3 * x + 3])


def frame_at(rows, x, y, n, z):
    """The n x n frame inside the border box whose corner is (x, y): each block's centre pixel."""
    return [[colour(rows, x + 2 + px * z + z // 2, y + 2 + py * z + z // 2) for px in range(n)] for py in range(n)]


def clip_frames(dataset, shard, index):
    data = open(os.path.join(dataset, shard), "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    t = head["clip.%d" % index]
    raw = data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]
    meta = head["__metadata__"]
    if meta.get("clip.%d.encoding" % index) == "zlib":
        raw = zlib.decompress(raw)
    size = int(meta["frame_size"])
    return raw, size


def main():
    png, n, z, kinds, windows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    dataset = sys.argv[6] if len(sys.argv) > 6 else None
    w, h, rows = load_png(png)
    corner = next(((x, y) for y in range(h) for x in range(w) if colour(rows, x, y) == GIVEN), None)
    if corner is None:
        fail("no grey border in " + png)
    cell, gap = z * n + 4, 6
    clips = []
    if dataset:
        lines = [l.split("\t") for l in open(sys.argv[7]).read().splitlines() if l and not l.startswith(("#", "window"))]
        clips = [(l[1], int(l[2])) for l in lines]
        lo, offsets = int(sys.argv[8]), [int(float(o)) for o in sys.argv[9].split(",")]
        if len(clips) != windows:
            fail("windows.tsv names %d windows, the image should show %d" % (len(clips), windows))
    compared = differing = 0
    for k in range(windows):
        y = corner[1] + k * (2 * cell + 4 + 12)
        raw = clip_frames(dataset, *clips[k])[0] if dataset else None
        for j, kind in enumerate(kinds):
            x = corner[0] + j * (cell + gap)
            want = MADE if kind == "t" else GIVEN
            if x + cell > w or y + 2 * cell + 4 > h:
                fail("window %d slot %d lies outside the %dx%d image" % (k, j, w, h))
            if colour(rows, x, y) != want or colour(rows, x + cell - 1, y + cell - 1) != want:
                fail("window %d slot %d: made row border %s, expected %s" % (k, j, colour(rows, x, y), want))
            if colour(rows, x, y + cell + 4) != REAL:
                fail("window %d slot %d: real row border %s" % (k, j, colour(rows, x, y + cell + 4)))
            made, real = frame_at(rows, x, y, n, z), frame_at(rows, x, y + cell + 4, n, z)
            if kind != "t" and made != real:
                fail("window %d slot %d: a given frame differs between the rows" % (k, j))
            if kind == "t":
                differing += made != real
            if raw is not None:
                f = offsets[j] - lo
                truth = [[tuple(raw[((f * n + py) * n + px) * 3:((f * n + py) * n + px) * 3 + 3]) for px in range(n)]
                         for py in range(n)]
                if real != truth:
                    fail("window %d slot %d: the real frame is not frame %d of %s clip %d" % (k, j, f, *clips[k]))
                compared += 1
    targets = windows * kinds.count("t")
    if differing == 0:
        fail("every made frame equals the real one: no model drew them")
    print("ok %dx%d image, %d windows x %d slots in place, %d of %d made frames differ from the real ones%s"
          % (w, h, windows, len(kinds), differing, targets,
             ", %d real frames equal the clips' frames" % compared if dataset else ""))


main()
