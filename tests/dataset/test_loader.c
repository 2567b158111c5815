// test_loader.c: the batch loader (loader.c) over a clip dataset: every window against a direct
// computation from (seed, step, window), across thread counts, prefetch depths and resumes; plans
// with negative offsets, mirroring, refusals at start, a damaged clip skipped (the next good clip
// shown, resumes exact), every clip damaged; excluded clips never shown (exclude lists, bad lists
// refused, lists over several shards read and written); its throughput.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dataset/clip_window.h"
#include "dataset/moving_shapes.h"
#include "base/common.h"
#include "base/config.h"
#include "dataset/exclude.h"
#include "dataset/loader.h"
#include "base/philox.h"
#include "formats/shard_fixture.h"
#include "formats/shards.h"

// ---- the loader ----

// Window b of step s, straight from the contract in loader.h.
static uint32_t ref_pick(uint64_t seed, int step, uint64_t base, uint32_t n) {
    uint64_t reject_from = 4294967296ull - 4294967296ull % n;
    for (int j = 0;; j++) {
        uint32_t u = philox_u32(seed, (uint32_t)step, RNG_DATA, base + (uint64_t)j);
        if (u < reject_from || j == 255) return u % n;
    }
}

// Windows counted by ref_batch: moving shapes, footage at 2x speed, cropped, cropped and moving; and
// crop samples that fell outside the frame (before the clamp, more than half a pixel out).
static int g_ref_shapes, g_ref_fast, g_ref_zoomed, g_ref_panned, g_ref_outside;
// Windows whose clip was damaged and that show the next good one (loader.h).
static long g_ref_substituted;

// The value of frame (N x N RGB) at (sx, sy), bilinear between its four pixels, as loader.h says.
static real ref_bilinear(const uint8_t *frame, int N, double sx, double sy, int ch) {
    if (sx < -0.5 - 1e-9 || sy < -0.5 - 1e-9 || sx > N - 0.5 + 1e-9 || sy > N - 0.5 + 1e-9) g_ref_outside++;
    sx = sx < 0 ? 0 : sx > N - 1 ? N - 1 : sx;
    sy = sy < 0 ? 0 : sy > N - 1 ? N - 1 : sy;
    int x0 = (int)floor(sx), y0 = (int)floor(sy);
    int x1 = x0 == N - 1 ? x0 : x0 + 1, y1 = y0 == N - 1 ? y0 : y0 + 1;
    double wx = sx - x0, wy = sy - y0;
#define PIX(x, y) ((real)(frame[((size_t)(y) * N + (x)) * 3 + ch] / 127.5 - 1.0))
    double top = PIX(x0, y0) * (1 - wx) + PIX(x1, y0) * wx;
    double bottom = PIX(x0, y1) * (1 - wx) + PIX(x1, y1) * wx;
#undef PIX
    return (real)(top * (1 - wy) + bottom * wy);
}

static void ref_batch(const Dataset *d, const Config *c, int B, uint64_t seed, int step, real *out) {
    int N = dataset_frame_size(d), CF = dataset_clip_frames(d), lo = 0, hi = 0;
    for (int f = 0; f < c->slots; f++) {
        int o = (int)c->slot_offset[f];
        if (!f || o < lo) lo = o;
        if (!f || o > hi) hi = o;
    }
    uint8_t *clip = fc_malloc(dataset_clip_bytes(d));
    char err[1024];
    size_t frame = (size_t)3 * N * N;
    for (int b = 0; b < B; b++) {
        int speed = philox_uniform(seed, (uint32_t)step, RNG_AUG, ((uint64_t)1 << 49) + b) < c->fast_fraction &&
                            CF - 2 * (hi - lo) >= 1 ? 2 : 1;
        if (philox_uniform(seed, (uint32_t)step, RNG_AUG, ((uint64_t)1 << 50) + b) < c->mix_shapes) {
            double start = 100 * philox_uniform(seed, (uint32_t)step, RNG_DATA, (uint64_t)b * 512 + 511);
            for (int f = 0; f < c->slots; f++)
                shapes_frame(out + ((size_t)b * c->slots + f) * frame, 3, N, seed, (uint32_t)step, (uint32_t)b,
                             start + c->slot_offset[f]);
            g_ref_shapes++;
            continue;
        }
        g_ref_fast += speed == 2;
        int k = (int)ref_pick(seed, step, (uint64_t)b * 512, (uint32_t)dataset_clips(d));
        int t0 = -speed * lo + (int)ref_pick(seed, step, (uint64_t)b * 512 + 256, (uint32_t)(CF - speed * (hi - lo)));
        int flip = philox_u32(seed, (uint32_t)step, RNG_AUG, ((uint64_t)1 << 48) + (uint64_t)b) >= 0x80000000u;
        int rc, drawn = k;
        for (int i = 1; (rc = dataset_read_clip(d, k, clip, err, sizeof err)) == DATASET_CLIP_DAMAGED &&
                        i < dataset_clips(d); i++)
            k = (drawn + i) % dataset_clips(d);  // the next good clip in dataset order
        if (rc) fc_die("%s", err);
        g_ref_substituted += k != drawn;
        double side = N, ax = 0, ay = 0, vx = 0, vy = 0;
        if (c->crop_zoom > 1) {
            double v[5];
            for (int j = 0; j < 5; j++)
                v[j] = philox_uniform(seed, (uint32_t)step, RNG_AUG, ((uint64_t)1 << 51) + 8 * (uint64_t)b + j);
            int span = speed * (hi - lo);
            side = N / (1 + (c->crop_zoom - 1) * v[0]);
            double vmax = span ? fmin(c->crop_pan, (N - side) / span) : 0;
            vx = vmax * (2 * v[1] - 1), vy = vmax * (2 * v[2] - 1);
            ax = (vx < 0 ? -vx * span : 0) + v[3] * (N - side - fabs(vx) * span);
            ay = (vy < 0 ? -vy * span : 0) + v[4] * (N - side - fabs(vy) * span);
            g_ref_zoomed++, g_ref_panned += vx != 0 || vy != 0;
        }
        for (int f = 0; f < c->slots; f++)
            for (int ch = 0; ch < 3; ch++)
                for (int y = 0; y < N; y++)
                    for (int x = 0; x < N; x++) {
                        int t = t0 + speed * (int)c->slot_offset[f], xs = flip ? N - 1 - x : x;
                        real *o = &out[((((size_t)b * c->slots + f) * 3 + ch) * N + y) * N + x];
                        if (c->crop_zoom > 1) {
                            int rel = speed * ((int)c->slot_offset[f] - lo);
                            double sx = ax + vx * rel + (xs + 0.5) * (side / N) - 0.5;
                            double sy = ay + vy * rel + (y + 0.5) * (side / N) - 0.5;
                            *o = ref_bilinear(clip + (size_t)t * N * N * 3, N, sx, sy, ch);
                            continue;
                        }
                        uint8_t p = clip[(((size_t)t * N + y) * N + xs) * 3 + ch];
                        *o = (real)(p / 127.5 - 1.0);
                    }
    }
    free(clip);
}

