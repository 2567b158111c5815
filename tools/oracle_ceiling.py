#!/usr/bin/python3
"""What a prediction that knows the future could score: ceilings for `eval --given K`.

For each clip of a dataset folder (framechain prepare --out), the frames after the first K are
predicted from the given ones, and scored as `framechain eval` scores them (PSNR of each frame,
then the mean over frames and clips). Beside repeating the last given frame (eval's baseline):

  mean of the given frames     a still prediction made from the given frames alone
  best still frame  (oracle)   the mean of the truth's frames: the best any one held frame can do
  best shift a frame (oracle)  the last given frame moved by the whole-pixel shift (within R,
                               edges repeated) that is closest to each true frame: the best
                               any camera translation can do
  best shift a tile (oracle)   with --tiles: the same for each TxT tile on its own
  tiles along measured motion  with --local H,...: each TxT tile of the last given frame moved along
                               its own motion, measured on the given frames (the shift of 1/4
                               pixel within 2 a frame that best maps frames K-2..K-4 onto K-1, kept
                               where it halves standing still's difference), for H frames, then held:
                               what local motion measured from the given frames alone gives
  selection control            the tile oracle aimed at the frames of another clip: what choosing
                               the best of (2R+1)^2 shifts a tile gains with no motion to find
                               (on the real set about as much as it gains on its own clip: a tile
                               oracle bounds nothing about motion)

Usage: tools/oracle_ceiling.py DATASET [--given K] [--next N] [--clips C] [--radius R]
Needs only numpy (tools/safetensors_io.py reads the shards).
"""

import argparse
import json
import os
import sys
import zlib

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read_safetensors  # noqa: E402


def read_clips(folder, limit):
    """The dataset's clips as float arrays (frames, size, size, 3) in [0, 1], in manifest order."""
    try:
        with open(os.path.join(folder, "dataset.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{folder}/dataset.json: {e}")
    if meta.get("format") != "framechain-dataset":
        sys.exit(f"{folder}/dataset.json: not a framechain dataset (format {meta.get('format')!r})")
    size, frames = int(meta["frame_size"]), int(meta["clip_frames"])
    clips = []
    for shard in meta["shards"]:
        tensors, header = read_safetensors(os.path.join(folder, shard["file"]))
        for i in range(int(header["clips"])):
            raw = tensors[f"clip.{i}"].tobytes()
            if header.get(f"clip.{i}.encoding") == "zlib":
                raw = zlib.decompress(raw)
            pixels = np.frombuffer(raw, np.uint8)
            if pixels.size != frames * size * size * 3:
                sys.exit(f"{folder}/{shard['file']}: clip {i} holds {pixels.size} bytes, "
                         f"not {frames} RGB frames of {size}x{size}")
            clips.append(pixels.reshape(frames, size, size, 3).astype(np.float64) / 255.0)
            if len(clips) == limit:
                return clips
    return clips


def psnr(pred, truth):
    mse = max(float(((pred - truth) ** 2).mean()), 1e-10)
    return 10.0 * np.log10(1.0 / mse)


def shifted_copies(frame, radius):
    """Every whole-pixel shift of frame within radius, edges repeated: ((2R+1)^2, H, W, 3)."""
    n = frame.shape[0]
    out = []
    for dy in range(-radius, radius + 1):
        rows = np.clip(np.arange(n) - dy, 0, n - 1)
        for dx in range(-radius, radius + 1):
            cols = np.clip(np.arange(n) - dx, 0, n - 1)
            out.append(frame[rows][:, cols])
    return np.stack(out)


def best_shift_frame(copies, truth):
    errors = ((copies - truth) ** 2).mean(axis=(1, 2, 3))
    return copies[int(np.argmin(errors))]


def best_shift_tiles(copies, truth, tile):
    """Each tile x tile block from whichever shifted copy is closest to the truth there."""
    s, n = copies.shape[0], copies.shape[1]
    t = n // tile
    blocks = copies.reshape(s, t, tile, t, tile, 3)
    errors = ((blocks - truth.reshape(1, t, tile, t, tile, 3)) ** 2).sum(axis=(2, 4, 5))  # (s, t, t)
    pick = np.argmin(errors, axis=0)                                                     # (t, t)
    out = np.take_along_axis(blocks, pick[None, :, None, :, None, None], axis=0)[0]
    return out.reshape(n, n, 3)


def bilinear_shift(img, dy, dx):
    """img (N, N, 3) moved by (dy, dx) pixels, sampled bilinearly, edges repeated."""
    n = img.shape[0]
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float64)
    sy, sx = np.clip(yy - dy, 0, n - 1), np.clip(xx - dx, 0, n - 1)
    y0, x0 = np.floor(sy).astype(int), np.floor(sx).astype(int)
    y1, x1 = np.minimum(y0 + 1, n - 1), np.minimum(x0 + 1, n - 1)
    fy, fx = (sy - y0)[..., None], (sx - x0)[..., None]
    return (img[y0, x0] * (1 - fy) * (1 - fx) + img[y0, x1] * (1 - fy) * fx +
            img[y1, x0] * fy * (1 - fx) + img[y1, x1] * fy * fx)


def tile_velocities(given, tile, reach=2.0, step=0.25):
    """Each tile's velocity (pixels a frame) from the last three steps of the given frames: (t, t, 2)."""
    last, n = given[-1], given[-1].shape[0]
    t = n // tile
    candidates = [(vy, vx) for vy in np.arange(-reach, reach + step / 2, step)
                  for vx in np.arange(-reach, reach + step / 2, step)]
    errors = np.zeros((len(candidates), t, t))
    for c, (vy, vx) in enumerate(candidates):
        for k in range(1, min(3, len(given) - 1) + 1):
            diff = bilinear_shift(given[-1 - k], k * vy, k * vx) - last
            errors[c] += (diff ** 2).sum(-1).reshape(t, tile, t, tile).sum(axis=(1, 3))
    still = errors[candidates.index((0.0, 0.0))]
    best = np.argmin(errors, axis=0)
    v = np.zeros((t, t, 2))
    for i in range(t):
        for j in range(t):
            if errors[best[i, j], i, j] <= 0.5 * still[i, j]:  # a motion that halves standing still's
                v[i, j] = candidates[best[i, j]]
    return v


def carry_tiles(img, v, lead, tile):
    out = img.copy()
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            if v[i, j].any():
                moved = bilinear_shift(img, lead * v[i, j, 0], lead * v[i, j, 1])
                out[i * tile:(i + 1) * tile, j * tile:(j + 1) * tile] = \
                    moved[i * tile:(i + 1) * tile, j * tile:(j + 1) * tile]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--given", type=int, default=7)
    ap.add_argument("--next", type=int, default=40)
    ap.add_argument("--clips", type=int, default=0, help="the first C clips (0: all)")
    ap.add_argument("--radius", type=int, default=8)
    ap.add_argument("--local", default="", help="frames H the measured tile motion goes on, e.g. 2,40")
    ap.add_argument("--local-tile", type=int, default=8)
    ap.add_argument("--tiles", default="", help="tile sizes of the tile oracle, e.g. 16,8 (none by default)")
    a = ap.parse_args()

    clips = read_clips(a.dataset, a.clips)
    k, n = a.given, a.next
    if not clips or clips[0].shape[0] < k + n:
        sys.exit(f"{a.dataset}: clips of {clips[0].shape[0] if clips else 0} frames, "
                 f"--given {k} --next {n} needs {k + n}")
    tiles = [int(t) for t in a.tiles.split(",") if t]
    local = [int(h) for h in a.local.split(",") if h]
    if a.local_tile < 1 or clips[0].shape[1] % a.local_tile:
        sys.exit(f"--local-tile: {a.local_tile} does not divide the frame size {clips[0].shape[1]}")
    for t in tiles:
        if t < 1 or clips[0].shape[1] % t:
            sys.exit(f"--tiles: {t} does not divide the frame size {clips[0].shape[1]}")

    rows = {"repeating the last given frame": [], "mean of the given frames": [],
            "best still frame (oracle)": [], "best shift a frame (oracle)": []}
    for h in local:
        rows[f"{a.local_tile}x{a.local_tile} tiles along their measured motion for {h} frames, then held"] = []
    for t in tiles:
        rows[f"best shift a {t}x{t} tile (oracle)"] = []
        if len(clips) > 1:
            rows[f"selection control: {t}x{t} tiles aimed at another clip"] = []

    for c, clip in enumerate(clips):
        last, future = clip[k - 1], clip[k:k + n]
        copies = shifted_copies(last, a.radius)
        still = future.mean(axis=0)
        given_mean = clip[:k].mean(axis=0)
        rows["repeating the last given frame"].append(np.mean([psnr(last, f) for f in future]))
        rows["mean of the given frames"].append(np.mean([psnr(given_mean, f) for f in future]))
        rows["best still frame (oracle)"].append(np.mean([psnr(still, f) for f in future]))
        rows["best shift a frame (oracle)"].append(
            np.mean([psnr(best_shift_frame(copies, f), f) for f in future]))
        if local:
            v = tile_velocities(clip[:k], a.local_tile)
            for h in local:
                rows[f"{a.local_tile}x{a.local_tile} tiles along their measured motion for {h} frames, then held"].append(
                    np.mean([psnr(carry_tiles(last, v, min(j + 1, h), a.local_tile), f)
                             for j, f in enumerate(future)]))
        for t in tiles:
            rows[f"best shift a {t}x{t} tile (oracle)"].append(
                np.mean([psnr(best_shift_tiles(copies, f, t), f) for f in future]))
            if len(clips) > 1:
                other = clips[(c + 1) % len(clips)][k:k + n]
                rows[f"selection control: {t}x{t} tiles aimed at another clip"].append(np.mean(
                    [psnr(best_shift_tiles(copies, f, t), f) - psnr(last, f) for f in other]))

    base = np.mean(rows["repeating the last given frame"])
    print(f"{a.dataset}: {len(clips)} clips, frames {k}-{k + n - 1} from frames 0-{k - 1}, "
          f"shifts within {a.radius} pixels; PSNR dB (mean over frames, then clips)")
    print()
    per_clip = len(clips) <= 8  # a column of 48 clips' scores is not read
    print("| prediction | PSNR | over repeating the last given frame |" + (" per clip |" if per_clip else ""))
    print("| --- | --- | --- |" + (" --- |" if per_clip else ""))
    for name, values in rows.items():
        v = np.array(values)
        control = name.startswith("selection control")
        cells = f"| {name} | {'' if control else f'{v.mean():.2f}'} | {v.mean() - (0 if control else base):+.2f} |"
        if per_clip:
            cells += " " + " ".join(f"{x:+.2f}" if control else f"{x:.2f}" for x in v) + " |"
        print(cells)


if __name__ == "__main__":
    main()