static Config plan_config(int N, const char *plan) {
    Config c;
    char err[512], kv[512];
    config_defaults(&c);
    snprintf(kv, sizeof kv, "frame_size=%d", N);
    if (config_set_checked(&c, kv, "test", err, sizeof err)) fc_die("%s", err);
    snprintf(kv, sizeof kv, "plan=%s", plan);
    if (config_set_checked(&c, kv, "test", err, sizeof err)) fc_die("%s", err);
    return c;
}

// Batches first..last of a loader, concatenated (NULL on an error, which is printed).
// g_run_substituted: what loader_substituted said at the end.
static long g_run_substituted;
static real *run_loader(const Dataset *d, const Config *c, int B, uint64_t seed, int first, int last, int threads,
                        int prefetch) {
    char err[1024];
    Loader *l = loader_start(NULL, d, c, B, 0, seed, first, threads, prefetch, err, sizeof err);
    if (!l) {
        printf("  loader_start: %s\n", err);
        return NULL;
    }
    size_t per = (size_t)B * c->slots * 3 * c->frame_size * c->frame_size;
    real *all = fc_malloc(sizeof(real) * per * (size_t)(last - first + 1));
    for (int s = first; s <= last; s++) {
        double wait;
        const real *x = loader_get(l, s, &wait, err, sizeof err);
        if (!x) {
            printf("  loader_get(%d): %s\n", s, err);
            free(all);
            loader_stop(l);
            return NULL;
        }
        memcpy(all + per * (size_t)(s - first), x, sizeof(real) * per);
    }
    g_run_substituted = loader_substituted(l, NULL);
    loader_stop(l);
    return all;
}

// One clip of ten damaged (a flipped byte): its windows show the next good clip, as the reference does;
// the same batches for any thread count, prefetch or first step; loader_substituted counts them.
static void test_damaged_clip(int N, int F, int B, uint64_t seed, const Config *c) {
    char dir[512], err[1024], path[700];
    folder(dir, sizeof dir, "loader_damaged");
    if (make_dataset(dir, N, F, "tttmtttmtt", 3 * (size_t)F * N * N * 3, NULL, NULL, err, sizeof err)) {
        check(0, "loader_damaged_setup", "%s", err);
        return;
    }
    Dataset *d = dataset_open(dir, err, sizeof err);
    ClipLocation loc;
    if (!d || dataset_clip_location(d, 3, &loc)) {
        check(0, "loader_damaged_setup", "%s", err);
        return;
    }
    snprintf(path, sizeof path, "%s/%s", dir, loc.shard);
    flip_byte(path, (long)(loc.offset + loc.stored / 2));
    const int steps = 20;
    size_t per = (size_t)B * c->slots * 3 * N * N;
    real *ref = fc_malloc(sizeof(real) * per * steps);
    g_ref_substituted = 0;
    for (int s = 1; s <= steps; s++) ref_batch(d, c, B, seed, s, ref + per * (size_t)(s - 1));
    real *a = run_loader(d, c, B, seed, 1, steps, 1, 1);
    long counted = g_run_substituted;
    int eq = 0, shows3 = 0;
    for (int s = 0; a && s < steps; s++) {
        eq += !memcmp(a + per * s, ref + per * s, sizeof(real) * per);
        for (int w = 0; w < B; w++)  // slot 0, green, pixel (0, 0): the clip's id
            shows3 += lrint((a[per * s + (size_t)w * c->slots * 3 * N * N + (size_t)N * N] + 1) * 127.5) == 3;
    }
    check(a && eq == steps && g_ref_substituted > 0 && counted == g_ref_substituted && !shows3,
          "loader_skips_damaged_clip",
          "clip 3 of 10 damaged: %d of %d batches equal the reference (its %ld windows show clip 4); the loader "
          "counted %ld; %d windows show clip 3", eq, steps, g_ref_substituted, counted, shows3);
    real *b = run_loader(d, c, B, seed, 1, steps, 3, 4);
    real *r = run_loader(d, c, B, seed, 11, steps, 2, 2);
    check(a && b && r && !memcmp(a, b, sizeof(real) * per * steps) &&
              !memcmp(a + per * 10, r, sizeof(real) * per * (steps - 10)),
          "loader_damaged_clip_resume", "3 threads + prefetch 4, and a start at step 11: the same batches bit for bit");
    free(a), free(b), free(r), free(ref);
    dataset_close(d);
}

// The green tag of window w's slot 0 in a batch: the clip it shows (clip_tagged).
static int shown_clip(const real *batch, const Config *c, int N, int w) {
    return (int)lrint((batch[(size_t)w * c->slots * 3 * N * N + (size_t)N * N] + 1) * 127.5);
}

// Clips 2, 5, 6 and 9 of ten excluded (loader.h): no window shows one; a window that drew one shows the
// next kept clip in dataset order (wrapping: 9 -> 0), every other window is what it is without the list;
// the same batches for another thread count and a resume; bad lists refused at loader_start in one line.
static void test_excluded_clips(int N, int F, int B, uint64_t seed, Config c) {
    char dir[512], err[1024], list[700];
    folder(dir, sizeof dir, "loader_exclude");
    if (make_dataset(dir, N, F, "tttttttttt", 4 * (size_t)F * N * N * 3, NULL, NULL, err, sizeof err)) {
        check(0, "loader_exclude_setup", "%s", err);
        return;
    }
    Dataset *d = dataset_open(dir, err, sizeof err);
    snprintf(list, sizeof list, "%s/exclude.txt", dir);
    const int ex[] = {2, 5, 6, 9};
    uint8_t is_ex[10] = {0};
    FILE *f = fopen(list, "w");
    fprintf(f, "# clips never drawn\n\n");
    for (int i = 0; i < 4; i++) {
        ClipLocation loc;
        dataset_clip_location(d, ex[i], &loc);
        fprintf(f, "%s %d\n", loc.shard, loc.index);
        is_ex[ex[i]] = 1;
    }
    fclose(f);
    const int steps = 20;
    size_t per = (size_t)B * c.slots * 3 * N * N;
    real *plain = run_loader(d, &c, B, seed, 1, steps, 2, 2);
    snprintf(c.exclude, sizeof c.exclude, "%s", list);
    real *a = run_loader(d, &c, B, seed, 1, steps, 1, 1);
    long substituted = g_run_substituted;  // damaged clips' substitutes: none here, an excluded clip is not one
    int drew = 0, shown = 0, wrong = 0, changed = 0;
    for (int s = 0; plain && a && s < steps; s++)
        for (int w = 0; w < B; w++) {
            int was = shown_clip(plain + per * s, &c, N, w), is = shown_clip(a + per * s, &c, N, w), want = was;
            while (is_ex[want]) want = (want + 1) % 10;
            drew += is_ex[was], shown += is_ex[is], wrong += is != want;
            size_t win = (size_t)c.slots * 3 * N * N;
            changed += !is_ex[was] && memcmp(plain + per * s + w * win, a + per * s + w * win, sizeof(real) * win);
        }
    check(a && plain && drew > 0 && !shown && !wrong && !changed && !substituted, "loader_never_shows_excluded",
          "clips 2, 5, 6, 9 of 10 excluded: %d of %d windows drew one, %d show one, %d show another clip than the "
          "next kept one, %d windows of kept clips changed, %ld counted as a damaged clip's substitute", drew,
          steps * B, shown, wrong, changed, substituted);
    real *b = run_loader(d, &c, B, seed, 1, steps, 3, 4);
    real *r = run_loader(d, &c, B, seed, 11, steps, 2, 2);
    check(a && b && r && !memcmp(a, b, sizeof(real) * per * steps) &&
              !memcmp(a + per * 10, r, sizeof(real) * per * (steps - 10)),
          "loader_exclude_resume", "3 threads + prefetch 4, and a start at step 11: the same batches bit for bit");
    free(plain), free(a), free(b), free(r);

    // bad lists: a clip index the shard lacks, a shard the dataset lacks, a malformed line, every clip
    const struct { const char *text, *want; } bad[] = {
        {"shard-00000.safetensors 99\n", "has no such clip"},
        {"shard-00009.safetensors 0\n", "has no such clip"},
        {"shard-00000.safetensors\n", "expected 'shard-NNNNN.safetensors K'"},
        {"shard-00000.safetensors 0 1\n", "expected 'shard-NNNNN.safetensors K'"},
        {"", "excludes every one of the 10 clips"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(list, "w");
        if (bad[i].text[0]) fputs(bad[i].text, f);
        else
            for (int k = 0; k < 10; k++) {
                ClipLocation loc;
                dataset_clip_location(d, k, &loc);
                fprintf(f, "%s %d\n", loc.shard, loc.index);
            }
        fclose(f);
        Loader *l = loader_start(NULL, d, &c, B, 0, seed, 1, 1, 1, err, sizeof err);
        char label[64];
        snprintf(label, sizeof label, "loader_exclude_refused_%zu", i);
        check(!l && one_line(err) && strstr(err, bad[i].want) && strstr(err, list), label, "%s",
              l ? "accepted" : err);
        loader_stop(l);
    }
    dataset_close(d);
}

// An exclude list over a dataset of several shards (exclude.h): each line names the clip the dataset
// has at that shard and index, a clip named twice counts once, an index one past a shard's last clip and
// a NUL byte in a line are refused, and what exclude_list_write writes reads back as the same clips.
static void test_exclude_across_shards(int N, int F) {
    char dir[512], err[1024], list[700], shard0[64];
    folder(dir, sizeof dir, "exclude_shards");
    if (make_dataset(dir, N, F, "rrrrrrrrrr", 4 * (size_t)F * N * N * 3, NULL, NULL, err, sizeof err)) {
        check(0, "exclude_shards_setup", "%s", err);
        return;
    }
    Dataset *d = dataset_open(dir, err, sizeof err);
    if (!d || dataset_clips(d) != 10) {
        check(0, "exclude_shards_setup", "%s", d ? "not 10 clips" : err);
        dataset_close(d);
        return;
    }
    snprintf(list, sizeof list, "%s/list.txt", dir);
    ClipLocation loc;
    const int named[] = {1, 5, 9, 5};
    FILE *f = fopen(list, "w");
    for (int k = 0; k < 4; k++) {
        dataset_clip_location(d, named[k], &loc);
        fprintf(f, "%s %d\n", loc.shard, loc.index);
    }
    fclose(f);
    uint8_t mask[10];
    char got[11] = "";
    int count = exclude_list_read(d, list, mask, err, sizeof err), right = count == 3;
    for (int i = 0; i < 10 && count >= 0; i++) {
        right &= mask[i] == (i == 1 || i == 5 || i == 9);
        got[i] = mask[i] ? 'x' : '.';
    }
    check(dataset_shards(d) >= 3 && right, "exclude_list_across_shards",
          "%d shards; clips 1, 5, 9 named (5 twice): %d counted, mask %s%s", dataset_shards(d), count, got,
          count < 0 ? err : "");

    dataset_clip_location(d, 0, &loc);
    snprintf(shard0, sizeof shard0, "%s", loc.shard);
    int in0 = 0;
    for (int i = 0; i < 10; i++) in0 += !dataset_clip_location(d, i, &loc) && !strcmp(loc.shard, shard0);
    f = fopen(list, "w");
    fprintf(f, "%s %d\n", shard0, in0);  // one past its last clip (the next shard's first)
    fclose(f);
    count = exclude_list_read(d, list, mask, err, sizeof err);
    check(count == -1 && one_line(err) && strstr(err, "has no such clip"), "exclude_list_index_past_shard",
          "%s %d (it holds %d clips): %s", shard0, in0, in0, count < 0 ? err : "accepted");

    f = fopen(list, "wb");
    fwrite("shard-00000.safetensors 1\0 junk\n", 1, 32, f);  // a NUL byte inside the line
    fclose(f);
    count = exclude_list_read(d, list, mask, err, sizeof err);
    check(count == -1 && one_line(err) && strstr(err, "NUL byte"), "exclude_list_nul_byte", "%s",
          count < 0 ? err : "accepted");

    // a list saved with a UTF-8 byte order mark (as Notepad saves it) reads as without one
    dataset_clip_location(d, 5, &loc);
    f = fopen(list, "wb");
    fprintf(f, "\xef\xbb\xbf%s %d\r\n", loc.shard, loc.index);
    fclose(f);
    count = exclude_list_read(d, list, mask, err, sizeof err);
    check(count == 1 && mask[5], "exclude_list_byte_order_mark", "clip 5 named after a BOM: %d counted%s%s", count,
          count < 0 ? ": " : "", count < 0 ? err : "");
    // an index past any long is named as written, not as the long it was clamped to (40 digits too); one
    // with leading zeros is its value
    const char *const huge[] = {"18446744073709551616", "1234567890123456789012345678901234567890"};
    for (int h = 0; h < 2; h++) {
        f = fopen(list, "w");
        fprintf(f, "%s %s\n", shard0, huge[h]);
        fclose(f);
        count = exclude_list_read(d, list, mask, err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, " %s: ", huge[h]);
        check(count == -1 && one_line(err) && strstr(err, want) && strstr(err, "has no such clip"),
              h ? "exclude_list_huge_index_40_digits" : "exclude_list_huge_index", "%s", count < 0 ? err : "accepted");
    }
    f = fopen(list, "w");
    fprintf(f, "%s 0000000000001\n", shard0);
    fclose(f);
    count = exclude_list_read(d, list, mask, err, sizeof err);
    check(count == 1 && mask[1], "exclude_list_leading_zeros", "%s 0000000000001: %d counted%s%s", shard0, count,
          count < 0 ? ": " : "", count < 0 ? err : "");

    // the shards are found by name through a sorted index: every clip but one named, the last shard's
    // first, read as the same mask; names that sort before, between and after the dataset's shards, or
    // that only begin like one, refused as before
    f = fopen(list, "w");
    for (int i = 9; i >= 1; i--) {
        dataset_clip_location(d, i, &loc);
        fprintf(f, "%s %d\n", loc.shard, loc.index);
    }
    fclose(f);
    count = exclude_list_read(d, list, mask, err, sizeof err);
    right = count == 9;
    for (int i = 0; i < 10 && count >= 0; i++) right &= mask[i] == (i != 0);
    check(right, "exclude_list_every_shard_backwards", "clips 9 down to 1 named: %d counted%s%s", count,
          count < 0 ? ": " : "", count < 0 ? err : "");
    const char *const unknown[] = {"a.safetensors", "shard-00001.safetensor", "shard-00001.safetensors.bak",
                                   "shard-0000.safetensors", "zzz"};
    int refused = 0;
    for (int u = 0; u < 5; u++) {
        f = fopen(list, "w");
        fprintf(f, "%s 0\n%s 0\n", shard0, unknown[u]);
        fclose(f);
        count = exclude_list_read(d, list, mask, err, sizeof err);
        char want[128];
        snprintf(want, sizeof want, "list.txt:2: %s 0: ", unknown[u]);
        refused += count == -1 && one_line(err) && strstr(err, want) && strstr(err, "has no such clip");
        if (count != -1 || !strstr(err, want)) printf("  %s: %s\n", unknown[u], count < 0 ? err : "accepted");
    }
    check(refused == 5, "exclude_list_unknown_shard_names", "%d of 5 names the dataset has no shard of refused, "
          "each on its line", refused);

    const int clips[] = {0, 4, 8};
    int rc = exclude_list_write(d, list, clips, 3, 1, err, sizeof err);
    count = rc ? -1 : exclude_list_read(d, list, mask, err, sizeof err);
    right = count == 3;
    for (int i = 0; i < 10 && count >= 0; i++) right &= mask[i] == (i == 0 || i == 4 || i == 8);
    check(right, "exclude_list_write_reads_back", "clips 0, 4, 8 written, %d read back%s%s", count,
          count < 0 ? ": " : "", count < 0 ? err : "");
    dataset_close(d);
}

static void test_loader(void) {
    const int N = 12, F = 32, B = 6;
    const uint64_t seed = 1234;
    char dir[512], err[1024];
    folder(dir, sizeof dir, "loader");
    if (make_dataset(dir, N, F, "tttmtttmtt", 3 * (size_t)F * N * N * 3, NULL, NULL, err, sizeof err)) {
        check(0, "loader_setup", "%s", err);
        return;
    }
    Dataset *d = dataset_open(dir, err, sizeof err);
    if (!d) {
        check(0, "loader_setup", "%s", err);
        return;
    }
    int nz = 0;
    for (int i = 0; i < dataset_clips(d); i++) {
        ClipLocation loc;
        dataset_clip_location(d, i, &loc);
        nz += loc.zlib;
    }
    check(nz > 0 && nz < dataset_clips(d), "loader_dataset_mixed",
          "%d zlib and %d raw clips of %d frames of %dx%d in %d shards", nz, dataset_clips(d) - nz, F, N, N,
          dataset_shards(d));
    Config c = plan_config(N, "anchor:0 target:1 target:2 target:3 target:4 target:5 target:6");
    size_t per = (size_t)B * c.slots * 3 * N * N;
    real *ref = fc_malloc(sizeof(real) * per * 20);
    for (int s = 1; s <= 20; s++) ref_batch(d, &c, B, seed, s, ref + per * (size_t)(s - 1));

    real *a = run_loader(d, &c, B, seed, 1, 20, 1, 1);
    int eq = 0;
    for (int s = 0; a && s < 20; s++) eq += !memcmp(a + per * s, ref + per * s, sizeof(real) * per);
    check(eq == 20, "loader_matches_reference", "%d of 20 batches (%d windows of 7 slots) equal the direct computation",
          eq, B);
    {  // moving shapes mixed in, and clips at 2x speed
        Config cm = c;
        cm.mix_shapes = 0.3, cm.fast_fraction = 0.5;
        g_ref_shapes = g_ref_fast = 0;
        real *rm = fc_malloc(sizeof(real) * per * 20);
        for (int s = 1; s <= 20; s++) ref_batch(d, &cm, B, seed, s, rm + per * (size_t)(s - 1));
        real *xm = run_loader(d, &cm, B, seed, 1, 20, 2, 2);
        int eqm = 0;
        for (int s = 0; xm && s < 20; s++) eqm += !memcmp(xm + per * s, rm + per * s, sizeof(real) * per);
        check(eqm == 20 && g_ref_shapes > 10 && g_ref_fast > 10, "loader_mix_shapes_and_fast",
              "mix_shapes 0.3, fast_fraction 0.5: %d of 20 batches equal the direct computation; %d of %d windows "
              "moving shapes, %d at 2x speed", eqm, g_ref_shapes, 20 * B, g_ref_fast);
        free(rm), free(xm);
    }
    {  // crops zoomed up to 2x and moving up to 0.25 pixel a frame, with 2x clips
        Config cc = c;
        cc.crop_zoom = 2, cc.crop_pan = 0.25, cc.fast_fraction = 0.5;
        g_ref_zoomed = g_ref_panned = g_ref_outside = 0;
        real *rc = fc_malloc(sizeof(real) * per * 20);
        for (int s = 1; s <= 20; s++) ref_batch(d, &cc, B, seed, s, rc + per * (size_t)(s - 1));
        real *xc = run_loader(d, &cc, B, seed, 1, 20, 2, 2);
        int eqc = 0, differs = 0;
        for (int s = 0; xc && s < 20; s++) {
            eqc += !memcmp(xc + per * s, rc + per * s, sizeof(real) * per);
            differs += !!memcmp(xc + per * s, ref + per * s, sizeof(real) * per);
        }
        check(eqc == 20 && differs == 20 && g_ref_zoomed == 20 * B && g_ref_panned > 10 && !g_ref_outside,
              "loader_crop_zoom_pan",
              "crop_zoom 2, crop_pan 0.25: %d of 20 batches equal the direct computation (%d differ from whole "
              "frames); %d of %d windows cropped, %d moving, %d samples outside their frame",
              eqc, differs, g_ref_zoomed, 20 * B, g_ref_panned, g_ref_outside);
        free(rc), free(xc);
    }
    real *b = run_loader(d, &c, B, seed, 1, 20, 3, 4);
    check(a && b && !memcmp(a, b, sizeof(real) * per * 20), "loader_threads_prefetch_invariant",
          "1 thread + prefetch 1 and 3 threads + prefetch 4: %zu values identical", per * 20);
    free(b);
    b = run_loader(d, &c, B, seed, 1, 20, 2, 2);
    check(a && b && !memcmp(a, b, sizeof(real) * per * 20), "loader_two_threads", "2 threads + prefetch 2 identical");
    free(b);
    free(a);
    free(ref);

    // resume: a loader started at step 50 gives the batches 50.. of one started at step 1
    a = run_loader(d, &c, B, seed, 1, 60, 2, 3);
    b = run_loader(d, &c, B, seed, 50, 60, 3, 1);
    real *r2 = run_loader(d, &c, B, seed, 55, 60, 1, 2);
    check(a && b && r2 && !memcmp(a + per * 49, b, sizeof(real) * per * 11) &&
              !memcmp(a + per * 54, r2, sizeof(real) * per * 6),
          "loader_resume", "started at 50 and at 55: the batches of the run started at 1, bit for bit");
    free(a), free(b), free(r2);
    a = run_loader(d, &c, B, seed + 1, 1, 3, 1, 1);
    b = run_loader(d, &c, B, seed, 1, 3, 1, 1);
    check(a && b && memcmp(a, b, sizeof(real) * per * 3), "loader_seed_matters", "seeds %llu and %llu differ",
          (unsigned long long)seed, (unsigned long long)seed + 1);
    free(a), free(b);

    // extrapolate's plan, with negative offsets: every slot shows frame t0 + offset of one clip
    static const char *plans[] = {
        "anchor:-16 context:-8 context:-4 context:0 target:4 target:8 target:12",
        "anchor:0 context:8 context:12 context:16 target:20 target:24 target:28",
    };
    for (int pi = 0; pi < 2; pi++) {
        Config e = plan_config(N, plans[pi]);
        const int steps = 100, EB = 8;
        size_t eper = (size_t)EB * e.slots * 3 * N * N;
        real *x = run_loader(d, &e, EB, seed, 1, steps, 2, 2);
        int lo = (int)e.slot_offset[0], hi = (int)e.slot_offset[e.slots - 1];
        int windows = 0, honoured = 0, flips = 0, tagged = 0, tmin = 1 << 30, tmax = -1, seen[16] = {0};
        for (int s = 0; x && s < steps; s++)
            for (int w = 0; w < EB; w++, windows++) {
                const real *win = x + eper * s + (size_t)w * e.slots * 3 * N * N;
                int G = (int)lrint((win[(size_t)N * N] + 1) * 127.5);  // slot 0, green, pixel (0, 0)
                if (G < 16) seen[G] = 1;
                int ok = 1, t0 = 0, flipped = 0;
                for (int f = 0; f < e.slots && ok; f++) {
                    const real *fr = win + (size_t)f * 3 * N * N;
                    int R = (int)lrint((fr[0] + 1) * 127.5), g = (int)lrint((fr[(size_t)N * N] + 1) * 127.5);
                    int Bl0 = (int)lrint((fr[2 * (size_t)N * N] + 1) * 127.5);
                    if (f == 0) t0 = R - (int)e.slot_offset[0], flipped = Bl0 == 255;
                    ok = g == G && R == t0 + (int)e.slot_offset[f] && R >= 0 && R < F && (Bl0 == 255) == flipped;
                }
                tagged++;
                honoured += ok;
                flips += flipped;
                if (t0 < tmin) tmin = t0;
                if (t0 > tmax) tmax = t0;
            }
        int all_clips = 1;
        for (int k = 0; k < 10; k++) all_clips &= seen[k];
        double frac = tagged ? (double)flips / tagged : 0;
        char label[64];
        snprintf(label, sizeof label, "loader_plan_offsets_%s", pi ? "positive" : "negative");
        check(x && honoured == tagged && tagged > 0 && tmin == -lo && tmax == F - 1 - hi && all_clips, label,
              "%s: %d of %d tagged windows show frames t0 + offset of one clip; t0 in %d..%d (all of %d..%d); all 10 "
              "clips drawn",
              plans[pi], honoured, tagged, tmin, tmax, -lo, F - 1 - hi);
        if (pi == 0)
            check(x && fabs(frac - 0.5) < 0.08, "loader_flips_half", "%d of %d windows mirrored (%.3f)", flips, tagged,
                  frac);
        free(x);
    }

    // fast_fraction where the clips cannot hold the plan at 2x: said (every window plays at 1x)
    {
        Config fits = plan_config(N, "anchor:0 target:15"), over = plan_config(N, "anchor:-8 context:0 target:8");
        char why[1024] = "";
        fits.fast_fraction = over.fast_fraction = 0.25;
        int fits_quiet = !loader_fast_unused(d, &fits, why, sizeof why);
        int over_said = loader_fast_unused(d, &over, why, sizeof why) && one_line(why) &&
                        strstr(why, "fast_fraction 0.25: not used") && strstr(why, "spans 17 frames, 33 at 2x") &&
                        strstr(why, "have 32") && strstr(why, "--clip-frames 33");
        over.fast_fraction = 0;
        int off_quiet = !loader_fast_unused(d, &over, why, sizeof why);
        check(fits_quiet && over_said && off_quiet, "loader_fast_unused_said",
              "a span of 16 frames (31 at 2x) in clips of 32 said: %s; 17 (33 at 2x): '%s'; fast_fraction 0: %s",
              fits_quiet ? "no" : "yes", why, off_quiet ? "nothing" : "said");
    }

    // refusals at loader_start
    {
        Config e = plan_config(N, "anchor:-20 context:0 target:12");
        Loader *l = loader_start(NULL, d, &e, 2, 0, 1, 1, 1, 1, err, sizeof err);
        check(!l && one_line(err) && strstr(err, "spans 33 frames") && strstr(err, "clip_frames 32"),
              "loader_plan_too_long", "%s", err);
        loader_stop(l);
        e = plan_config(N, "anchor:0 target:1.5");
        l = loader_start(NULL, d, &e, 2, 0, 1, 1, 1, 1, err, sizeof err);
        check(!l && one_line(err) && strstr(err, "whole number"), "loader_fractional_offset", "%s", err);
        loader_stop(l);
        e = plan_config(16, "anchor:0 target:1");
        l = loader_start(NULL, d, &e, 2, 0, 1, 1, 1, 1, err, sizeof err);
        check(!l && one_line(err) && strstr(err, "frame_size 16"), "loader_frame_size_mismatch", "%s", err);
        loader_stop(l);
        // steps come one after another
        l = loader_start(NULL, d, &c, 2, 0, 1, 5, 2, 2, err, sizeof err);
        double wait = -1;
        const real *x5 = l ? loader_get(l, 5, &wait, err, sizeof err) : NULL;
        const real *x7 = l ? loader_get(l, 7, NULL, err, sizeof err) : NULL;
        check(x5 && wait >= 0 && !x7 && strstr(err, "step 7") && strstr(err, "next one is 6"), "loader_steps_in_order",
              "%s (the first wait: %.3f ms)", err, 1e3 * wait);
        loader_stop(l);
    }
    dataset_close(d);

    test_damaged_clip(N, F, B, seed, &c);
    test_excluded_clips(N, F, B, seed, c);
    test_exclude_across_shards(N, F);

    // every clip damaged: loader_get fails with one line that says so
    {
        char bad[512];
        folder(bad, sizeof bad, "loader_bad");
        if (make_dataset(bad, N, F, "rrrr", 0, NULL, NULL, err, sizeof err)) return;
        Dataset *bd = dataset_open(bad, err, sizeof err);
        for (int i = 0; bd && i < dataset_clips(bd); i++) {
            ClipLocation loc;
            char path[700];
            dataset_clip_location(bd, i, &loc);
            snprintf(path, sizeof path, "%s/%s", bad, loc.shard);
            flip_byte(path, (long)(loc.offset + 5));
        }
        Loader *l = bd ? loader_start(NULL, bd, &c, 4, 0, 1, 1, 2, 2, err, sizeof err) : NULL;
        const real *x = l ? loader_get(l, 1, NULL, err, sizeof err) : NULL;
        check(l && !x && one_line(err) && strstr(err, "every one of its 4 clips fails its check") &&
                  strstr(err, "re-prepare"),
              "loader_every_clip_damaged", "%s", err);
        loader_stop(l);
        dataset_close(bd);
    }
    // a shard that changes after opening is no damaged clip: loader_get fails with the reader's line
    {
        char cut[512], path[700];
        folder(cut, sizeof cut, "loader_cut");
        if (make_dataset(cut, N, F, "rrrr", 0, NULL, NULL, err, sizeof err)) return;
        Dataset *cd = dataset_open(cut, err, sizeof err);
        snprintf(path, sizeof path, "%s/shard-00000.safetensors", cut);
        if (!cd || truncate(path, 4096)) abort();
        Loader *l = loader_start(NULL, cd, &c, 4, 0, 1, 1, 2, 2, err, sizeof err);
        const real *x = l ? loader_get(l, 1, NULL, err, sizeof err) : NULL;
        check(l && !x && one_line(err) && strstr(err, "changed since the dataset was opened") &&
                  loader_substituted(l, NULL) == 0,
              "loader_shard_changed_fails", "%s", err);
        loader_stop(l);
        dataset_close(cd);
    }
}

// windows per second from a dataset of 64x64 clips, 7 slots, batch 8
static void bench(const char *what, const char *kinds) {
    const int N = 64, F = 32, B = 8;
    char dir[512], err[1024];
    folder(dir, sizeof dir, what);
    double t0 = fc_now_s();
    if (make_dataset(dir, N, F, kinds, 0, NULL, NULL, err, sizeof err)) {
        check(0, "loader_throughput", "%s", err);
        return;
    }
    double t_write = fc_now_s() - t0;
    Dataset *d = dataset_open(dir, err, sizeof err);
    Config c = plan_config(N, "anchor:0 target:1 target:2 target:3 target:4 target:5 target:6");
    ClipLocation loc;
    dataset_clip_location(d, 0, &loc);
    double rate[2] = {0, 0}, waited[2] = {0, 0};
    for (int th = 1; th <= 2; th++) {
        Loader *l = loader_start(NULL, d, &c, B, 0, 7, 1, th, 4, err, sizeof err);
        double start = fc_now_s(), wait_total = 0;
        int steps = 0;
        while (fc_now_s() - start < 0.4) {
            double wait;
            if (!loader_get(l, steps + 1, &wait, err, sizeof err)) break;
            wait_total += wait;
            steps++;
        }
        double dt = fc_now_s() - start;
        loader_stop(l);
        rate[th - 1] = steps * B / dt, waited[th - 1] = wait_total / dt;
    }
    char label[64];
    snprintf(label, sizeof label, "loader_throughput_%s", what);
    check(rate[0] > 0 && rate[1] > 0, label,
          "%d clips of %dx%dx%d (%s, %llu of %zu bytes stored; written in %.2f s): %.0f windows/s with 1 thread, %.0f "
          "with 2 (7 slots, batch %d)",
          (int)strlen(kinds), F, N, N, loc.zlib ? "zlib" : "raw", (unsigned long long)loc.stored, dataset_clip_bytes(d),
          t_write, rate[0], rate[1], B);
    (void)waited;
    dataset_close(d);
    rm_rf(dir);
}

// ---- a plan's first window, cut whole (clip_window.h: what score and the previews read) ----

// The clip frame each slot of `plan` shows in clip_first_window's window of a tagged clip (red = the
// frame's index), into got[slot]; -1 where a slot's pixels disagree. The return of clip_window_fits.
static int first_window_frames(const Dataset *d, const uint8_t *clip, int N, const char *plan, int *got, char *err,
                               size_t errlen) {
    Config c = plan_config(N, plan);
    int lo = 99;
    if (clip_window_fits(&c, "the test's plan", d, &lo, err, errlen)) return -1;
    size_t plane = (size_t)N * N;
    real *w = fc_malloc(sizeof(real) * c.slots * 3 * plane);
    clip_first_window(&c, lo, clip, w);
    for (int f = 0; f < c.slots; f++) {
        const real *red = w + (size_t)f * 3 * plane;
        got[f] = (int)lround((red[0] + 1.0) * 127.5);
        for (size_t p = 0; p < plane; p++)
            if (red[p] != red[0]) got[f] = -1;
    }
    free(w);
    return 0;
}

static void test_clip_window(void) {
    const int N = 8, F = 12;
    char dir[512], err[1024];
    uint8_t *clips = NULL;
    folder(dir, sizeof dir, "clip_window");
    Dataset *d = NULL;
    if (make_dataset(dir, N, F, "t", 1 << 20, &clips, NULL, err, sizeof err) || !(d = dataset_open(dir, err, sizeof err))) {
        check(0, "clip_window_setup", "%s", err);
        free(clips);
        return;
    }
    static const struct {
        const char *plan;
        int frames[4];  // the clip frame of each slot: the plan's offsets counted from its earliest
    } cases[] = {
        {"target:1 target:2 target:5", {0, 1, 4}},  // every offset after 0: the earliest is 1, not 0
        {"anchor:-3 context:0 target:2 target:8", {0, 3, 5, 11}},
        {"target:4 anchor:0 context:2", {4, 0, 2}},  // slots out of order
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int got[8] = {0}, ok = 1;
        Config c = plan_config(N, cases[k].plan);
        if (first_window_frames(d, clips, N, cases[k].plan, got, err, sizeof err)) {
            check(0, "clip_window_frames", "plan %s refused: %s", cases[k].plan, err);
            continue;
        }
        for (int f = 0; f < c.slots; f++) ok &= got[f] == cases[k].frames[f];
        check(ok, "clip_window_frames", "plan %s: slots show frames %d %d %d %d (expected %d %d %d %d)", cases[k].plan,
              got[0], got[1], got[2], c.slots > 3 ? got[3] : -1, cases[k].frames[0], cases[k].frames[1],
              cases[k].frames[2], c.slots > 3 ? cases[k].frames[3] : -1);
    }
    {  // a plan one frame longer than the clips, refused; one as long, taken
        int got[8];
        int longer = first_window_frames(d, clips, N, "target:1 target:13", got, err, sizeof err);
        int refused = longer && one_line(err) && strstr(err, "spans 13 frames") && strstr(err, "clip_frames 12");
        int fits = !first_window_frames(d, clips, N, "target:1 target:12", got, err, sizeof err) && got[1] == 11;
        check(refused && fits, "clip_window_span", "a plan of 13 frames over clips of 12: %s; of 12: %s",
              refused ? "refused" : "not refused", fits ? "taken, its last slot the clip's last frame" : err);
    }
    {  // an offset between two frames, refused by name
        Config c = plan_config(N, "target:1 target:2");
        c.slot_offset[1] = 1.5f;
        int lo = 0;
        int refused = clip_window_fits(&c, "run R", d, &lo, err, sizeof err) && one_line(err) &&
                      strstr(err, "run R") && strstr(err, "not a whole number");
        check(refused, "clip_window_half_frame", "an offset of 1.5 frames: %s", err);
    }
    {  // bytes to values: [0, 255] onto [-1, 1] exactly, v / 127.5 - 1: 0 is -1, 255 is 1 (not 0.992 as
       // v / 128 - 1 gives), 128 is 128 / 127.5 - 1 (0.00392, the middle of the range falling between 127 and 128)
        Config c = plan_config(N, "target:1 target:2 target:3");
        size_t plane = (size_t)N * N;
        static const uint8_t bytes[3] = {0, 255, 128};
        const real want[3] = {-1, 1, (real)(128 / 127.5 - 1)};
        uint8_t *clip = fc_malloc(3 * plane * 3);
        real *w = fc_malloc(sizeof(real) * 3 * 3 * plane);
        for (int f = 0; f < 3; f++) memset(clip + (size_t)f * plane * 3, bytes[f], plane * 3);
        clip_first_window(&c, 1, clip, w);
        int off = 0;
        for (int f = 0; f < 3; f++)
            for (size_t i = 0; i < 3 * plane; i++) off += w[(size_t)f * 3 * plane + i] != want[f];
        check(off == 0, "clip_window_byte_scale", "bytes 0, 255, 128 read as %.7f, %.7f, %.7f (-1, 1, %.7f); %d "
              "values off", (double)w[0], (double)w[3 * plane], (double)w[6 * plane], (double)want[2], off);
        free(clip), free(w);
    }
    {  // frames of another size, refused with the dataset's folder named
        Config c = plan_config(2 * N, "target:1 target:2");
        int lo = 0;
        int refused = clip_window_fits(&c, "run R", d, &lo, err, sizeof err) && one_line(err) && strstr(err, dir);
        check(refused, "clip_window_frame_size", "a 16x16 config over 8x8 clips: %s", err);
    }
    dataset_close(d);
    free(clips);
    rm_rf(dir);
}

static void run_all(void) {
    test_loader();
    test_clip_window();
    bench("zlib", "ssssssssssssssssssss");
    bench("raw", "rrrrrrrrrrrrrrrrrrrr");
}

int main(void) { return run_in_scratch("loader", run_all); }
